// Fast kernels of the quantized ops on plain tensors: quantize and dequantize as parallel loops,
// conv2d_int8 and linear_int8 as oneDNN int8 primitives on a cpu with VNNI (int8_exact.h on one
// without, where oneDNN's products saturate), with the arithmetic of the reference kernels (ops/quant.h), which the op harness checks bit for bit.
#include "reckon/kernels/cpu/quant_dnnl.h"

#include "reckon/kernels/cpu/conv_small.h"
#include "reckon/kernels/cpu/int8_exact.h"

#include <fmt/format.h>

#include <omp.h>

#include <immintrin.h>
#include <limits>
#include <type_traits>

#include "reckon/ops/op_list.h"

namespace reckon {

namespace dnnl_util {
using dnnl::memory;
using tag = memory::format_tag;

std::optional<dnnl::primitive_attr> quant_attr(const QuantLinearAttrs& q, int64_t out_channels) {
  dnnl::primitive_attr attr = default_attr();
  std::vector<float> m;
  if (q.w_scale.size() == 1) m.push_back(quant_multiplier(q, 0));
  else
    for (int64_t o = 0; o < out_channels; ++o) m.push_back(quant_multiplier(q, o));
  attr.set_output_scales(m.size() == 1 ? 0 : 1 << 1, m);
  if (q.x_zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {int32_t(q.x_zero_point)});
  dnnl::post_ops po;
  for (const auto& p : quant_scaled_post(q)) {
    if (p.kind == "relu") po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, float(p.alpha), 0.f);
    else if (p.kind == "clamp") po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, float(p.alpha), float(p.beta));
    else if (p.kind == "sum") po.append_sum(float(p.alpha), 0, dt(quant_residual_dtype("int8 product", q)));
    else return std::nullopt;
  }
  // The output's zero point as the last post-ops: rounded first, then shifted, as the reference does
  // (and ONNX Runtime: a zero point added before the rounding would lose the fraction of a value
  // near .5 to float32's spacing at 128). oneDNN 2.6's inner product takes no destination zero point.
  if (q.y_dtype != "f32" && q.y_zero_point != 0) {
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, float(q.y_zero_point));
  }
  attr.set_post_ops(po);
  return attr;
}

QuantConvGeo quant_conv_geo(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a) {
  QuantConvGeo g;
  g.x = dims_of(x);
  g.y = dims_of(y);
  g.stride = {a.stride[0], a.stride[1]};
  g.dil = {a.dilation[0] - 1, a.dilation[1] - 1};
  g.pad_l = {a.padding[0], a.padding[1]};
  g.pad_r.resize(2);
  for (size_t i = 0; i < 2; ++i)
    g.pad_r[i] = (y[2 + i] - 1) * a.stride[i] + (w[2 + i] - 1) * a.dilation[i] + 1 - x[2 + i] - a.padding[i];
  if (a.groups > 1) {
    g.w = {a.groups, w[0] / a.groups, w[1], w[2], w[3]};
    g.w_tag = tag::goihw;
  } else {
    g.w = dims_of(w);
    g.w_tag = tag::oihw;
  }
  g.w_user = g.w;
  return g;
}

dnnl::convolution_forward::primitive_desc quant_conv_pd(const memory::desc& src, const QuantConvGeo& g, DType y,
                                                        bool bias, const dnnl::primitive_attr& attr) {
  const memory::desc wd(g.w, memory::data_type::s8, tag::any), yd(g.y, dt(y), tag::any);
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_direct;
  auto d = bias ? dnnl::convolution_forward::desc(prop, alg, src, wd, memory::desc({g.y[1]}, memory::data_type::s32, tag::a),
                                                  yd, g.stride, g.dil, g.pad_l, g.pad_r)
                : dnnl::convolution_forward::desc(prop, alg, src, wd, yd, g.stride, g.dil, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, attr, engine());
}

