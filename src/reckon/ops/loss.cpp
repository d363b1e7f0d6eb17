#include "reckon/ops/loss.h"

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

RowGeo softmax_geo(std::string_view op, const Shape& x, int64_t dim) {
  if (x.empty()) {
    RK_CHECK(dim == 0 || dim == -1, "[{}] dim {} out of range for a 0-d tensor", op, dim);
    return {};
  }
  const int64_t d = normalize_dim(op, dim, int64_t(x.size()));
  RowGeo g;
  g.len = x[size_t(d)];
  for (int64_t i = 0; i < d; ++i) g.outer *= x[size_t(i)];
  for (size_t i = size_t(d) + 1; i < x.size(); ++i) g.inner *= x[i];
  return g;
}

void check_targets(std::string_view op, const Tensor& target, int64_t n, int64_t classes, int64_t ignore_index) {
  RK_CHECK(target.defined(), "[{}] needs a target", op);
  RK_CHECK(target.dtype() == DType::i64, "[{}] target must be int64 class indices, got {} ({})", op,
           dtype_name(target.dtype()), shape_str(target.shape()));
  RK_CHECK(target.dim() == 1 && target.size(0) == n, "[{}] target {} does not match a batch of {}", op,
           shape_str(target.shape()), n);
  if (target.device() != Device::cpu) return;
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    RK_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < classes),
             "[{}] target {} out of range for {} classes at index {}", op, t[i], classes, i);
}

namespace {
void check_logits(std::string_view op, const Tensor& x, const char* what) {
  RK_CHECK(x.defined(), "[{}] needs {}", op, what);
  RK_CHECK(is_floating(x.dtype()), "[{}] {} must be floating, got {} ({})", op, what, dtype_name(x.dtype()),
           shape_str(x.shape()));
  RK_CHECK(x.dim() == 2 && x.size(1) > 0, "[{}] {} must be (N, C) with C > 0, got {}", op, what,
           shape_str(x.shape()));
}
Shape loss_shape(Reduction r, int64_t n) { return r == Reduction::none ? Shape{n} : Shape{}; }
void check_dy(std::string_view op, const Tensor& dy, Reduction r, int64_t n, DType t) {
  RK_CHECK(dy.defined() && dy.shape() == loss_shape(r, n) && dy.dtype() == t,
           "[{}] gradient {} does not match a loss of shape {} ({})", op, dy.defined() ? dy.str() : "undefined",
           shape_str(loss_shape(r, n)), dtype_name(t));
}
void check_smoothing(std::string_view op, double eps) {
  RK_CHECK(eps >= 0.0 && eps <= 1.0, "[{}] label_smoothing must be between 0.0 and 1.0, got {}", op, eps);
}
}  // namespace

// ---- softmax, log_softmax ----
std::vector<TensorSpec> Softmax::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[{}] needs x", kName);
  RK_CHECK(is_floating(in[0].dtype()), "[{}] needs a floating x, got {}", kName, dtype_name(in[0].dtype()));
  softmax_geo(kName, in[0].shape(), a.dim);
  return {in[0].spec()};
}
Cost Softmax::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 8);  // max, subtract, exp (4), sum, scale
}
SavedSet Softmax::saved(const Attrs&, NeedsGrad) { return {0, 1}; }
std::vector<Tensor> Softmax::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return {Tensor()};
  return {call1<SoftmaxBackward>({b.grad_outputs[0], b.outputs[0]}, a)};
}

std::vector<TensorSpec> LogSoftmax::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[{}] needs x", kName);
  RK_CHECK(is_floating(in[0].dtype()), "[{}] needs a floating x, got {}", kName, dtype_name(in[0].dtype()));
  softmax_geo(kName, in[0].shape(), a.dim);
  return {in[0].spec()};
}
Cost LogSoftmax::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  RowGeo g = softmax_geo(kName, in[0].shape(), a.dim);
  Cost c = elementwise_cost(in, out, 8);  // max, subtract, exp (4), sum, subtract
  c.flops += 4 * g.outer * g.inner;       // one log per row
  return c;
}
SavedSet LogSoftmax::saved(const Attrs&, NeedsGrad) { return {0, 1}; }
std::vector<Tensor> LogSoftmax::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return {Tensor()};
  return {call1<LogSoftmaxBackward>({b.grad_outputs[0], b.outputs[0]}, a)};
}

namespace {
std::vector<TensorSpec> infer_softmax_backward(std::string_view op, std::span<const Tensor> in, int64_t dim) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined(), "[{}] needs dy and y", op);
  RK_CHECK(in[0].shape() == in[1].shape() && in[0].dtype() == in[1].dtype() && is_floating(in[0].dtype()),
           "[{}] gradient {} does not match y {}", op, in[0].str(), in[1].str());
  softmax_geo(op, in[1].shape(), dim);
  return {in[1].spec()};
}
}  // namespace
std::vector<TensorSpec> SoftmaxBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  return infer_softmax_backward(kName, in, a.dim);
}
Cost SoftmaxBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 4);  // dy * y summed (2), subtract, multiply
}
SavedSet SoftmaxBackward::saved(const Attrs&, NeedsGrad) { return {}; }

