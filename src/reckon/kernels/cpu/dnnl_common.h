// Shared oneDNN plumbing for the cpu kernels: one engine and stream, a cache of primitives
// keyed by the call's shapes and attributes (plan once, reuse), scratchpads allocated through
// the kernel context so they are tagged `workspace` in the memory accounts.
#pragma once
#include <dnnl.hpp>
#include <omp.h>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/op.h"

namespace reckon::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();

// Whether oneDNN has bf16 convolution and matmul kernels on this cpu (AVX-512 and up for the
// oneDNN 2.6 of Debian 12; not on an AVX2-only cpu, where bf16 calls compute in f32 on widened
// copies). Probed once by planning a small bf16 convolution. The ISA oneDNN dispatches to, in
// its own words ("Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions", ...).
bool bf16_kernels_available();
std::string cpu_isa_name();

inline dnnl::memory::data_type dt(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    case DType::i8: return dnnl::memory::data_type::s8;
    case DType::u8: return dnnl::memory::data_type::u8;
    case DType::i32: return dnnl::memory::data_type::s32;
    default: return dnnl::memory::data_type::undef;
  }
}

inline dnnl::memory::dims dims_of(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

// A dense row-major memory descriptor of a tensor.
inline dnnl::memory::desc plain_desc(const Tensor& t) {
  return dnnl::memory::desc(dims_of(t.shape()), dt(t.dtype()), dims_of(contiguous_strides(t.shape())));
}

inline dnnl::memory mem(const dnnl::memory::desc& d, const Tensor& t) {
  return dnnl::memory(d, engine(), t.raw_data());
}

// Primitive attributes every kernel uses: user-managed scratchpad.
inline dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// Cache of planned primitives (pd + primitive), one per op kind, key and OpenMP thread count (a
// primitive splits its work for the thread count it was planned with, and a training run may
// change the count: train/threads.h). A call oneDNN has no
// implementation for on this cpu (bf16 without AVX-512, say) is remembered too: get() returns
// null for it, and the kernel declines the call (the dispatcher then computes in f32 or runs the
// reference), so a missing ISA is a slower path, never an error.
template <class Entry>
class PlanCache {
 public:
  template <class Make>
  Entry* get(const std::string& key, Make&& make) {
    const std::string full = std::to_string(omp_get_max_threads()) + "|" + key;
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(full);
    if (it == map_.end()) {
      std::optional<Entry> e;
      try {
        e.emplace(make());
      } catch (const dnnl::error& err) {
        if (err.status != dnnl_unimplemented) throw;
      }
      it = map_.emplace(full, std::move(e)).first;
    }
    return it->second ? &*it->second : nullptr;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::optional<Entry>> map_;
};
// Why a kernel declined a call whose plan oneDNN could not make.
inline constexpr const char* kNoDnnlImpl = "oneDNN has no implementation of this call on this cpu";

// Runs a primitive with the scratchpad it asks for (tagged workspace). When the context is
// planning (the meta device) both functions make the same workspace requests and touch no data.
void execute(KernelCtx& ctx, const dnnl::primitive& p, const dnnl::memory::desc& scratch_desc,
             std::unordered_map<int, dnnl::memory> args);

// Reorders a tensor between layouts into a workspace buffer; returns the memory.
dnnl::memory reorder_to(KernelCtx& ctx, const dnnl::memory& src, const dnnl::memory::desc& dst_desc,
                        Tensor& holder);

// reorder_to for an input tensor `t` whose converted copy the next kernels of a
// ShareConversions scope may reuse (a convolution's dy, read by backward-data and
// backward-weights): an earlier copy of t in this layout is returned (and held in `holder`)
// instead of a new one.
dnnl::memory reorder_shared(KernelCtx& ctx, const Tensor& t, const dnnl::memory& src,
                            const dnnl::memory::desc& dst_desc, Tensor& holder);

// This cpu has no f16 arithmetic: a kernel called with f16 tensors runs `f32_kernel` on f32
// workspace copies of them and rounds its outputs back to f16. The copies are requested from ctx,
// so on the meta device (planning) they are accounted like any other workspace.
template <class F>
Support run_in_f32(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, F&& f32_kernel) {
  Support s;
  detail::run_widened(ctx, in, out, [&](std::span<const Tensor> win, std::span<Tensor> wout) {
    s = f32_kernel(win, wout);
    return s.ok;
  });
  return s;
}

}  // namespace reckon::dnnl_util
