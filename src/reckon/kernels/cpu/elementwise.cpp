// Fast elementwise kernels (f32, bf16, f16): the same formulas as the reference, in loops the
// compiler vectorises, split across threads with OpenMP when the tensor is large enough to pay.
// bf16/f16 load to f32, compute in f32 and round once on store (kernels/cpu/lowp.h), so they
// give the f32 kernel's result rounded; all tensors of a call must share one dtype.
#include "reckon/kernels/broadcast.h"
#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/elementwise.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = 1 << 15;
using lowp::load;
using lowp::store;

template <class F, class T>
void binary(const Tensor& ta, const Tensor& tb, Tensor& ty) {
  const T* pa = ta.data<T>();
  const T* pb = tb.data<T>();
  T* py = ty.data<T>();
  int64_t n = ty.numel();
  if (ta.numel() == n && tb.numel() == n) {
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) py[i] = store<T>(F::f(load(pa[i]), load(pb[i])));
    return;
  }
  for_each_row(plan_broadcast(ta.shape(), tb.shape(), ty.shape()),
               [&](int64_t oa, int64_t ob, int64_t oy, int64_t m, int64_t sa, int64_t sb) {
                 const T* a = pa + oa;
                 const T* b = pb + ob;
                 T* y = py + oy;
                 if (sa == 1 && sb == 1) {
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = store<T>(F::f(load(a[i]), load(b[i])));
                 } else if (sa == 1) {
                   float bv = load(b[0]);
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = store<T>(F::f(load(a[i]), bv));
                 } else if (sb == 1) {
                   float av = load(a[0]);
#pragma omp simd
                   for (int64_t i = 0; i < m; ++i) y[i] = store<T>(F::f(av, load(b[i])));
                 } else {
                   for (int64_t i = 0; i < m; ++i) y[i] = store<T>(F::f(load(a[i * sa]), load(b[i * sb])));
                 }
               });
}

// All defined tensors of in and out in one dtype, which is returned (f64 if they differ, declined).
DType common_dtype(std::span<const Tensor> in, std::span<const Tensor> out) {
  DType d = out[0].dtype();
  for (auto& t : in)
    if (t.defined() && t.dtype() != d) return DType::f64;
  for (auto& t : out)
    if (t.defined() && t.dtype() != d) return DType::f64;
  return d;
}
}  // namespace

template <class F>
Support Binary<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  return lowp::visit(common_dtype(in, out), [&]<class T>() {
    binary<F, T>(in[0], in[1], out[0]);
    return Support::yes();
  });
}

Support Affine::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  return lowp::visit(common_dtype(in, out), [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    float al = float(a.alpha), be = float(a.beta);
    int64_t n = in[0].numel();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = store<T>(al * load(x[i]) + be);
    return Support::yes();
  });
}

template <class F>
Support Unary<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  return lowp::visit(common_dtype(in, out), [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    float al = float(a.alpha), be = float(a.beta);
    int64_t n = in[0].numel();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = store<T>(F::f(load(x[i]), al, be));
    return Support::yes();
  });
}

template <class F>
Support UnaryBackward<F>::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  return lowp::visit(common_dtype(in, out), [&]<class T>() {
    const T* dy = in[0].data<T>();
    const T* s = in[1].data<T>();
    T* dx = out[0].data<T>();
    float al = float(a.alpha), be = float(a.beta);
    int64_t n = in[0].numel();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dx[i] = store<T>(load(dy[i]) * F::df(load(s[i]), al, be));
    return Support::yes();
  });
}

#define RK_INST_BINARY_CPU(F) template Support Binary<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_BINARY_FUNCTORS(RK_INST_BINARY_CPU)
#define RK_INST_UNARY_CPU(F)                                                                           \
  template Support Unary<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&); \
  template Support UnaryBackward<F>::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_UNARY_FUNCTORS(RK_INST_UNARY_CPU)

}  // namespace reckon
