// The one list of ops. The registry below, the compile-time contract check, the test
// harness (tests/test_ops.cpp), the benchmarks and the ONNX coverage report all read it:
// an op that is not here does not exist; an op here without a test case fails the harness.
#pragma once
#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/elementwise.h"
#include "reckon/ops/loss.h"
#include "reckon/ops/matmul.h"
#include "reckon/ops/norm.h"
#include "reckon/ops/pool.h"
#include "reckon/ops/shape_ops.h"

// X(OpStruct)
#define RK_OPS(X)                                                                               \
  X(Reshape) X(Permute) X(Expand) X(Narrow) X(PadNarrow) X(Contiguous) X(Concat) X(Cast) X(Sum) \
  X(Add) X(Sub) X(Mul) X(Div) X(Affine)                                                         \
  X(Relu) X(Relu6) X(LeakyRelu) X(Gelu) X(Silu) X(Sigmoid) X(Tanh) X(Exp) X(Log) X(Square)     \
  X(UnaryBackward<ReluF>) X(UnaryBackward<Relu6F>) X(UnaryBackward<LeakyReluF>)                 \
  X(UnaryBackward<GeluF>) X(UnaryBackward<SiluF>) X(UnaryBackward<SigmoidF>)                    \
  X(UnaryBackward<TanhF>) X(UnaryBackward<ExpF>) X(UnaryBackward<LogF>) X(UnaryBackward<SquareF>) \
  X(Matmul) X(Linear)                                                                           \
  X(Conv2d) X(Conv2dBackwardInput) X(Conv2dBackwardWeight)                                      \
  RK_POOL_OPS(X) RK_NORM_OPS(X) RK_LOSS_OPS(X)

namespace reckon {

// What the registry knows of each op without instantiating it.
struct OpInfo {
  std::string_view name;
  bool has_cpu_kernel;
  bool differentiable;     // false: kNoGradient (backward ops)
  std::string_view onnx;   // ONNX op type, or "" with not_exportable saying why
  std::string_view not_exportable;
  bool is_view;
};
const std::vector<OpInfo>& op_registry();

}  // namespace reckon
