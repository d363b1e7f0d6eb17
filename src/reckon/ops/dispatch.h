// The dispatcher: the one path every op call takes.
//   infer -> allocate outputs (tagged current_tag()) -> report cost -> run a kernel
//   (meta: none; cpu: the fast kernel if it accepts the call, else the reference) ->
//   record an autograd node that keeps exactly the op's declared saved set.
#pragma once
#include <array>
#include <cmath>

#include "reckon/ops/autocast.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

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
Tensor contiguous_copy(const Tensor& t);  // plain copy, no autograd
void report(std::string_view op, const Cost& cost, std::string_view kernel, std::string skipped,
            std::span<const Tensor> in, std::span<const Tensor> out, int64_t macs_counted,
            int64_t workspace_bytes, int64_t saved_bytes, std::string impl);
void note_failure(std::string_view op, std::span<const Tensor> in);  // see last_op_failure()
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
  static_assert(OpDef<Op>);
  if constexpr (amp_policy<Op>() != AmpPolicy::keep)
    if (autocast_active()) detail::autocast_inputs(amp_policy<Op>(), in);
  Device dev = Device::cpu;
  detail::check_same_device(Op::kName, in, dev);
  std::vector<TensorSpec> specs;
  try {
    specs = Op::infer(in, attrs);
  } catch (const Error&) {
    detail::note_failure(Op::kName, in);
    throw;
  }
  std::vector<Tensor> out;
  out.reserve(specs.size());

  Cost cost = Op::cost(in, specs, attrs);
  std::string_view kernel = "none";
  std::string skipped;
  int64_t counted = -1, ws = 0;
  std::string impl;

  if constexpr (HasViewKernel<Op>) {
    out.push_back(Op::view(in, attrs));
    kernel = "view";
  } else {
    // Kernels see dense inputs; autograd below keeps the caller's tensors.
    std::vector<Tensor> kin = in;
    for (auto& t : kin)
      if (t.defined() && !t.is_contiguous()) t = detail::contiguous_copy(t);
    for (auto& s : specs) out.push_back(Tensor::empty(s.shape, s.dtype, dev));
    if (fill_outputs_with_nan() && dev == Device::cpu)
      for (auto& t : out)
        if (is_floating(t.dtype())) fill_(t, std::nan(""));
    if (dev == Device::cpu) {
      KernelCtx ctx;
      bool done = false;
      if constexpr (HasCpuKernel<Op>) {
        if (!force_reference()) {
          Support s = Op::cpu(ctx, kin, out, attrs);
          done = s.ok;
          if (!done) skipped = s.why;
        } else {
          skipped = "reference forced";
        }
      } else {
        skipped = "no cpu kernel";
      }
      if (done) {
        kernel = "cpu";
      } else if (detail::has_low_precision(kin, out)) {
        // No bf16/f16 kernel took the call: compute in f32 and round the outputs back.
        bool wide_done = false;
        detail::run_widened(ctx, kin, out, [&](std::span<const Tensor> win, std::span<Tensor> wout) {
          if constexpr (HasCpuKernel<Op>)
            if (!force_reference()) wide_done = Op::cpu(ctx, win, wout, attrs).ok;
          if (!wide_done) {
            Op::ref(ctx, win, wout, attrs);
            counted = ctx.macs_counted();
          }
          return true;
        });
        kernel = wide_done ? "cpu-f32" : "ref-f32";
      } else {
        Op::ref(ctx, kin, out, attrs);
        kernel = "ref";
        counted = ctx.macs_counted();
      }
      ws = ctx.workspace_bytes();
      if (observing_ops()) impl = ctx.impl();
    } else if (dev == Device::cuda) {
      throw Error(fmt::format("[{}] this build has no cuda kernels", Op::kName));
    } else if (dev == Device::meta) {
      // Planning: the cpu kernel requests its workspace (accounted on meta) and runs nothing.
      if constexpr (HasCpuKernel<Op>) {
        if (plan_kernels_on_meta() && cpu_kernel_plans<Op> && !force_reference()) {
          KernelCtx ctx(KernelCtx::Mode::plan);
          Support s = Op::cpu(ctx, kin, out, attrs);
          if (s.ok) {
            kernel = "plan";
          } else {
            skipped = s.why;
            // As on the cpu: no low-precision kernel took the call, so it computes in f32 on
            // widened copies (accounted here as they will be there).
            if (detail::has_low_precision(kin, out)) {
              bool wide_ok = false;
              detail::run_widened(ctx, kin, out, [&](std::span<const Tensor> win, std::span<Tensor> wout) {
                wide_ok = Op::cpu(ctx, win, wout, attrs).ok;
                return true;
              });
              kernel = wide_ok ? "plan-f32" : "plan-ref-f32";
            }
          }
          ws = ctx.workspace_bytes();
          impl = ctx.impl();
        }
      }
    }
  }

  int64_t saved_bytes = 0;
  bool any_grad = false;
  if (grad_enabled())
    for (auto& t : in) any_grad = any_grad || t.requires_grad();
  if (any_grad) {
    {
      auto node = std::make_shared<OpNode<Op>>();
      node->attrs = attrs;
      node->scope = current_scope();
      node->num_outputs = int(out.size());
      SavedSet ss = Op::saved(attrs);
      for (size_t i = 0; i < in.size(); ++i) {
        node->in_specs.push_back(in[i].defined() ? in[i].spec() : TensorSpec{});
        node->needs_grad.push_back(in[i].requires_grad());
        node->next.push_back(gradient_edge(in[i]));
        bool keep = (ss.inputs >> i) & 1u;
        if (keep && in[i].defined() && in[i].storage().tag() == Tag::temporary)
          saved_bytes += in[i].nbytes();
        node->saved_in.emplace_back(keep ? SavedTensor(in[i]) : SavedTensor());
      }
      for (size_t i = 0; i < out.size(); ++i) {
        bool keep = (ss.outputs >> i) & 1u;
        if (keep) saved_bytes += out[i].nbytes();
        node->saved_out.emplace_back(keep ? SavedTensor(out[i]) : SavedTensor());
      }
      for (size_t i = 0; i < out.size(); ++i) {
        if (!is_floating(out[i].dtype())) continue;
        auto& im = out[i].impl();
        im.requires_grad = true;
        im.grad_fn = node;
        im.output_nr = int(i);
      }
    }
  }
  if (observing_ops()) detail::report(Op::kName, cost, kernel, std::move(skipped), in, out, counted, ws, saved_bytes,
                                       std::move(impl));
  return out;
}

// Single-output convenience.
template <class Op>
Tensor call1(std::vector<Tensor> in, const typename Op::Attrs& attrs = {}) {
  return call<Op>(std::move(in), attrs)[0];
}

}  // namespace reckon