dnnl::inner_product_forward::primitive_desc quant_linear_pd(const memory::desc& src, const Shape& w, DType y, bool bias,
                                                            const dnnl::primitive_attr& attr) {
  const memory::dims yd{src.dims()[0], w[0]};
  const memory::desc wd(dims_of(w), memory::data_type::s8, tag::any), dd(yd, dt(y), tag::nc);
  const auto prop = dnnl::prop_kind::forward_inference;
  auto d = bias ? dnnl::inner_product_forward::desc(prop, src, wd, memory::desc({w[0]}, memory::data_type::s32, tag::a), dd)
                : dnnl::inner_product_forward::desc(prop, src, wd, dd);
  return dnnl::inner_product_forward::primitive_desc(d, attr, engine());
}
}  // namespace dnnl_util

using namespace dnnl_util;
using dnnl::memory;
using tag = memory::format_tag;

namespace {
// Per-tensor quantization as one vectorised loop per thread: rint rounds as nearbyint does (to
// nearest, ties to even), NaN becomes the zero point.
template <class Q>
void quantize_run(const float* __restrict x, Q* __restrict y, int64_t n, float s, float zp, float lo, float hi) {
  const float vlo = lo - zp, vhi = hi - zp;
  // (no `omp simd` here: with it gcc 12 made this loop 7x slower)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / s;
    v = v != v ? 0.f : std::min(std::max(v, vlo), vhi);
    y[i] = Q(int32_t(__builtin_rintf(v)) + int32_t(zp));
  }
}
// f(begin, count) over chunks of n elements, the chunks shared among threads when there are
// more than a few.
template <class F>
void for_chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
}
template <class Q>
void quantize_block(const float* x, Q* y, int64_t n, float s, float zp, float lo, float hi) {
  for_chunks(n, [&](int64_t b, int64_t m) { quantize_run(x + b, y + b, m, s, zp, lo, hi); });
}

struct Plan {
  dnnl::primitive prim;
  memory::desc src, weights, dst, scratch;
  std::string impl;
};
template <class PD>
Plan plan_of(const PD& pd) {
  return Plan{dnnl::primitive(pd.get()), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc(),
              pd.impl_info_str()};
}

// Runs a planned product on plain tensors: reorders x, w (and the residual, into dst) into the
// primitive's layouts, runs it, and reorders the output back.
Support run_product(KernelCtx& ctx, const Plan& p, std::span<const Tensor> in, Tensor& y, const memory::desc& xu_md,
                    const memory::desc& wu_md, const memory::desc& yu_md, bool sum) {
  Tensor hx, hw, hy;
  memory xu(xu_md, engine(), in[0].raw_data()), wu(wu_md, engine(), in[1].raw_data()), yu(yu_md, engine(), y.raw_data());
  memory xm = reorder_to(ctx, xu, p.src, hx);
  memory wm = reorder_to(ctx, wu, p.weights, hw);
  memory ym = yu;
  if (p.dst != yu_md) {
    hy = ctx.workspace(int64_t(p.dst.get_size()));
    ym = memory(p.dst, engine(), hy.raw_data());
  }
  if (sum && !ctx.planning()) {  // the residual into dst, in its own dtype (dst takes its bytes' place)
    memory::desc r_user = yu_md, r_dst = ym.get_desc();
    r_user.data.data_type = r_dst.data.data_type = memory::convert_to_c(dt(in[3].dtype()));
    memory ru(r_user, engine(), in[3].raw_data()), rd(r_dst, engine(), ym.get_data_handle());
    dnnl::reorder(ru, rd).execute(stream(), ru, rd);
    stream().wait();
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (in.size() > 2 && in[2].defined())
    args[DNNL_ARG_BIAS] = memory(memory::desc({in[2].numel()}, memory::data_type::s32, tag::a), engine(), in[2].raw_data());
  ctx.note_impl(p.impl);
  execute(ctx, p.prim, p.scratch, std::move(args));
  if (!ctx.planning() && ym.get_desc() != yu_md) {
    dnnl::reorder(ym, yu).execute(stream(), ym, yu);
    stream().wait();
  }
  return Support::yes();
}
std::string key_of(const char* op, std::span<const Tensor> in, const std::string& attrs) {
  std::string k = op;
  for (const auto& t : in) k += t.defined() ? "|" + shape_str(t.shape()) + std::string(dtype_name(t.dtype())) : "|-";
  return k + attrs;
}
}  // namespace

