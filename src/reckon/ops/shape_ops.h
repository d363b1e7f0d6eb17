// Shape ops: views (reshape, permute, expand, narrow) share storage and cost nothing;
// contiguous, concat and cast copy. Inputs: in[0] = x unless noted.
#pragma once
#include "reckon/ops/op.h"

namespace reckon {

// The shape `target` means for a tensor of `from` (numel elements): one -1 inferred, the product
// checked against int64 (a shape read from a file can wrap it). Throws "[reshape] ..." for a
// second -1, a negative size, or a product that is not numel. Reshape::infer and the ONNX
// importer's constant-folding path share it.
Shape resolve_reshape(const Shape& from, int64_t numel, const Shape& target);

struct Reshape {
  static constexpr std::string_view kName = "reshape";
  struct A {
    Shape shape;
    RK_FIELDS(shape)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  static Tensor view(std::span<const Tensor> in, const Attrs& a);
  RK_OP_BACKWARD;
};

struct Permute {
  static constexpr std::string_view kName = "permute";
  struct A {
    std::vector<int64_t> dims;
    RK_FIELDS(dims)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  static Tensor view(std::span<const Tensor> in, const Attrs& a);
  RK_OP_BACKWARD;
};

struct Expand {
  static constexpr std::string_view kName = "expand";
  struct A {
    Shape shape;
    RK_FIELDS(shape)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  static Tensor view(std::span<const Tensor> in, const Attrs& a);
  RK_OP_BACKWARD;
};

struct Narrow {
  static constexpr std::string_view kName = "narrow";
  struct A {
    int64_t dim = 0, start = 0, length = 0;
    RK_FIELDS(dim, start, length)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  static Tensor view(std::span<const Tensor> in, const Attrs& a);
  RK_OP_BACKWARD;
};

// Writes a dense slice of a larger zero tensor: backward of narrow.
struct PadNarrow {
  static constexpr std::string_view kName = "narrow_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    Shape full_shape;
    int64_t dim = 0, start = 0;
    RK_FIELDS(full_shape, dim, start)
  };
  RK_OP_DECLS(A);
  RK_OP_REF;
};

// A dense copy of a strided x (the dispatcher inserts it before kernels that need dense inputs),
// in NCHW, or with channels_last in NHWC (4-D x): the reorders between layouts are this op.
struct Contiguous {
  static constexpr std::string_view kName = "contiguous";
  static constexpr bool kTakesStrided = true;
  struct A {
    bool channels_last = false;
    RK_FIELDS(channels_last)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = the tensors to join, all with the same shape except along dim.
struct Concat {
  static constexpr std::string_view kName = "concat";
  struct A {
    int64_t dim = 0;
    RK_FIELDS(dim)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_BACKWARD;
};

struct Cast {
  static constexpr std::string_view kName = "cast";
  static constexpr AmpPolicy kAmp = AmpPolicy::keep;
  struct A {
    DType dtype = DType::f32;
    RK_FIELDS(dtype)
  };
  // A channels-last x stays so between f32, bf16 and f16 (the fast kernel's flat loops).
  static bool channels_last(std::span<const Tensor> in, const A& a) {
    return (a.dtype == DType::f32 || a.dtype == DType::bf16 || a.dtype == DType::f16) &&
           elementwise_channels_last(in, 1u);
  }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 1u;
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;  // f32 / bf16 / f16 / f64 conversions and same-dtype copies (kernels/cpu/cast.cpp)
  RK_OP_BACKWARD;
};

// Sums over dims (sorted, unique); keepdim keeps them as size 1. Empty dims = all.
struct Sum {
  static constexpr std::string_view kName = "sum";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  struct A {
    std::vector<int64_t> dims;
    bool keepdim = false;
    RK_FIELDS(dims, keepdim)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// Normalises dims against rank (negative counts from the end); names the op on error.
int64_t normalize_dim(std::string_view op, int64_t d, int64_t rank);
// numpy broadcast of two shapes, or an error naming the op and both shapes.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);

}  // namespace reckon
