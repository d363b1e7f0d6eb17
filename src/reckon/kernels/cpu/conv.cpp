// oneDNN convolution: forward, backward data, backward weights (+ bias), f32 and bf16; f16
// calls run the f32 kernels on f32 copies (run_in_f32: this cpu has no f16 arithmetic, and
// oneDNN 2.6's converting f16 reorders are about 5x slower than converting first).
// Weights are OIHW. Activations come NCHW or channels-last (NHWC). NCHW ones: the primitive picks
// its own layouts (format `any`, oneDNN's blocked ones) and we reorder in and out through
// workspace buffers, since the blocked jit kernels beat the plain-NCHW ones by far on AVX-512.
// NHWC ones (a call that runs channels-last, ops/conv.h): the primitive is planned on NHWC, which
// its jit kernels read as they are (measured here at resnet18_cifar's shapes in bf16, batch 128:
// within 5% of the blocked kernels' time, either way), so activations are never reordered. Plans are built once per shape (and algorithm) and
// reused. The algorithm is oneDNN's `convolution_auto` unless the call's ConvAttrs::algo says direct:
// oneDNN 2.6 then picks Winograd F(4x4, 3x3) for most 3x3 stride-1 f32 convolutions, 1.5x
// faster end to end on resnet18_cifar training here.
#include <fmt/format.h>

#include <map>
#include <vector>

#include "reckon/kernels/cpu/conv_small.h"
#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"

