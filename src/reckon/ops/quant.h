// Quantized (int8) ops: what the quantizer (engine/quantize.h) rewrites a fused forward graph
// into. A real value v is held as an 8-bit integer q with v = scale * (q - zero_point); u8 and
// s8 are the storage types (i32 for biases). The reference kernels define the arithmetic, and
// the fast kernels (oneDNN's int8 primitives: VNNI where the cpu has it) reproduce it bit for
// bit, so it is written the way those kernels compute:
//  - rounding is to nearest, ties to even (the cpu's default mode, std::nearbyint), and
//    saturation clamps to the storage type's range before rounding;
//  - a convolution or linear layer accumulates (x_q - x_zp) * w_q exactly in int32, adds the
//    int32 bias (quantized with scale x_scale * w_scale[o] and zero point 0), converts to f32
//    and multiplies by one f32 factor per output channel, m[o] = x_scale * w_scale[o] / y_scale
//    computed in float32, step by step (ONNX Runtime's QLinearConv and QGemm compute theirs so);
//    its post-ops then run on that scaled value in f32 (relu and leaky relu as they are, clamp
//    with its bounds divided by y_scale, sum adding the residual times float(r_scale / y_scale)),
//    and the result is rounded, shifted by y_zp and saturated (rounding after the shift would lose
//    the fraction of a value near .5 to float32's spacing at 128). With an f32 output (y_dtype
//    "f32") y_scale is 1 and nothing is rounded.
//  - add_int8 is ONNX Runtime's QLinearAdd: a * (a_scale / y_scale) + b * (b_scale / y_scale) plus
//    the zero points' constant y_zp - (a_zp * ... + b_zp * ...), in float32 (add_int8_value).
// Weights are s8, symmetric (zero point 0), per output channel (w_scale has one entry per
// output channel) or per tensor (one entry).
// ONNX: each op exports in the QDQ format ONNX Runtime runs (QuantizeLinear / DequantizeLinear
// around float Conv, Gemm, pooling and Add; per-axis scales for per-channel weights), so an int8
// program (engine/quantize.h) is written as one QDQ file.
// fake_quantize (and its backward) is the one op here with a gradient: quantization-aware training
// (train/qat.h) runs it in an f32 forward, and exports it as QuantizeLinear + DequantizeLinear.
// Not here: choosing scales (engine/quantize.h, train/qat.h).
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reckon/ops/conv.h"
#include "reckon/ops/fused.h"
#include "reckon/ops/op.h"
#include "reckon/ops/pool.h"

namespace reckon {

// "u8" | "s8" (and "f32" where an op may give a real output) as a dtype, or an Error naming op.
DType quant_dtype(std::string_view op, const std::string& name, bool allow_f32 = false);
std::string quant_dtype_name(DType t);  // "u8", "s8", "f32"
// The storage range of an 8-bit type: [0, 255] or [-128, 127].
int64_t quant_min(DType t);
int64_t quant_max(DType t);
// v rounded half to even and saturated to [lo, hi] (v is clamped first, as the fast kernels do).
inline float round_saturate(float v, float lo, float hi) { return std::nearbyint(std::min(std::max(v, lo), hi)); }

// Calls f.template operator()<Q>() with Q the storage type of t (u8, s8 or i32); an Error naming
// op for any other dtype. The kernels of these ops dispatch on it.
template <class F>
void visit_q8(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::u8: f.template operator()<uint8_t>(); return;
    case DType::i8: f.template operator()<int8_t>(); return;
    case DType::i32: f.template operator()<int32_t>(); return;
    default: throw Error(fmt::format("[{}] no kernel for {}", op, dtype_name(t)));
  }
}

struct QuantizeAttrs;
// Which scale and zero point element i of a tensor of shape s takes under per-tensor or per-axis
// parameters (the kernels' indexing).
struct QuantAxis {
  int64_t inner = 1, channels = 1;
  bool per_channel = false;
  QuantAxis(const QuantizeAttrs& a, const Shape& s);
  size_t channel(int64_t i) const { return per_channel ? size_t((i / inner) % channels) : 0; }
};

