// rtjob's libtorch addon: tensors of the TF.js `torch` backend live here as at::Tensor, and
// every kernel is one call of `op(name, inputs, args, outDtype)`. The TypeScript side
// (../kernels.ts) maps TF.js kernel attributes to the positional `args` each op reads below.
// Built by ../build.ts against whichever libtorch it finds (Debian 1.13 on CPU, or the one
// inside a PyTorch install, CUDA when present).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>
#include <node_api.h>

#include "handle.h"

#include <array>
#include <cmath>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif


namespace {

using rtjob::Handle;

at::Device g_device = at::kCPU;
bool g_bf16 = false;

// Per-op counters while counting is on (`counters(true)`): calls, nanoseconds inside the op,
// bytes of its outputs.
bool g_counting = false;
std::unordered_map<std::string, std::array<double, 3>> g_counts;

struct JsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define NAPI(call)                                                      \
  do {                                                                  \
    if ((call) != napi_ok) throw JsError("N-API call failed: " #call);  \
  } while (0)

at::ScalarType dtypeOf(const std::string& s) {
  if (s == "float32") return at::kFloat;
  if (s == "int32") return at::kInt;
  if (s == "bool") return at::kBool;
  throw JsError("torch backend: unsupported dtype " + s);
}

const char* dtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kInt: return "int32";
    case at::kBool: return "bool";
    default: return "other";
  }
}

// TF.js knows three dtypes: anything else torch produces (int64 indices, float64) is cast.
at::Tensor normalise(const at::Tensor& t) {
  auto s = t.scalar_type();
  if (s == at::kFloat || s == at::kInt || s == at::kBool) return t;
  if (at::isFloatingType(s)) return t.to(at::kFloat);
  return t.to(at::kInt);
}

std::string getString(napi_env env, napi_value v) {
  size_t len = 0;
  NAPI(napi_get_value_string_utf8(env, v, nullptr, 0, &len));
  std::string s(len, '\0');
  NAPI(napi_get_value_string_utf8(env, v, s.data(), len + 1, &len));
  return s;
}

double getDouble(napi_env env, napi_value v) {
  double d = 0;
  NAPI(napi_get_value_double(env, v, &d));
  return d;
}

std::vector<int64_t> getInts(napi_env env, napi_value v) {
  uint32_t n = 0;
  NAPI(napi_get_array_length(env, v, &n));
  std::vector<int64_t> out(n);
  for (uint32_t i = 0; i < n; i++) {
    napi_value e;
    NAPI(napi_get_element(env, v, i, &e));
    out[i] = static_cast<int64_t>(getDouble(env, e));
  }
  return out;
}

Handle* getHandle(napi_env env, napi_value v) {
  void* p = nullptr;
  NAPI(napi_get_value_external(env, v, &p));
  return static_cast<Handle*>(p);
}

void finalizeHandle(napi_env, void* data, void*) { delete static_cast<Handle*>(data); }

napi_value wrap(napi_env env, at::Tensor t) {
  napi_value ext;
  NAPI(napi_create_external(env, new Handle{std::move(t)}, finalizeHandle, nullptr, &ext));
  return ext;
}

// One output as `[handle, shape, dtype]`.
napi_value describe(napi_env env, const at::Tensor& t0) {
  at::Tensor t = normalise(t0);
  napi_value arr, shape, dt;
  NAPI(napi_create_array_with_length(env, 3, &arr));
  NAPI(napi_create_array_with_length(env, t.dim(), &shape));
  for (int64_t i = 0; i < t.dim(); i++) {
    napi_value n;
    NAPI(napi_create_double(env, static_cast<double>(t.size(i)), &n));
    NAPI(napi_set_element(env, shape, static_cast<uint32_t>(i), n));
  }
  NAPI(napi_create_string_utf8(env, dtypeName(t.scalar_type()), NAPI_AUTO_LENGTH, &dt));
  NAPI(napi_set_element(env, arr, 0, wrap(env, t)));
  NAPI(napi_set_element(env, arr, 1, shape));
  NAPI(napi_set_element(env, arr, 2, dt));
  return arr;
}

// Positional arguments of one op call.
struct Args {
  napi_env env;
  napi_value arr;
  napi_value at(uint32_t i) const {
    napi_value v;
    NAPI(napi_get_element(env, arr, i, &v));
    return v;
  }
  double num(uint32_t i) const { return getDouble(env, at(i)); }
  int64_t i64(uint32_t i) const { return static_cast<int64_t>(num(i)); }
  bool flag(uint32_t i) const {
    bool b = false;
    NAPI(napi_get_value_bool(env, at(i), &b));
    return b;
  }
  std::vector<int64_t> ints(uint32_t i) const { return getInts(env, at(i)); }
  std::string str(uint32_t i) const { return getString(env, at(i)); }
};

using Tensors = std::vector<at::Tensor>;
using OpFn = std::function<Tensors(const Tensors&, const Args&)>;

at::Tensor matmul(at::Tensor a, at::Tensor b, bool ta, bool tb) {
  if (ta) a = a.transpose(-1, -2);
  if (tb) b = b.transpose(-1, -2);
  if (g_bf16 && a.is_floating_point())
    return at::matmul(a.to(at::kBFloat16), b.to(at::kBFloat16)).to(at::kFloat);
  return at::matmul(a, b);
}

// `x cos + rotate_half(x) sin` for x `[B, T, heads, hd]`, cos/sin `[B, T, hd]`.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  int64_t half = x.size(-1) / 2;
  auto rot = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(2) + rot * sin.unsqueeze(2);
}

