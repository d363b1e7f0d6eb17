#include "reckon/ops/pool.h"

#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

bool max_pool_channels_last(std::span<const Tensor> in, uint32_t floats) {
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) any = any || (in[i].defined() && in[i].prefers_channels_last());
  if (!any || !channels_last_kernels_allowed(in[0])) return false;
  for (size_t i = 0; i < in.size(); ++i)
    if ((floats >> i) & 1u) {
      const DType d = in[i].dtype();
      if (d != DType::f32 && d != DType::bf16 && d != DType::f16) return false;
    }
  return true;
}

Shape pool_out_shape(std::string_view op, const Shape& x, const PoolAttrs& a, bool allow_dilation) {
  RK_CHECK(x.size() == 4, "[{}] x must be (N, C, H, W), got {}", op, shape_str(x));
  RK_CHECK(allow_dilation || (a.dilation[0] == 1 && a.dilation[1] == 1),
           "[{}] dilation {}x{} is not supported (x: {})", op, a.dilation[0], a.dilation[1], shape_str(x));
  Shape y = {x[0], x[1], 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    int64_t k = a.kernel[i], s = a.stride[i], p = a.padding[i], d = a.dilation[i];
    RK_CHECK(k > 0 && s > 0 && p >= 0 && d > 0,
             "[{}] bad window: kernel {}x{}, stride {}x{}, padding {}x{}, dilation {}x{} (x: {})", op,
             a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.dilation[0],
             a.dilation[1], shape_str(x));
    int64_t extent = (k - 1) * d + 1;
    RK_CHECK(2 * p <= extent, "[{}] padding {} must be at most half the kernel extent {} (x: {})", op, p, extent,
             shape_str(x));
    y[2 + i] = conv_out_size(op, x[2 + i], k, s, p, d, a.ceil_mode);
  }
  return y;
}

namespace {
void check_float_x(std::string_view op, std::span<const Tensor> in) {
  RK_CHECK(in.size() >= 1 && in[0].defined(), "[{}] needs x", op);
  RK_CHECK(is_floating(in[0].dtype()), "[{}] needs a floating x, got {} ({})", op, dtype_name(in[0].dtype()),
           in[0].str());
}
void check_grad_shape(std::string_view op, const Tensor& dy, const Shape& x, const Shape& y) {
  RK_CHECK(dy.defined() && is_floating(dy.dtype()), "[{}] needs a floating gradient", op);
  RK_CHECK(dy.shape() == y, "[{}] gradient {} does not match the output shape {} of x {}", op,
           shape_str(dy.shape()), shape_str(y), shape_str(x));
}
// Taps of all adaptive windows of one (n, c) plane: sum over rows of row extents times sum over
// columns of column extents.
int64_t adaptive_taps(const Shape& x, const Shape& y) {
  int64_t th = 0, tw = 0;
  for (int64_t i = 0; i < y[2]; ++i) th += adaptive_end(i, x[2], y[2]) - adaptive_start(i, x[2], y[2]);
  for (int64_t i = 0; i < y[3]; ++i) tw += adaptive_end(i, x[3], y[3]) - adaptive_start(i, x[3], y[3]);
  return th * tw;
}
Shape adaptive_out_shape(std::string_view op, const Shape& x, const std::array<int64_t, 2>& o) {
  RK_CHECK(x.size() == 4, "[{}] x must be (N, C, H, W), got {}", op, shape_str(x));
  RK_CHECK(o[0] > 0 && o[1] > 0, "[{}] output size {}x{} must be positive (x: {})", op, o[0], o[1], shape_str(x));
  RK_CHECK(x[2] > 0 && x[3] > 0, "[{}] empty input plane (x: {})", op, shape_str(x));
  return {x[0], x[1], o[0], o[1]};
}
std::vector<Tensor> undefined(size_t n) { return std::vector<Tensor>(n); }
}  // namespace