namespace reckon {

namespace {
using namespace dnnl_util;
using dnnl::memory;
using tag = memory::format_tag;

struct ConvGeo {
  memory::dims x, w, y, b, stride, dil, pad_l, pad_r;
  memory::dims w_user;  // OIHW or GOIHW
  tag w_tag;
};

ConvGeo conv_geo(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a) {
  ConvGeo g;
  g.x = dims_of(x);
  g.y = dims_of(y);
  g.b = {w[0]};
  g.stride = {a.stride[0], a.stride[1]};
  g.dil = {a.dilation[0] - 1, a.dilation[1] - 1};
  g.pad_l = {a.padding[0], a.padding[1]};
  for (int i = 0; i < 2; ++i) {
    int64_t in = x[size_t(2 + i)], k = w[size_t(2 + i)], out = y[size_t(2 + i)];
    g.pad_r.push_back((out - 1) * a.stride[size_t(i)] + (k - 1) * a.dilation[size_t(i)] + 1 - in - a.padding[size_t(i)]);
  }
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

// The activations' layout of a call: NHWC when it runs channels-last, else oneDNN's choice.
tag act_tag(bool channels_last) { return channels_last ? tag::nhwc : tag::any; }
// The user activations' layout.
tag user_tag(bool channels_last) { return channels_last ? tag::nhwc : tag::nchw; }

std::string conv_key(const char* kind, const Shape& x, const Shape& w, const ConvAttrs& a, DType t, bool bias,
                     bool channels_last) {
  return fmt::format("{}:{}:{}:{},{},{},{},{},{},{}:{}:{}:{}:{}", kind, shape_str(x), shape_str(w), a.stride[0],
                     a.stride[1], a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups, int(t), bias,
                     conv_algorithm_name(a.algo), channels_last ? "nhwc" : "any");
}

dnnl::algorithm algorithm(const ConvAttrs& a) {
  return a.algo == ConvAlgorithm::direct ? dnnl::algorithm::convolution_direct : dnnl::algorithm::convolution_auto;
}

// Which oneDNN implementations ran (conv_kernels_used()).
std::mutex g_used_mu;
std::map<std::string, int64_t>& used() {
  static std::map<std::string, int64_t> m;
  return m;
}
// The kernel ran (or, planning, would run) `impl` for a call of `kind` (fwd, bwd_data,
// bwd_weights): the op record names it, and a real run counts it.
void ran(KernelCtx& ctx, const std::string& impl, const char* kind) {
  // oneDNN names its Winograd implementations "jit_wino_...", "..._wino_..."
  ctx.note_impl(impl, impl.find("wino") != std::string::npos ? KernelAlgo::winograd : KernelAlgo::direct);
  if (ctx.planning()) return;
  std::lock_guard<std::mutex> g(g_used_mu);
  ++used()[impl + " " + kind];
}
// oneDNN's direct kernels compute only the taps that read the input and fetch only the weights an
// output reads there (KernelCtx::note_work; Winograd and gemm compute the padding's too):
// weight_bytes, the weights the op's cost counts as read (0 where it writes them).
void note_taps(KernelCtx& ctx, const std::string& impl, const Shape& x, const Shape& w, const Shape& y,
               const ConvAttrs& a, int64_t weight_bytes) {
  if (!conv_impl_skips_padding(impl) || x.size() != 4 || w.size() != 4 || y.size() != 4) return;
  double taps = 1.0, weights = 1.0;
  conv_tap_shares(x, w, y, a, taps, weights);
  if (taps < 1.0) ctx.note_work(taps, int64_t(double(weight_bytes) * (1.0 - weights)));
}
const std::string kSmallDirect = "reckon small_direct";
const std::string kSmallDirectOutputLanes = "reckon small_direct o_lanes";  // conv_small::output_channel_lanes
const std::string kSmallDirectImageLanes = "reckon small_direct n_lanes";  // conv_small::backward_input_image_lanes
constexpr const char* kNchwOnly = "a channels-last activation this call's kernels read as NCHW: the reference";
const std::string kDepthwiseDirect = "reckon depthwise_direct";

// A depthwise convolution's weight gradient (groups = in = out channels, one filter each), by
// direct sums: one channel a thread, each tap summed over the samples and output positions in
// double, the bias likewise. For the shapes where oneDNN 2.6's jit_dw kernel declines backward
// weights (spatial sizes below the filter's, as in mobilenet_v2's last blocks at 1x1 and 2x2) and
// its fallback, a gemm per group, took 4 ms for 960 channels at 1x1 and batch 32: here 0.3 M MACs.
bool depthwise(const Shape& w, const ConvAttrs& a) { return a.groups > 1 && w[0] == a.groups && w[1] == 1; }

template <class T>
void depthwise_backward_weight(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db, const ConvAttrs& a) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = dy.size(2), WO = dy.size(3), KH = dw.size(2), KW = dw.size(3);
  const T *pdy = dy.data<T>(), *px = x.data<T>();
  T* pdw = dw.data<T>();
  T* pdb = db ? db->data<T>() : nullptr;
  const int64_t work = N * C * HO * WO * KH * KW;
#pragma omp parallel for schedule(static) if (work > (1 << 16))
  for (int64_t c = 0; c < C; ++c) {
    std::vector<double> acc(static_cast<size_t>(KH * KW), 0.0);
    double bias = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T* d = pdy + (n * C + c) * HO * WO;
      const T* xs = px + (n * C + c) * H * W;
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          const double g = double(lowp::load(d[oh * WO + ow]));
          bias += g;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
              if (iw >= 0 && iw < W) acc[size_t(kh * KW + kw)] += g * double(lowp::load(xs[ih * W + iw]));
            }
          }
        }
    }
    for (int64_t k = 0; k < KH * KW; ++k) pdw[c * KH * KW + k] = lowp::store<T>(float(acc[size_t(k)]));
    if (pdb) pdb[c] = lowp::store<T>(float(bias));
  }
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvGeo& g, memory::data_type t, bool bias,
                                                 const ConvAttrs& a, bool channels_last) {
  auto any = tag::any, act = act_tag(channels_last);
  auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm(a),
                                                  memory::desc(g.x, t, act), memory::desc(g.w, t, any),
                                                  memory::desc(g.b, t, tag::a), memory::desc(g.y, t, act),
                                                  g.stride, g.dil, g.pad_l, g.pad_r)
                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm(a),
                                                  memory::desc(g.x, t, act), memory::desc(g.w, t, any),
                                                  memory::desc(g.y, t, act), g.stride, g.dil, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, default_attr(), engine());
}

struct FwdPlan {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  std::string impl;  // oneDNN's name for the implementation it chose
};
struct BwdDataPlan {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  std::string impl;  // oneDNN's name for the implementation it chose
};
struct BwdWeightPlan {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  std::string impl;  // oneDNN's name for the implementation it chose
};

