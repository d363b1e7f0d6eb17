#include "reckon/kernels/cpu/dnnl_common.h"

namespace reckon::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

void execute(KernelCtx& ctx, const dnnl::primitive& p, const dnnl::memory::desc& scratch_desc,
             std::unordered_map<int, dnnl::memory> args) {
  Tensor scratch;
  size_t bytes = scratch_desc.get_size();
  if (ctx.planning()) {  // the meta device: the same request, held while it would run
    if (bytes > 0) ctx.workspace(int64_t(bytes));
    return;
  }
  if (bytes > 0) {
    scratch = ctx.workspace(int64_t(bytes));
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratch_desc, engine(), scratch.raw_data());
  }
  p.execute(stream(), args);
  stream().wait();
}

dnnl::memory reorder_to(KernelCtx& ctx, const dnnl::memory& src, const dnnl::memory::desc& dst_desc,
                        Tensor& holder) {
  if (src.get_desc() == dst_desc) return src;
  holder = ctx.workspace(int64_t(dst_desc.get_size()));
  dnnl::memory dst(dst_desc, engine(), holder.raw_data());
  if (ctx.planning()) return dst;  // the meta device: the buffer is requested, nothing is copied
  dnnl::memory s = src;
  dnnl::reorder(s, dst).execute(stream(), s, dst);
  stream().wait();
  return dst;
}

}  // namespace reckon::dnnl_util