Support QuantizeLinear::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const QuantAxis ax(a, x.shape());
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  visit_q8(y.dtype(), "quantize_linear", [&]<class Q>() {
    Q* py = y.data<Q>();
    const float lo = float(quant_min(y.dtype())), hi = float(quant_max(y.dtype()));
    if (!ax.per_channel) {
      quantize_block(px, py, n, float(a.scale[0]), float(a.zero_point[0]), lo, hi);
      return;
    }
#pragma omp parallel for if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = ax.channel(i);
      const float zp = float(a.zero_point[c]);
      const float v = px[i] / float(a.scale[c]);
      py[i] = std::isnan(v) ? Q(zp) : Q(round_saturate(v, lo - zp, hi - zp) + zp);
    }
  });
  return Support::yes();
}

// Fake quantization per tensor as one vectorised loop per chunk (the reference's arithmetic:
// saturate, round to nearest even, back to f32); per axis, the reference.
Support FakeQuantize::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (a.scale.size() != 1) return Support::no("per-axis: the reference kernel");
  const DType t = quant_dtype(kName, a.dtype);
  const float s = float(a.scale[0]), zp = float(a.zero_point[0]);
  const float vlo = float(quant_min(t)) - zp, vhi = float(quant_max(t)) - zp;
  const float* px = in[0].data<float>();
  float* py = out[0].data<float>();
  for_chunks(in[0].numel(), [&](int64_t b, int64_t m) {
    const float* __restrict x = px + b;
    float* __restrict y = py + b;
    for (int64_t i = 0; i < m; ++i) {
      float v = x[i] / s;
      v = v != v ? 0.f : std::min(std::max(v, vlo), vhi);
      y[i] = __builtin_rintf(v) * s;
    }
  });
  return Support::yes();
}
Support FakeQuantizeBackward::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (a.scale.size() != 1) return Support::no("per-axis: the reference kernel");
  const DType t = quant_dtype(kName, a.dtype);
  const float s = float(a.scale[0]), zp = float(a.zero_point[0]);
  const float lo = float(quant_min(t)), hi = float(quant_max(t));
  const float *pd = in[0].data<float>(), *px = in[1].data<float>();
  float* pg = out[0].data<float>();
  for_chunks(in[0].numel(), [&](int64_t b, int64_t m) {
    const float *__restrict d = pd + b, *__restrict x = px + b;
    float* __restrict g = pg + b;
    for (int64_t i = 0; i < m; ++i) {
      const float q = __builtin_rintf(x[i] / s) + zp;
      g[i] = q >= lo && q <= hi ? d[i] : 0.f;
    }
  });
  return Support::yes();
}

Support DequantizeLinear::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const QuantAxis ax(a, x.shape());
  float* py = out[0].data<float>();
  const int64_t n = x.numel();
  visit_q8(x.dtype(), "dequantize_linear", [&]<class Q>() {
    const Q* px = x.data<Q>();
#pragma omp parallel for if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = ax.channel(i);
      py[i] = float(int32_t(px[i]) - int32_t(a.zero_point[c])) * float(a.scale[c]);
    }
  });
  return Support::yes();
}

