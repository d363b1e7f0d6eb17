#include "reckon/ops/norm.h"

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

namespace {
constexpr const char* kBnSlot[] = {"x", "weight", "bias", "running_mean", "running_var"};

// Mixed precision: with x in bf16/f16 the per-channel tensors (parameters, running and saved
// statistics) are f32, as the kernel computes in f32 (torch's mixed-type batch norm).
DType stat_dtype(DType x) { return x == DType::bf16 || x == DType::f16 ? DType::f32 : x; }
// Checks a per-channel tensor of batch norm (if defined): shape (C), x's dtype (or f32 for a
// bf16/f16 x).
void check_channel(std::string_view op, const Tensor& t, const char* name, const Tensor& x, bool contiguous) {
  if (!t.defined()) return;
  int64_t C = x.size(1);
  RK_CHECK(t.dim() == 1 && t.size(0) == C, "[{}] {} has shape {} but x {} has {} channels", op, name,
           shape_str(t.shape()), shape_str(x.shape()), C);
  RK_CHECK(t.dtype() == stat_dtype(x.dtype()) || t.dtype() == x.dtype(), "[{}] {} is {} but x is {}", op, name,
           dtype_name(t.dtype()), dtype_name(x.dtype()));
  RK_CHECK(!contiguous || t.is_contiguous(), "[{}] {} must be contiguous: it is updated in place", op, name);
}
void check_x(std::string_view op, const Tensor& x, int64_t min_rank) {
  RK_CHECK(x.defined(), "[{}] needs x", op);
  RK_CHECK(is_floating(x.dtype()), "[{}] needs a floating x, got {} ({})", op, dtype_name(x.dtype()), x.str());
  RK_CHECK(x.dim() >= min_rank, "[{}] x must be (N, C, ...) with at least {} dims, got {}", op, min_rank,
           shape_str(x.shape()));
}
}  // namespace

// ---- batch norm ----
std::vector<TensorSpec> BatchNorm2d::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 5, "[{}] needs (x, weight, bias, running_mean, running_var), got {} tensors", kName,
           in.size());
  const Tensor& x = in[0];
  check_x(kName, x, 2);
  for (size_t i = 1; i < 5; ++i) check_channel(kName, in[i], kBnSlot[i], x, i >= 3);
  const bool running = in[3].defined();
  RK_CHECK(running == in[4].defined(), "[{}] running_mean and running_var must both be given or both be missing",
           kName);
  RK_CHECK(a.training || running, "[{}] eval mode needs running_mean and running_var (x: {})", kName,
           shape_str(x.shape()));
  const int64_t C = x.size(1);
  if (a.training) {
    int64_t m = C ? x.numel() / C : 0;
    RK_CHECK(m > 1, "[{}] expected more than 1 value per channel when training, got x {}", kName, shape_str(x.shape()));
    if (!running) return {x.spec(), {{C}, stat_dtype(x.dtype())}, {{C}, stat_dtype(x.dtype())}};
    return {x.spec(), {{C}, stat_dtype(x.dtype())}, {{C}, stat_dtype(x.dtype())}, in[3].spec(), in[4].spec()};
  }
  return {x.spec()};
}
Cost BatchNorm2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[0].numel(), c = in[0].size(1);
  Cost k{0, 0, bytes_of(in), bytes_of(out)};
  if (a.training) {
    // mean: 1 add; var: sub, mul, add; y = x * scale + shift: 2. Per channel: invstd, scale,
    // shift, the two running updates.
    k.flops = 6 * n + 12 * c;  // the running stats' writes are outputs 3 and 4
  } else {
    k.flops = 2 * n + 4 * c;
  }
  return k;
}
SavedSet BatchNorm2d::saved(const Attrs& a, NeedsGrad needs) {
  // The weight is needed for dx only; x (with the statistics) for every gradient.
  const uint32_t w = needs[0] ? 0b00010 : 0;
  return a.training ? SavedSet{0b00001 | w, 0b110} : SavedSet{0b11001 | w, 0};
}
std::vector<Tensor> BatchNorm2d::backward(const BackwardArgs& b, const Attrs& a) {
  std::vector<Tensor> r(5);
  const Tensor& dy = b.grad_outputs[0];
  const bool want_x = b.needs_grad[0], want_w = b.needs_grad[1], want_b = b.needs_grad[2];
  const Tensor& x = b.inputs[0];
  const Tensor& w = b.inputs[1];
  if (dy.defined() && (want_x || want_w || want_b)) {
    auto g = a.training ? call<BatchNorm2dBackward>({dy, x, w, b.outputs[1], b.outputs[2]}, a)
                        : call<BatchNorm2dBackward>({dy, x, w, b.inputs[3], b.inputs[4]}, a);
    if (want_x) r[0] = g[0];
    if (want_w) r[1] = g[1];
    if (want_b) r[2] = g[2];
  }
  // Gradients that reached the saved batch statistics (only if a caller used them):
  // mean = sum(x) / M, invstd = (var + eps)^-1/2, d invstd / dx = -invstd^3 (x - mean) / M.
  if (a.training && want_x && b.grad_outputs.size() >= 3 &&
      (b.grad_outputs[1].defined() || b.grad_outputs[2].defined())) {
    const Tensor &gm = b.grad_outputs[1], &gi = b.grad_outputs[2];
    const int64_t C = x.size(1);
    const double M = double(x.numel() / C);
    Shape bs(size_t(x.dim()), 1);
    bs[1] = C;
    Tensor extra;
    if (gm.defined()) extra = reshape(scale(gm, 1.0 / M), bs);
    if (gi.defined()) {
      const Tensor &mean = b.outputs[1], &invstd = b.outputs[2];
      Tensor k = reshape(scale(mul(gi, mul(invstd, square(invstd))), -1.0 / M), bs);
      Tensor t = mul(sub(x, reshape(mean, bs)), k);
      extra = extra.defined() ? add(t, extra) : t;
    }
    if (r[0].defined()) r[0] = add(r[0], extra);
    else r[0] = extra.shape() == x.shape() ? extra : contiguous(expand(extra, x.shape()));
  }
  return r;
}

