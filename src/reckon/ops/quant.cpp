#include "reckon/ops/quant.h"

#include <fmt/format.h>

#include <cmath>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/matmul.h"

namespace reckon {

DType quant_dtype(std::string_view op, const std::string& name, bool allow_f32) {
  if (name == "u8") return DType::u8;
  if (name == "s8") return DType::i8;
  if (allow_f32 && name == "f32") return DType::f32;
  throw Error(fmt::format("[{}] unknown quantized dtype '{}' (expected u8 or s8{})", op, name, allow_f32 ? " or f32" : ""));
}
std::string quant_dtype_name(DType t) {
  switch (t) {
    case DType::u8: return "u8";
    case DType::i8: return "s8";
    default: return std::string(dtype_name(t));
  }
}
int64_t quant_min(DType t) { return t == DType::u8 ? 0 : -128; }
int64_t quant_max(DType t) { return t == DType::u8 ? 255 : 127; }

namespace {
bool is_q8(DType t) { return t == DType::u8 || t == DType::i8; }

void check_scale(std::string_view op, std::string_view what, double s) {
  RK_CHECK(std::isfinite(s) && s > 0, "[{}] {} must be a finite positive number, got {}", op, what, s);
}
void check_zero_point(std::string_view op, std::string_view what, int64_t zp, DType t) {
  RK_CHECK(zp >= quant_min(t) && zp <= quant_max(t), "[{}] {} {} is outside {}'s range [{}, {}]", op, what, zp,
           quant_dtype_name(t), quant_min(t), quant_max(t));
}

// Scale and zero point lists against the tensor they quantize.
void check_qparams(std::string_view op, const QuantizeAttrs& a, const Shape& x, DType qt) {
  RK_CHECK(!a.scale.empty() && a.scale.size() == a.zero_point.size(),
           "[{}] needs as many scales as zero points (one per tensor or per channel), got {} and {}", op,
           a.scale.size(), a.zero_point.size());
  for (double s : a.scale) check_scale(op, "scale", s);
  if (is_q8(qt))
    for (int64_t z : a.zero_point) check_zero_point(op, "zero point", z, qt);
  if (a.scale.size() > 1) {
    RK_CHECK(a.axis >= 0 && a.axis < int64_t(x.size()), "[{}] axis {} is outside a tensor of shape {}", op, a.axis,
             shape_str(x));
    RK_CHECK(int64_t(a.scale.size()) == x[size_t(a.axis)], "[{}] {} scales for {} channels along axis {} of {}", op,
             a.scale.size(), x[size_t(a.axis)], a.axis, shape_str(x));
  }
}

void check_linear_q(std::string_view op, const QuantLinearAttrs& q, DType xt, int64_t out_channels) {
  check_scale(op, "x_scale", q.x_scale);
  check_zero_point(op, "x_zero_point", q.x_zero_point, xt);
  RK_CHECK(q.w_scale.size() == 1 || int64_t(q.w_scale.size()) == out_channels,
           "[{}] w_scale has {} entries for {} output channels (one per tensor or per channel)", op, q.w_scale.size(),
           out_channels);
  for (double s : q.w_scale) check_scale(op, "w_scale", s);
  const DType yt = quant_dtype(op, q.y_dtype, true);
  if (yt != DType::f32) {
    check_scale(op, "y_scale", q.y_scale);
    check_zero_point(op, "y_zero_point", q.y_zero_point, yt);
  }
  int sums = 0;
  for (const auto& p : q.post) {
    const PostKind k = post_kind(op, p.kind);
    RK_CHECK(k == PostKind::relu || k == PostKind::clamp || k == PostKind::sum,
             "[{}] takes relu, clamp and sum post-ops, not {}", op, p.kind);
    sums += k == PostKind::sum;
  }
  RK_CHECK(sums <= 1, "[{}] a post-op chain adds one residual at most", op);
  if (sums) {
    RK_CHECK(yt != DType::f32, "[{}] a sum post-op needs a quantized output", op);
    check_scale(op, "r_scale", q.r_scale);
  }
}

// Inputs (x, w, bias, residual) of a quantized conv or linear.
void check_qproduct(std::string_view op, std::span<const Tensor> in, const QuantLinearAttrs& q) {
  RK_CHECK(in.size() >= 2 && in[0].defined() && in[1].defined(), "[{}] needs x and weight", op);
  RK_CHECK(is_q8(in[0].dtype()), "[{}] x must be u8 or s8, got {}", op, dtype_name(in[0].dtype()));
  RK_CHECK(in[1].dtype() == DType::i8, "[{}] weight must be s8, got {}", op, dtype_name(in[1].dtype()));
  const int64_t o = in[1].size(0);
  if (in.size() > 2 && in[2].defined())
    RK_CHECK(in[2].dtype() == DType::i32 && in[2].dim() == 1 && in[2].size(0) == o,
             "[{}] bias must be i32 ({}), got {} {}", op, o, dtype_name(in[2].dtype()), shape_str(in[2].shape()));
  check_linear_q(op, q, in[0].dtype(), o);
  const bool sum = has_sum(q.post);
  RK_CHECK(in.size() == (sum ? 4u : 3u) || (!sum && in.size() == 2) || (!sum && in.size() == 4 && !in[3].defined()),
           "[{}] takes {} inputs with this chain ({}), got {}", op, sum ? 4 : 3, post_ops_str(q.post), in.size());
}
void check_residual(std::string_view op, std::span<const Tensor> in, const TensorSpec& y, const QuantLinearAttrs& q) {
  if (!has_sum(q.post)) return;
  const Tensor& r = in[3];
  const DType rt = quant_residual_dtype(op, q);
  RK_CHECK(r.defined() && r.shape() == y.shape && r.dtype() == rt,
           "[{}] the residual must be the output's shape {} and {}, got {}", op, shape_str(y.shape), quant_dtype_name(rt),
           r.defined() ? shape_str(r.shape()) + " " + quant_dtype_name(r.dtype()) : "none");
}
Tensor meta_like(const Tensor& t, DType d = DType::f32) { return Tensor::empty(t.shape(), d, Device::meta); }
// f() with an Error from the f32 op it asks renamed to this op ("[conv2d] ..." -> "[conv2d_int8] ...").
template <class F>
auto with_op_name(std::string_view op, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    std::string m = e.what();
    if (!m.empty() && m[0] == '[') m = m.substr(m.find(']') + 1);
    throw Error(fmt::format("[{}]{}", op, m));
  }
}
int64_t chain_flops(const std::vector<PostOp>& post, int64_t n) {
  int64_t f = 0;
  for (const auto& p : post) f += post_flops(post_kind("post-op", p.kind)) * n;
  return f;
}
}  // namespace

