// Reference matrix products: triple loops accumulating in double, counting every MAC.
#include "reckon/ops/dispatch.h"
#include "reckon/ops/matmul.h"

namespace reckon {

void Matmul::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  int64_t m = y.size(-2), n = y.size(-1), k = a.trans_a ? x.size(-2) : x.size(-1);
  int64_t batch = y.numel() / std::max<int64_t>(m * n, 1);
  bool shared = w.dim() == 2;
  visit_float(y.dtype(), "matmul", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    for (int64_t bi = 0; bi < batch; ++bi) {
      const T* A = px + bi * m * k;
      const T* B = pw + (shared ? 0 : bi * k * n);
      T* C = py + bi * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            double av = a.trans_a ? A[p * m + i] : A[i * k + p];
            double bv = a.trans_b ? B[j * k + p] : B[p * n + j];
            s += av * bv;
          }
          C[i * n + j] = T(s);
        }
    }
  });
  ctx.count_macs(batch * m * n * k);
}

void Linear::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &x = in[0], &w = in[1];
  bool bias = in.size() > 2 && in[2].defined();
  Tensor& y = out[0];
  int64_t n = x.size(0), k = x.size(1), o = w.size(0);
  visit_float(y.dtype(), "linear", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = bias ? in[2].data<T>() : nullptr;
    T* py = y.data<T>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < o; ++j) {
        double s = pb ? double(pb[j]) : 0.0;
        for (int64_t p = 0; p < k; ++p) s += double(px[i * k + p]) * double(pw[j * k + p]);
        py[i * o + j] = T(s);
      }
  });
  ctx.count_macs(n * o * k);
}

}  // namespace reckon
