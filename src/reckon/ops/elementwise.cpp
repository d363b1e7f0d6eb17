#include "reckon/ops/elementwise.h"

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

// ---- binary ----
template <class F>
std::vector<TensorSpec> Binary<F>::infer(std::span<const Tensor> in, const Attrs&) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined(), "[{}] needs two tensors", F::kName);
  RK_CHECK(in[0].dtype() == in[1].dtype(), "[{}] dtypes differ: {} and {}", F::kName,
           dtype_name(in[0].dtype()), dtype_name(in[1].dtype()));
  return {{broadcast_shapes(F::kName, in[0].shape(), in[1].shape()), in[0].dtype()}};
}
template <class F>
Cost Binary<F>::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 1);
}
template <class F>
SavedSet Binary<F>::saved(const Attrs&, NeedsGrad needs) {
  if constexpr (std::is_same_v<F, MulF>) return saved_for_product(needs);
  // da = dy / b needs b; db = -dy a / b^2 needs both.
  if constexpr (std::is_same_v<F, DivF>) return {(needs[1] ? 1u : 0u) | (needs.any() ? 2u : 0u), 0};
  return {F::kSaved, 0};
}

template <class F>
std::vector<Tensor> Binary<F>::backward(const BackwardArgs& b, const Attrs&) {
  const Tensor& dy = b.grad_outputs[0];
  const Shape& sa = b.input_specs[0].shape;
  const Shape& sb = b.input_specs[1].shape;
  Tensor da, db;
  if constexpr (std::is_same_v<F, AddF>) {
    if (b.needs_grad[0]) da = sum_to(dy, sa);
    if (b.needs_grad[1]) db = sum_to(dy, sb);
  } else if constexpr (std::is_same_v<F, SubF>) {
    if (b.needs_grad[0]) da = sum_to(dy, sa);
    if (b.needs_grad[1]) db = scale(sum_to(dy, sb), -1.0);
  } else if constexpr (std::is_same_v<F, MulF>) {
    if (b.needs_grad[0]) da = sum_to(mul(dy, b.inputs[1]), sa);
    if (b.needs_grad[1]) db = sum_to(mul(dy, b.inputs[0]), sb);
  } else {
    static_assert(std::is_same_v<F, DivF>);
    if (b.needs_grad[0]) da = sum_to(div(dy, b.inputs[1]), sa);
    if (b.needs_grad[1])  // d(a/b)/db = -a / b^2
      db = sum_to(scale(div(mul(dy, b.inputs[0]), square(b.inputs[1])), -1.0), sb);
  }
  return {da, db};
}

#define RK_INST_BINARY(F) template struct Binary<F>;
RK_BINARY_FUNCTORS(RK_INST_BINARY)

// ---- affine ----
std::vector<TensorSpec> Affine::infer(std::span<const Tensor> in, const Attrs&) {
  RK_CHECK(is_floating(in[0].dtype()), "[affine] needs a floating tensor, got {}", dtype_name(in[0].dtype()));
  return {in[0].spec()};
}
Cost Affine::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 2);
}
SavedSet Affine::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> Affine::backward(const BackwardArgs& b, const Attrs& a) {
  return {scale(b.grad_outputs[0], a.alpha)};
}

// ---- unary ----
template <class F>
std::vector<TensorSpec> Unary<F>::infer(std::span<const Tensor> in, const Attrs&) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[{}] needs one tensor", F::kName);
  RK_CHECK(is_floating(in[0].dtype()), "[{}] needs a floating tensor, got {}", F::kName,
           dtype_name(in[0].dtype()));
  return {in[0].spec()};
}
template <class F>
Cost Unary<F>::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, F::kFlops);
}
template <class F>
SavedSet Unary<F>::saved(const Attrs&, NeedsGrad) {
  return F::kSavesOutput ? SavedSet{0, 1} : SavedSet{1, 0};
}
template <class F>
std::vector<Tensor> Unary<F>::backward(const BackwardArgs& b, const Attrs& a) {
  const Tensor& s = F::kSavesOutput ? b.outputs[0] : b.inputs[0];
  return {call1<UnaryBackward<F>>({b.grad_outputs[0], s}, a)};
}

template <class F>
std::vector<TensorSpec> UnaryBackward<F>::infer(std::span<const Tensor> in, const Attrs&) {
  RK_CHECK(in.size() == 2 && in[0].shape() == in[1].shape() && in[0].dtype() == in[1].dtype(),
           "[{}] gradient {} and saved {} differ", F::kGradName, in[0].str(), in[1].str());
  return {in[0].spec()};
}
template <class F>
Cost UnaryBackward<F>::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, F::kFlops + 1);
}
template <class F>
SavedSet UnaryBackward<F>::saved(const Attrs&, NeedsGrad) { return {}; }