// add_int8 over dense tensors as one loop per chunk (gcc vectorises it), in the reference's arithmetic
// (add_int8_value, then the zero point, saturation and rounding half to even). The engine runs it on
// the bytes of any layout the two inputs share.
namespace {
template <class A, class B, class Y>
void add_int8_block(const A* __restrict x, const B* __restrict z, Y* __restrict y, int64_t m, AddInt8Coefs c) {
  const float lo = float(std::numeric_limits<Y>::min()), hi = float(std::numeric_limits<Y>::max());
  for (int64_t i = 0; i < m; ++i) {
    const float v = add_int8_value(c, int32_t(x[i]), int32_t(z[i]));
    y[i] = Y(int32_t(__builtin_rintf(std::min(std::max(v, lo), hi))));
  }
}
template <class A, class B, class Y>
void add_int8_run(const A* pa, const B* pb, Y* py, int64_t n, const QuantAddAttrs& a) {
  const AddInt8Coefs c = add_int8_coefs(a);
  for_chunks(n, [&](int64_t b, int64_t m) { add_int8_block(pa + b, pb + b, py + b, m, c); });
}
}  // namespace

Support AddInt8::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (!in[0].is_contiguous() || !in[1].is_contiguous()) return Support::no("strided inputs: the reference kernel");
  const int64_t n = out[0].numel();
  visit_q8(in[0].dtype(), kName, [&]<class A>() {
    visit_q8(in[1].dtype(), kName, [&]<class B>() {
      visit_q8(out[0].dtype(), kName, [&]<class Y>() {
        if constexpr (sizeof(A) == 1 && sizeof(B) == 1 && sizeof(Y) == 1)
          add_int8_run(in[0].data<A>(), in[1].data<B>(), out[0].data<Y>(), n, a);
      });
    });
  });
  return Support::yes();
}

// pool2d_int8's 2x2/2 max windows on NCHW planes, threads over planes, a row of outputs at a time:
// on AVX-512 32 outputs a step (the two input rows' maximum, then each byte pair's in 16-bit lanes,
// narrowed back), elsewhere a loop over the row; other windows are the reference kernel's. (GCC left
// the portable loop's stride-2 byte loads scalar: 138 us of LeNet-5's int8 step at batch 256 on a
// Xeon, 5 of its 12 steps' bytes.)
namespace {
bool pool_2x2(const QuantPoolAttrs& a, const Shape& x, const Shape& y) {
  const PoolAttrs& p = a.pool;
  return a.mode == "max" && p.kernel == std::array<int64_t, 2>{2, 2} && p.stride == std::array<int64_t, 2>{2, 2} &&
         p.padding == std::array<int64_t, 2>{0, 0} && p.dilation == std::array<int64_t, 2>{1, 1} && 2 * y[2] <= x[2] &&
         2 * y[3] <= x[3];
}
template <class Q>
void max_pool_2x2_planes(const Q* px, Q* py, int64_t planes, int64_t H, int64_t W, int64_t HO, int64_t WO) {
#pragma omp parallel for schedule(static) if (planes * HO * WO > (1 << 14))
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < HO; ++oh) {
      const Q* __restrict r0 = px + (pl * H + 2 * oh) * W;
      const Q* __restrict r1 = r0 + W;
      Q* __restrict yr = py + (pl * HO + oh) * WO;
      int64_t ow = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
      for (; ow < WO; ow += 32) {
        const int64_t k = std::min<int64_t>(32, WO - ow);
        const __mmask64 in_mask = _bzhi_u64(~0ULL, unsigned(2 * k));
        const __m512i a = _mm512_maskz_loadu_epi8(in_mask, r0 + 2 * ow), b = _mm512_maskz_loadu_epi8(in_mask, r1 + 2 * ow);
        __m512i m;
        if constexpr (std::is_signed_v<Q>) {  // each byte of a pair sign-extended to 16 bits
          const __m512i v = _mm512_max_epi8(a, b);
          m = _mm512_max_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), _mm512_srai_epi16(v, 8));
        } else {
          const __m512i v = _mm512_max_epu8(a, b);
          m = _mm512_max_epu16(_mm512_and_si512(v, _mm512_set1_epi16(0xff)), _mm512_srli_epi16(v, 8));
        }
        _mm256_mask_storeu_epi8(yr + ow, __mmask32(_bzhi_u32(~0u, unsigned(k))), _mm512_cvtepi16_epi8(m));
      }
