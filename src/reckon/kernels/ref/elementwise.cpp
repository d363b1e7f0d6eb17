// Reference elementwise kernels: one scalar loop per op, f32 and f64.
#include "reckon/kernels/broadcast.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/elementwise.h"

namespace reckon {

template <class F>
void Binary<F>::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  Tensor& y = out[0];
  visit_float(y.dtype(), F::kName.data(), [&]<class T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    for_each_row(plan_broadcast(a.shape(), b.shape(), y.shape()),
                 [&](int64_t oa, int64_t ob, int64_t oy, int64_t n, int64_t sa, int64_t sb) {
                   for (int64_t i = 0; i < n; ++i) py[oy + i] = F::f(pa[oa + i * sa], pb[ob + i * sb]);
                 });
  });
}

void Affine::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), "affine", [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = T(a.alpha) * x[i] + T(a.beta);
  });
}

template <class F>
void Unary<F>::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), F::kName.data(), [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = F::f(x[i], T(a.alpha), T(a.beta));
  });
}

template <class F>
void UnaryBackward<F>::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), F::kGradName.data(), [&]<class T>() {
    const T* dy = in[0].data<T>();
    const T* s = in[1].data<T>();
    T* dx = out[0].data<T>();
    for (int64_t i = 0; i < in[0].numel(); ++i) dx[i] = dy[i] * F::df(s[i], T(a.alpha), T(a.beta));
  });
}

#define RK_INST_BINARY_REF(F) template void Binary<F>::ref(KernelCtx& ctx, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_BINARY_FUNCTORS(RK_INST_BINARY_REF)
#define RK_INST_UNARY_REF(F)                                                                        \
  template void Unary<F>::ref(KernelCtx& ctx, std::span<const Tensor>, std::span<Tensor>, const Attrs&); \
  template void UnaryBackward<F>::ref(KernelCtx& ctx, std::span<const Tensor>, std::span<Tensor>, const Attrs&);
RK_UNARY_FUNCTORS(RK_INST_UNARY_REF)

}  // namespace reckon
