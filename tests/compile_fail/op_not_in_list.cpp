// Must not compile: an op that keeps the whole contract of ops/op.h but is not in the one list
// (ops/op_list.h). call<Op> static_asserts on it, so it cannot run, escape the test harness or
// the ledger. CMakeLists.txt checks the compiler says why.
#include "reckon/ops/dispatch.h"

namespace reckon {
struct NotListed {
  static constexpr std::string_view kName = "not_listed";
  static constexpr std::string_view kNotExportable = "a test";
  static constexpr std::string_view kNoGradient = "a test";
  RK_OP_DECLS(NoAttrs);
  RK_OP_REF;
};
static_assert(OpDef<NotListed>, "the op itself keeps the contract");
std::vector<Tensor> use(const Tensor& x) { return call<NotListed>({x}); }
}  // namespace reckon