// Grouped-query attention of rotated heads, all at once: q `[B,H,T,hd]`, k/v `[B,KV,Tk,hd]`,
// bias `[B or 1, T, Tk]`; returns `[B,T,H*hd]`. Without SDPA's fused kernels (libtorch 1.13, or
// SDPA's math path) the scores and probabilities `[B,H,T,Tk]` exist whole, several copies.
at::Tensor attentionWhole(const at::Tensor& qr, const at::Tensor& kr, const at::Tensor& vh,
                          const at::Tensor& bias, int64_t H, int64_t KV, int64_t hd) {
  int64_t B = qr.size(0), T = qr.size(2);
  auto mask = bias.unsqueeze(1);  // [B|1, 1, T, Tk]
  int64_t rep = H / KV;
  auto ke = rep == 1 ? kr : kr.repeat_interleave(rep, 1);
  auto ve = rep == 1 ? vh : vh.repeat_interleave(rep, 1);
  at::Tensor out;
  bool bf = g_bf16;
  auto cast = [bf](const at::Tensor& t) { return bf ? t.to(at::kBFloat16) : t; };
#if TORCH_VERSION_MAJOR >= 2
  out = at::scaled_dot_product_attention(cast(qr), cast(ke), cast(ve), cast(mask), 0.0, false)
            .to(at::kFloat);
#else
  auto scores = at::matmul(cast(qr), cast(ke).transpose(-1, -2)).to(at::kFloat);
  scores.div_(std::sqrt(static_cast<double>(hd))).add_(mask);
  auto probs = at::softmax(scores, -1);
  scores = at::Tensor();
  out = at::matmul(cast(probs), cast(ve)).to(at::kFloat);
#endif
  return out.permute({0, 2, 1, 3}).reshape({B, T, H * hd});
}

// One block of the blocked attention: batch row b, kv head g (with its rep query heads), query
// rows [i0, i0 + n).
struct AttnBlock {
  int64_t b, g, i0, n;
};

// The blocks that keep at most `maxScores` scores (query head x query row x key) at a time:
// per batch row and kv head, runs of query rows. Empty when the whole attention fits (or
// maxScores <= 0, or SDPA runs fused on CUDA and never holds the scores whole).
std::vector<AttnBlock> attentionBlocks(const at::Tensor& q, int64_t B, int64_t T, int64_t Tk,
                                       int64_t H, int64_t KV, int64_t maxScores) {
  std::vector<AttnBlock> blocks;
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) return blocks;
#endif
  int64_t rep = H / KV;
  if (maxScores <= 0 || B * H * T * Tk <= maxScores) return blocks;
  int64_t rows = std::max<int64_t>(1, std::min<int64_t>(T, maxScores / (rep * Tk)));
  for (int64_t b = 0; b < B; b++)
    for (int64_t g = 0; g < KV; g++)
      for (int64_t i0 = 0; i0 < T; i0 += rows) blocks.push_back({b, g, i0, std::min(rows, T - i0)});
  return blocks;
}

// attentionWhole, or the same block by block (attentionBlocks) into one output: each block's
// scores exist only while it runs. Each query row's softmax and products are the same as whole.
at::Tensor attentionCore(const at::Tensor& qr, const at::Tensor& kr, const at::Tensor& vh,
                         const at::Tensor& bias, int64_t H, int64_t KV, int64_t hd,
                         int64_t maxScores) {
  int64_t B = qr.size(0), T = qr.size(2), Tk = kr.size(2), rep = H / KV;
  auto blocks = attentionBlocks(qr, B, T, Tk, H, KV, maxScores);
  if (blocks.empty()) return attentionWhole(qr, kr, vh, bias, H, KV, hd);
  auto out = at::empty({B, T, H * hd}, qr.options());
  for (const auto& k : blocks) {
    auto o = attentionWhole(qr.narrow(0, k.b, 1).narrow(1, k.g * rep, rep).narrow(2, k.i0, k.n),
                            kr.narrow(0, k.b, 1).narrow(1, k.g, 1),
                            vh.narrow(0, k.b, 1).narrow(1, k.g, 1),
                            bias.narrow(0, bias.size(0) == 1 ? 0 : k.b, 1).narrow(1, k.i0, k.n),
                            rep, 1, hd);
    out.narrow(0, k.b, 1).narrow(1, k.i0, k.n).narrow(2, k.g * rep * hd, rep * hd).copy_(o);
  }
  return out;
}

// Rotary + grouped-query attention on token-major projections, HF's equations: q `[B,T,H*hd]`,
// k/v `[B,T,KV*hd]`, bias `[B or 1, T, Tk]`. Returns `[B,T,H*hd]` and the rotated k and the v in
// the cache layout `[B,KV,T,hd]`. With a past (`pk`, `pv`: `[B,KV,Tp,hd]`, rotated), the new
// keys and values follow it (Tk = Tp + T) and the returned k and v are the grown cache.
Tensors attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& bias, int64_t H,
                  int64_t KV, int64_t hd, int64_t maxScores, const at::Tensor* pk = nullptr,
                  const at::Tensor* pv = nullptr) {
  int64_t B = q.size(0), T = q.size(1);
  auto qr = rope(q.view({B, T, H, hd}), cos, sin).permute({0, 2, 1, 3});
  auto kr = rope(k.view({B, T, KV, hd}), cos, sin).permute({0, 2, 1, 3});
  auto vh = v.view({B, T, KV, hd}).permute({0, 2, 1, 3});
  if (pk) {
    kr = at::cat({*pk, kr}, 2);
    vh = at::cat({*pv, vh}, 2);
  }
  auto out = attentionCore(qr, kr, vh, bias, H, KV, hd, maxScores);
  return {out, kr.contiguous(), vh.contiguous()};
}

