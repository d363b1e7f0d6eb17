#include "reckon/ops/conv.h"

#include <optional>

#include <atomic>
#include <cstdlib>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

void conv_tap_shares(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, double& taps, double& weights) {
  taps = weights = 1.0;
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x[size_t(2 + d)], k = w[size_t(2 + d)], out = y[size_t(2 + d)];
    if (out * k <= 0) continue;
    int64_t inside = 0, used = 0;
    for (int64_t t = 0; t < k; ++t) {
      int64_t n = 0;
      for (int64_t o = 0; o < out; ++o) {
        const int64_t i = o * a.stride[size_t(d)] - a.padding[size_t(d)] + t * a.dilation[size_t(d)];
        n += i >= 0 && i < in;
      }
      inside += n;
      used += n > 0;
    }
    taps *= double(inside) / double(out * k);
    weights *= double(used) / double(k);
  }
}

bool conv_impl_is_gemm(std::string_view impl) {
  return impl.rfind("gemm", 0) == 0 || impl.find(":gemm") != std::string_view::npos;
}

bool conv_impl_skips_padding(std::string_view impl) {
  return impl.find("wino") == std::string_view::npos && !conv_impl_is_gemm(impl);
}

bool few_channel_first_layer(const Shape& x, const Shape& w, const ConvAttrs& a) {
  return x.size() == 4 && w.size() == 4 && a.groups == 1 && x[1] <= 3 && w[0] <= 16 && a.stride[0] == 1 &&
         a.stride[1] == 1 && a.dilation[0] == 1 && a.dilation[1] == 1;
}

bool narrow_conv_keeps_f32(const Shape& w, const ConvAttrs& a) {
  return w.size() == 4 && a.groups == 1 && w[1] < 16 && w[0] <= 16 && cpu_bf16_slower_than_f32();
}

ConvAlgorithm parse_conv_algorithm(std::string_view s, std::string_view source) {
  if (s == "auto") return ConvAlgorithm::automatic;
  if (s == "direct") return ConvAlgorithm::direct;
  throw Error(fmt::format("{}: unknown convolution algorithm '{}' (expected auto or direct)", source, s));
}

std::string_view conv_algorithm_name(ConvAlgorithm a) { return a == ConvAlgorithm::direct ? "direct" : "auto"; }

namespace {
ConvAlgorithm initial_conv_algorithm() {
  const char* e = std::getenv("RECKON_CONV_ALGO");
  if (e == nullptr || *e == '\0') return ConvAlgorithm::automatic;
  return parse_conv_algorithm(e, "RECKON_CONV_ALGO");
}
std::atomic<ConvAlgorithm>& conv_algorithm_slot() {
  static std::atomic<ConvAlgorithm> a{initial_conv_algorithm()};
  return a;
}
}  // namespace

void set_conv_algorithm(ConvAlgorithm a) { conv_algorithm_slot().store(a); }
ConvAlgorithm conv_algorithm() { return conv_algorithm_slot().load(); }

ConvAlgorithmScope::ConvAlgorithmScope(ConvAlgorithm a) : prev_(conv_algorithm()) { set_conv_algorithm(a); }
ConvAlgorithmScope::ConvAlgorithmScope(const std::string& name)
    : ConvAlgorithmScope(name.empty() ? conv_algorithm() : parse_conv_algorithm(name)) {}
ConvAlgorithmScope::~ConvAlgorithmScope() { set_conv_algorithm(prev_); }

int64_t conv_out_size(std::string_view op, int64_t in, int64_t k, int64_t stride, int64_t pad,
                      int64_t dilation, bool ceil_mode) {
  RK_CHECK(stride > 0 && dilation > 0 && pad >= 0 && k > 0,
           "[{}] bad window: kernel {}, stride {}, padding {}, dilation {}", op, k, stride, pad, dilation);
  int64_t span = dilation * (k - 1) + 1;
  int64_t num = in + 2 * pad - span;
  RK_CHECK(num >= 0, "[{}] input size {} (padding {}) is smaller than the kernel extent {}", op, in, pad, span);
  int64_t out = (ceil_mode ? (num + stride - 1) / stride : num / stride) + 1;
  // PyTorch: with ceil_mode, the last window must start inside the (left-padded) input.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

namespace {
void check_conv(std::span<const Tensor> in, const ConvAttrs& a, const Shape& x, const Shape& w) {
  RK_CHECK(x.size() == 4, "[conv2d] x must be (N, C, H, W), got {}", shape_str(x));
  RK_CHECK(w.size() == 4, "[conv2d] weight must be (O, C/groups, KH, KW), got {}", shape_str(w));
  RK_CHECK(a.groups >= 1 && x[1] % a.groups == 0 && w[0] % a.groups == 0,
           "[conv2d] groups={} must divide input channels {} and output channels {}", a.groups, x[1], w[0]);
  RK_CHECK(w[1] * a.groups == x[1], "[conv2d] weight has {} input channels but x has {} (x: {}, weight: {}, groups: {})",
           w[1] * a.groups, x[1], shape_str(x), shape_str(w), a.groups);
}
Shape conv_out_shape(const Shape& x, const Shape& w, const ConvAttrs& a) {
  return {x[0], w[0], conv_out_size("conv2d", x[2], w[2], a.stride[0], a.padding[0], a.dilation[0]),
          conv_out_size("conv2d", x[3], w[3], a.stride[1], a.padding[1], a.dilation[1])};
}
int64_t conv_macs(const Shape& y, const Shape& w) { return y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3]; }
}  // namespace

