// Fast elementwise kernels (f32): the same formulas as the reference, in loops the compiler
// vectorises, split across threads with OpenMP when the tensor is large enough to pay.
#include "reckon/kernels/broadcast.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/elementwise.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
}

template <class F>
Support Binary<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  if (out[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  const float* pa = in[0].data<float>();
  const float* pb = in[1].data<float>();
  float* py = out[0].data<float>();
  int64_t n = out[0].numel();
  if (in[0].numel() == n && in[1].numel() == n) {
#pragma omp parallel for simd if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = F::f(pa[i], pb[i]);
    return Support::yes();
  }
  for_each_row(plan_broadcast(in[0].shape(), in[1].shape(), out[0].shape()),
               [&](int64_t oa, int64_t ob, int64_t oy, int64_t m, int64_t sa, int64_t sb) {
                 const float* a = pa + oa;
                 const float* b = pb + ob;
                 float* y = py + oy;
                 if (sa == 1 && sb == 1) {
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = F::f(a[i], b[i]);
                 } else if (sa == 1) {
                   float bv = b[0];
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = F::f(a[i], bv);
                 } else if (sb == 1) {
                   float av = a[0];
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = F::f(av, b[i]);
                 } else {
                   for (int64_t i = 0; i < m; ++i) y[i] = F::f(a[i * sa], b[i * sb]);
                 }
               });
  return Support::yes();
}

Support Affine::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  float al = float(a.alpha), be = float(a.beta);
  int64_t n = in[0].numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = al * x[i] + be;
  return Support::yes();
}

template <class F>
Support Unary<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  const float* x = in[0].data<float>();
  float* y = out[0].data<float>();
  float al = float(a.alpha);
  int64_t n = in[0].numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = F::f(x[i], al);
  return Support::yes();
}

template <class F>
Support UnaryBackward<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  const float* dy = in[0].data<float>();
  const float* s = in[1].data<float>();
  float* dx = out[0].data<float>();
  float al = float(a.alpha);
  int64_t n = in[0].numel();
#pragma omp parallel for simd if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * F::df(s[i], al);
  return Support::yes();
}

#define RK_INST_BINARY_CPU(F) template Support Binary<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_BINARY_FUNCTORS(RK_INST_BINARY_CPU)
#define RK_INST_UNARY_CPU(F)                                                                           \
  template Support Unary<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&); \
  template Support UnaryBackward<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_UNARY_FUNCTORS(RK_INST_UNARY_CPU)

}  // namespace reckon
