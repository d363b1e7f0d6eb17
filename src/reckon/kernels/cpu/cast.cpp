// Fast cast (dtype conversion), the copies autocast makes of weights, inputs and gradients:
// between f32, bf16 and f16 (load to f32, round to nearest even on store: kernels/cpu/lowp.h;
// bf16 <-> f16 goes through f32, exactly as the reference), f32 <-> f64, and a copy when the
// dtypes are equal. Vectorised loops, split across threads with OpenMP for large tensors.
// Other pairs (integers, f64 <-> bf16/f16) are declined to the reference kernel.
// Also the layout copies (contiguous, channels-last) of 4-D f32/bf16 tensors, by oneDNN's reorder.
#include <cstring>

#include "reckon/kernels/cpu/dnnl_common.h"

#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

template <class S, class D>
void convert(const S* src, D* dst, int64_t n) {
#pragma omp parallel for simd if (parallel: n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = lowp::store<D>(lowp::load(src[i]));
}
bool is_f32_or_lowp(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }
}  // namespace

Support Cast::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const DType s = x.dtype(), d = y.dtype();
  const int64_t n = x.numel();
  if (s == d) {
    const auto* src = static_cast<const char*>(x.raw_data());
    auto* dst = static_cast<char*>(y.raw_data());
    const int64_t bytes = x.nbytes();
    constexpr int64_t kChunk = 1 << 20;
#pragma omp parallel for schedule(static) if (bytes > 8 * kChunk)
    for (int64_t o = 0; o < bytes; o += kChunk) std::memcpy(dst + o, src + o, size_t(std::min(kChunk, bytes - o)));
    return Support::yes();
  }
  if (s == DType::f32 && d == DType::f64) {
    const float* src = x.data<float>();
    double* dst = y.data<double>();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = double(src[i]);
    return Support::yes();
  }
  if (s == DType::f64 && d == DType::f32) {
    const double* src = x.data<double>();
    float* dst = y.data<float>();
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
    return Support::yes();
  }
  if (!is_f32_or_lowp(s) || !is_f32_or_lowp(d)) return Support::no("cast is not between f32, f64, bf16 and f16");
  return lowp::visit(s, [&]<class S>() {
    return lowp::visit(d, [&]<class D>() {
      convert<S, D>(x.data<S>(), y.data<D>(), n);
      return Support::yes();
    });
  });
}

// A 4-D f32 or bf16 tensor from one layout into another (NCHW <-> NHWC, or any positive strides
// into either): oneDNN's reorder, which transposes in cache-sized tiles. Others decline: the
// dispatcher computes an f16 one in f32 (back here), anything else by the reference.
Support Contiguous::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (x.dim() != 4 || (x.dtype() != DType::f32 && x.dtype() != DType::bf16) || x.numel() == 0)
    return Support::no("not a 4-D f32 or bf16 tensor: the reference");
  for (auto st : x.strides())
    if (st <= 0) return Support::no("a broadcast or reversed stride: the reference");
  using dnnl_util::dims_of;
  const auto t = dnnl_util::dt(x.dtype());
  dnnl::memory src(dnnl::memory::desc(dims_of(x.shape()), t, dims_of(x.strides())), dnnl_util::engine(), x.raw_data());
  dnnl::memory dst(dnnl::memory::desc(dims_of(y.shape()), t, dims_of(y.strides())), dnnl_util::engine(), y.raw_data());
  dnnl::reorder(src, dst).execute(dnnl_util::stream(), src, dst);
  dnnl_util::stream().wait();
  return Support::yes();
}

}  // namespace reckon