#define RK_INST_UNARY(F) template struct Unary<F>; template struct UnaryBackward<F>;
RK_UNARY_FUNCTORS(RK_INST_UNARY)

// ---- functional ----
Tensor add(const Tensor& a, const Tensor& b) { return call1<Add>({a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return call1<Sub>({a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call1<Mul>({a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return call1<Div>({a, b}); }
Tensor affine(const Tensor& x, double alpha, double beta) { return call1<Affine>({x}, {alpha, beta}); }
Tensor scale(const Tensor& x, double alpha) { return alpha == 1.0 ? x : affine(x, alpha, 0.0); }
Tensor neg(const Tensor& x) { return affine(x, -1.0, 0.0); }
Tensor exp(const Tensor& x) { return call1<Exp>({x}); }
Tensor log(const Tensor& x) { return call1<Log>({x}); }
Tensor square(const Tensor& x) { return call1<Square>({x}); }
Tensor relu(const Tensor& x) { return call1<Relu>({x}); }
Tensor relu6(const Tensor& x) { return call1<Relu6>({x}); }
Tensor leaky_relu(const Tensor& x, double slope) { return call1<LeakyRelu>({x}, {slope}); }
Tensor clamp(const Tensor& x, double lo, double hi) { return call1<Clamp>({x}, {lo, hi}); }
Tensor hardsigmoid(const Tensor& x, double alpha, double beta) { return clamp(affine(x, alpha, beta), 0.0, 1.0); }
Tensor hardswish(const Tensor& x) { return mul(x, hardsigmoid(x, 1.0 / 6.0, 0.5)); }
Tensor gelu(const Tensor& x) { return call1<Gelu>({x}); }
Tensor silu(const Tensor& x) { return call1<Silu>({x}); }
Tensor sigmoid(const Tensor& x) { return call1<Sigmoid>({x}); }
Tensor tanh(const Tensor& x) { return call1<Tanh>({x}); }

}  // namespace reckon

// ---- ONNX ----
namespace reckon {

template <class F>
std::vector<std::string> Binary<F>::onnx(OnnxArgs& o, const Attrs&) {
  return {o.one(F::kOnnxType, {o.in[0], o.in[1]})};
}

std::vector<std::string> Affine::onnx(OnnxArgs& o, const Attrs& a) {
  std::string y = o.in[0];
  if (a.alpha != 1.0) y = o.one("Mul", {y, o.sink.const_f32(float(a.alpha))});
  if (a.beta != 0.0) y = o.one("Add", {y, o.sink.const_f32(float(a.beta))});
  if (y == o.in[0]) y = o.one("Identity", {y});
  return {y};
}

template <class F>
std::vector<std::string> Unary<F>::onnx(OnnxArgs& o, const Attrs& a) {
  const std::string& x = o.in[0];
  if constexpr (std::is_same_v<F, Relu6F>) {
    return {o.one("Clip", {x, o.sink.const_f32(0.f), o.sink.const_f32(6.f)})};
  } else if constexpr (std::is_same_v<F, ClampF>) {
    return {o.one("Clip", {x, o.sink.const_f32(float(a.alpha)), o.sink.const_f32(float(a.beta))})};
  } else if constexpr (std::is_same_v<F, LeakyReluF>) {
    return {o.one("LeakyRelu", {x}, {{"alpha", a.alpha}})};
  } else if constexpr (std::is_same_v<F, SiluF>) {
    return {o.one("Mul", {x, o.one("Sigmoid", {x})})};
  } else if constexpr (std::is_same_v<F, SquareF>) {
    return {o.one("Mul", {x, x})};
  } else if constexpr (std::is_same_v<F, GeluF>) {
    // Gelu is an operator from opset 20 on; before, its exact form: 0.5 x (1 + erf(x / sqrt 2)).
    std::string e = o.one("Erf", {o.one("Mul", {x, o.sink.const_f32(float(M_SQRT1_2))})});
    std::string h = o.one("Mul", {x, o.one("Add", {e, o.sink.const_f32(1.f)})});
    return {o.one("Mul", {h, o.sink.const_f32(0.5f)})};
  } else {
    return {o.one(F::kOnnxType, {x})};
  }
}

#define RK_INST_ONNX_BINARY(F) template std::vector<std::string> Binary<F>::onnx(OnnxArgs&, const Attrs&);
RK_BINARY_FUNCTORS(RK_INST_ONNX_BINARY)
#define RK_INST_ONNX_UNARY(F) template std::vector<std::string> Unary<F>::onnx(OnnxArgs&, const Attrs&);
RK_UNARY_FUNCTORS(RK_INST_ONNX_UNARY)

}  // namespace reckon
