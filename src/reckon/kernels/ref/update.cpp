// Reference kernels of the optimizer updates and the unscale (ops/update.h): PyTorch's formulas
// in f32, one element after another.
#include <cfloat>
#include <cmath>

#include "reckon/ops/update.h"

namespace reckon {

void SgdUpdate::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const float lr = float(a.lr), wd = float(a.weight_decay), mom = float(a.momentum), damp = float(a.dampening);
  float* pd = out[0].data<float>();
  const float* gd = in[1].data<float>();
  float* bd = out.size() > 1 ? out[1].data<float>() : nullptr;
  const int64_t n = out[0].numel();
  for (int64_t k = 0; k < n; ++k) {
    float d = gd[k];
    if (wd != 0.0f) d += wd * pd[k];
    if (bd) {
      bd[k] = a.first ? d : mom * bd[k] + (1.0f - damp) * d;
      d = a.nesterov ? d + mom * bd[k] : bd[k];
    }
    pd[k] -= lr * d;
  }
}

void AdamUpdate::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  // PyTorch's scalars: step_size = lr / bc1, denom = sqrt(v) / sqrt(bc2) + eps.
  const double bc1 = 1.0 - std::pow(a.beta1, double(a.step)), bc2 = 1.0 - std::pow(a.beta2, double(a.step));
  const float step_size = float(a.lr / bc1), bc2_sqrt = float(std::sqrt(bc2)), eps = float(a.eps);
  const float wd = float(a.weight_decay), decay = float(1.0 - a.lr * a.weight_decay);
  const float w1 = float(1.0 - a.beta1), b2 = float(a.beta2), w2 = float(1.0 - a.beta2);
  float* pd = out[0].data<float>();
  const float* gd = in[1].data<float>();
  float* md = out[1].data<float>();
  float* vd = out[2].data<float>();
  const int64_t n = out[0].numel();
  for (int64_t k = 0; k < n; ++k) {
    float d = gd[k];
    if (a.decoupled)
      pd[k] *= decay;
    else if (wd != 0.0f)
      d += wd * pd[k];
    md[k] += w1 * (d - md[k]);
    vd[k] = vd[k] * b2 + w2 * d * d;
    const float denom = std::sqrt(vd[k]) / bc2_sqrt + eps;
    pd[k] -= step_size * (md[k] / denom);
  }
}

void UnscaleGrad::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& g = out[0];
  const float inv = float(a.inv_scale);
  bool nonfinite = false;
  for (int64_t k = 0; k < g.numel(); ++k) {
    const float v = float(g.get(k));
    nonfinite = nonfinite || !std::isfinite(v);
    g.set(k, double(v * inv));
  }
  if (nonfinite) out[1].set(0, 1.0);
}

}  // namespace reckon