std::vector<TensorSpec> BatchNorm2dBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 5 && in[0].defined() && in[1].defined() && in[3].defined() && in[4].defined(),
           "[{}] needs (dy, x, weight or undefined, mean, invstd or running_var)", kName);
  const Tensor &dy = in[0], &x = in[1];
  check_x(kName, x, 2);
  RK_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), "[{}] gradient {} does not match x {}", kName,
           dy.str(), x.str());
  check_channel(kName, in[2], "weight", x, false);
  check_channel(kName, in[3], a.training ? "save_mean" : "running_mean", x, false);
  check_channel(kName, in[4], a.training ? "save_invstd" : "running_var", x, false);
  const int64_t C = x.size(1);
  const DType wd = in[2].defined() ? in[2].dtype() : stat_dtype(x.dtype());
  return {x.spec(), {{C}, wd}, {{C}, wd}};
}
Cost BatchNorm2dBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[1].numel(), c = in[1].size(1);
  // sums: dy (1), dy * (x - mean) (3); training dx = (dy - a - (x - mean) * b) * c (5), eval dx = dy * c (1).
  return {0, a.training ? 9 * n + 8 * c : 5 * n + 6 * c, bytes_of(in), bytes_of(out)};
}
SavedSet BatchNorm2dBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- local response norm ----
std::vector<TensorSpec> LocalResponseNorm::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1, "[{}] needs x", kName);
  check_x(kName, in[0], 3);
  RK_CHECK(a.size >= 1, "[{}] size must be at least 1, got {} (x: {})", kName, a.size, shape_str(in[0].shape()));
  return {in[0].spec()};
}
Cost LocalResponseNorm::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[0].numel();
  // window of squares: size MACs; s = k + alpha / size * sum: 2; s^-beta: 2 (log, exp); x * that: 1.
  return {n * a.size, 5 * n, bytes_of(in), bytes_of(out)};
}
SavedSet LocalResponseNorm::saved(const Attrs&, NeedsGrad) { return {1, 0}; }
std::vector<Tensor> LocalResponseNorm::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return {Tensor()};
  return {call1<LocalResponseNormBackward>({b.grad_outputs[0], b.inputs[0]}, a)};
}