DType quant_residual_dtype(std::string_view op, const QuantLinearAttrs& q) {
  return q.r_dtype.empty() ? quant_dtype(op, q.y_dtype, true) : quant_dtype(op, q.r_dtype);
}
float quant_multiplier(const QuantLinearAttrs& q, int64_t o) {
  // In float32, each step rounded, as ONNX Runtime's QLinearConv and QGemm compute it (so an imported
  // QDQ file requantizes as ONNX Runtime runs it). volatile: no compiler may keep the product wider.
  const float ws = float(q.w_scale.size() == 1 ? q.w_scale[0] : q.w_scale[size_t(o)]);
  volatile float xw = float(q.x_scale) * ws;
  return q.y_dtype == "f32" ? float(xw) : float(xw) / float(q.y_scale);
}
std::vector<PostOp> quant_scaled_post(const QuantLinearAttrs& q) {
  const double ys = q.y_dtype == "f32" ? 1.0 : q.y_scale;
  std::vector<PostOp> r = q.post;
  for (auto& p : r) {
    if (p.kind == "clamp") {
      p.alpha /= ys;
      p.beta /= ys;
    } else if (p.kind == "sum") {
      p.alpha = q.r_scale / ys;
    }
  }
  return r;
}
Tensor quantize_bias(const Tensor& b, double x_scale, const std::vector<double>& w_scale) {
  Tensor c = contiguous(cast(b, DType::f64));
  const double* p = c.data<double>();
  Tensor r = Tensor::empty(b.shape(), DType::i32);
  int32_t* q = r.data<int32_t>();
  for (int64_t o = 0; o < b.numel(); ++o) {
    const double s = x_scale * (w_scale.size() == 1 ? w_scale[0] : w_scale[size_t(o)]);
    const double v = std::nearbyint(p[o] / s);
    RK_CHECK(std::isfinite(v) && std::abs(v) < 2147483647.0,
             "[quantize] bias {} of channel {} does not fit int32 at scale {:g}", p[o], o, s);
    q[o] = int32_t(v);
  }
  return r;
}

// ---- quantize_linear / dequantize_linear ----
std::vector<TensorSpec> QuantizeLinear::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[quantize_linear] takes one tensor");
  RK_CHECK(in[0].dtype() == DType::f32, "[quantize_linear] quantizes f32, got {}", dtype_name(in[0].dtype()));
  const DType qt = quant_dtype(kName, a.dtype);
  check_qparams(kName, a, in[0].shape(), qt);
  return {{in[0].shape(), qt}};
}
Cost QuantizeLinear::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 3);
}
SavedSet QuantizeLinear::saved(const Attrs&, NeedsGrad) { return {}; }