// Gradients of q, k, v (token-major, as `attention` takes them) given dOut `dy`: the forward is
// recomputed under autograd, so the backward is libtorch's own (SDPA's on torch >= 2). Blocked
// as attentionCore is, each block with inputs of its own (its query rows, its kv head's keys and
// values), so one block's scores and their gradients exist at a time; the keys' and values'
// gradients are summed over the blocks of their head.
Tensors attentionGrad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& bias,
                      const at::Tensor& dy, int64_t H, int64_t KV, int64_t hd,
                      int64_t maxScores) {
  at::AutoGradMode on(true);
  int64_t B = q.size(0), T = q.size(1), rep = H / KV;
  auto blocks = attentionBlocks(q, B, T, T, H, KV, maxScores);
  if (blocks.empty()) {
    auto ql = q.detach().requires_grad_(true);
    auto kl = k.detach().requires_grad_(true);
    auto vl = v.detach().requires_grad_(true);
    auto r = attention(ql, kl, vl, cos, sin, bias, H, KV, hd, 0);
    return torch::autograd::grad({r[0]}, {ql, kl, vl}, {dy});
  }
  auto dq = at::empty_like(q);
  auto dk = at::zeros_like(k);
  auto dv = at::zeros_like(v);
  for (const auto& b : blocks) {
    auto rows = [&](const at::Tensor& t) { return t.narrow(0, b.b, 1).narrow(1, b.i0, b.n); };
    auto qHeads = [&](const at::Tensor& t) { return rows(t).narrow(2, b.g * rep * hd, rep * hd); };
    auto kvHead = [&](const at::Tensor& t) { return t.narrow(0, b.b, 1).narrow(2, b.g * hd, hd); };
    auto ql = qHeads(q).detach().requires_grad_(true);
    auto kl = kvHead(k).detach().requires_grad_(true);
    auto vl = kvHead(v).detach().requires_grad_(true);
    auto cb = cos.narrow(0, b.b, 1), sb = sin.narrow(0, b.b, 1);
    auto qr = rope(ql.reshape({1, b.n, rep, hd}), rows(cos), rows(sin)).permute({0, 2, 1, 3});
    auto kr = rope(kl.reshape({1, T, 1, hd}), cb, sb).permute({0, 2, 1, 3});
    auto vh = vl.reshape({1, T, 1, hd}).permute({0, 2, 1, 3});
    auto mb = bias.narrow(0, bias.size(0) == 1 ? 0 : b.b, 1).narrow(1, b.i0, b.n);
    auto o = attentionWhole(qr, kr, vh, mb, rep, 1, hd);
    auto g = torch::autograd::grad({o}, {ql, kl, vl}, {qHeads(dy).contiguous()});
    qHeads(dq).copy_(g[0]);
    kvHead(dk).add_(g[1]);
    kvHead(dv).add_(g[2]);
  }
  return {dq, dk, dv};
}

std::unordered_map<std::string, OpFn>& ops() {
  static std::unordered_map<std::string, OpFn> table;
  return table;
}

void def(const std::string& name, OpFn fn) { ops()[name] = std::move(fn); }

using Unary = at::Tensor (*)(const at::Tensor&);
using Binary = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

// Float results of integer inputs where TF.js computes in float (exp of an int32, ...).
at::Tensor fl(const at::Tensor& x) { return x.is_floating_point() ? x : x.to(at::kFloat); }