// ---- max pool ----
std::vector<TensorSpec> MaxPool2d::infer(std::span<const Tensor> in, const Attrs& a) {
  check_float_x(kName, in);
  Shape y = pool_out_shape(kName, in[0].shape(), a, true);
  return {{y, in[0].dtype()}, {y, DType::i64}};
}
Cost MaxPool2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {0, shape_numel(out[0].shape) * a.kernel[0] * a.kernel[1], bytes_of(in), bytes_of(out)};
}
SavedSet MaxPool2d::saved(const Attrs&, NeedsGrad) { return {0, 0b10}; }
std::vector<Tensor> MaxPool2d::backward(const BackwardArgs& b, const Attrs&) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return undefined(1);
  return {call1<MaxPool2dBackward>({b.grad_outputs[0], b.outputs[1]}, {b.input_specs[0].shape})};
}

std::vector<TensorSpec> MaxPool2dBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined(), "[{}] needs dy and indices", kName);
  const Tensor &dy = in[0], &idx = in[1];
  RK_CHECK(a.x_shape.size() == 4, "[{}] x must be (N, C, H, W), got {}", kName, shape_str(a.x_shape));
  RK_CHECK(is_floating(dy.dtype()), "[{}] needs a floating gradient, got {}", kName, dtype_name(dy.dtype()));
  RK_CHECK(idx.dtype() == DType::i64, "[{}] indices must be i64, got {}", kName, dtype_name(idx.dtype()));
  RK_CHECK(dy.dim() == 4 && dy.shape() == idx.shape() && dy.size(0) == a.x_shape[0] && dy.size(1) == a.x_shape[1],
           "[{}] gradient {} and indices {} do not fit x {}", kName, shape_str(dy.shape()), shape_str(idx.shape()),
           shape_str(a.x_shape));
  return {{a.x_shape, dy.dtype()}};
}
Cost MaxPool2dBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, in[0].numel(), bytes_of(in), bytes_of(out)};
}
SavedSet MaxPool2dBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- avg pool ----
std::vector<TensorSpec> AvgPool2d::infer(std::span<const Tensor> in, const Attrs& a) {
  check_float_x(kName, in);
  return {{pool_out_shape(kName, in[0].shape(), a, false), in[0].dtype()}};
}
Cost AvgPool2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  // kh * kw - 1 adds and one divide per output.
  return {0, shape_numel(out[0].shape) * a.kernel[0] * a.kernel[1], bytes_of(in), bytes_of(out)};
}
SavedSet AvgPool2d::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> AvgPool2d::backward(const BackwardArgs& b, const Attrs& a) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return undefined(1);
  return {call1<AvgPool2dBackward>({b.grad_outputs[0]}, {a, b.input_specs[0].shape})};
}

std::vector<TensorSpec> AvgPool2dBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1, "[{}] needs dy", kName);
  check_grad_shape(kName, in[0], a.x_shape, pool_out_shape(kName, a.x_shape, a.pool, false));
  return {{a.x_shape, in[0].dtype()}};
}
Cost AvgPool2dBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {0, in[0].numel() * a.pool.kernel[0] * a.pool.kernel[1], bytes_of(in), bytes_of(out)};
}
SavedSet AvgPool2dBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- adaptive avg pool ----
std::vector<TensorSpec> AdaptiveAvgPool2d::infer(std::span<const Tensor> in, const Attrs& a) {
  check_float_x(kName, in);
  return {{adaptive_out_shape(kName, in[0].shape(), a.output_size), in[0].dtype()}};
}
Cost AdaptiveAvgPool2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  const Shape &x = in[0].shape(), &y = out[0].shape;
  return {0, x[0] * x[1] * adaptive_taps(x, y), bytes_of(in), bytes_of(out)};
}
SavedSet AdaptiveAvgPool2d::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> AdaptiveAvgPool2d::backward(const BackwardArgs& b, const Attrs&) {
  if (!b.grad_outputs[0].defined() || !b.needs_grad[0]) return undefined(1);
  return {call1<AdaptiveAvgPool2dBackward>({b.grad_outputs[0]}, {b.input_specs[0].shape})};
}

