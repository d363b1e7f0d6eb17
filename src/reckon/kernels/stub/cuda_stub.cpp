// The cuda stub: linked when reckon is built without its cuda backend (the default), so the
// interface stays honest and callers get a clear answer instead of a link error: the device
// says "no device", and the kernel table's cuda column answers every op with "not built".
#include "reckon/core/cuda.h"
#include "reckon/ops/op_list.h"

namespace reckon {

bool cuda_available() { return false; }
std::string cuda_status() { return "this build has no cuda backend (configure with -DRECKON_CUDA=ON)"; }

template <class Op>
Support cuda_kernel(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const void*) {
  return Support::no("not built: this build has no cuda kernels (configure with -DRECKON_CUDA=ON)");
}

// One line per op of the list: its cuda column.
#define RK_CUDA_STUB(...) \
  template Support cuda_kernel<__VA_ARGS__>(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const void*);
RK_OPS(RK_CUDA_STUB)

}  // namespace reckon