void defineOps() {
  const std::vector<std::pair<std::string, std::function<at::Tensor(const at::Tensor&)>>> unary = {
      {"neg", [](const at::Tensor& x) { return at::neg(x); }},
      {"exp", [](const at::Tensor& x) { return at::exp(fl(x)); }},
      {"log", [](const at::Tensor& x) { return at::log(fl(x)); }},
      {"sqrt", [](const at::Tensor& x) { return at::sqrt(fl(x)); }},
      {"rsqrt", [](const at::Tensor& x) { return at::rsqrt(fl(x)); }},
      {"square", [](const at::Tensor& x) { return x * x; }},
      {"abs", [](const at::Tensor& x) { return at::abs(x); }},
      {"sigmoid", [](const at::Tensor& x) { return at::sigmoid(fl(x)); }},
      {"tanh", [](const at::Tensor& x) { return at::tanh(fl(x)); }},
      {"relu", [](const at::Tensor& x) { return at::relu(x); }},
      {"relu6", [](const at::Tensor& x) { return at::clamp(x, 0, 6); }},
      {"elu", [](const at::Tensor& x) { return at::elu(fl(x)); }},
      {"selu", [](const at::Tensor& x) { return at::selu(fl(x)); }},
      {"sin", [](const at::Tensor& x) { return at::sin(fl(x)); }},
      {"cos", [](const at::Tensor& x) { return at::cos(fl(x)); }},
      {"tan", [](const at::Tensor& x) { return at::tan(fl(x)); }},
      {"asin", [](const at::Tensor& x) { return at::asin(fl(x)); }},
      {"acos", [](const at::Tensor& x) { return at::acos(fl(x)); }},
      {"atan", [](const at::Tensor& x) { return at::atan(fl(x)); }},
      {"sinh", [](const at::Tensor& x) { return at::sinh(fl(x)); }},
      {"cosh", [](const at::Tensor& x) { return at::cosh(fl(x)); }},
      {"asinh", [](const at::Tensor& x) { return at::asinh(fl(x)); }},
      {"acosh", [](const at::Tensor& x) { return at::acosh(fl(x)); }},
      {"atanh", [](const at::Tensor& x) { return at::atanh(fl(x)); }},
      {"floor", [](const at::Tensor& x) { return at::floor(x); }},
      {"ceil", [](const at::Tensor& x) { return at::ceil(x); }},
      {"round", [](const at::Tensor& x) { return at::round(x); }},
      {"sign", [](const at::Tensor& x) { return at::sign(x); }},
      {"log1p", [](const at::Tensor& x) { return at::log1p(fl(x)); }},
      {"expm1", [](const at::Tensor& x) { return at::expm1(fl(x)); }},
      {"reciprocal", [](const at::Tensor& x) { return at::reciprocal(fl(x)); }},
      {"erf", [](const at::Tensor& x) { return at::erf(fl(x)); }},
      {"softplus", [](const at::Tensor& x) { return at::softplus(fl(x)); }},
      {"logical_not", [](const at::Tensor& x) { return at::logical_not(x); }},
      {"isnan", [](const at::Tensor& x) { return at::isnan(x); }},
      {"isinf", [](const at::Tensor& x) { return at::isinf(x); }},
      {"isfinite", [](const at::Tensor& x) { return at::isfinite(x); }},
      {"identity", [](const at::Tensor& x) { return x; }},
      {"zeros_like", [](const at::Tensor& x) { return at::zeros_like(x); }},
      {"ones_like", [](const at::Tensor& x) { return at::ones_like(x); }},
  };
  for (const auto& [name, fn] : unary) {
    auto f = fn;
    def(name, [f](const Tensors& in, const Args&) { return Tensors{f(in[0])}; });
  }
  const std::vector<std::pair<std::string, Binary>> binary = {
      {"add", [](const at::Tensor& a, const at::Tensor& b) { return a.scalar_type() == at::kBool ? at::logical_or(a, b) : at::add(a, b); }},
      {"sub", [](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); }},
      {"mul", [](const at::Tensor& a, const at::Tensor& b) { return a.scalar_type() == at::kBool ? at::logical_and(a, b) : at::mul(a, b); }},
      {"div", [](const at::Tensor& a, const at::Tensor& b) { return at::div(fl(a), fl(b)); }},
      {"floordiv", [](const at::Tensor& a, const at::Tensor& b) {
         return a.is_floating_point() ? at::floor(at::div(a, b)) : at::floor(at::div(fl(a), fl(b))).to(a.scalar_type()); }},
      {"mod", [](const at::Tensor& a, const at::Tensor& b) { return at::remainder(a, b); }},
      {"maximum", [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }},
      {"minimum", [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }},
      {"pow", [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); }},
      {"squared_difference", [](const at::Tensor& a, const at::Tensor& b) { auto d = a - b; return d * d; }},
      {"atan2", [](const at::Tensor& a, const at::Tensor& b) { return at::atan2(fl(a), fl(b)); }},
      {"equal", [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }},
      {"not_equal", [](const at::Tensor& a, const at::Tensor& b) { return at::ne(a, b); }},
      {"less", [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }},
      {"less_equal", [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }},
      {"greater", [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }},
      {"greater_equal", [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); }},
      {"logical_and", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }},
      {"logical_or", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }},
      {"logical_xor", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); }},
      {"prelu", [](const at::Tensor& x, const at::Tensor& a) { return at::where(x < 0, x * a, x); }},
  };
  for (const auto& [name, fn] : binary) {
    auto f = fn;
    def(name, [f](const Tensors& in, const Args&) { return Tensors{f(in[0], in[1])}; });
  }
  def("cast", [](const Tensors& in, const Args& a) {
    auto to = dtypeOf(a.str(0));
    auto x = in[0];
    // TF.js truncates floats toward zero when casting to int32, as torch does.
    if (to == at::kBool) return Tensors{x != 0};
    return Tensors{x.to(to)};
  });
  def("add_n", [](const Tensors& in, const Args&) {
    auto s = in[0].clone();
    for (size_t i = 1; i < in.size(); i++) s.add_(in[i]);
    return Tensors{s};
  });
  def("clip", [](const Tensors& in, const Args& a) { return Tensors{at::clamp(in[0], a.num(0), a.num(1))}; });
  def("leaky_relu", [](const Tensors& in, const Args& a) { return Tensors{at::where(in[0] < 0, in[0] * a.num(0), in[0])}; });
  def("step", [](const Tensors& in, const Args& a) {
    auto x = in[0];
    return Tensors{at::where(at::isnan(x), x, at::where(x > 0, at::ones_like(x), at::full_like(x, a.num(0))))};
  });
  // args: kind, axes, keepDims
  def("reduce", [](const Tensors& in, const Args& a) {
    auto kind = a.str(0);
    auto axes = a.ints(1);
    bool keep = a.flag(2);
    auto x = in[0];
    if (axes.empty()) return Tensors{x.clone()};
    if (kind == "sum") return Tensors{x.scalar_type() == at::kBool ? at::sum(x.to(at::kInt), axes, keep) : at::sum(x, axes, keep)};
    if (kind == "mean") return Tensors{at::mean(fl(x), axes, keep)};
    if (kind == "max") return Tensors{at::amax(x, axes, keep)};
    if (kind == "min") return Tensors{at::amin(x, axes, keep)};
    // prod, any, all: one axis at a time, highest first so indices stay valid.
    std::sort(axes.begin(), axes.end(), std::greater<int64_t>());
    for (auto d : axes) {
      if (kind == "prod") x = at::prod(x.scalar_type() == at::kBool ? x.to(at::kInt) : x, d, keep);
      else if (kind == "any") x = at::any(x.to(at::kBool), d, keep);
      else if (kind == "all") x = at::all(x.to(at::kBool), d, keep);
      else throw JsError("torch backend: unknown reduction " + kind);
    }
    return Tensors{x};
  });
  // TF.js skips NaN (torch would pick it); ties go to the lowest index in both.
  def("argmax", [](const Tensors& in, const Args& a) {
    auto x = in[0].scalar_type() == at::kBool ? in[0].to(at::kInt) : in[0];
    if (x.is_floating_point()) x = at::where(at::isnan(x), at::full_like(x, -INFINITY), x);
    return Tensors{at::argmax(x, a.i64(0)).to(at::kInt)};
  });
  def("argmin", [](const Tensors& in, const Args& a) {
    auto x = in[0].scalar_type() == at::kBool ? in[0].to(at::kInt) : in[0];
    if (x.is_floating_point()) x = at::where(at::isnan(x), at::full_like(x, INFINITY), x);
    return Tensors{at::argmin(x, a.i64(0)).to(at::kInt)};
  });
  def("softmax", [](const Tensors& in, const Args& a) { return Tensors{at::softmax(in[0], a.i64(0))}; });
  def("log_softmax", [](const Tensors& in, const Args& a) { return Tensors{at::log_softmax(in[0], a.i64(0))}; });
  def("reshape", [](const Tensors& in, const Args& a) { return Tensors{in[0].reshape(a.ints(0))}; });
  def("transpose", [](const Tensors& in, const Args& a) { return Tensors{in[0].permute(a.ints(0)).contiguous()}; });
  def("slice", [](const Tensors& in, const Args& a) {
    auto begin = a.ints(0), size = a.ints(1);
    auto x = in[0];
    for (size_t d = 0; d < begin.size(); d++) x = x.narrow(static_cast<int64_t>(d), begin[d], size[d]);
    return Tensors{x.contiguous()};
  });
  // args: begin, end, strides (per dimension, already resolved by TF.js' slice_util), finalShape
  def("strided_slice", [](const Tensors& in, const Args& a) {
    auto begin = a.ints(0), end = a.ints(1), strides = a.ints(2), shape = a.ints(3);
    auto x = in[0];
    for (size_t i = 0; i < begin.size(); i++) {
      int64_t d = static_cast<int64_t>(i), b = begin[i], e = end[i], s = strides[i];
      if (s > 0) {
        x = x.slice(d, b, std::max(b, e), s);
      } else {
        auto idx = b > e ? at::arange(b, e, s, at::TensorOptions().dtype(at::kLong).device(x.device()))
                         : at::empty({0}, at::TensorOptions().dtype(at::kLong).device(x.device()));
        x = x.index_select(d, idx);
      }
    }
    return Tensors{x.reshape(shape).contiguous()};
  });
  def("concat", [](const Tensors& in, const Args& a) { return Tensors{at::cat(in, a.i64(0))}; });
  def("stack", [](const Tensors& in, const Args& a) { return Tensors{at::stack(in, a.i64(0))}; });
  def("unstack", [](const Tensors& in, const Args& a) {
    Tensors out;
    for (auto& t : at::unbind(in[0], a.i64(0))) out.push_back(t.contiguous());
    return out;
  });
  def("split", [](const Tensors& in, const Args& a) {
    Tensors out;
    for (auto& t : at::split_with_sizes(in[0], a.ints(0), a.i64(1))) out.push_back(t.contiguous());
    return out;
  });
  def("tile", [](const Tensors& in, const Args& a) { return Tensors{in[0].repeat(a.ints(0))}; });
  def("reverse", [](const Tensors& in, const Args& a) { return Tensors{at::flip(in[0], a.ints(0))}; });
  // args: flat [before, after] per dimension (TF.js order), constant
  def("pad", [](const Tensors& in, const Args& a) {
    auto p = a.ints(0);
    std::vector<int64_t> tp;
    for (size_t d = p.size() / 2; d-- > 0;) {
      tp.push_back(p[2 * d]);
      tp.push_back(p[2 * d + 1]);
    }
    return Tensors{at::constant_pad_nd(in[0], tp, a.num(1))};
  });
  // args: axis, batchDims. Indices out of range are the caller's error, as on TF.js' CPU.
  def("gather", [](const Tensors& in, const Args& a) {
    auto x = in[0];
    auto idx = in[1].to(at::kLong);
    int64_t axis = a.i64(0), bd = a.i64(1);
    if (bd == 0) {
      std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + axis);
      for (auto s : idx.sizes()) shape.push_back(s);
      for (int64_t d = axis + 1; d < x.dim(); d++) shape.push_back(x.size(d));
      return Tensors{x.index_select(axis, idx.reshape({-1})).reshape(shape)};
    }
    // batchDims > 0: fold the batch into one dimension and gather per batch.
    int64_t batch = 1;
    for (int64_t d = 0; d < bd; d++) batch *= x.size(d);
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + axis);
    for (int64_t d = bd; d < idx.dim(); d++) shape.push_back(idx.size(d));
    for (int64_t d = axis + 1; d < x.dim(); d++) shape.push_back(x.size(d));
    int64_t outer = 1;
    for (int64_t d = bd; d < axis; d++) outer *= x.size(d);
    auto xr = x.reshape({batch, outer, x.size(axis), -1});
    auto ir = idx.reshape({batch, -1});
    Tensors parts;
    for (int64_t b = 0; b < batch; b++) parts.push_back(xr[b].index_select(1, ir[b]));
    return Tensors{at::stack(parts, 0).reshape(shape)};
  });
  def("gather_nd", [](const Tensors& in, const Args&) {
    auto x = in[0];
    auto idx = in[1].to(at::kLong);
    int64_t K = idx.size(-1);
    std::vector<int64_t> outShape(idx.sizes().begin(), idx.sizes().end() - 1);
    for (int64_t d = K; d < x.dim(); d++) outShape.push_back(x.size(d));
    auto lin = at::zeros(idx.sizes().slice(0, idx.dim() - 1), idx.options());
    for (int64_t k = 0; k < K; k++) lin = lin * x.size(k) + idx.select(-1, k);
    int64_t rows = 1;
    for (int64_t k = 0; k < K; k++) rows *= x.size(k);
    auto xr = x.reshape({rows, -1});
    return Tensors{xr.index_select(0, lin.reshape({-1})).reshape(outShape)};
  });
  // inputs: indices, updates; args: shape
  def("scatter_nd", [](const Tensors& in, const Args& a) {
    auto idx = in[0].to(at::kLong);
    if (idx.dim() == 1) idx = idx.unsqueeze(-1);  // one index per update row
    auto upd = in[1];
    auto shape = a.ints(0);
    int64_t K = idx.size(-1);
    int64_t rows = 1;
    for (int64_t k = 0; k < K; k++) rows *= shape[k];
    auto out = at::zeros(shape, upd.options());
    auto lin = at::zeros(idx.sizes().slice(0, idx.dim() - 1), idx.options());
    for (int64_t k = 0; k < K; k++) lin = lin * shape[k] + idx.select(-1, k);
    auto o2 = out.view({rows, -1});
    o2.index_add_(0, lin.reshape({-1}), upd.reshape({lin.numel(), -1}));
    return Tensors{out};
  });
  // inputs: data, segmentIds; args: numSegments
  def("unsorted_segment_sum", [](const Tensors& in, const Args& a) {
    auto x = in[0];
    auto ids = in[1].to(at::kLong).reshape({-1});
    int64_t n = ids.numel();
    std::vector<int64_t> shape{a.i64(0)};
    for (int64_t d = in[1].dim(); d < x.dim(); d++) shape.push_back(x.size(d));
    auto out = at::zeros(shape, x.options());
    auto valid = (ids >= 0).nonzero().reshape({-1});
    out.view({shape[0], -1}).index_add_(0, ids.index_select(0, valid), x.reshape({n, -1}).index_select(0, valid));
    return Tensors{out};
  });
  // args: depth, on, off
  def("one_hot", [](const Tensors& in, const Args& a) {
    auto idx = in[0].to(at::kLong);
    int64_t depth = a.i64(0);
    auto valid = (idx >= 0) & (idx < depth);
    auto oh = at::one_hot(at::where(valid, idx, at::zeros_like(idx)), depth) * valid.unsqueeze(-1);
    double on = a.num(1), off = a.num(2);
    return Tensors{oh.to(at::kFloat) * (on - off) + off};
  });
  def("select", [](const Tensors& in, const Args&) { return Tensors{at::where(in[0].to(at::kBool), in[1], in[2])}; });
  def("matmul", [](const Tensors& in, const Args& a) { return Tensors{matmul(in[0], in[1], a.flag(0), a.flag(1))}; });
  def("einsum", [](const Tensors& in, const Args& a) { return Tensors{at::einsum(a.str(0), in)}; });
  // args: shape, value, dtype
  def("fill", [](const Tensors&, const Args& a) {
    return Tensors{at::full(a.ints(0), a.num(1), at::TensorOptions().dtype(dtypeOf(a.str(2))).device(g_device))};
  });
  // args: axis, exclusive, reverse
  def("cumsum", [](const Tensors& in, const Args& a) {
    int64_t axis = a.i64(0);
    auto x = in[0];
    if (a.flag(2)) x = at::flip(x, {axis});
    auto c = at::cumsum(x, axis);
    if (a.flag(1)) c = c - x;
    if (a.flag(2)) c = at::flip(c, {axis});
    return Tensors{c};
  });
  def("cumprod", [](const Tensors& in, const Args& a) {
    int64_t axis = a.i64(0);
    auto x = in[0];
    if (a.flag(2)) x = at::flip(x, {axis});
    auto c = at::cumprod(x, axis);
    if (a.flag(1)) c = at::cat({at::ones_like(x.narrow(axis, 0, 1)), c.narrow(axis, 0, x.size(axis) - 1)}, axis);
    if (a.flag(2)) c = at::flip(c, {axis});
    return Tensors{c};
  });
  // args: k, sorted
  def("topk", [](const Tensors& in, const Args& a) {
    // A stable sort: equal values keep index order, as TF.js does.
    auto r = at::sort(in[0], true, -1, true);
    int64_t k = a.i64(0);
    return Tensors{std::get<0>(r).narrow(-1, 0, k).contiguous(),
                   std::get<1>(r).narrow(-1, 0, k).to(at::kInt)};
  });
  // AdamW as the trainer computes it (../../training.ts): inputs p, m, v, raw gradient; args lr,
  // beta1, beta2, eps, weightDecay, bc1, bc2, gs (the gradient's scale). Returns new p, m, v.
  def("adamw", [](const Tensors& in, const Args& a) {
    at::NoGradGuard ng;
    double lr = a.num(0), b1 = a.num(1), b2 = a.num(2), eps = a.num(3), wd = a.num(4);
    double bc1 = a.num(5), bc2 = a.num(6), gs = a.num(7);
    auto g = in[3] * gs;
    auto m = in[1] * b1 + g * (1 - b1);
    auto v = in[2] * b2 + g * g * (1 - b2);
    auto update = (m / bc1) / ((v / bc2).sqrt() + eps) * lr;
    auto p = wd > 0 ? in[0] * (1 - lr * wd) - update : in[0] - update;
    return Tensors{p, m, v};
  });
  // The same update in place (inputs p, m, v, g; same args; no outputs): the TS side calls it
  // only when the variables alone hold p, m and v. On CPU one pass over the four arrays, where
  // the composed update above makes about ten parameter-sized temporaries.
  def("adamw_", [](const Tensors& in, const Args& a) {
    at::NoGradGuard ng;
    double lr = a.num(0), b1 = a.num(1), b2 = a.num(2), eps = a.num(3), wd = a.num(4);
    double bc1 = a.num(5), bc2 = a.num(6), gs = a.num(7);
    auto p = in[0], m = in[1], v = in[2], g = in[3];
    bool flat = p.device().is_cpu() && p.scalar_type() == at::kFloat && g.scalar_type() == at::kFloat &&
                p.is_contiguous() && m.is_contiguous() && v.is_contiguous() && g.is_contiguous();
    if (!flat) {
      m.mul_(b1).add_(g, (1 - b1) * gs);
      v.mul_(b2).addcmul_(g, g, (1 - b2) * gs * gs);
      if (wd > 0) p.mul_(1 - lr * wd);
      auto denom = (v / bc2).sqrt_().add_(eps);
      p.addcdiv_(m, denom, -lr / bc1);
      return Tensors{};
    }
    float* P = p.data_ptr<float>();
    float* M = m.data_ptr<float>();
    float* Vv = v.data_ptr<float>();
    const float* G = g.data_ptr<float>();
    const float fb1 = b1, fb2 = b2, c1 = (1 - b1) * gs, c2 = (1 - b2) * gs * gs;
    const float decay = 1 - lr * wd, step = lr / bc1, ibc2 = 1 / bc2, feps = eps;
    at::parallel_for(0, p.numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; i++) {
        float gi = G[i];
        float mi = fb1 * M[i] + c1 * gi;
        float vi = fb2 * Vv[i] + c2 * gi * gi;
        M[i] = mi;
        Vv[i] = vi;
        P[i] = P[i] * decay - step * mi / (std::sqrt(vi * ibc2) + feps);
      }
    });
    return Tensors{};
  });
  // The sum of squares of all inputs (the trainer's global gradient norm, squared): a dot product
  // of each with itself, no squared copies; accumulated in double.
  def("sum_squares", [](const Tensors& in, const Args&) {
    at::NoGradGuard ng;
    at::Tensor acc = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(g_device));
    for (const auto& t : in) {
      auto f = t.reshape({-1});
      acc += at::dot(f, f).to(at::kDouble);
    }
    return Tensors{acc.to(at::kFloat)};
  });
  // log_softmax(x)[..., t] for x [.., V] and t [..] (../../training.ts), and its gradient
  // dx = dy * (onehot(t) - softmax(x)).
  // By blocks of 64 rows: logsumexp's vocabulary-wide temporaries are one block's, not a
  // second and third copy of all the logits.
  def("target_logprob", [](const Tensors& in, const Args&) {
    at::NoGradGuard ng;
    auto x = in[0].reshape({-1, in[0].size(-1)});
    auto t = in[1].to(at::kLong).reshape({-1, 1});
    auto out = at::empty({x.size(0)}, x.options());
    for (int64_t r = 0; r < x.size(0); r += 64) {
      int64_t n = std::min<int64_t>(64, x.size(0) - r);
      auto xb = x.narrow(0, r, n);
      out.narrow(0, r, n).copy_(xb.gather(-1, t.narrow(0, r, n)).squeeze(-1) - at::logsumexp(xb, -1));
    }
    return Tensors{out.reshape(in[1].sizes())};
  });
  def("target_logprob_grad", [](const Tensors& in, const Args&) {
    at::NoGradGuard ng;
    auto t = in[1].to(at::kLong).unsqueeze(-1);
    auto dy = in[2].unsqueeze(-1);
    auto dx = at::softmax(in[0], -1).mul_(-dy);
    dx.scatter_add_(-1, t, dy);
    return Tensors{dx};
  });
  // The model's fused attention (../../attention.ts): args H, KV, hd, and the most scores one
  // block may hold (attentionBlocks; 0: all at once).
  def("attention", [](const Tensors& in, const Args& a) {
    at::NoGradGuard ng;
    auto r = attention(in[0], in[1], in[2], in[3], in[4], in[5], a.i64(0), a.i64(1), a.i64(2),
                       a.i64(3));
    return Tensors{r[0]};
  });
  def("attention_cache", [](const Tensors& in, const Args& a) {
    at::NoGradGuard ng;
    return attention(in[0], in[1], in[2], in[3], in[4], in[5], a.i64(0), a.i64(1), a.i64(2),
                     a.i64(3));
  });
  // Decoding: inputs 6 and 7 are the cache's keys and values so far; returns the output and the
  // grown cache (one kernel for what is ~20 TF.js kernels per layer composed).
  def("attention_past", [](const Tensors& in, const Args& a) {
    at::NoGradGuard ng;
    return attention(in[0], in[1], in[2], in[3], in[4], in[5], a.i64(0), a.i64(1), a.i64(2),
                     a.i64(3), &in[6], &in[7]);
  });
  // Gradients of q, k, v given dOut (input 6).
  def("attention_grad", [](const Tensors& in, const Args& a) {
    return attentionGrad(in[0], in[1], in[2], in[3], in[4], in[5], in[6], a.i64(0), a.i64(1),
                         a.i64(2), a.i64(3));
  });
}