std::vector<TensorSpec> DequantizeLinear::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[dequantize_linear] takes one tensor");
  const DType t = in[0].dtype();
  RK_CHECK(is_q8(t) || t == DType::i32, "[dequantize_linear] takes u8, s8 or i32, got {}", dtype_name(t));
  check_qparams(kName, a, in[0].shape(), t);
  return {{in[0].shape(), DType::f32}};
}
Cost DequantizeLinear::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 2);
}
SavedSet DequantizeLinear::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- fake_quantize ----
std::vector<TensorSpec> FakeQuantize::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[fake_quantize] takes one tensor");
  RK_CHECK(in[0].dtype() == DType::f32, "[fake_quantize] takes f32, got {}", dtype_name(in[0].dtype()));
  check_qparams(kName, a, in[0].shape(), quant_dtype(kName, a.dtype));
  return {in[0].spec()};
}
Cost FakeQuantize::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 5);
}
SavedSet FakeQuantize::saved(const Attrs&, NeedsGrad) { return {1u, 0}; }
std::vector<Tensor> FakeQuantize::backward(const BackwardArgs& b, const Attrs& a) {
  return {call1<FakeQuantizeBackward>({b.grad_outputs[0], b.inputs[0]}, a)};
}
Tensor fake_quantize(const Tensor& x, const QuantizeAttrs& a) { return call1<FakeQuantize>({x}, a); }

std::vector<TensorSpec> FakeQuantizeBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined() && in[0].shape() == in[1].shape() &&
               in[0].dtype() == DType::f32 && in[1].dtype() == DType::f32,
           "[fake_quantize_backward] takes dy and x, f32 of one shape");
  check_qparams(kName, a, in[1].shape(), quant_dtype(kName, a.dtype));
  return {in[0].spec()};
}
Cost FakeQuantizeBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 4);
}
SavedSet FakeQuantizeBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- conv2d_int8 / linear_int8 ----
std::vector<TensorSpec> Conv2dInt8::infer(std::span<const Tensor> in, const Attrs& a) {
  check_qproduct(kName, in, a.q);
  std::vector<Tensor> m{meta_like(in[0]), meta_like(in[1])};
  const Shape ys = with_op_name(kName, [&] { return Conv2d::infer(m, a.conv)[0].shape; });
  TensorSpec y{ys, quant_dtype(kName, a.q.y_dtype, true)};
  check_residual(kName, in, y, a.q);
  return {y};
}
Cost Conv2dInt8::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const Shape &y = out[0].shape, &w = in[1].shape();
  const int64_t n = shape_numel(y);
  return {y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3], 2 * n + chain_flops(a.q.post, n), bytes_of(in), bytes_of(out)};
}
SavedSet Conv2dInt8::saved(const Attrs&, NeedsGrad) { return {}; }

std::vector<TensorSpec> LinearInt8::infer(std::span<const Tensor> in, const Attrs& a) {
  check_qproduct(kName, in, a);
  std::vector<Tensor> m{meta_like(in[0]), meta_like(in[1])};
  const Shape ys = with_op_name(kName, [&] { return Linear::infer(m, {})[0].shape; });
  TensorSpec y{ys, quant_dtype(kName, a.y_dtype, true)};
  check_residual(kName, in, y, a);
  return {y};
}
Cost LinearInt8::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = shape_numel(out[0].shape);
  return {in[0].size(0) * in[0].size(1) * in[1].size(0), 2 * n + chain_flops(a.post, n), bytes_of(in), bytes_of(out)};
}
SavedSet LinearInt8::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- pool2d_int8 / add_int8 ----
std::vector<TensorSpec> Pool2dInt8::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[pool2d_int8] takes one tensor");
  RK_CHECK(is_q8(in[0].dtype()), "[pool2d_int8] takes u8 or s8, got {}", dtype_name(in[0].dtype()));
  RK_CHECK(a.mode == "max" || a.mode == "avg", "[pool2d_int8] mode must be max or avg, got '{}'", a.mode);
  RK_CHECK(!a.pool.ceil_mode, "[pool2d_int8] has no ceil mode");
  return {{pool_out_shape(kName, in[0].shape(), a.pool, a.mode == "max"), in[0].dtype()}};
}
Cost Pool2dInt8::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {0, shape_numel(out[0].shape) * a.pool.kernel[0] * a.pool.kernel[1], bytes_of(in), bytes_of(out)};
}
SavedSet Pool2dInt8::saved(const Attrs&, NeedsGrad) { return {}; }