#endif
      for (; ow < WO; ++ow)
        yr[ow] = std::max(std::max(r0[2 * ow], r0[2 * ow + 1]), std::max(r1[2 * ow], r1[2 * ow + 1]));
    }
}
}  // namespace

Support Pool2dInt8::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (!x.is_contiguous() || !pool_2x2(a, x.shape(), y.shape())) return Support::no("not a 2x2/2 max: the reference kernel");
  visit_q8(x.dtype(), kName, [&]<class Q>() {
    if constexpr (sizeof(Q) == 1)
      max_pool_2x2_planes(x.data<Q>(), y.data<Q>(), x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2), y.size(3));
  });
  return Support::yes();
}

Support Conv2dInt8::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  if (conv_small::first_layer(x.shape(), w.shape(), a.conv)) {  // a first layer: exact on any AVX-512 cpu
    const int T = omp_get_max_threads();
    const Tensor s = ctx.workspace(conv_small::forward_int8_scratch_bytes(x.shape(), w.shape(), y.shape(), a.conv, T));
    ctx.note_impl("reckon direct (few channels)");
    ctx.note_lane_use(conv_small::forward_lane_use(x.shape(), w.shape(), a.conv));
    if (!ctx.planning())
      conv_small::forward_int8(x, w, in.size() > 2 && in[2].defined() ? &in[2] : nullptr,
                               in.size() > 3 && in[3].defined() ? &in[3] : nullptr, y, a, s.raw_data(), T);
    return Support::yes();
  }
  if (!int8_exact::dnnl_is_exact()) {  // oneDNN would saturate pairs of products in int16
    int8_exact::conv(ctx, in, y, a);
    return Support::yes();
  }
  const bool bias = in.size() > 2 && in[2].defined(), sum = has_sum(a.q.post);
  const QuantConvGeo g = quant_conv_geo(x.shape(), w.shape(), y.shape(), a.conv);
  static PlanCache<Plan> cache;
  auto* plan = cache.get(key_of("conv2d_int8", in, op_info(op_id<Conv2dInt8>).attrs_to_json(&a)), [&] {
    auto attr = quant_attr(a.q, w.size(0));
    if (!attr) throw dnnl::error(dnnl_unimplemented, "post-op");
    return plan_of(quant_conv_pd(memory::desc(g.x, dt(x.dtype()), tag::any), g, y.dtype(), bias, *attr));
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  return run_product(ctx, *plan, in, y, memory::desc(g.x, dt(x.dtype()), tag::nchw),
                     memory::desc(g.w_user, memory::data_type::s8, g.w_tag), memory::desc(g.y, dt(y.dtype()), tag::nchw),
                     sum);
}

Support LinearInt8::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  if (!int8_exact::dnnl_is_exact()) {
    int8_exact::linear(ctx, in, y, a);
    return Support::yes();
  }
  const bool bias = in.size() > 2 && in[2].defined(), sum = has_sum(a.post);
  static PlanCache<Plan> cache;
  auto* plan = cache.get(key_of("linear_int8", in, op_info(op_id<LinearInt8>).attrs_to_json(&a)), [&] {
    auto attr = quant_attr(a, w.size(0));
    if (!attr) throw dnnl::error(dnnl_unimplemented, "post-op");
    return plan_of(quant_linear_pd(plain_desc(x), w.shape(), y.dtype(), bias, *attr));
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  return run_product(ctx, *plan, in, y, plain_desc(x), plain_desc(w), plain_desc(y), sum);
}

}  // namespace reckon
