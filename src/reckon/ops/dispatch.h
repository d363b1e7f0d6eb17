// The dispatcher: the one path every op call takes, and what turns the call into a node.
//   autocast (the op's policy) -> infer -> outputs (allocated, tagged current_tag(), or an input
//   itself for an in-place op) -> cost -> kernels through the per-device table (cpu: the fast
//   kernel if it takes the call, else f32 on widened copies, else the reference; meta: none, or
//   the cpu kernel planning its workspace; cuda: the backend's column) -> an autograd node that
//   keeps exactly the op's declared saved set -> the node's record to the observers (the graph
//   capture appends it; graph/).
// Strided inputs are made dense by a recorded `contiguous` op, unless the op takes strides; a call
// that runs channels-last (ops/op.h) gets its activations channels-last instead. The reference
// kernels always see dense tensors (copies, where a channels-last call falls back to them).
#pragma once
#include <array>
#include <cmath>

#include "reckon/ops/autocast.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"
#include "reckon/ops/op_list.h"

namespace reckon {

template <class Op>
struct OpNode final : Node {
  typename Op::Attrs attrs;
  std::vector<SavedTensor> saved_in, saved_out;
  std::vector<TensorSpec> in_specs;
  std::vector<bool> needs_grad;

  std::string_view name() const override { return Op::kName; }
  void release() override {
    saved_in.clear();
    saved_out.clear();
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    if constexpr (HasBackward<Op>) {
      BackwardArgs b;
      for (auto& s : saved_in) b.inputs.push_back(s.get());
      for (auto& s : saved_out) b.outputs.push_back(s.get());
      b.input_specs = in_specs;
      b.grad_outputs = std::move(grad_outputs);
      b.needs_grad = needs_grad;
      return Op::backward(b, attrs);
    } else {
      throw Error(fmt::format("[{}] has no gradient: {}", Op::kName, Op::kNoGradient));
    }
  }
};

namespace detail {
void check_same_device(std::string_view op, std::span<const Tensor> in, Device& dev);
void note_failure(std::string_view op, std::span<const Tensor> in);  // see last_op_failure()
// The output a spec asks for: a new tensor, or (alias >= 0) input `alias` itself, checked.
Tensor make_output(std::string_view op, const TensorSpec& spec, std::span<const Tensor> in, int alias, Device dev);
// Dense copies (a recorded `contiguous` op, no autograd) of the strided inputs not in `keep`; for a
// call that runs channels-last, its 4-D inputs of `channels_last` made channels-last instead.
void make_dense(std::vector<Tensor>& kin, uint32_t keep, uint32_t channels_last = 0);

// What running a call's kernels found: which kernel ran and why a faster one did not, the MACs
// the reference counted, the workspace asked for, the implementation the kernel noted.
struct KernelRun {
  std::string_view kernel = "none";  // cpu, cpu-f32, ref, ref-f32, view, none (meta), plan, plan-f32, plan-ref-f32
  std::string skipped;
  int64_t macs_counted = -1;
  int64_t workspace_bytes = 0;
  std::string impl;
  KernelAlgo algo = KernelAlgo::none;
  double lane_use = 1.0;
  int64_t reorder_bytes = 0;
  double work_share = 1.0;
  int64_t unread_bytes = 0;
};
// Runs op `id`'s kernels from the table on device dev (dense inputs, allocated outputs).
void run_kernels(int id, std::string_view op, Device dev, std::span<const Tensor> in, std::span<Tensor> out,
                 const void* attrs, KernelRun& run);

// The node's record for the observers (only called while some observer listens).
void report(int id, std::string_view op, const void* attrs, const Cost& cost, KernelRun&& run,
            std::span<const Tensor> in, std::span<const Tensor> out, int64_t saved_bytes, SavedSet saved,
            uint32_t aliases, Tag out_tag);

// Computing in f32 for a kernel without a bf16/f16 path: any floating tensor of in/out in bf16 or
// f16? Then widen(ctx, in) gives f32 workspace copies of those inputs (others as they are),
// f32_outputs(ctx, out) f32 workspace tensors for the low-precision outputs, and narrow() rounds
// them back into out.
bool has_low_precision(std::span<const Tensor> in, std::span<const Tensor> out);
std::vector<Tensor> widen(KernelCtx& ctx, std::span<const Tensor> in);
std::vector<Tensor> f32_outputs(KernelCtx& ctx, std::span<const Tensor> out);
void narrow(std::span<const Tensor> wide, std::span<Tensor> out);
// f(win, wout) on the widened tensors; the outputs are rounded back when f returns true. The
// copies come from ctx, so a planning context accounts them on the meta device.
template <class F>
bool run_widened(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, F&& f) {
  std::vector<Tensor> win = widen(ctx, in);
  std::vector<Tensor> wout = f32_outputs(ctx, out);
  const bool ok = f(std::span<const Tensor>(win), std::span<Tensor>(wout));
  if (ok) narrow(wout, out);
  return ok;
}
}  // namespace detail

template <class Op>
std::vector<Tensor> call(std::vector<Tensor> in, const typename Op::Attrs& attrs = {}) {
  static_assert(OpDef<Op>, "the op breaks the contract in ops/op.h");
  static_assert(op_id<Op> >= 0, "the op is not in the one list of ops: add it to RK_OPS in ops/op_list.h");
  constexpr int kId = op_id<Op>;
  if constexpr (amp_policy<Op>() != AmpPolicy::keep)
    if (autocast_active()) {
      AmpPolicy p = amp_policy<Op>();
      if constexpr (requires { Op::amp_keeps_f32(std::span<const Tensor>(in), attrs); })
        if (p == AmpPolicy::lower && Op::amp_keeps_f32(std::span<const Tensor>(in), attrs)) p = AmpPolicy::fp32;
      detail::autocast_inputs(p, in);
    }
  Device dev = Device::cpu;
  if constexpr (requires { Op::device(attrs); })
    if (in.empty()) dev = Op::device(attrs);
  detail::check_same_device(Op::kName, in, dev);
  std::vector<TensorSpec> specs;
  try {
    specs = Op::infer(in, attrs);
  } catch (const Error&) {
    detail::note_failure(Op::kName, in);
    throw;
  }
  uint32_t channels_last = 0;  // the inputs the kernels get channels-last
  if constexpr (HasChannelsLast<Op>) {
    if (Op::channels_last(std::span<const Tensor>(in), attrs)) {
      channels_last = uint32_t(Op::kChannelsLastIn);
      for (size_t i = 0; i < specs.size(); ++i)
        if (((uint32_t(Op::kChannelsLastOut) >> i) & 1u) && specs[i].shape.size() == 4)
          specs[i].format = MemoryFormat::channels_last;
    }
  }
  const Cost cost = Op::cost(in, specs, attrs);
  const Tag out_tag = current_tag();

  // In-place outputs: output i is input alias_of(i) itself.
  uint32_t aliases = 0, aliased_inputs = 0;
  std::array<int8_t, 8> alias_of{-1, -1, -1, -1, -1, -1, -1, -1};
  if constexpr (HasInPlace<Op>)
    for (size_t i = 0; i < specs.size() && i < alias_of.size(); ++i)
      if (int j = Op::alias_of(int(i), attrs); j >= 0) {
        alias_of[i] = int8_t(j);
        aliases |= 1u << i;
        aliased_inputs |= 1u << j;
      }

  std::vector<Tensor> out;
  out.reserve(specs.size());
  detail::KernelRun run;
  if constexpr (HasViewKernel<Op>) {
    out.push_back(Op::view(in, attrs));
    run.kernel = "view";
  } else {
    // Kernels see dense inputs, or channels-last ones where the call runs so (but an input
    // written in place is the tensor itself); autograd below keeps the caller's tensors.
    std::vector<Tensor> kin = in;
    if (channels_last || !takes_strided<Op>()) detail::make_dense(kin, aliased_inputs, channels_last);
    for (size_t i = 0; i < specs.size(); ++i)
      out.push_back(detail::make_output(Op::kName, specs[i], in, i < alias_of.size() ? alias_of[i] : -1, dev));
    detail::run_kernels(kId, Op::kName, dev, kin, out, &attrs, run);
  }

  int64_t saved_bytes = 0;
  SavedSet ss{};
  NeedsGrad needs;
  if (grad_enabled())
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].requires_grad()) needs.bits |= 1u << i;
  if (needs.any()) {
    auto node = std::make_shared<OpNode<Op>>();
    node->attrs = attrs;
    node->scope = current_scope();
    node->num_outputs = int(out.size());
    ss = Op::saved(attrs, needs);
    for (size_t i = 0; i < in.size(); ++i) {
      node->in_specs.push_back(in[i].defined() ? in[i].spec() : TensorSpec{});
      node->needs_grad.push_back(needs[i]);
      node->next.push_back(gradient_edge(in[i]));
      bool keep = (ss.inputs >> i) & 1u;
      if (keep && in[i].defined() && in[i].storage().tag() == Tag::temporary) saved_bytes += in[i].nbytes();
      node->saved_in.emplace_back(keep ? SavedTensor(in[i]) : SavedTensor());
    }
    for (size_t i = 0; i < out.size(); ++i) {
      bool keep = (ss.outputs >> i) & 1u;
      if (keep) saved_bytes += out[i].nbytes();
      node->saved_out.emplace_back(keep ? SavedTensor(out[i]) : SavedTensor());
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (!is_floating(out[i].dtype()) || ((aliases >> i) & 1u)) continue;  // written in place: not a new value
      auto& im = out[i].impl();
      im.requires_grad = true;
      im.grad_fn = node;
      im.output_nr = int(i);
    }
  }
  if (observing_ops())
    detail::report(kId, Op::kName, &attrs, cost, std::move(run), in, out, saved_bytes, ss, aliases, out_tag);
  return out;
}

// Single-output convenience.
template <class Op>
Tensor call1(std::vector<Tensor> in, const typename Op::Attrs& attrs = {}) {
  return call<Op>(std::move(in), attrs)[0];
}

}  // namespace reckon