// ---- N-API entry points -------------------------------------------------------------------

template <typename F>
napi_value guarded(napi_env env, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    napi_throw_error(env, "RTJOB_TORCH_OP", e.what());
    return nullptr;
  }
}

napi_value jsFromData(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 3;
    napi_value argv[3];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    napi_typedarray_type type;
    size_t length;
    void* data;
    napi_value ab;
    size_t offset;
    NAPI(napi_get_typedarray_info(env, argv[0], &type, &length, &data, &ab, &offset));
    auto shape = getInts(env, argv[1]);
    auto dt = dtypeOf(getString(env, argv[2]));
    at::ScalarType src;
    switch (type) {
      case napi_float32_array: src = at::kFloat; break;
      case napi_int32_array: src = at::kInt; break;
      case napi_uint8_array: src = at::kByte; break;
      default: throw JsError("torch backend: unsupported typed array");
    }
    auto t = at::from_blob(data, {static_cast<int64_t>(length)}, at::TensorOptions().dtype(src));
    auto out = (src == at::kByte && dt == at::kBool) ? t != 0 : t.to(dt);
    if (out.data_ptr() == data) out = out.clone();
    return wrap(env, out.reshape(shape).to(g_device));
  });
}

napi_value jsToData(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 1;
    napi_value argv[1];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    auto t = normalise(getHandle(env, argv[0])->t).to(at::kCPU).contiguous();
    if (t.scalar_type() == at::kBool) t = t.to(at::kByte);
    size_t bytes = t.numel() * t.element_size();
    void* buf;
    napi_value ab, out;
    NAPI(napi_create_arraybuffer(env, bytes, &buf, &ab));
    if (bytes) std::memcpy(buf, t.data_ptr(), bytes);
    napi_typedarray_type type = t.scalar_type() == at::kFloat ? napi_float32_array
                                : t.scalar_type() == at::kInt ? napi_int32_array
                                                              : napi_uint8_array;
    NAPI(napi_create_typedarray(env, type, t.numel(), ab, 0, &out));
    return out;
  });
}