std::vector<TensorSpec> LogSoftmaxBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  return infer_softmax_backward(kName, in, a.dim);
}
Cost LogSoftmaxBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 7);  // sum dy, exp (4), multiply, subtract
}
SavedSet LogSoftmaxBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- cross entropy ----
std::vector<TensorSpec> CrossEntropy::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2, "[{}] needs logits and target", kName);
  check_logits(kName, in[0], "logits");
  check_smoothing(kName, a.label_smoothing);
  const int64_t N = in[0].size(0), C = in[0].size(1);
  check_targets(kName, in[1], N, C, a.ignore_index);
  return {{loss_shape(a.reduction, N), in[0].dtype()}, in[0].spec()};
}
Cost CrossEntropy::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t N = in[0].size(0), C = in[0].size(1);
  // log_softmax (8 per element, a log per row); the smoothing sum; pick, scale, reduce per row.
  return {0, 8 * N * C + (a.label_smoothing > 0 ? N * C : 0) + 8 * N, bytes_of(in), bytes_of(out)};
}
SavedSet CrossEntropy::saved(const Attrs&, NeedsGrad) { return {0b10, 0b10}; }
std::vector<Tensor> CrossEntropy::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.needs_grad[0]) return {Tensor(), Tensor()};
  Tensor dx;
  if (b.grad_outputs[0].defined())
    dx = call1<CrossEntropyBackward>({b.grad_outputs[0], b.outputs[1], b.inputs[1]}, a);
  // A gradient that reached the logp output (only if a caller used it): logp = log_softmax(logits).
  if (b.grad_outputs.size() == 2 && b.grad_outputs[1].defined()) {
    Tensor g = call1<LogSoftmaxBackward>({b.grad_outputs[1], b.outputs[1]}, {1});
    dx = dx.defined() ? add(dx, g) : g;
  }
  return {dx, Tensor()};
}

std::vector<TensorSpec> CrossEntropyBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 3, "[{}] needs dy, logp and target", kName);
  check_logits(kName, in[1], "logp");
  check_smoothing(kName, a.label_smoothing);
  const int64_t N = in[1].size(0);
  check_dy(kName, in[0], a.reduction, N, in[1].dtype());
  RK_CHECK(in[2].defined() && in[2].dtype() == DType::i64 && in[2].shape() == Shape{N},
           "[{}] target {} does not match logp {}", kName, in[2].defined() ? in[2].str() : "undefined",
           shape_str(in[1].shape()));
  return {in[1].spec()};
}
Cost CrossEntropyBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 6 * in[1].numel(), bytes_of(in), bytes_of(out)};  // exp (4), subtract, scale
}
SavedSet CrossEntropyBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- nll loss ----
std::vector<TensorSpec> NllLoss::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2, "[{}] needs logp and target", kName);
  check_logits(kName, in[0], "logp");
  const int64_t N = in[0].size(0), C = in[0].size(1);
  check_targets(kName, in[1], N, C, a.ignore_index);
  return {{loss_shape(a.reduction, N), in[0].dtype()}};
}
Cost NllLoss::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  const int64_t N = in[0].size(0);
  // Reads one logp per row (and the targets), not the whole (N, C).
  return {0, 2 * N, in[1].nbytes() + N * int64_t(dtype_size(in[0].dtype())), bytes_of(out)};
}
SavedSet NllLoss::saved(const Attrs&, NeedsGrad) { return {0b10, 0}; }
std::vector<Tensor> NllLoss::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return {Tensor(), Tensor()};
  return {call1<NllLossBackward>({b.grad_outputs[0], b.inputs[1]}, {a, b.input_specs[0].shape[1]}), Tensor()};
}

std::vector<TensorSpec> NllLossBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2 && in[1].defined(), "[{}] needs dy and target", kName);
  RK_CHECK(in[1].dtype() == DType::i64 && in[1].dim() == 1, "[{}] target must be (N) int64, got {}", kName,
           in[1].str());
  RK_CHECK(a.classes > 0, "[{}] needs the number of classes, got {}", kName, a.classes);
  const int64_t N = in[1].size(0);
  RK_CHECK(in[0].defined() && is_floating(in[0].dtype()), "[{}] needs a floating gradient", kName);
  check_dy(kName, in[0], a.nll.reduction, N, in[0].dtype());
  return {{{N, a.classes}, in[0].dtype()}};
}
Cost NllLossBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, in[1].numel(), bytes_of(in), bytes_of(out)};
}
SavedSet NllLossBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- functional ----
Tensor softmax(const Tensor& x, int64_t dim) { return call1<Softmax>({x}, {dim}); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return call1<LogSoftmax>({x}, {dim}); }
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyArgs& a) {
  return call<CrossEntropy>({logits, target}, a)[0];
}
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r, int64_t ignore_index) {
  return call1<NllLoss>({logp, target}, {r, ignore_index});
}
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction r) {
  // torch broadcasts mismatched shapes with a warning; reckon refuses them.
  RK_CHECK(a.defined() && b.defined() && a.shape() == b.shape(), "[mse_loss] input {} and target {} differ",
           a.defined() ? shape_str(a.shape()) : "undefined", b.defined() ? shape_str(b.shape()) : "undefined");
  Tensor sq = square(sub(a, b));
  switch (r) {
    case Reduction::none: return sq;
    case Reduction::sum: return sum(sq);
    case Reduction::mean: return mean(sq);
  }
  return sq;
}

}  // namespace reckon

namespace reckon {
std::vector<std::string> Softmax::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Softmax", {o.in[0]}, {{"axis", a.dim}})};
}
std::vector<std::string> LogSoftmax::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("LogSoftmax", {o.in[0]}, {{"axis", a.dim}})};
}
}  // namespace reckon
