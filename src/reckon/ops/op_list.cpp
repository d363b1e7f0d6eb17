#include "reckon/ops/op_list.h"

namespace reckon {

#define RK_CHECK_OP(...) static_assert(OpDef<__VA_ARGS__>, "op breaks the contract in op.h");
RK_OPS(RK_CHECK_OP)

namespace {
template <class Op>
OpInfo info_of() {
  OpInfo i{};
  i.name = Op::kName;
  i.has_cpu_kernel = HasCpuKernel<Op>;
  i.differentiable = HasBackward<Op>;
  if constexpr (requires { Op::kOnnx; }) i.onnx = Op::kOnnx;
  if constexpr (requires { Op::kNotExportable; }) i.not_exportable = Op::kNotExportable;
  i.is_view = HasViewKernel<Op>;
  return i;
}
}  // namespace

const std::vector<OpInfo>& op_registry() {
#define RK_INFO(...) info_of<__VA_ARGS__>(),
  static const std::vector<OpInfo> r = {RK_OPS(RK_INFO)};
  return r;
}

}  // namespace reckon
