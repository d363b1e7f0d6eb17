// 2-D pooling over H and W, each with its backward op: max (returning PyTorch's argmax
// indices as a second, i64 output), average, adaptive average.
// x (N, C, H, W), y (N, C, HO, WO). Windows follow PyTorch exactly:
//   max/avg: output size from conv_out_size (ceil_mode: the last window must start inside the
//            input or its left padding); padding at most half the (effective) kernel.
//   max:     ties keep the first tap in (kh, kw) order; a NaN tap wins (later NaNs replace it).
//            indices are h * W + w within x's (n, c) plane, as torch's max_pool2d returns them.
//   avg:     a window is clipped to the padded input; count_include_pad divides by the clipped
//            window's size including padding, otherwise by the taps inside the input.
//   adaptive avg: row i averages [floor(i * H / HO), ceil((i + 1) * H / HO)), same for columns.
// Pooling performs no MACs (nothing is multiplied and accumulated); compares and adds are flops.
// Not here: dilation for avg pool, divisor_override, 3-D inputs (C, H, W).
#pragma once
#include <array>

#include "reckon/ops/op.h"

namespace reckon {

struct PoolAttrs {
  std::array<int64_t, 2> kernel{2, 2}, stride{2, 2}, padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
  RK_FIELDS(kernel, stride, padding, dilation, ceil_mode, count_include_pad)
};

// requires: x is (N, C, H, W); ensures: (N, C, HO, WO), or an Error naming op and shapes.
// dilation must be {1, 1} unless allow_dilation (max pool).
Shape pool_out_shape(std::string_view op, const Shape& x, const PoolAttrs& a, bool allow_dilation);

// Adaptive window [start, end) of output index i for in -> out.
inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// Max pooling runs channels-last (kernels/cpu/pool.cpp has NHWC loops) when an input of it
// prefers it and the inputs of `floats` are f32, bf16 or f16, on the cpu with the fast kernels
// allowed; its indices are then channels-last too.
bool max_pool_channels_last(std::span<const Tensor> in, uint32_t floats);

// in = x -> y (N, C, HO, WO), indices (N, C, HO, WO) i64. The autograd node keeps indices only.
struct MaxPool2d {
  static constexpr std::string_view kName = "max_pool2d";
  static bool channels_last(std::span<const Tensor> in, const PoolAttrs&) { return max_pool_channels_last(in, 1u); }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 3u;
  RK_OP_DECLS(PoolAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy (N, C, HO, WO), indices (N, C, HO, WO) i64) -> dx (N, C, H, W): dy scattered (added)
// to the argmax of each window.
struct MaxPool2dBackward {
  static constexpr std::string_view kName = "max_pool2d_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    Shape x_shape;
    RK_FIELDS(x_shape)
  };
  static bool channels_last(std::span<const Tensor> in, const A&) { return max_pool_channels_last(in, 1u); }
  static constexpr uint32_t kChannelsLastIn = 3u, kChannelsLastOut = 1u;
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = x -> y (N, C, HO, WO). Keeps nothing for backward.
struct AvgPool2d {
  static constexpr std::string_view kName = "avg_pool2d";
  RK_OP_DECLS(PoolAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = dy (N, C, HO, WO) -> dx (N, C, H, W): each dy spread evenly over its window's taps
// inside the input (divided by the same divisor as forward).
struct AvgPool2dBackward {
  static constexpr std::string_view kName = "avg_pool2d_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    PoolAttrs pool;
    Shape x_shape;
    RK_FIELDS(pool, x_shape)
  };
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = x -> y (N, C, HO, WO) with (HO, WO) = output_size. Keeps nothing for backward.
// ONNX: GlobalAveragePool for a 1x1 output, AveragePool when the sizes divide.
struct AdaptiveAvgPool2d {
  static constexpr std::string_view kName = "adaptive_avg_pool2d";
  struct A {
    std::array<int64_t, 2> output_size{1, 1};
    RK_FIELDS(output_size)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = dy (N, C, HO, WO) -> dx (N, C, H, W).
struct AdaptiveAvgPool2dBackward {
  static constexpr std::string_view kName = "adaptive_avg_pool2d_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    Shape x_shape;
    RK_FIELDS(x_shape)
  };
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

}  // namespace reckon

#define RK_POOL_OPS(X)                                                                   \
  X(MaxPool2d) X(MaxPool2dBackward) X(AvgPool2d) X(AvgPool2dBackward) X(AdaptiveAvgPool2d) \
  X(AdaptiveAvgPool2dBackward)
