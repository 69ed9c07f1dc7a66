// c10d collectives for the torch addon: a torch.distributed rendezvous (`TCPStore`, laid out as
// `init_process_group` lays it out) and a c10d process group (Gloo; NCCL on a CUDA libtorch),
// over the addon's own tensors, so nothing is copied to JavaScript. Every blocking step (the
// store's connect, the group's full-mesh rendezvous, `work->wait()`) runs on a libuv worker
// thread as N-API async work and settles a promise; the event loop never blocks on a peer.
//
// Compiled with USE_C10D_GLOO where gloo's headers exist (Debian: libgloo-dev), RTJOB_WITH_NCCL
// where libtorch has CUDA and ProcessGroupNCCL's headers; without either the addon still builds
// and `c10dBackends()` says what it lacks.
#include "handle.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef RTJOB_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using std::chrono::milliseconds;

struct C10dError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define CHECK_NAPI(call)                                                  \
  do {                                                                    \
    if ((call) != napi_ok) throw C10dError("N-API call failed: " #call);  \
  } while (0)

// The store of one rendezvous (a `TCPStore`, server on rank 0).
struct StoreBox {
  c10::intrusive_ptr<c10d::Store> store;
};

// One member's process group; `pg` is released by `c10dClose` (off the JS thread: Gloo's
// destructor joins its threads, which may be inside a transfer until the timeout).
struct GroupBox {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::string backend;
  int rank = 0;
  int size = 1;
};

// One piece of async work: `run` on a worker thread, `done` back on the JS thread.
struct Job {
  napi_async_work work = nullptr;
  napi_deferred deferred = nullptr;
  std::function<void()> run;
  std::function<napi_value(napi_env)> done;
  std::string error;
  // JavaScript values the work reads or writes (typed arrays, handles), kept alive until it ends.
  std::vector<napi_ref> keep;
};

std::string str(napi_env env, napi_value v) {
  size_t len = 0;
  CHECK_NAPI(napi_get_value_string_utf8(env, v, nullptr, 0, &len));
  std::string s(len, '\0');
  CHECK_NAPI(napi_get_value_string_utf8(env, v, s.data(), len + 1, &len));
  return s;
}

double num(napi_env env, napi_value v) {
  double d = 0;
  CHECK_NAPI(napi_get_value_double(env, v, &d));
  return d;
}

template <typename T>
T* external(napi_env env, napi_value v) {
  void* p = nullptr;
  CHECK_NAPI(napi_get_value_external(env, v, &p));
  if (!p) throw C10dError("c10d: released object");
  return static_cast<T*>(p);
}

std::vector<napi_value> args(napi_env env, napi_callback_info info, size_t n) {
  std::vector<napi_value> argv(n);
  size_t argc = n;
  CHECK_NAPI(napi_get_cb_info(env, info, &argc, argv.data(), nullptr, nullptr));
  if (argc < n) throw C10dError("c10d: too few arguments");
  return argv;
}

void execute(napi_env, void* data) {
  auto* job = static_cast<Job*>(data);
  try {
    job->run();
  } catch (const c10::Error& e) {
    job->error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    job->error = e.what();
    if (job->error.empty()) job->error = "c10d: unknown error";
  }
}

void complete(napi_env env, napi_status status, void* data) {
  auto* job = static_cast<Job*>(data);
  for (auto r : job->keep) napi_delete_reference(env, r);
  if (status != napi_ok && job->error.empty()) job->error = "c10d: async work cancelled";
  napi_value result = nullptr;
  if (job->error.empty()) {
    try {
      result = job->done ? job->done(env) : nullptr;
    } catch (const std::exception& e) {
      job->error = e.what();
    }
  }
  if (job->error.empty()) {
    if (!result) napi_get_undefined(env, &result);
    napi_resolve_deferred(env, job->deferred, result);
  } else {
    napi_value msg, code, err;
    napi_create_string_utf8(env, job->error.c_str(), NAPI_AUTO_LENGTH, &msg);
    napi_create_string_utf8(env, "RTJOB_C10D", NAPI_AUTO_LENGTH, &code);
    napi_create_error(env, code, msg, &err);
    napi_reject_deferred(env, job->deferred, err);
  }
  napi_delete_async_work(env, job->work);
  delete job;
}

napi_value queue(napi_env env, Job* job) {
  napi_value promise, name;
  CHECK_NAPI(napi_create_promise(env, &job->deferred, &promise));
  CHECK_NAPI(napi_create_string_utf8(env, "rtjob:c10d", NAPI_AUTO_LENGTH, &name));
  CHECK_NAPI(napi_create_async_work(env, nullptr, name, execute, complete, job, &job->work));
  CHECK_NAPI(napi_queue_async_work(env, job->work));
  return promise;
}

template <typename F>
napi_value guarded(napi_env env, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    napi_throw_error(env, "RTJOB_C10D", e.what());
    return nullptr;
  }
}