std::vector<TensorSpec> AdaptiveAvgPool2dBackward::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[{}] needs dy", kName);
  RK_CHECK(in[0].dim() == 4, "[{}] gradient must be (N, C, HO, WO), got {}", kName, shape_str(in[0].shape()));
  Shape y = adaptive_out_shape(kName, a.x_shape, {in[0].size(2), in[0].size(3)});
  check_grad_shape(kName, in[0], a.x_shape, y);
  return {{a.x_shape, in[0].dtype()}};
}
Cost AdaptiveAvgPool2dBackward::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {0, a.x_shape[0] * a.x_shape[1] * adaptive_taps(a.x_shape, in[0].shape()), bytes_of(in), bytes_of(out)};
}
SavedSet AdaptiveAvgPool2dBackward::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- functional ----
namespace {
PoolAttrs pool_attrs(const Pool2dArgs& a) {
  PoolAttrs p;
  p.kernel = a.kernel;
  for (size_t i = 0; i < 2; ++i) p.stride[i] = a.stride[i] == 0 ? a.kernel[i] : a.stride[i];
  p.padding = a.padding;
  p.ceil_mode = a.ceil_mode;
  p.count_include_pad = a.count_include_pad;
  return p;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dArgs& a) { return call<MaxPool2d>({x}, pool_attrs(a))[0]; }
Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& a) { return call1<AvgPool2d>({x}, pool_attrs(a)); }
Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size) {
  return call1<AdaptiveAvgPool2d>({x}, {output_size});
}

}  // namespace reckon

// ---- ONNX ----
namespace reckon {
namespace {
std::vector<OnnxAttr> pool_attrs(std::string_view op, const OnnxArgs& o, const PoolAttrs& a, bool dilations) {
  const Shape& x = o.in_specs[0].shape;
  const Shape& y = o.out_specs[0].shape;
  for (int i = 0; i < 2; ++i) {
    int64_t want = onnx_window_out(x[2 + i], a.kernel[i], a.stride[i], a.padding[i], a.padding[i], a.dilation[i], a.ceil_mode);
    if (want != y[2 + i])
      throw OnnxUnsupported(fmt::format(
          "[{}] ceil_mode gives {} outputs along dim {} here but ONNX's rule gives {} (PyTorch drops a last "
          "window that starts in the right padding)", op, y[2 + i], 2 + i, want));
  }
  std::vector<OnnxAttr> at{{"kernel_shape", std::vector<int64_t>{a.kernel[0], a.kernel[1]}},
                           {"strides", std::vector<int64_t>{a.stride[0], a.stride[1]}},
                           {"pads", std::vector<int64_t>{a.padding[0], a.padding[1], a.padding[0], a.padding[1]}},
                           {"ceil_mode", int64_t(a.ceil_mode)}};
  if (dilations) at.push_back({"dilations", std::vector<int64_t>{a.dilation[0], a.dilation[1]}});
  return at;
}
}  // namespace

std::vector<std::string> MaxPool2d::onnx(OnnxArgs& o, const Attrs& a) {
  // ONNX's Indices count over the whole tensor, torch's within each plane: not exported.
  return {o.one("MaxPool", {o.in[0]}, pool_attrs("max_pool2d", o, a, true)), ""};
}
std::vector<std::string> AvgPool2d::onnx(OnnxArgs& o, const Attrs& a) {
  auto at = pool_attrs("avg_pool2d", o, a, false);
  at.push_back({"count_include_pad", int64_t(a.count_include_pad)});
  return {o.one("AveragePool", {o.in[0]}, at)};
}
std::vector<std::string> AdaptiveAvgPool2d::onnx(OnnxArgs& o, const Attrs& a) {
  const Shape& x = o.in_specs[0].shape;
  if (a.output_size[0] == 1 && a.output_size[1] == 1) return {o.one("GlobalAveragePool", {o.in[0]})};
  if (x[2] % a.output_size[0] != 0 || x[3] % a.output_size[1] != 0)
    throw OnnxUnsupported(fmt::format(
        "[adaptive_avg_pool2d] {}x{} to {}x{}: the sizes do not divide, and ONNX has no adaptive pooling",
        x[2], x[3], a.output_size[0], a.output_size[1]));
  int64_t kh = x[2] / a.output_size[0], kw = x[3] / a.output_size[1];
  if (kh == 1 && kw == 1) return {o.one("Identity", {o.in[0]})};
  return {o.one("AveragePool", {o.in[0]},
                {{"kernel_shape", std::vector<int64_t>{kh, kw}}, {"strides", std::vector<int64_t>{kh, kw}}})};
}
}  // namespace reckon
