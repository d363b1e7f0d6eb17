// The one list of ops. Everything that knows ops reads it: the op ids, the per-device kernel
// table and the registry below, the compile-time contract check, the dispatcher (call<Op> does
// not compile for an op that is not here), the graph's interpreter and JSON, the test harness
// (tests/test_ops.cpp: an op here without a test case fails it), the benchmarks and the ONNX
// coverage report.
#pragma once
#include <array>

#include "reckon/ops/conv.h"
#include "reckon/ops/elementwise.h"
#include "reckon/ops/fused.h"
#include "reckon/ops/loss.h"
#include "reckon/ops/matmul.h"
#include "reckon/ops/norm.h"
#include "reckon/ops/pool.h"
#include "reckon/ops/quant.h"
#include "reckon/ops/shape_ops.h"
#include "reckon/ops/update.h"
#include "reckon/ops/writes.h"

// X(OpStruct)
#define RK_OPS(X)                                                                               \
  X(Reshape) X(Permute) X(Expand) X(Narrow) X(PadNarrow) X(Contiguous) X(Concat) X(Cast) X(Sum) \
  X(Add) X(Sub) X(Mul) X(Div) X(Affine)                                                         \
  X(Relu) X(Relu6) X(LeakyRelu) X(Clamp) X(Gelu) X(Silu) X(Sigmoid) X(Tanh) X(Exp) X(Log) X(Square)     \
  X(UnaryBackward<ReluF>) X(UnaryBackward<Relu6F>) X(UnaryBackward<LeakyReluF>) X(UnaryBackward<ClampF>)                 \
  X(UnaryBackward<GeluF>) X(UnaryBackward<SiluF>) X(UnaryBackward<SigmoidF>)                    \
  X(UnaryBackward<TanhF>) X(UnaryBackward<ExpF>) X(UnaryBackward<LogF>) X(UnaryBackward<SquareF>) \
  X(Matmul) X(Linear)                                                                           \
  X(Conv2d) X(Conv2dBackwardInput) X(Conv2dBackwardWeight)                                      \
  RK_POOL_OPS(X) RK_NORM_OPS(X) RK_LOSS_OPS(X) RK_WRITE_OPS(X) RK_UPDATE_OPS(X) RK_FUSED_OPS(X) RK_QUANT_OPS(X)

namespace reckon {

// ---- op ids: an op's index in the list ----
namespace detail {
template <class... Ts>
struct OpTypes {};
#define RK_OP_TYPE_(...) __VA_ARGS__,
using AllOps = OpTypes<RK_OPS(RK_OP_TYPE_) void>;  // the trailing void ends the list
#undef RK_OP_TYPE_
template <class Op, class... Ts>
constexpr int index_in(OpTypes<Ts...>) {
  int i = 0, found = -1;
  ((std::is_same_v<Op, Ts> && found < 0 ? (found = i, ++i) : ++i), ...);
  return found;
}
template <class... Ts>
constexpr int count_of(OpTypes<Ts...>) {
  return int(sizeof...(Ts)) - 1;
}
}  // namespace detail

// -1 for a type that is not in the list (call<Op> static_asserts on it).
template <class Op>
inline constexpr int op_id = detail::index_in<Op>(detail::AllOps{});
inline constexpr int kNumOps = detail::count_of(detail::AllOps{});

// ---- what the registry knows of each op, and how to call it by id ----
// The attributes travel type-erased (const void* to the op's Attrs); the functions here are
// the op's own, instantiated once per op from the list (op_list.cpp).
struct OpInfo {
  std::string_view name;
  int id = -1;
  bool has_cpu_kernel = false;
  bool differentiable = false;  // false: kNoGradient (backward ops, writes, updates)
  // Op::onnx (ops/onnx_map.h) with the attributes as a pointer to Op::Attrs; null for an op
  // that is never exportable, and then not_exportable says why.
  std::vector<std::string> (*to_onnx)(OnnxArgs& args, const void* attrs) = nullptr;
  std::string_view not_exportable;
  bool is_view = false;
  bool takes_strided = false;   // its kernels read strided inputs (else callers make them dense)
  bool has_in_place = false;    // some output may be an input written in place (Op::alias_of)
  bool overwrites = false;      // it writes those outputs without reading them (Op::kOverwrites)
  bool random = false;          // draws a seed per call (Op::reseed)
  OpClass op_class = OpClass::other;
  // call<Op>(in, attrs) with the attributes given as a pointer to Op::Attrs.
  std::vector<Tensor> (*call)(std::vector<Tensor> in, const void* attrs) = nullptr;
  // A heap copy of attrs (Op::Attrs), default attributes when attrs is null.
  std::shared_ptr<void> (*copy_attrs)(const void* attrs) = nullptr;
  // Op::reseed on a copy made by copy_attrs (random ops only; null otherwise).
  void (*reseed)(void* attrs) = nullptr;
  // The attributes as a JSON object, field by field (RK_FIELDS), and back: from_json starts
  // from the defaults, so a field the text lacks keeps its default; a field the attributes do
  // not have, or a value of the wrong kind, is an error naming the op and the field.
  std::string (*attrs_to_json)(const void* attrs) = nullptr;
  std::shared_ptr<void> (*attrs_from_json)(const std::string& json) = nullptr;
  // Sets a bool attribute named "training" (batch norm, dropout) and says whether there was one.
  bool (*set_training)(void* attrs, bool training) = nullptr;
};
const std::vector<OpInfo>& op_registry();
const OpInfo& op_info(int id);  // throws naming the id when out of range
int op_id_of(std::string_view name);  // -1 when no op has that name

// ---- the per-device kernel table ----
// One row per device, one entry per op: ref (the reference kernel, the spec), cpu (the fast
// kernel, null where an op has none) and cuda (kernels/stub/cuda_stub.cpp in a build without
// the cuda backend: one line per op that answers "not built"). The dispatcher calls kernels
// only through this table.
struct KernelTable {
  std::array<KernelFn, size_t(kNumOps)> ref{}, cpu{}, cuda{};
  std::array<const bool*, size_t(kNumOps)> cpu_plans{};  // &cpu_kernel_plans<Op>
};
const KernelTable& kernel_table();

// The cuda column: defined per op by the cuda backend, or by the stub (kernels/stub/).
template <class Op>
Support cuda_kernel(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const void* attrs);

}  // namespace reckon
