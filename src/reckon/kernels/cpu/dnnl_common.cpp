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

bool bf16_kernels_available() {
  static const bool ok = [] {
    using dnnl::memory;
    const auto t = memory::data_type::bf16;
    const auto any = memory::format_tag::any;
    try {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        memory::desc({1, 16, 8, 8}, t, any), memory::desc({16, 16, 3, 3}, t, any),
                                        memory::desc({1, 16, 8, 8}, t, any), {1, 1}, {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(d, engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

std::string cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "SSE4.1";
    case dnnl::cpu_isa::avx: return "AVX";
    case dnnl::cpu_isa::avx2: return "AVX2";
    case dnnl::cpu_isa::avx512_mic: return "AVX-512 (Xeon Phi)";
    case dnnl::cpu_isa::avx512_mic_4ops: return "AVX-512 (Xeon Phi, 4ops)";
    case dnnl::cpu_isa::avx512_core: return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX-512 with VNNI";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX-512 with VNNI and BF16";
    case dnnl::cpu_isa::avx512_core_amx: return "AVX-512 with AMX";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2 with VNNI";
    default: return "generic";
  }
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
  ctx.note_reorder(int64_t(src.get_desc().get_size() + dst_desc.get_size()));
  dnnl::memory dst(dst_desc, engine(), holder.raw_data());
  if (ctx.planning()) return dst;  // the meta device: the buffer is requested, nothing is copied
  dnnl::memory s = src;
  dnnl::reorder(s, dst).execute(stream(), s, dst);
  stream().wait();
  return dst;
}

namespace {
struct SharedReorder {
  dnnl::memory::desc desc;
  Tensor copy;
};
}  // namespace

dnnl::memory reorder_shared(KernelCtx& ctx, const Tensor& t, const dnnl::memory& src,
                            const dnnl::memory::desc& dst_desc, Tensor& holder) {
  auto* shared = ShareConversions::active();
  if (!shared || src.get_desc() == dst_desc) return reorder_to(ctx, src, dst_desc, holder);
  for (const auto& e : *shared) {
    if (e.storage.lock() != t.storage_ptr() || e.offset != t.offset()) continue;
    const auto* r = static_cast<const SharedReorder*>(e.payload.get());
    if (r->desc != dst_desc) continue;
    holder = r->copy;
    return dnnl::memory(dst_desc, engine(), holder.raw_data());
  }
  dnnl::memory m = reorder_to(ctx, src, dst_desc, holder);
  shared->push_back({t.storage_ptr(), t.offset(), std::make_shared<SharedReorder>(SharedReorder{dst_desc, holder})});
  return m;
}

}  // namespace reckon::dnnl_util