napi_value jsFree(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 1;
    napi_value argv[1];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    getHandle(env, argv[0])->t = at::Tensor();
    return nullptr;
  });
}

// op(name, inputs, args, outDtype?) -> [[handle, shape, dtype], ...]
napi_value jsOp(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 4;
    napi_value argv[4];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    auto name = getString(env, argv[0]);
    auto it = ops().find(name);
    if (it == ops().end()) throw JsError("torch backend: no op '" + name + "'");
    uint32_t n = 0;
    NAPI(napi_get_array_length(env, argv[1], &n));
    Tensors in;
    for (uint32_t i = 0; i < n; i++) {
      napi_value e;
      NAPI(napi_get_element(env, argv[1], i, &e));
      in.push_back(getHandle(env, e)->t);
    }
    Args args{env, argv[2]};
    auto t0 = g_counting ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Tensors out = it->second(in, args);
    if (g_counting) {
      auto& c = g_counts[name];
      c[0] += 1;
      c[1] += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      for (const auto& t : out) c[2] += static_cast<double>(t.numel() * t.element_size());
    }
    napi_valuetype vt = napi_undefined;
    if (argc > 3) NAPI(napi_typeof(env, argv[3], &vt));
    if (vt == napi_string) {
      auto dt = dtypeOf(getString(env, argv[3]));
      for (auto& t : out)
        if (t.scalar_type() != dt) t = dt == at::kBool ? t != 0 : t.to(dt);
    }
    napi_value arr;
    NAPI(napi_create_array_with_length(env, out.size(), &arr));
    for (size_t i = 0; i < out.size(); i++)
      NAPI(napi_set_element(env, arr, static_cast<uint32_t>(i), describe(env, out[i])));
    return arr;
  });
}