// A tensor argument: a torch backend handle (an external), or a Float32Array whose memory the
// collective reads and writes where it lies (CPU only). Either is kept alive by the job.
at::Tensor tensorArg(napi_env env, napi_value v, Job* job) {
  napi_ref ref;
  CHECK_NAPI(napi_create_reference(env, v, 1, &ref));
  job->keep.push_back(ref);
  bool typed = false;
  CHECK_NAPI(napi_is_typedarray(env, v, &typed));
  if (!typed) {
    auto t = external<rtjob::Handle>(env, v)->t;
    if (!t.defined()) throw C10dError("c10d: tensor was freed");
    if (!t.is_contiguous()) throw C10dError("c10d: tensors must be contiguous");
    return t;
  }
  napi_typedarray_type type;
  size_t length;
  void* data;
  napi_value ab;
  size_t offset;
  CHECK_NAPI(napi_get_typedarray_info(env, v, &type, &length, &data, &ab, &offset));
  if (type != napi_float32_array) throw C10dError("c10d: arrays must be Float32Arrays");
  return at::from_blob(data, {static_cast<int64_t>(length)}, at::TensorOptions().dtype(at::kFloat));
}

std::vector<at::Tensor> tensorList(napi_env env, napi_value arr, Job* job) {
  uint32_t n = 0;
  CHECK_NAPI(napi_get_array_length(env, arr, &n));
  std::vector<at::Tensor> out;
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    CHECK_NAPI(napi_get_element(env, arr, i, &e));
    out.push_back(tensorArg(env, e, job));
  }
  return out;
}

void finalizeStore(napi_env, void* data, void*) { delete static_cast<StoreBox*>(data); }

void finalizeGroup(napi_env, void* data, void*) {
  // Not closed: released on a thread of its own, since it may wait for a transfer to time out.
  auto* g = static_cast<GroupBox*>(data);
  if (!g->pg) {
    delete g;
    return;
  }
  std::thread([g] { delete g; }).detach();
}

void runWork(const c10::intrusive_ptr<c10d::Work>& work) {
  // Gloo's transfers time out by themselves (the group's timeout); the TypeScript side keeps a
  // deadline too, so a caller never waits past it even if this thread still does.
  work->wait();
}

