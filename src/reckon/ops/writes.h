// Tensors made and written outside a layer's math, each an op, so that their bytes and time are
// in the ledger and a captured graph replays them: `full` makes a tensor of one value (the
// backward pass's seed gradient, optimizer state, the loss scaler's flag); `fill_`, `copy_`,
// `add_` and `add_scalar_` write into an existing tensor (zeroing gradients, loading, gradient
// accumulation, batch norm's batch counter). The in-place ones return their destination as
// output 0 (alias_of), written where it lies; they have no gradient.
// Not here: the optimizers' updates (ops/update.h).
#pragma once
#include "reckon/ops/op.h"

namespace reckon {

// in = () -> a new tensor of `shape` and `dtype` on `device`, uninitialised (what a copy_ fills:
// the gradient accumulator's first copy). No kernel work.
struct Empty {
  static constexpr std::string_view kName = "empty";
  static constexpr std::string_view kNotExportable = "an uninitialised buffer";
  static constexpr std::string_view kNoGradient = "an uninitialised buffer";
  static constexpr OpClass kClass = OpClass::write;
  struct A {
    Shape shape;
    DType dtype = DType::f32;
    Device device = Device::cpu;
    RK_FIELDS(shape, dtype, device)
  };
  static Device device(const A& a) { return a.device; }
  RK_OP_DECLS(A);
  RK_OP_REF;
};

// in = () -> a new tensor of `shape` and `dtype` on `device`, every element `value`.
struct Full {
  static constexpr std::string_view kName = "full";
  static constexpr std::string_view kNoGradient = "a constant";
  static constexpr OpClass kClass = OpClass::write;
  struct A {
    Shape shape;
    DType dtype = DType::f32;
    Device device = Device::cpu;
    double value = 0.0;
    RK_FIELDS(shape, dtype, device, value)
  };
  static Device device(const A& a) { return a.device; }
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (dst) -> dst, every element set to value.
struct FillInplace {
  static constexpr std::string_view kName = "fill_";
  static constexpr std::string_view kNotExportable = "an in-place write of training state";
  static constexpr std::string_view kNoGradient = "an in-place write";
  static constexpr OpClass kClass = OpClass::write;
  static constexpr bool kOverwrites = true;
  static constexpr bool kTakesStrided = true;
  struct A {
    double value = 0.0;
    RK_FIELDS(value)
  };
  static int alias_of(int out, const A&) { return out == 0 ? 0 : -1; }
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (dst, src), same number of elements, any dtypes and strides -> dst = src (converted).
struct CopyInplace {
  static constexpr std::string_view kName = "copy_";
  static constexpr std::string_view kNotExportable = "an in-place write of training state";
  static constexpr std::string_view kNoGradient = "an in-place write";
  static constexpr OpClass kClass = OpClass::write;
  static constexpr bool kOverwrites = true;
  static constexpr bool kTakesStrided = true;
  static int alias_of(int out, const NoAttrs&) { return out == 0 ? 0 : -1; }
  RK_OP_DECLS(NoAttrs);
  RK_OP_REF;
};

// in = (dst, src), same shape and floating dtype, dst dense -> dst += src.
struct AddInplace {
  static constexpr std::string_view kName = "add_";
  static constexpr std::string_view kNotExportable = "an in-place write of training state";
  static constexpr std::string_view kNoGradient = "an in-place write";
  static constexpr OpClass kClass = OpClass::write;
  static int alias_of(int out, const NoAttrs&) { return out == 0 ? 0 : -1; }
  RK_OP_DECLS(NoAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (dst) of any dtype -> dst += value (batch norm's num_batches_tracked += 1).
struct AddScalarInplace {
  static constexpr std::string_view kName = "add_scalar_";
  static constexpr std::string_view kNotExportable = "an in-place write of training state";
  static constexpr std::string_view kNoGradient = "an in-place write";
  static constexpr OpClass kClass = OpClass::write;
  static constexpr bool kTakesStrided = true;
  struct A {
    double value = 0.0;
    RK_FIELDS(value)
  };
  static int alias_of(int out, const A&) { return out == 0 ? 0 : -1; }
  RK_OP_DECLS(A);
  RK_OP_REF;
};

}  // namespace reckon

#define RK_WRITE_OPS(X) X(Empty) X(Full) X(FillInplace) X(CopyInplace) X(AddInplace) X(AddScalarInplace)
