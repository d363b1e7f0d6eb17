// Reference kernels of the quantized ops: plain loops that define the int8 arithmetic
// (ops/quant.h says it in words). The fast kernels are tested against these bit for bit.
#include <cmath>
#include <limits>

#include "reckon/ops/dispatch.h"
#include "reckon/kernels/ref/requant.h"
#include "reckon/ops/quant.h"

namespace reckon {

using namespace requant;

void QuantizeLinear::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const QuantAxis ap(a, x.shape());
  const float* px = x.data<float>();
  visit_q8(y.dtype(), "quantize_linear", [&]<class Q>() {
    Q* py = y.data<Q>();
    const float lo = float(quant_min(y.dtype())), hi = float(quant_max(y.dtype()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t c = ap.channel(i);
      const float zp = float(a.zero_point[c]);
      const float v = px[i] / float(a.scale[c]);
      py[i] = std::isnan(v) ? Q(zp) : Q(round_saturate(v, lo - zp, hi - zp) + zp);
    }
  });
}

// x / scale + zero point, saturated and rounded as QuantizeLinear stores it, back in f32; the
// backward passes dy where x / scale + zero point (rounded) lies within the type's range.
void FakeQuantize::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const QuantAxis ap(a, x.shape());
  const DType t = quant_dtype(kName, a.dtype);
  const float lo = float(quant_min(t)), hi = float(quant_max(t));
  const float* px = x.data<float>();
  float* py = out[0].data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = ap.channel(i);
    const float zp = float(a.zero_point[c]), sc = float(a.scale[c]);
    const float v = px[i] / sc;
    const float q = std::isnan(v) ? zp : round_saturate(v, lo - zp, hi - zp) + zp;
    py[i] = (q - zp) * sc;
  }
}
void FakeQuantizeBackward::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &x = in[1];
  const QuantAxis ap(a, x.shape());
  const DType t = quant_dtype(kName, a.dtype);
  const float lo = float(quant_min(t)), hi = float(quant_max(t));
  const float *pd = dy.data<float>(), *px = x.data<float>();
  float* pg = out[0].data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t c = ap.channel(i);
    const float q = std::nearbyint(px[i] / float(a.scale[c])) + float(a.zero_point[c]);
    pg[i] = q >= lo && q <= hi ? pd[i] : 0.f;
  }
}

void DequantizeLinear::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const QuantAxis ap(a, x.shape());
  float* py = out[0].data<float>();
  visit_q8(x.dtype(), "dequantize_linear", [&]<class Q>() {
    const Q* px = x.data<Q>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const size_t c = ap.channel(i);
      py[i] = float(int32_t(px[i]) - int32_t(a.zero_point[c])) * float(a.scale[c]);
    }
  });
}

void Conv2dInt8::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  const Requant rq(a.q, bias_of(in));
  const Tensor* r = residual_of(in);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), CG = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t OH = y.size(2), OW = y.size(3), G = a.conv.groups, OG = O / G;
  const int8_t* pw = w.data<int8_t>();
  const int32_t xzp = int32_t(a.q.x_zero_point);
  ctx.count_macs(N * O * OH * OW * CG * KH * KW);
  visit_q8(x.dtype(), "conv2d_int8", [&]<class Q>() {
    const Q* px = x.data<Q>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        const int64_t g = o / OG;
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int32_t acc = 0;
            for (int64_t c = 0; c < CG; ++c)
              for (int64_t kh = 0; kh < KH; ++kh) {
                const int64_t ih = oh * a.conv.stride[0] - a.conv.padding[0] + kh * a.conv.dilation[0];
                if (ih < 0 || ih >= H) continue;
                for (int64_t kw = 0; kw < KW; ++kw) {
                  const int64_t iw = ow * a.conv.stride[1] - a.conv.padding[1] + kw * a.conv.dilation[1];
                  if (iw < 0 || iw >= W) continue;
                  const int32_t xv = int32_t(px[((n * C + g * CG + c) * H + ih) * W + iw]) - xzp;
                  acc += xv * int32_t(pw[((o * CG + c) * KH + kh) * KW + kw]);
                }
              }
            const int64_t i = ((n * O + o) * OH + oh) * OW + ow;
            rq.store(y, i, rq.value(acc, o, residual_at(r, i)));
          }
      }
  });
}

void LinearInt8::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  const Requant rq(a, bias_of(in));
  const Tensor* r = residual_of(in);
  const int64_t N = x.size(0), I = x.size(1), O = w.size(0);
  const int8_t* pw = w.data<int8_t>();
  const int32_t xzp = int32_t(a.x_zero_point);
  ctx.count_macs(N * I * O);
  visit_q8(x.dtype(), "linear_int8", [&]<class Q>() {
    const Q* px = x.data<Q>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        int32_t acc = 0;
        for (int64_t k = 0; k < I; ++k) acc += (int32_t(px[n * I + k]) - xzp) * int32_t(pw[o * I + k]);
        rq.store(y, n * O + o, rq.value(acc, o, residual_at(r, n * O + o)));
      }
  });
}

void Pool2dInt8::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const PoolAttrs& p = a.pool;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = y.size(2), OW = y.size(3);
  const bool max = a.mode == "max";
  const float lo = float(quant_min(x.dtype())), hi = float(quant_max(x.dtype()));
  visit_q8(x.dtype(), "pool2d_int8", [&]<class Q>() {
    const Q* px = x.data<Q>();
    Q* py = y.data<Q>();
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int32_t best = std::numeric_limits<int32_t>::min(), sum = 0, count = 0;
          for (int64_t kh = 0; kh < p.kernel[0]; ++kh)
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * (max ? p.dilation[0] : 1);
              const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * (max ? p.dilation[1] : 1);
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const int32_t v = px[(nc * H + ih) * W + iw];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          if (!max && p.count_include_pad) {
            // the window as it lies over the padded input, clipped at the padded edge
            const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
            const int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
            count = int32_t((h1 - h0) * (w1 - w0));
          }
          const int64_t i = (nc * OH + oh) * OW + ow;
          py[i] = max ? Q(best) : Q(round_saturate(float(sum) / float(count), lo, hi));
        }
  });
}

void AddInt8::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const DType yt = out[0].dtype();
  const AddInt8Coefs c = add_int8_coefs(a);
  const float lo = float(quant_min(yt)), hi = float(quant_max(yt));
  const int64_t n = out[0].numel();
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::u8 ? int32_t(t.data<uint8_t>()[i]) : int32_t(t.data<int8_t>()[i]);
  };
  for (int64_t i = 0; i < n; ++i) {
    const float v = round_saturate(add_int8_value(c, at(in[0], i), at(in[1], i)), lo, hi);
    if (yt == DType::u8) out[0].data<uint8_t>()[i] = uint8_t(v);
    else out[0].data<int8_t>()[i] = int8_t(v);
  }
}

}  // namespace reckon
