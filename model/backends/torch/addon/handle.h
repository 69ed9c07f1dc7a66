// What the torch addon's translation units share: a TF.js `torch` tensor is one Handle, held by
// JavaScript as an external; rtjob_torch.cc makes them, c10d.cc runs collectives over them.
#pragma once
#include <ATen/ATen.h>
#include <node_api.h>

namespace rtjob {

struct Handle {
  at::Tensor t;
};

// Adds the c10d functions (`c10d*`) to the addon's exports (c10d.cc).
void defineC10d(napi_env env, napi_value exports);

}  // namespace rtjob