// Several tensors go as one flat buffer (as DDP's buckets do); one is reduced where it lies.
at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  if (ts.size() == 1) return ts[0].view({-1});
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.view({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  if (ts.size() == 1) return;
  int64_t o = 0;
  for (const auto& t : ts) {
    t.view({-1}).copy_(flat.narrow(0, o, t.numel()));
    o += t.numel();
  }
}

#if defined(USE_C10D_GLOO)
std::shared_ptr<::gloo::transport::Device> glooDevice(const std::string& host) {
  if (!host.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(host);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

// c10dBackends() -> { gloo, nccl }: which process groups this build has.
napi_value jsBackends(napi_env env, napi_callback_info) {
  return guarded(env, [&]() -> napi_value {
    napi_value o, v;
    CHECK_NAPI(napi_create_object(env, &o));
#ifdef USE_C10D_GLOO
    CHECK_NAPI(napi_get_boolean(env, true, &v));
#else
    CHECK_NAPI(napi_get_boolean(env, false, &v));
#endif
    CHECK_NAPI(napi_set_named_property(env, o, "gloo", v));
#ifdef RTJOB_WITH_NCCL
    CHECK_NAPI(napi_get_boolean(env, true, &v));
#else
    CHECK_NAPI(napi_get_boolean(env, false, &v));
#endif
    CHECK_NAPI(napi_set_named_property(env, o, "nccl", v));
    return o;
  });
}

// c10dStore(host, port, isServer, worldSize, timeoutMs) -> Promise<[store, port]>. The server
// listens (port 0: any free one) and returns at once; a client connects, retrying until the
// timeout, and counts itself in as torch's clients do.
napi_value jsStore(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    auto a = args(env, info, 5);
    auto host = str(env, a[0]);
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(num(env, a[1]));
    bool server = false;
    CHECK_NAPI(napi_get_value_bool(env, a[2], &server));
    opts.isServer = server;
    opts.numWorkers = static_cast<std::size_t>(num(env, a[3]));
    // The server hands its port back before the others can know it, so it does not wait for them.
    opts.waitWorkers = !server;
    opts.timeout = milliseconds(static_cast<int64_t>(num(env, a[4])));
    // As torch's tcp:// rendezvous; an ephemeral port is this store's alone.
    opts.multiTenant = opts.port != 0;
    auto* job = new Job();
    auto box = std::make_shared<StoreBox>();
    auto port = std::make_shared<int>(0);
    job->run = [host, opts, box, port] {
      auto s = c10::make_intrusive<c10d::TCPStore>(host, opts);
      *port = s->getPort();
      box->store = s;
    };
    job->done = [box, port](napi_env env) -> napi_value {
      napi_value arr, ext, p;
      CHECK_NAPI(napi_create_array_with_length(env, 2, &arr));
      CHECK_NAPI(napi_create_external(env, new StoreBox{box->store}, finalizeStore, nullptr, &ext));
      CHECK_NAPI(napi_create_int32(env, *port, &p));
      CHECK_NAPI(napi_set_element(env, arr, 0, ext));
      CHECK_NAPI(napi_set_element(env, arr, 1, p));
      return arr;
    };
    return queue(env, job);
  });
}

// c10dGroup(store, backend, rank, worldSize, timeoutMs, deviceHost) -> Promise<group>: the
// process group of torch's default group (`default_pg/0/…` in the store), then the store-based
// barrier and sequence number `init_process_group` ends with, so a torch.distributed peer's
// `init_process_group` returns.
napi_value jsGroup(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    auto a = args(env, info, 6);
    auto store = external<StoreBox>(env, a[0])->store;
    auto backend = str(env, a[1]);
    int rank = static_cast<int>(num(env, a[2]));
    int size = static_cast<int>(num(env, a[3]));
    auto timeout = milliseconds(static_cast<int64_t>(num(env, a[4])));
    auto deviceHost = str(env, a[5]);
    if (backend != "gloo" && backend != "nccl") throw C10dError("c10d: no backend " + backend);
#ifndef USE_C10D_GLOO
    if (backend == "gloo") throw C10dError("c10d: this torch addon was built without Gloo");
#endif
#ifndef RTJOB_WITH_NCCL
    if (backend == "nccl") throw C10dError("c10d: this torch addon was built without NCCL");
#endif
    auto* job = new Job();
    auto box = std::make_shared<GroupBox>();
    job->run = [=] {
      auto outer = c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
      auto pgStore = c10::make_intrusive<c10d::PrefixStore>("0", outer);
      c10::intrusive_ptr<c10d::ProcessGroup> pg;
#ifdef USE_C10D_GLOO
      if (backend == "gloo") {
        auto o = c10d::ProcessGroupGloo::Options::create(timeout);
        o->devices.push_back(glooDevice(deviceHost));
        o->threads = 2;
        pg = c10::make_intrusive<c10d::ProcessGroupGloo>(pgStore, rank, size, o);
      }
#endif
#ifdef RTJOB_WITH_NCCL
      if (backend == "nccl") {
        // Errors and timeouts surface on the waiting thread, not as a hang inside a kernel.
        setenv("NCCL_BLOCKING_WAIT", "1", 0);
        auto o = c10d::ProcessGroupNCCL::Options::create();
        o->timeout = timeout;
        pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(pgStore, rank, size, o);
      }
#endif
      // torch's _store_based_barrier: every member counts itself in, then waits for the rest.
      const std::string key = "store_based_barrier_key:1";
      outer->add(key, 1);
      auto until = std::chrono::steady_clock::now() + timeout;
      while (outer->add(key, 0) < size) {
        if (std::chrono::steady_clock::now() > until)
          throw C10dError("c10d: timed out in the store-based barrier after init");
        std::this_thread::sleep_for(milliseconds(10));
      }
      pg->setSequenceNumberForGroup();
      box->pg = pg;
    };
    job->done = [box, backend, rank, size](napi_env env) -> napi_value {
      napi_value ext;
      auto* g = new GroupBox{box->pg, backend, rank, size};
      CHECK_NAPI(napi_create_external(env, g, finalizeGroup, nullptr, &ext));
      return ext;
    };
    return queue(env, job);
  });
}

