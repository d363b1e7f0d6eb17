// Fast kernels of the fused ops on plain tensors (what an eager replay of a fused graph runs; the
// inference engine runs conv and linear chains as one oneDNN primitive with post-ops instead):
// the fused op's own fast kernel, then the chain in blocks of elements, one vectorised loop per
// step over each block, so the data is read and written once while it sits in cache. f32 only.
#include <omp.h>

#include "reckon/kernels/cpu/post_ops.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/fused.h"
#include "reckon/ops/matmul.h"

namespace reckon {

namespace {
constexpr int64_t kBlock = 1024;

void chain_block(float* y, const float* r, int64_t n, const std::vector<PostKind>& kinds,
                 const std::vector<PostOp>& post) {
  for (size_t k = 0; k < kinds.size(); ++k) {
    const float a = float(post[k].alpha), b = float(post[k].beta);
    switch (kinds[k]) {
#define RK_STEP_(K, EXPR)                                 \
  case PostKind::K:                                       \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { \
      const float x = y[i];                               \
      y[i] = (EXPR);                                      \
    }                                                     \
    break;
      RK_STEP_(relu, x > 0.f ? x : a * x)
      RK_STEP_(clamp, x < a ? a : (x > b ? b : x))
      RK_STEP_(sigmoid, 1.f / (1.f + std::exp(-x)))
      RK_STEP_(tanh, std::tanh(x))
      RK_STEP_(gelu, GeluF::f<float>(x, a, b))
      RK_STEP_(silu, x / (1.f + std::exp(-x)))
      RK_STEP_(hardswish, x * std::min(1.f, std::max(0.f, a * x + b)))
      RK_STEP_(affine, a * x + b)
      RK_STEP_(exp, std::exp(x))
      RK_STEP_(log, std::log(x))
      RK_STEP_(square, x * x)
#undef RK_STEP_
      case PostKind::sum:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) y[i] += r[i];
        break;
    }
  }
}

}  // namespace

void apply_post_ops(const char* op, const float* src, float* y, const float* r, int64_t n, const std::vector<PostOp>& post) {
  std::vector<PostKind> kinds;
  for (const auto& p : post) kinds.push_back(post_kind(op, p.kind));
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t lo = bi * kBlock, m = std::min(kBlock, n - lo);
    if (src != y) std::copy_n(src + lo, m, y + lo);
    chain_block(y + lo, r ? r + lo : nullptr, m, kinds, post);
  }
}

namespace {
const float* residual(std::span<const Tensor> in) {
  return in.size() > 3 && in[3].defined() ? in[3].data<float>() : nullptr;
}
}  // namespace

Support FusedConv2d::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  Support s = Conv2d::cpu(ctx, in.first(std::min<size_t>(3, in.size())), out, a.conv);
  if (!s.ok) return s;
  float* y = out[0].data<float>();
  apply_post_ops("conv2d_fused", y, y, residual(in), out[0].numel(), a.post);
  return Support::yes();
}
Support FusedLinear::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  Support s = Linear::cpu(ctx, in.first(std::min<size_t>(3, in.size())), out, {});
  if (!s.ok) return s;
  float* y = out[0].data<float>();
  apply_post_ops("linear_fused", y, y, residual(in), out[0].numel(), a.post);
  return Support::yes();
}
Support FusedElementwise::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() != DType::f32) return Support::no("dtype is not f32");
  apply_post_ops("elementwise_fused", in[0].data<float>(), out[0].data<float>(), nullptr, in[0].numel(), a.post);
  return Support::yes();
}

}  // namespace reckon
