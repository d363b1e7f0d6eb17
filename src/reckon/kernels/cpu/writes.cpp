// Fast kernels of the writes (ops/writes.h): dense f32 fills and the gradient accumulation loop.
#include <algorithm>

#include "reckon/ops/writes.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 16;  // elements: below this one thread is faster

Support fill_f32(const Tensor& t, double value) {
  if (t.dtype() != DType::f32 || !t.is_contiguous()) return Support::no("not a dense f32 tensor");
  float* p = t.data<float>();
  const float v = float(value);
  const int64_t n = t.numel();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = v;
  return Support::yes();
}
}  // namespace

Support Full::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  return fill_f32(out[0], a.value);
}

Support FillInplace::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  return fill_f32(out[0], a.value);
}

Support AddInplace::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &dst = out[0], &src = in[1];
  if (dst.dtype() != DType::f32) return Support::no("not f32");
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const int64_t n = dst.numel();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  return Support::yes();
}

}  // namespace reckon