// Per-tensor or per-channel quantization of a real tensor (ONNX QuantizeLinear):
// q = saturate(round(x / scale) + zero_point), the division in f32. axis: the channel dimension
// when scale has more than one entry.
struct QuantizeAttrs {
  std::vector<double> scale{1.0};
  std::vector<int64_t> zero_point{0};
  int64_t axis = 1;
  std::string dtype = "u8";
  RK_FIELDS(scale, zero_point, axis, dtype)
};
inline QuantAxis::QuantAxis(const QuantizeAttrs& a, const Shape& s) {
  per_channel = a.scale.size() > 1;
  if (per_channel) {
    channels = s[size_t(a.axis)];
    for (size_t d = size_t(a.axis) + 1; d < s.size(); ++d) inner *= s[d];
  }
}
inline constexpr std::string_view kQuantNoGradient =
    "a quantized op: int8 inference runs a forward that no backward runs through";

// in = (x f32) -> q (dtype).
struct QuantizeLinear {
  static constexpr std::string_view kName = "quantize_linear";
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantizeAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};

// in = (q u8/s8/i32) -> x f32 = (float(q) - zero_point) * float(scale) (ONNX DequantizeLinear).
// attrs.dtype is not read (the input's dtype is).
struct DequantizeLinear {
  static constexpr std::string_view kName = "dequantize_linear";
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantizeAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};