Support check(const Tensor& t, const ConvGeo& g) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) return Support::no("dtype is not f32 or bf16");
  for (auto p : g.pad_r)
    (void)p;  // oneDNN accepts a negative right padding (floor-mode output sizes)
  return Support::yes();
}

// Copies a primitive-layout result back into the user's plain tensor.
void reorder_out(KernelCtx& ctx, const memory& from, const memory& user) {
  if (from.get_desc() == user.get_desc()) return;
  ctx.note_reorder(int64_t(from.get_desc().get_size() + user.get_desc().get_size()));
  if (ctx.planning()) return;
  dnnl::reorder(from, user).execute(stream(), const_cast<memory&>(from), const_cast<memory&>(user));
  stream().wait();
}
}  // namespace

bool conv_takes_channels_last(const Shape& x, const Shape& w, const ConvAttrs& a, const Tensor& act) {
  const DType d = act.dtype();
  return channels_last_kernels_allowed(act) && (d == DType::f32 || d == DType::bf16) &&
         a.groups == 1 && x.size() == 4 && w.size() == 4 && !conv_small::applies(x, w, a, d) &&
         !(d == DType::bf16 && conv_small::first_layer(x, w, a));
}

Support Conv2d::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  const Tensor &x = in[0], &w = in[1];
  bool bias = in.size() > 2 && in[2].defined();
  Tensor& y = out[0];
  // A channels-last x that this call does not run channels-last (reckon's NCHW kernels, or the f32
  // rerun of a bf16 call oneDNN declined): decline, and the dispatcher's reference reads it dense.
  const bool cl = channels_last(in, a);
  if (x.prefers_channels_last() && !cl) return Support::no(kNchwOnly);
  if (x.dtype() == DType::bf16 && conv_small::first_layer(x.shape(), w.shape(), a))
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  if (conv_small::applies(x.shape(), w.shape(), a, x.dtype())) {
    ran(ctx, conv_small::output_channel_lanes(w.shape()) ? kSmallDirectOutputLanes : kSmallDirect, "fwd");
    ctx.note_lane_use(conv_small::forward_lane_use(x.shape(), w.shape(), a));
    conv_small::forward(ctx, x, w, bias ? &in[2] : nullptr, y, a);
    return Support::yes();
  }
  ConvGeo g = conv_geo(x.shape(), w.shape(), y.shape(), a);
  if (Support s = check(x, g); !s.ok) return s;
  auto t = dt(x.dtype());
  static PlanCache<FwdPlan> cache;
  auto* plan = cache.get(conv_key("fwd", x.shape(), w.shape(), a, x.dtype(), bias, cl), [&] {
    auto pd = fwd_pd(g, t, bias, a, cl);
    return FwdPlan{pd, dnnl::convolution_forward(pd), pd.impl_info_str()};
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  memory xu(memory::desc(g.x, t, user_tag(cl)), engine(), x.raw_data());
  memory wu(memory::desc(g.w_user, t, g.w_tag), engine(), w.raw_data());
  memory yu(memory::desc(g.y, t, user_tag(cl)), engine(), y.raw_data());
  Tensor hx, hw, hy;
  memory xm = reorder_to(ctx, xu, plan->pd.src_desc(), hx);
  memory wm = reorder_to(ctx, wu, plan->pd.weights_desc(), hw);
  memory ym = yu;
  if (plan->pd.dst_desc() != yu.get_desc()) {
    hy = ctx.workspace(int64_t(plan->pd.dst_desc().get_size()));
    ym = memory(plan->pd.dst_desc(), engine(), hy.raw_data());
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (bias) args[DNNL_ARG_BIAS] = memory(plan->pd.bias_desc(), engine(), in[2].raw_data());
  ran(ctx, plan->impl, "fwd");
  note_taps(ctx, plan->impl, x.shape(), w.shape(), y.shape(), a, w.nbytes());
  execute(ctx, plan->prim, plan->pd.scratchpad_desc(), std::move(args));
  reorder_out(ctx, ym, yu);
  return Support::yes();
}

Support Conv2dBackwardInput::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  const Tensor &dy = in[0], &w = in[1];
  Tensor& dx = out[0];
  const bool cl = channels_last(in, a);
  if (dy.prefers_channels_last() && !cl) return Support::no(kNchwOnly);  // as forward
  if (dy.dtype() == DType::bf16 && conv_small::first_layer(a.x_shape, w.shape(), a.conv))
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  if (conv_small::applies(a.x_shape, w.shape(), a.conv, dy.dtype())) {
    const bool image_lanes = conv_small::backward_input_image_lanes(a.x_shape, w.shape(), a.conv);
    ran(ctx, image_lanes ? kSmallDirectImageLanes : kSmallDirect, "bwd_data");
    ctx.note_lane_use(conv_small::backward_input_lane_use(a.x_shape, w.shape(), a.conv));
    if (image_lanes)  // sums only the taps inside
      note_taps(ctx, kSmallDirectImageLanes, a.x_shape, w.shape(), dy.shape(), a.conv, 0);
    conv_small::backward_input(ctx, dy, w, dx, a.conv);
    return Support::yes();
  }
  ConvGeo g = conv_geo(a.x_shape, w.shape(), dy.shape(), a.conv);
  if (Support s = check(dy, g); !s.ok) return s;
  auto t = dt(dy.dtype());
  static PlanCache<BwdDataPlan> cache;
  auto* plan = cache.get(conv_key("bwd_data", a.x_shape, w.shape(), a.conv, dy.dtype(), false, cl), [&] {
    auto hint = fwd_pd(g, t, false, a.conv, cl);
    auto any = tag::any, act = act_tag(cl);
    dnnl::convolution_backward_data::desc d(algorithm(a.conv), memory::desc(g.x, t, act),
                                            memory::desc(g.w, t, any), memory::desc(g.y, t, act), g.stride,
                                            g.dil, g.pad_l, g.pad_r);
    auto pd = dnnl::convolution_backward_data::primitive_desc(d, default_attr(), engine(), hint);
    return BwdDataPlan{pd, dnnl::convolution_backward_data(pd), pd.impl_info_str()};
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  memory dyu(memory::desc(g.y, t, user_tag(cl)), engine(), dy.raw_data());
  memory wu(memory::desc(g.w_user, t, g.w_tag), engine(), w.raw_data());
  memory dxu(memory::desc(g.x, t, user_tag(cl)), engine(), dx.raw_data());
  Tensor hdy, hw, hdx;
  memory dym = reorder_shared(ctx, dy, dyu, plan->pd.diff_dst_desc(), hdy);
  memory wm = reorder_to(ctx, wu, plan->pd.weights_desc(), hw);
  memory dxm = dxu;
  if (plan->pd.diff_src_desc() != dxu.get_desc()) {
    hdx = ctx.workspace(int64_t(plan->pd.diff_src_desc().get_size()));
    dxm = memory(plan->pd.diff_src_desc(), engine(), hdx.raw_data());
  }
  ran(ctx, plan->impl, "bwd_data");
  note_taps(ctx, plan->impl, a.x_shape, w.shape(), dy.shape(), a.conv, w.nbytes());
  execute(ctx, plan->prim, plan->pd.scratchpad_desc(),
      {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}});
  reorder_out(ctx, dxm, dxu);
  return Support::yes();
}

Support Conv2dBackwardWeight::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  const Tensor &dy = in[0], &x = in[1];
  Tensor& dw = out[0];
  const bool cl = channels_last(in, a);
  if ((dy.prefers_channels_last() || x.prefers_channels_last()) && !cl) return Support::no(kNchwOnly);  // as forward
  if (dy.dtype() == DType::bf16 && conv_small::first_layer(x.shape(), a.w_shape, a.conv))
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  if (conv_small::applies(x.shape(), a.w_shape, a.conv, dy.dtype())) {
    ran(ctx, conv_small::output_channel_lanes(a.w_shape) ? kSmallDirectOutputLanes : kSmallDirect, "bwd_weights");
    ctx.note_lane_use(conv_small::backward_weight_lane_use(x.shape(), a.w_shape, a.conv));
    conv_small::backward_weight(ctx, dy, x, dw, a.with_bias ? &out[1] : nullptr, a.conv);
    return Support::yes();
  }
  ConvGeo g = conv_geo(x.shape(), a.w_shape, dy.shape(), a.conv);
  if (Support s = check(dy, g); !s.ok) return s;
  auto t = dt(dy.dtype());
  static PlanCache<BwdWeightPlan> cache;
  auto* plan = cache.get(conv_key("bwd_weights", x.shape(), a.w_shape, a.conv, dy.dtype(), a.with_bias, cl), [&] {
    auto hint = fwd_pd(g, t, a.with_bias, a.conv, cl);
    auto any = tag::any, act = act_tag(cl);
    auto d = a.with_bias
                 ? dnnl::convolution_backward_weights::desc(algorithm(a.conv), memory::desc(g.x, t, act),
                                                            memory::desc(g.w, t, any), memory::desc(g.b, t, tag::a),
                                                            memory::desc(g.y, t, act), g.stride, g.dil, g.pad_l, g.pad_r)
                 : dnnl::convolution_backward_weights::desc(algorithm(a.conv), memory::desc(g.x, t, act),
                                                            memory::desc(g.w, t, any), memory::desc(g.y, t, act),
                                                            g.stride, g.dil, g.pad_l, g.pad_r);
    auto pd = dnnl::convolution_backward_weights::primitive_desc(d, default_attr(), engine(), hint);
    return BwdWeightPlan{pd, dnnl::convolution_backward_weights(pd), pd.impl_info_str()};
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  if (depthwise(a.w_shape, a.conv) && plan->impl.rfind("x64:gemm", 0) == 0) {  // jit_dw declined
    ran(ctx, kDepthwiseDirect, "bwd_weights");
    if (ctx.planning()) return Support::yes();
    Tensor* db = a.with_bias ? &out[1] : nullptr;
    return lowp::visit(dy.dtype(), [&]<class T>() {
      depthwise_backward_weight<T>(dy, x, dw, db, a.conv);
      return Support::yes();
    });
  }
  memory dyu(memory::desc(g.y, t, user_tag(cl)), engine(), dy.raw_data());
  memory xu(memory::desc(g.x, t, user_tag(cl)), engine(), x.raw_data());
  memory dwu(memory::desc(g.w_user, t, g.w_tag), engine(), dw.raw_data());
  Tensor hdy, hx, hdw;
  memory dym = reorder_shared(ctx, dy, dyu, plan->pd.diff_dst_desc(), hdy);
  memory xm = reorder_to(ctx, xu, plan->pd.src_desc(), hx);
  memory dwm = dwu;
  if (plan->pd.diff_weights_desc() != dwu.get_desc()) {
    hdw = ctx.workspace(int64_t(plan->pd.diff_weights_desc().get_size()));
    dwm = memory(plan->pd.diff_weights_desc(), engine(), hdw.raw_data());
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_WEIGHTS, dwm}};
  if (a.with_bias) args[DNNL_ARG_DIFF_BIAS] = memory(plan->pd.diff_bias_desc(), engine(), out[1].raw_data());
  ran(ctx, plan->impl, "bwd_weights");
  note_taps(ctx, plan->impl, x.shape(), a.w_shape, dy.shape(), a.conv, 0);
  execute(ctx, plan->prim, plan->pd.scratchpad_desc(), std::move(args));
  reorder_out(ctx, dwm, dwu);
  return Support::yes();
}

std::vector<std::pair<std::string, int64_t>> conv_kernels_used() {
  std::lock_guard<std::mutex> g(g_used_mu);
  return {used().begin(), used().end()};
}
void reset_conv_kernels_used() {
  std::lock_guard<std::mutex> g(g_used_mu);
  used().clear();
}

namespace {
// These kernels plan (dnnl_util::execute and reorder_to honour a planning context): the meta
// device accounts their workspace.
[[maybe_unused]] const bool kConvPlans =
    (cpu_kernel_plans<Conv2d> = cpu_kernel_plans<Conv2dBackwardInput> = cpu_kernel_plans<Conv2dBackwardWeight> = true);
}  // namespace

}  // namespace reckon
