#include "reckon/ops/matmul.h"

#include "reckon/ops/conv.h"  // cpu_bf16_slower_than_f32
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

bool small_linear_keeps_f32(const Shape& w) {
  return w.size() == 2 && shape_numel(w) <= kSmallLinearWeights && cpu_bf16_slower_than_f32();
}

namespace {
struct MatDims {
  int64_t batch, m, k, n;
  bool b_shared;
};
MatDims mat_dims(std::span<const Tensor> in, const Matmul::Attrs& a) {
  const Tensor &x = in[0], &y = in[1];
  RK_CHECK(x.dim() >= 2 && y.dim() >= 2, "[matmul] needs matrices, got {} and {}", shape_str(x.shape()),
           shape_str(y.shape()));
  RK_CHECK(x.dtype() == y.dtype(), "[matmul] dtypes differ: {} and {}", dtype_name(x.dtype()), dtype_name(y.dtype()));
  int64_t m = a.trans_a ? x.size(-1) : x.size(-2), k = a.trans_a ? x.size(-2) : x.size(-1);
  int64_t kb = a.trans_b ? y.size(-1) : y.size(-2), n = a.trans_b ? y.size(-2) : y.size(-1);
  RK_CHECK(k == kb, "[matmul] inner dims differ: a {} (K={}) and b {} (K={})", shape_str(x.shape()), k,
           shape_str(y.shape()), kb);
  Shape xb(x.shape().begin(), x.shape().end() - 2), yb(y.shape().begin(), y.shape().end() - 2);
  bool shared = y.dim() == 2;
  RK_CHECK(shared || xb == yb, "[matmul] batch dims differ: {} and {}", shape_str(x.shape()), shape_str(y.shape()));
  return {shape_numel(xb), m, k, n, shared};
}
}  // namespace

std::vector<TensorSpec> Matmul::infer(std::span<const Tensor> in, const Attrs& a) {
  MatDims d = mat_dims(in, a);
  Shape s(in[0].shape().begin(), in[0].shape().end() - 2);
  s.push_back(d.m);
  s.push_back(d.n);
  return {{s, in[0].dtype()}};
}
Cost Matmul::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  MatDims d = mat_dims(in, a);
  return {d.batch * d.m * d.n * d.k, 0, bytes_of(in), bytes_of(out)};
}
SavedSet Matmul::saved(const Attrs&, NeedsGrad needs) { return saved_for_product(needs); }
std::vector<Tensor> Matmul::backward(const BackwardArgs& b, const Attrs& a) {
  const Tensor& dy = b.grad_outputs[0];  // (..., M, N)
  const Tensor &x = b.inputs[0], &y = b.inputs[1];
  Tensor dx, dw;
  if (b.needs_grad[0])  // C = A B: dA = dC B^T (stored transposed: dA^T = B dC^T)
    dx = a.trans_a ? matmul(y, dy, a.trans_b, true) : matmul(dy, y, false, !a.trans_b);
  if (b.needs_grad[1]) {
    if (b.input_specs[1].shape.size() == 2 && x.dim() > 2) {  // shared b: fold the batch into rows
      Tensor x2 = reshape(x, {-1, x.size(-1)});
      Tensor dy2 = reshape(dy, {-1, dy.size(-1)});
      RK_CHECK(!a.trans_a, "[matmul] backward of a batched transposed a against a shared b is not supported");
      dw = a.trans_b ? matmul(dy2, x2, true, false) : matmul(x2, dy2, true, false);
    } else {
      dw = a.trans_b ? matmul(dy, x, true, a.trans_a) : matmul(x, dy, !a.trans_a, false);
    }
  }
  return {dx, dw};
}

std::vector<TensorSpec> Linear::infer(std::span<const Tensor> in, const Attrs&) {
  const Tensor &x = in[0], &w = in[1];
  RK_CHECK(x.dim() == 2, "[linear] x must be (N, IN), got {}", shape_str(x.shape()));
  RK_CHECK(w.dim() == 2, "[linear] weight must be (OUT, IN), got {}", shape_str(w.shape()));
  RK_CHECK(x.size(1) == w.size(1), "[linear] weight has {} input features but x has {} (x: {})",
           w.size(1), x.size(1), shape_str(x.shape()));
  RK_CHECK(x.dtype() == w.dtype(), "[linear] dtypes differ: x {} and weight {}", dtype_name(x.dtype()),
           dtype_name(w.dtype()));
  if (in.size() > 2 && in[2].defined())
    RK_CHECK(in[2].dim() == 1 && in[2].size(0) == w.size(0), "[linear] bias {} for {} outputs",
             shape_str(in[2].shape()), w.size(0));
  return {{{x.size(0), w.size(0)}, x.dtype()}};
}
Cost Linear::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  int64_t n = in[0].size(0), i = in[0].size(1), o = in[1].size(0);
  bool bias = in.size() > 2 && in[2].defined();
  return {n * i * o, bias ? n * o : 0, bytes_of(in), bytes_of(out)};
}
SavedSet Linear::saved(const Attrs&, NeedsGrad needs) { return saved_for_product(needs); }
std::vector<Tensor> Linear::backward(const BackwardArgs& b, const Attrs&) {
  const Tensor& dy = b.grad_outputs[0];  // (N, OUT)
  Tensor dx, dw, db;
  if (b.needs_grad[0]) dx = matmul(dy, b.inputs[1]);             // (N, OUT) @ (OUT, IN)
  if (b.needs_grad[1]) dw = matmul(dy, b.inputs[0], true, false);  // (OUT, N) @ (N, IN)
  if (b.needs_grad.size() > 2 && b.needs_grad[2]) db = sum(dy, {0});
  return {dx, dw, db};
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  return call1<Matmul>({a, b}, {trans_a, trans_b});
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (x.dim() == 2) return call1<Linear>({x, w, b});
  // (..., IN): fold leading dims into rows.
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  Tensor y = call1<Linear>({reshape(x, {-1, x.size(-1)}), w, b});
  lead.push_back(w.size(0));
  return reshape(y, lead);
}

}  // namespace reckon

namespace reckon {
std::vector<std::string> Matmul::onnx(OnnxArgs& o, const Attrs& a) {
  auto t = [&](const std::string& x, size_t rank) {
    std::vector<int64_t> perm(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(i);
    std::swap(perm[rank - 1], perm[rank - 2]);
    return o.one("Transpose", {x}, {{"perm", perm}});
  };
  std::string x = a.trans_a ? t(o.in[0], o.in_specs[0].shape.size()) : o.in[0];
  std::string w = a.trans_b ? t(o.in[1], o.in_specs[1].shape.size()) : o.in[1];
  return {o.one("MatMul", {x, w})};
}
std::vector<std::string> Linear::onnx(OnnxArgs& o, const Attrs&) {
  std::vector<std::string> in{o.in[0], o.in[1]};
  if (o.in.size() > 2 && !o.in[2].empty()) in.push_back(o.in[2]);
  return {o.one("Gemm", in, {{"transB", int64_t(1)}})};
}
}  // namespace reckon