std::vector<TensorSpec> Conv2d::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() >= 2 && in[0].defined() && in[1].defined(), "[conv2d] needs x and weight");
  const Tensor &x = in[0], &w = in[1];
  check_conv(in, a, x.shape(), w.shape());
  RK_CHECK(x.dtype() == w.dtype(), "[conv2d] dtypes differ: x {} and weight {}", dtype_name(x.dtype()),
           dtype_name(w.dtype()));
  if (in.size() > 2 && in[2].defined())
    RK_CHECK(in[2].dim() == 1 && in[2].size(0) == w.size(0), "[conv2d] bias {} for {} output channels",
             shape_str(in[2].shape()), w.size(0));
  return {{conv_out_shape(x.shape(), w.shape(), a), x.dtype()}};
}
Cost Conv2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  bool bias = in.size() > 2 && in[2].defined();
  return {conv_macs(out[0].shape, in[1].shape()), bias ? shape_numel(out[0].shape) : 0, bytes_of(in),
          bytes_of(out)};
}
SavedSet Conv2d::saved(const Attrs&, NeedsGrad needs) { return saved_for_product(needs); }
std::vector<Tensor> Conv2d::backward(const BackwardArgs& b, const Attrs& a) {
  const Tensor& dy = b.grad_outputs[0];
  Tensor dx, dw, db;
  bool want_b = b.needs_grad.size() > 2 && b.needs_grad[2];
  // Both passes read dy: its layout conversion is made once (ShareConversions, op.h).
  std::optional<ShareConversions> share;
  if (b.needs_grad[0] && b.needs_grad[1]) share.emplace();
  if (b.needs_grad[0]) dx = call1<Conv2dBackwardInput>({dy, b.inputs[1]}, {a, b.input_specs[0].shape});
  if (b.needs_grad[1]) {
    auto r = call<Conv2dBackwardWeight>({dy, b.inputs[0]}, {a, b.input_specs[1].shape, want_b});
    dw = r[0];
    if (want_b) db = r[1];
  } else if (want_b) {
    db = sum(dy, {0, 2, 3});
  }
  return {dx, dw, db};
}

std::vector<TensorSpec> Conv2dBackwardInput::infer(std::span<const Tensor> in, const Attrs& a) {
  check_conv(in, a.conv, a.x_shape, in[1].shape());
  RK_CHECK(in[0].shape() == conv_out_shape(a.x_shape, in[1].shape(), a.conv),
           "[conv2d_backward_input] gradient {} does not match the output shape", shape_str(in[0].shape()));
  return {{a.x_shape, in[0].dtype()}};
}
Cost Conv2dBackwardInput::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {conv_macs(in[0].shape(), in[1].shape()), 0, bytes_of(in), bytes_of(out)};
}
SavedSet Conv2dBackwardInput::saved(const Attrs&, NeedsGrad) { return {}; }

std::vector<TensorSpec> Conv2dBackwardWeight::infer(std::span<const Tensor> in, const Attrs& a) {
  check_conv(in, a.conv, in[1].shape(), a.w_shape);
  RK_CHECK(in[0].shape() == conv_out_shape(in[1].shape(), a.w_shape, a.conv),
           "[conv2d_backward_weight] gradient {} does not match the output shape", shape_str(in[0].shape()));
  std::vector<TensorSpec> r = {{a.w_shape, in[0].dtype()}};
  if (a.with_bias) r.push_back({{a.w_shape[0]}, in[0].dtype()});
  return r;
}
Cost Conv2dBackwardWeight::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {conv_macs(in[0].shape(), a.w_shape), a.with_bias ? in[0].numel() : 0, bytes_of(in), bytes_of(out)};
}
SavedSet Conv2dBackwardWeight::saved(const Attrs&, NeedsGrad) { return {}; }

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dArgs& a) {
  return call1<Conv2d>({x, w, b}, ConvAttrs{a.stride, a.padding, a.dilation, a.groups, conv_algorithm()});
}

}  // namespace reckon

namespace reckon {
std::vector<std::string> Conv2d::onnx(OnnxArgs& o, const Attrs& a) {
  const Shape& w = o.in_specs[1].shape;
  std::vector<std::string> in{o.in[0], o.in[1]};
  if (o.in.size() > 2 && !o.in[2].empty()) in.push_back(o.in[2]);
  return {o.one("Conv", in,
                {{"kernel_shape", std::vector<int64_t>{w[2], w[3]}},
                 {"strides", std::vector<int64_t>{a.stride[0], a.stride[1]}},
                 {"pads", std::vector<int64_t>{a.padding[0], a.padding[1], a.padding[0], a.padding[1]}},
                 {"dilations", std::vector<int64_t>{a.dilation[0], a.dilation[1]}},
                 {"group", a.groups}})};
}
}  // namespace reckon