// in = (x f32) -> y f32 = (saturate(round(x / scale) + zero_point) - zero_point) * scale: the value
// the 8-bit tensor of QuantizeLinear would hold, as DequantizeLinear gives it back (the same
// rounding and saturation, per tensor or per axis). Gradient: the straight-through estimator
// with clipping (PyTorch's fake_quantize_per_tensor/channel_affine): dx = dy where
// round(x / scale) + zero_point falls within the type's range, 0 where it saturates.
struct FakeQuantize {
  static constexpr std::string_view kName = "fake_quantize";
  RK_OP_DECLS(QuantizeAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
  RK_OP_BACKWARD;
};
// in = (dy, x) -> dx (the straight-through gradient above).
struct FakeQuantizeBackward {
  static constexpr std::string_view kName = "fake_quantize_backward";
  static constexpr std::string_view kNoGradient = "backward op";
  static constexpr std::string_view kNotExportable = "backward op";
  RK_OP_DECLS(QuantizeAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};
Tensor fake_quantize(const Tensor& x, const QuantizeAttrs& a);

// The quantization of a conv or linear call: its input's, its weights', its output's and its
// residual's (with a sum post-op; zero point 0 there).
struct QuantLinearAttrs {
  double x_scale = 1.0;
  int64_t x_zero_point = 0;
  std::vector<double> w_scale{1.0};
  double y_scale = 1.0;
  int64_t y_zero_point = 0;
  std::string y_dtype = "u8";  // "u8" | "s8" | "f32"
  double r_scale = 1.0;
  std::string r_dtype;         // the residual's "u8" | "s8" ("": the output's)
  std::vector<PostOp> post;    // relu (any slope), clamp, sum (in real units)
  RK_FIELDS(x_scale, x_zero_point, w_scale, y_scale, y_zero_point, y_dtype, r_scale, r_dtype, post)
};
struct QuantConvAttrs {
  ConvAttrs conv;
  QuantLinearAttrs q;
  RK_FIELDS(conv, q)
};

// The residual's dtype (r_dtype, or the output's when empty).
DType quant_residual_dtype(std::string_view op, const QuantLinearAttrs& q);
// The f32 factor of output channel o (see the top of this file).
float quant_multiplier(const QuantLinearAttrs& q, int64_t o);
// The post-op chain in the scaled domain the kernels run it in (clamp bounds divided by y_scale).
std::vector<PostOp> quant_scaled_post(const QuantLinearAttrs& q);
// A bias quantized for an int8 conv or linear: round(b[o] / (x_scale * w_scale[o])) as i32.
Tensor quantize_bias(const Tensor& b, double x_scale, const std::vector<double>& w_scale);

// in = (x u8/s8 (N, C, H, W), w s8 (O, C/groups, KH, KW), bias i32 (O) or undefined,
//       residual (the output's shape, dtype r_dtype, zero point 0; iff a sum step)) -> y (y_dtype).
// A residual of another 8-bit type than the output (an s8 shortcut into a u8 output after a
// relu) is read as its own type: the output takes its place byte for byte.
struct Conv2dInt8 {
  static constexpr std::string_view kName = "conv2d_int8";
  static constexpr OpClass kClass = OpClass::conv;
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantConvAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};

// in = (x u8/s8 (N, IN), w s8 (OUT, IN), bias i32 (OUT) or undefined, residual iff a sum step)
// -> y (N, OUT) (y_dtype).
struct LinearInt8 {
  static constexpr std::string_view kName = "linear_int8";
  static constexpr OpClass kClass = OpClass::linear;
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantLinearAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};

// Pooling of 8-bit values, which keep their scale and zero point: max, or average (the window's
// integer sum over its element count, in f32, rounded half to even). Windows as max_pool2d's and
// avg_pool2d's (no ceil mode).
struct QuantPoolAttrs {
  PoolAttrs pool;
  std::string mode = "max";  // "max" | "avg"
  RK_FIELDS(pool, mode)
};
struct Pool2dInt8 {
  static constexpr std::string_view kName = "pool2d_int8";
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantPoolAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};

// y = saturate(round(a_scale / y_scale * (a - a_zp) + b_scale / y_scale * (b - b_zp) + y_zp)), relu
//     keeping it at y_zp or above: the residual add of two 8-bit tensors of one shape, in the float32
//     arithmetic add_int8_value defines.
struct QuantAddAttrs {
  double a_scale = 1.0, b_scale = 1.0, y_scale = 1.0;
  int64_t a_zero_point = 0, b_zero_point = 0, y_zero_point = 0;
  std::string y_dtype = "u8";
  bool relu = false;
  RK_FIELDS(a_scale, b_scale, y_scale, a_zero_point, b_zero_point, y_zero_point, y_dtype, relu)
};
struct AddInt8 {
  static constexpr std::string_view kName = "add_int8";
  static constexpr std::string_view kNoGradient = kQuantNoGradient;
  RK_OP_DECLS(QuantAddAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_ONNX;
};
// add_int8's arithmetic, as every kernel of it computes it (and as ONNX Runtime's QLinearAdd does
// on x86): the ratios of the scales in float32, the zero points folded into one constant, and
// v = a * ma + (b * mb + fixed) as two fused multiply-adds (explicit, so no compiler's contraction
// choice can make two kernels differ); relu keeps v at the output's zero point or above. The
// stored value is v saturated to the output's type and rounded half to even.
struct AddInt8Coefs {
  float ma, mb, fixed, floor;
};
inline AddInt8Coefs add_int8_coefs(const QuantAddAttrs& a) {
  const float ma = float(a.a_scale) / float(a.y_scale), mb = float(a.b_scale) / float(a.y_scale);
  volatile float za = ma * float(a.a_zero_point), zb = mb * float(a.b_zero_point);  // each product rounded
  const float zy = float(a.y_zero_point);
  return {ma, mb, zy - (za + zb), a.relu ? zy : -std::numeric_limits<float>::infinity()};
}
inline float add_int8_value(const AddInt8Coefs& c, int32_t a, int32_t b) {
  return std::max(std::fma(float(a), c.ma, std::fma(float(b), c.mb, c.fixed)), c.floor);
}

#define RK_QUANT_OPS(X) X(QuantizeLinear) X(DequantizeLinear) X(FakeQuantize) X(FakeQuantizeBackward) X(Conv2dInt8) X(LinearInt8) X(Pool2dInt8) X(AddInt8)

}  // namespace reckon
