// Fast kernels of the optimizer updates and the unscale (ops/update.h): the reference's formulas,
// vectorised and split over threads for large tensors. This file is built with -fno-math-errno
// (CMakeLists.txt), so std::sqrt compiles to a vector square root: Adam's update was a scalar
// loop, three times slower than a pass over its memory.
#include <cfloat>
#include <cmath>

#include "reckon/ops/update.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = int64_t(1) << 14;  // elements: below this one thread is faster
}

namespace {
// One SGD variant with its branches hoisted out of the loop: GCC left the loop with them inside
// scalar (a conditional read of the momentum buffer), 2.5 ns a parameter on LeNet-5's.
template <bool Decay, bool Momentum, bool First, bool Nesterov>
void sgd(float* __restrict pd, const float* __restrict gd, float* __restrict bd, int64_t n, float lr, float wd,
         float mom, float damp) {
#pragma omp parallel for simd schedule(static) if (parallel: n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) {
    float d = gd[k];
    if constexpr (Decay) d += wd * pd[k];
    if constexpr (Momentum) {
      float b;
      if constexpr (First) b = d;
      else b = mom * bd[k] + (1.0f - damp) * d;
      bd[k] = b;
      d = Nesterov ? d + mom * b : b;
    }
    pd[k] -= lr * d;
  }
}
}  // namespace

Support SgdUpdate::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const float lr = float(a.lr), wd = float(a.weight_decay), mom = float(a.momentum), damp = float(a.dampening);
  float* pd = out[0].data<float>();
  const float* gd = in[1].data<float>();
  float* bd = out.size() > 1 ? out[1].data<float>() : nullptr;
  const int64_t n = out[0].numel();
  auto run = [&]<bool Decay>() {
    if (!bd) sgd<Decay, false, false, false>(pd, gd, bd, n, lr, wd, mom, damp);
    else if (a.first && a.nesterov) sgd<Decay, true, true, true>(pd, gd, bd, n, lr, wd, mom, damp);
    else if (a.first) sgd<Decay, true, true, false>(pd, gd, bd, n, lr, wd, mom, damp);
    else if (a.nesterov) sgd<Decay, true, false, true>(pd, gd, bd, n, lr, wd, mom, damp);
    else sgd<Decay, true, false, false>(pd, gd, bd, n, lr, wd, mom, damp);
  };
  if (wd != 0.0f) run.template operator()<true>();
  else run.template operator()<false>();
  return Support::yes();
}

Support AdamUpdate::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, double(a.step)), bc2 = 1.0 - std::pow(a.beta2, double(a.step));
  const float step_size = float(a.lr / bc1), bc2_sqrt = float(std::sqrt(bc2)), eps = float(a.eps);
  const float wd = float(a.weight_decay), decay = float(1.0 - a.lr * a.weight_decay);
  const float w1 = float(1.0 - a.beta1), b2 = float(a.beta2), w2 = float(1.0 - a.beta2);
  float* pd = out[0].data<float>();
  const float* gd = in[1].data<float>();
  float* md = out[1].data<float>();
  float* vd = out[2].data<float>();
  const int64_t n = out[0].numel();
  const bool decoupled = a.decoupled;
#pragma omp parallel for simd if (parallel: n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) {
    float d = gd[k];
    if (decoupled)
      pd[k] *= decay;
    else if (wd != 0.0f)
      d += wd * pd[k];
    md[k] += w1 * (d - md[k]);
    vd[k] = vd[k] * b2 + w2 * d * d;
    const float denom = std::sqrt(vd[k]) / bc2_sqrt + eps;
    pd[k] -= step_size * (md[k] / denom);
  }
  return Support::yes();
}

Support UnscaleGrad::cpu(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  const Tensor& g = out[0];
  if (!g.is_contiguous()) return Support::no("a strided gradient");
  float* d = g.data<float>();
  const float inv = float(a.inv_scale);
  const int64_t n = g.numel();
  bool nonfinite = false;
  // !(|v| <= FLT_MAX) is true for inf and NaN, and vectorises (std::isfinite may not).
#pragma omp parallel for simd reduction(|| : nonfinite) if (parallel: n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) {
    const float v = d[k];
    nonfinite = nonfinite || !(std::fabs(v) <= FLT_MAX);
    d[k] = v * inv;
  }
  if (nonfinite) out[1].data<float>()[0] = 1.0f;
  return Support::yes();
}

}  // namespace reckon