std::vector<TensorSpec> LocalResponseNormBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2 && in[0].defined(), "[{}] needs dy and x", kName);
  check_x(kName, in[1], 3);
  RK_CHECK(in[0].shape() == in[1].shape() && in[0].dtype() == in[1].dtype(), "[{}] gradient {} does not match x {}",
           kName, in[0].str(), in[1].str());
  RK_CHECK(a.size >= 1, "[{}] size must be at least 1, got {}", kName, a.size);
  return {in[1].spec()};
}
Cost LocalResponseNormBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[1].numel();
  // s again (size MACs + 2), s^-beta and s^(-beta-1) (3), dy x s^(-beta-1) (2), the transposed
  // window (size MACs), dy s^-beta - coef x t (3).
  return {2 * n * a.size, 10 * n, bytes_of(in), bytes_of(out)};
}
SavedSet LocalResponseNormBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- dropout ----
std::vector<TensorSpec> Dropout::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[{}] needs x", kName);
  RK_CHECK(is_floating(in[0].dtype()), "[{}] needs a floating x, got {}", kName, dtype_name(in[0].dtype()));
  RK_CHECK(a.p >= 0.0 && a.p <= 1.0, "[{}] probability has to be between 0 and 1, but got {} (x: {})", kName, a.p,
           shape_str(in[0].shape()));
  return {in[0].spec(), in[0].spec()};
}
Cost Dropout::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  // per element: draw and compare, multiply; writes y and the mask.
  return {0, 2 * in[0].numel(), bytes_of(in), bytes_of(out)};
}
SavedSet Dropout::saved(const Attrs&, NeedsGrad) { return {0, 0b10}; }
std::vector<Tensor> Dropout::backward(const BackwardArgs& b, const Attrs&) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return {Tensor()};
  return {mul(b.grad_outputs[0], b.outputs[1])};
}

// ---- functional ----
bool batch_norm_channels_last(std::span<const Tensor> in, uint32_t big) {
  if (!elementwise_channels_last(in.first(std::min<size_t>(big, in.size())), (1u << big) - 1)) return false;
  for (size_t i = big; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != DType::f32) return false;
  return true;
}

Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum, double eps) {
  return call<BatchNorm2d>({x, weight, bias, running_mean, running_var}, {training, momentum, eps})[0];
}
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  return call1<LocalResponseNorm>({x}, {size, alpha, beta, k});
}
Tensor dropout(const Tensor& x, double p, bool training) {
  RK_CHECK(p >= 0.0 && p <= 1.0, "[dropout] probability has to be between 0 and 1, but got {}", p);
  if (!training || p == 0.0) return x;
  DropoutAttrs a{p, true, 0};
  Dropout::reseed(a);
  return call<Dropout>({x}, a)[0];
}

}  // namespace reckon

// ---- ONNX ----
namespace reckon {
std::vector<std::string> BatchNorm2d::onnx(OnnxArgs& o, const Attrs& a) {
  if (a.training)
    throw OnnxUnsupported("[batch_norm2d] in training mode (export writes the eval forward: call eval() first)");
  const int64_t c = o.in_specs[0].shape[1];
  std::string w = o.in[1].empty() ? o.sink.const_f32s(std::vector<float>(size_t(c), 1.f)) : o.in[1];
  std::string b = o.in[2].empty() ? o.sink.const_f32s(std::vector<float>(size_t(c), 0.f)) : o.in[2];
  std::vector<std::string> out{o.one("BatchNormalization", {o.in[0], w, b, o.in[3], o.in[4]},
                                     {{"epsilon", a.eps}, {"momentum", 1.0 - a.momentum}})};
  out.resize(o.out_specs.size());
  return out;
}
std::vector<std::string> LocalResponseNorm::onnx(OnnxArgs& o, const Attrs& a) {
  if (a.size % 2 == 0)
    throw OnnxUnsupported(fmt::format(
        "[local_response_norm] size {} is even: ONNX's LRN centres an even window one channel later than torch",
        a.size));
  return {o.one("LRN", {o.in[0]}, {{"size", a.size}, {"alpha", a.alpha}, {"beta", a.beta}, {"bias", a.k}})};
}
std::vector<std::string> Dropout::onnx(OnnxArgs& o, const Attrs& a) {
  if (a.training)
    throw OnnxUnsupported("[dropout] in training mode (export writes the eval forward: call eval() first)");
  std::vector<std::string> out{o.one("Identity", {o.in[0]})};
  out.resize(o.out_specs.size());
  return out;
}
}  // namespace reckon