// What one collective does, on the worker thread: `job->run`.
void plan(Job* job, const GroupBox& g, const std::string& op, const std::vector<at::Tensor>& ts,
          double arg) {
  auto pg = g.pg;
  int size = g.size;
  int rank = g.rank;
  bool gloo = g.backend == "gloo";
  if (op == "allreduce") {
    job->run = [=] {
      std::vector<at::Tensor> flat{flatten(ts)};
      runWork(pg->allreduce(flat));
      if (arg != 0) flat[0].div_(size);
      unflatten(flat[0], ts);
    };
  } else if (op == "broadcast") {
    job->run = [=] {
      std::vector<at::Tensor> flat{flatten(ts)};
      c10d::BroadcastOptions o;
      o.rootRank = static_cast<int64_t>(arg);
      runWork(pg->broadcast(flat, o));
      if (rank != o.rootRank) unflatten(flat[0], ts);
    };
  } else if (op == "allgather" || op == "reduceScatter") {
    if (ts.size() != 2) throw C10dError("c10d: " + op + " takes [output, input]");
    auto out = ts[0].view({-1});
    auto in = ts[1].view({-1});
    bool gather = op == "allgather";
    auto& whole = gather ? out : in;
    auto& part = gather ? in : out;
    if (whole.numel() != part.numel() * size)
      throw C10dError("c10d: " + op + ": the whole must be worldSize times the part");
    job->run = [=] {
      auto chunks = whole.chunk(size);
      if (gather) {
        std::vector<std::vector<at::Tensor>> outs{std::vector<at::Tensor>(chunks.begin(), chunks.end())};
        std::vector<at::Tensor> ins{part};
        runWork(pg->allgather(outs, ins));
      } else if (gloo) {
        // ProcessGroupGloo has no reduce_scatter (torch 1.13): all-reduce a copy, keep one chunk.
        std::vector<at::Tensor> sum{whole.clone()};
        runWork(pg->allreduce(sum));
        part.copy_(sum[0].chunk(size)[rank]);
      } else {
        std::vector<at::Tensor> outs{part};
        std::vector<std::vector<at::Tensor>> ins{std::vector<at::Tensor>(chunks.begin(), chunks.end())};
        runWork(pg->reduce_scatter(outs, ins));
      }
    };
  } else if (op == "barrier") {
    job->run = [=] { runWork(pg->barrier()); };
  } else {
    throw C10dError("c10d: no op " + op);
  }
}

// c10dRun(group, op, tensors, arg) -> Promise<void>. `op`: allreduce (arg 1: mean), broadcast
// (arg: root), allgather ([output, input]: output is worldSize inputs end to end),
// reduceScatter ([output, input]: input is worldSize outputs end to end), barrier.
napi_value jsRun(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    auto a = args(env, info, 4);
    auto* g = external<GroupBox>(env, a[0]);
    if (!g->pg) throw C10dError("c10d: the group was closed");
    auto op = str(env, a[1]);
    auto* job = new Job();
    try {
      plan(job, *g, op, tensorList(env, a[2], job), num(env, a[3]));
    } catch (...) {
      for (auto r : job->keep) napi_delete_reference(env, r);
      delete job;
      throw;
    }
    return queue(env, job);
  });
}

// c10dClose(group) -> Promise<void>: releases the process group (its threads and sockets).
napi_value jsClose(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    auto a = args(env, info, 1);
    auto* g = external<GroupBox>(env, a[0]);
    auto pg = std::move(g->pg);
    g->pg = c10::intrusive_ptr<c10d::ProcessGroup>();
    auto* job = new Job();
    auto holder = std::make_shared<c10::intrusive_ptr<c10d::ProcessGroup>>(std::move(pg));
    job->run = [holder] { holder->reset(); };
    return queue(env, job);
  });
}

}  // namespace

namespace rtjob {

void defineC10d(napi_env env, napi_value exports) {
  const std::pair<const char*, napi_callback> fns[] = {
      {"c10dBackends", jsBackends}, {"c10dStore", jsStore}, {"c10dGroup", jsGroup},
      {"c10dRun", jsRun},           {"c10dClose", jsClose},
  };
  for (const auto& [name, fn] : fns) {
    napi_value f;
    napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, nullptr, &f);
    napi_set_named_property(env, exports, name, f);
  }
}

}  // namespace rtjob
