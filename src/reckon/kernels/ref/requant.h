// The end of a quantized product, as the reference kernels define it: an int32 accumulator
// plus the int32 bias, times the output multiplier, through the post-ops in the scaled domain,
// then rounded (half to even) and saturated into the output type. Every kernel that computes
// conv2d_int8 or linear_int8 itself (the reference, the exact cpu kernel) writes its outputs
// through this one code, so they agree bit for bit by construction.
#pragma once
#include <span>

#include "reckon/ops/quant.h"

namespace reckon::requant {

// The post-op chain of a quantized product, in the scaled domain, on one value.
struct ScaledPost {
  std::vector<PostKind> kinds;
  std::vector<float> alpha, beta;
  explicit ScaledPost(const QuantLinearAttrs& q) {
    for (const auto& p : quant_scaled_post(q)) {
      kinds.push_back(post_kind("int8 post-op", p.kind));
      alpha.push_back(float(p.alpha));
      beta.push_back(float(p.beta));
    }
  }
  float apply(float v, float r) const {
    for (size_t k = 0; k < kinds.size(); ++k) {
      switch (kinds[k]) {
        case PostKind::relu: v = v > 0.f ? v : v * alpha[k]; break;
        case PostKind::clamp: v = std::min(std::max(v, alpha[k]), beta[k]); break;
        case PostKind::sum: v = v + alpha[k] * r; break;
        default: break;
      }
    }
    return v;
  }
};

// Writes output element i of a quantized product from its int32 accumulator.
struct Requant {
  const QuantLinearAttrs& q;
  ScaledPost post;
  DType yt;
  float lo = 0, hi = 0, zp = 0;
  const int32_t* bias;
  explicit Requant(const QuantLinearAttrs& attrs, const int32_t* b)
      : q(attrs), post(attrs), yt(quant_dtype("int8 product", attrs.y_dtype, true)), bias(b) {
    if (yt != DType::f32) {
      lo = float(quant_min(yt));
      hi = float(quant_max(yt));
      zp = float(q.y_zero_point);
    }
  }
  // acc: the accumulator of output channel o; r: the residual element (sum) as stored.
  float value(int32_t acc, int64_t o, float r) const {
    float v = float(acc);
    if (bias) v += float(bias[o]);
    v *= quant_multiplier(q, o);
    v = post.apply(v, r);
    if (yt == DType::f32) return v;
    return round_saturate(v, lo - zp, hi - zp) + zp;  // rounded, then shifted (an integer: exact)
  }
  void store(Tensor& y, int64_t i, float v) const {
    if (yt == DType::f32) y.data<float>()[i] = v;
    else if (yt == DType::u8) y.data<uint8_t>()[i] = uint8_t(v);
    else y.data<int8_t>()[i] = int8_t(v);
  }
};
inline float residual_at(const Tensor* r, int64_t i) {
  if (!r) return 0.f;
  return r->dtype() == DType::u8 ? float(r->data<uint8_t>()[i]) : float(r->data<int8_t>()[i]);
}
inline const Tensor* residual_of(std::span<const Tensor> in) { return in.size() > 3 && in[3].defined() ? &in[3] : nullptr; }
inline const int32_t* bias_of(std::span<const Tensor> in) {
  return in.size() > 2 && in[2].defined() ? in[2].data<int32_t>() : nullptr;
}

}  // namespace reckon::requant