std::vector<TensorSpec> AddInt8::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined(), "[add_int8] takes two tensors");
  RK_CHECK(is_q8(in[0].dtype()) && is_q8(in[1].dtype()), "[add_int8] takes u8 or s8 tensors, got {} and {}",
           dtype_name(in[0].dtype()), dtype_name(in[1].dtype()));
  RK_CHECK(in[0].shape() == in[1].shape(), "[add_int8] adds tensors of one shape, got {} and {}",
           shape_str(in[0].shape()), shape_str(in[1].shape()));
  for (double s : {a.a_scale, a.b_scale, a.y_scale}) check_scale(kName, "scale", s);
  check_zero_point(kName, "a_zero_point", a.a_zero_point, in[0].dtype());
  check_zero_point(kName, "b_zero_point", a.b_zero_point, in[1].dtype());
  const DType yt = quant_dtype(kName, a.y_dtype);
  check_zero_point(kName, "y_zero_point", a.y_zero_point, yt);
  return {{in[0].shape(), yt}};
}
Cost AddInt8::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 4);
}
SavedSet AddInt8::saved(const Attrs&, NeedsGrad) { return {}; }

}  // namespace reckon

// ---- ONNX: the QDQ format ----
namespace reckon {
namespace {
int onnx_q_type(DType t) { return onnx_dtype(t); }

std::string scale_init(OnnxSink& s, const std::vector<double>& sc) {
  if (sc.size() == 1) return s.const_f32(float(sc[0]));
  return s.const_f32s(std::vector<float>(sc.begin(), sc.end()));
}
std::string zero_point_init(OnnxSink& s, const std::vector<int64_t>& zp, DType t) {
  const Shape dims = zp.size() == 1 ? Shape{} : Shape{int64_t(zp.size())};
  if (t == DType::i32) {
    std::vector<int32_t> v(zp.begin(), zp.end());
    return s.const_raw(onnx_q_type(t), dims, v.data(), v.size() * 4);
  }
  std::vector<uint8_t> v;
  for (int64_t z : zp) v.push_back(t == DType::u8 ? uint8_t(z) : uint8_t(int8_t(z)));
  return s.const_raw(onnx_q_type(t), dims, v.data(), v.size());
}
std::vector<OnnxAttr> axis_attr(const std::vector<double>& sc, int64_t axis) {
  if (sc.size() == 1) return {};
  return {{"axis", axis}};
}
// DequantizeLinear(q) with these parameters (t: q's dtype).
// An empty zp: the zero point is 0 and not written (ONNX's default; weights and biases).
std::string dq(OnnxArgs& a, const std::string& q, const std::vector<double>& sc, const std::vector<int64_t>& zp, DType t,
               int64_t axis = 1) {
  std::vector<std::string> in{q, scale_init(a.sink, sc)};
  if (!zp.empty()) in.push_back(zero_point_init(a.sink, zp, t));
  return a.one("DequantizeLinear", in, axis_attr(sc, axis));
}
std::string qz(OnnxArgs& a, const std::string& x, double sc, int64_t zp, DType t) {
  return a.one("QuantizeLinear", {x, scale_init(a.sink, {sc}), zero_point_init(a.sink, {zp}, t)});
}
// The post-ops of a quantized product on its real-valued output y (residual: its real value).
std::string post_chain(OnnxArgs& a, std::string y, const std::vector<PostOp>& post, const std::string& residual) {
  for (const auto& p : post) {
    if (p.kind == "relu")
      y = p.alpha == 0 ? a.one("Relu", {y}) : a.one("LeakyRelu", {y}, {{"alpha", p.alpha}});
    else if (p.kind == "clamp")
      y = a.one("Clip", {y, a.sink.const_f32(float(p.alpha)), a.sink.const_f32(float(p.beta))});
    else if (p.kind == "sum")
      y = a.one("Add", {y, residual});
  }
  return y;
}
// The real-valued product of a quantized conv or linear: DQ(x), DQ(w) per output channel, DQ(bias),
// then `f32_op` (Conv or Gemm) on them.
template <class F>
std::string qproduct(OnnxArgs& a, const QuantLinearAttrs& q, F&& f32_op) {
  const DType xt = a.in_specs[0].dtype;
  const std::string x = dq(a, a.in[0], {q.x_scale}, {q.x_zero_point}, xt);
  // (the zero points of weights and bias are written, though 0: ONNX Runtime fuses Gemm into
  // QGemm only with them)
  const std::string w = dq(a, a.in[1], q.w_scale, std::vector<int64_t>(q.w_scale.size(), 0), DType::i8, 0);
  std::string b;
  if (a.in.size() > 2 && !a.in[2].empty()) {
    std::vector<double> bs;
    for (double ws : q.w_scale) bs.push_back(q.x_scale * ws);
    b = dq(a, a.in[2], bs, std::vector<int64_t>(bs.size(), 0), DType::i32, 0);
  }
  // The residual's dequantize before the product, so that a reader fusing the sum into the product
  // (reckon's own importer) finds it made before the product runs.
  std::string r;
  if (has_sum(q.post)) r = dq(a, a.in.at(3), {q.r_scale}, {0}, quant_residual_dtype("int8 product", q));
  OnnxArgs f{a.sink, {x, w, b}, a.in_specs, a.out_specs};
  std::string y = post_chain(a, f32_op(f), q.post, r);
  if (q.y_dtype == "f32") return y;
  return qz(a, y, q.y_scale, q.y_zero_point, quant_dtype("int8 product", q.y_dtype));
}
}  // namespace

std::vector<std::string> QuantizeLinear::onnx(OnnxArgs& o, const Attrs& a) {
  const DType t = quant_dtype(kName, a.dtype);
  return {o.one("QuantizeLinear", {o.in[0], scale_init(o.sink, a.scale), zero_point_init(o.sink, a.zero_point, t)},
                axis_attr(a.scale, a.axis))};
}
std::vector<std::string> FakeQuantize::onnx(OnnxArgs& o, const Attrs& a) {
  const DType t = quant_dtype(kName, a.dtype);
  const std::string q = o.one("QuantizeLinear", {o.in[0], scale_init(o.sink, a.scale), zero_point_init(o.sink, a.zero_point, t)},
                              axis_attr(a.scale, a.axis));
  return {dq(o, q, a.scale, a.zero_point, t, a.axis)};
}
std::vector<std::string> DequantizeLinear::onnx(OnnxArgs& o, const Attrs& a) {
  return {dq(o, o.in[0], a.scale, a.zero_point, o.in_specs[0].dtype, a.axis)};
}
std::vector<std::string> Conv2dInt8::onnx(OnnxArgs& o, const Attrs& a) {
  return {qproduct(o, a.q, [&](OnnxArgs& f) { return Conv2d::onnx(f, a.conv)[0]; })};
}
std::vector<std::string> LinearInt8::onnx(OnnxArgs& o, const Attrs& a) {
  return {qproduct(o, a, [&](OnnxArgs& f) { return Linear::onnx(f, {})[0]; })};
}
std::vector<std::string> Pool2dInt8::onnx(OnnxArgs& o, const Attrs& a) {
  const PoolAttrs& p = a.pool;
  std::vector<OnnxAttr> at = {{"kernel_shape", std::vector<int64_t>{p.kernel[0], p.kernel[1]}},
                              {"strides", std::vector<int64_t>{p.stride[0], p.stride[1]}},
                              {"pads", std::vector<int64_t>{p.padding[0], p.padding[1], p.padding[0], p.padding[1]}}};
  if (a.mode == "max") {  // MaxPool takes 8-bit tensors as they are (opset 12+)
    if (p.dilation[0] != 1 || p.dilation[1] != 1)
      at.push_back({"dilations", std::vector<int64_t>{p.dilation[0], p.dilation[1]}});
    return {o.one("MaxPool", {o.in[0]}, at)};
  }
  // An average commutes with the affine map of any scale and zero point: through unit ones, the
  // rounding is the reference's (the window's sum over its count, ties to even).
  const DType t = o.in_specs[0].dtype;
  at.push_back({"count_include_pad", int64_t(p.count_include_pad ? 1 : 0)});
  const std::string x = dq(o, o.in[0], {1.0}, {0}, t);
  return {qz(o, o.one("AveragePool", {x}, at), 1.0, 0, t)};
}
std::vector<std::string> AddInt8::onnx(OnnxArgs& o, const Attrs& a) {
  std::string y = o.one("Add", {dq(o, o.in[0], {a.a_scale}, {a.a_zero_point}, o.in_specs[0].dtype),
                                dq(o, o.in[1], {a.b_scale}, {a.b_zero_point}, o.in_specs[1].dtype)});
  if (a.relu) y = o.one("Relu", {y});
  return {qz(o, y, a.y_scale, a.y_zero_point, quant_dtype(kName, a.y_dtype))};
}

}  // namespace reckon