// info() -> { version, device, cuda }; configure(device, bf16)
napi_value jsInfo(napi_env env, napi_callback_info) {
  return guarded(env, [&]() -> napi_value {
    napi_value o, v;
    NAPI(napi_create_object(env, &o));
    NAPI(napi_create_string_utf8(env, TORCH_VERSION, NAPI_AUTO_LENGTH, &v));
    NAPI(napi_set_named_property(env, o, "version", v));
    bool cuda = at::hasCUDA() && at::detail::getCUDAHooks().getNumGPUs() > 0;
    NAPI(napi_get_boolean(env, cuda, &v));
    NAPI(napi_set_named_property(env, o, "cuda", v));
    NAPI(napi_create_string_utf8(env, g_device.str().c_str(), NAPI_AUTO_LENGTH, &v));
    NAPI(napi_set_named_property(env, o, "device", v));
    return o;
  });
}

napi_value jsConfigure(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 3;
    napi_value argv[3];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    g_device = at::Device(getString(env, argv[0]));
    auto precision = getString(env, argv[1]);
    g_bf16 = precision == "bf16";
    at::globalContext().setAllowTF32CuBLAS(precision != "fp32");
    int threads = static_cast<int>(getDouble(env, argv[2]));
    if (threads > 0) at::set_num_threads(threads);
    return nullptr;
  });
}

// counters(on) -> { op: [calls, ns, bytes] } counted since the last call; then counts only if on.
napi_value jsCounters(napi_env env, napi_callback_info info) {
  return guarded(env, [&]() -> napi_value {
    size_t argc = 1;
    napi_value argv[1];
    NAPI(napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr));
    bool on = false;
    NAPI(napi_get_value_bool(env, argv[0], &on));
    napi_value o;
    NAPI(napi_create_object(env, &o));
    for (const auto& [name, c] : g_counts) {
      napi_value arr;
      NAPI(napi_create_array_with_length(env, 3, &arr));
      for (uint32_t i = 0; i < 3; i++) {
        napi_value n;
        NAPI(napi_create_double(env, c[i], &n));
        NAPI(napi_set_element(env, arr, i, n));
      }
      NAPI(napi_set_named_property(env, o, name.c_str(), arr));
    }
    g_counts.clear();
    g_counting = on;
    return o;
  });
}

}  // namespace

NAPI_MODULE_INIT() {
#ifdef __GLIBC__
  // Host tensors of 1 MiB and more get pages of their own, returned to the system when freed.
  // glibc's default threshold grows with the largest block freed (to 32 MiB), after which a
  // training step's many activations of a few MiB to 32 MiB come from the heap, which freeing
  // fragments rather than shrinks: ~0.2 GiB of a 1-layer Qwen3-0.6B-shaped LoRA step's peak RSS.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
  defineOps();
  const std::pair<const char*, napi_callback> fns[] = {
      {"fromData", jsFromData}, {"toData", jsToData}, {"free", jsFree},
      {"op", jsOp},             {"info", jsInfo},     {"configure", jsConfigure},
      {"counters", jsCounters},
  };
  for (const auto& [name, fn] : fns) {
    napi_value f;
    napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, nullptr, &f);
    napi_set_named_property(env, exports, name, f);
  }
  rtjob::defineC10d(env, exports);
  return exports;
}
