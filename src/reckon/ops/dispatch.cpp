#include "reckon/ops/dispatch.h"

#include <fmt/ranges.h>

#include <cstring>
#include <new>

#include "reckon/ops/shape_ops.h"

namespace reckon {

int64_t bytes_of(std::span<const Tensor> ts) {
  int64_t b = 0;
  for (auto& t : ts)
    if (t.defined()) b += t.nbytes();
  return b;
}

int64_t bytes_of(std::span<const TensorSpec> ts) {
  int64_t b = 0;
  for (auto& t : ts) b += shape_numel(t.shape) * int64_t(dtype_size(t.dtype));
  return b;
}

Cost elementwise_cost(std::span<const Tensor> in, std::span<const TensorSpec> out,
                      int64_t flops_per_elem) {
  Cost c;
  for (auto& s : out) c.flops += flops_per_elem * shape_numel(s.shape);
  c.bytes_read = bytes_of(in);
  c.bytes_written = bytes_of(out);
  return c;
}

namespace {
thread_local ShareConversions* t_share = nullptr;
}
ShareConversions::ShareConversions() : prev_(t_share) { t_share = this; }
ShareConversions::~ShareConversions() { t_share = prev_; }
std::vector<ShareConversions::Entry>* ShareConversions::active() { return t_share ? &t_share->entries_ : nullptr; }

Tensor KernelCtx::workspace(int64_t bytes) {
  TagGuard g(Tag::workspace);
  workspace_bytes_ += bytes;
  return Tensor::empty({bytes}, DType::u8, planning() ? Device::meta : Device::cpu);
}

Tensor KernelCtx::workspace_tensor(const Shape& shape, DType dtype) {
  TagGuard g(Tag::workspace);
  held_.push_back(Tensor::empty(shape, dtype, planning() ? Device::meta : Device::cpu));
  workspace_bytes_ += held_.back().nbytes();
  return held_.back();
}

namespace {
thread_local std::vector<OpObserver> t_observers;
thread_local std::vector<std::string> t_scopes;
thread_local const std::string* t_backward_scope = nullptr;
thread_local bool t_in_backward = false;
thread_local bool t_force_ref = false;
thread_local bool t_grad_enabled = true;
const std::string kEmpty;
}  // namespace

ObserveOps::ObserveOps(OpObserver f) { t_observers.push_back(std::move(f)); }
ObserveOps::~ObserveOps() { t_observers.pop_back(); }
bool observing_ops() { return !t_observers.empty(); }
void notify_ops(const OpRecord& r) {
  for (auto& f : t_observers) f(r);
}

ScopeGuard::ScopeGuard(const std::string& name) {
  if (t_scopes.empty() || t_scopes.back().empty() || name.empty())
    t_scopes.push_back(t_scopes.empty() || t_scopes.back().empty() ? name : t_scopes.back());
  else
    t_scopes.push_back(t_scopes.back() + "." + name);
}
ScopeGuard::~ScopeGuard() { t_scopes.pop_back(); }
const std::string& current_scope() {
  if (t_backward_scope) return *t_backward_scope;
  return t_scopes.empty() ? kEmpty : t_scopes.back();
}
void set_scope_for_backward(const std::string* scope, bool backward) {
  t_backward_scope = scope;
  t_in_backward = backward;
}
bool in_backward() { return t_in_backward; }
ScopeOverride::ScopeOverride(const std::string* scope, bool backward)
    : prev_scope_(t_backward_scope), prev_backward_(t_in_backward) {
  t_backward_scope = scope;
  t_in_backward = backward;
}
ScopeOverride::~ScopeOverride() {
  t_backward_scope = prev_scope_;
  t_in_backward = prev_backward_;
}

namespace {
thread_local bool t_recomputing = false;
}
Recomputing::Recomputing() : prev_(t_recomputing) { t_recomputing = true; }
Recomputing::~Recomputing() { t_recomputing = prev_; }
bool recomputing() { return t_recomputing; }

namespace {
thread_local Phase t_phase = Phase::forward;
}
std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::recompute: return "recompute";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}
Phase current_phase() { return t_recomputing ? Phase::recompute : t_phase; }
PhaseGuard::PhaseGuard(Phase p) : prev_(t_phase) { t_phase = p; }
PhaseGuard::~PhaseGuard() { t_phase = prev_; }

ForceReference::ForceReference(bool on) : prev_(t_force_ref) { t_force_ref = on; }
ForceReference::~ForceReference() { t_force_ref = prev_; }
bool force_reference() { return t_force_ref; }

namespace {
thread_local bool t_plan_on_meta = false;
thread_local OpFailure t_failure;
}  // namespace
PlanKernelsOnMeta::PlanKernelsOnMeta(bool on) : prev_(t_plan_on_meta) { t_plan_on_meta = on; }
PlanKernelsOnMeta::~PlanKernelsOnMeta() { t_plan_on_meta = prev_; }
bool plan_kernels_on_meta() { return t_plan_on_meta; }
const OpFailure& last_op_failure() { return t_failure; }
void clear_op_failure() { t_failure = OpFailure{}; }

namespace {
thread_local bool t_fill_nan = false;
}
FillOutputsWithNaN::FillOutputsWithNaN(bool on) : prev_(t_fill_nan) { t_fill_nan = on; }
FillOutputsWithNaN::~FillOutputsWithNaN() { t_fill_nan = prev_; }
bool fill_outputs_with_nan() { return t_fill_nan; }

bool grad_enabled() { return t_grad_enabled; }
NoGrad::NoGrad() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = prev_; }
EnableGrad::EnableGrad() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGrad::~EnableGrad() { t_grad_enabled = prev_; }

bool channels_last_kernels_allowed(const Tensor& t) { return t.device() != Device::cuda && !force_reference(); }

bool elementwise_channels_last(std::span<const Tensor> in, uint32_t mask) {
  const Tensor* lead = nullptr;
  for (size_t i = 0; i < in.size(); ++i)
    if (((mask >> i) & 1u) && in[i].defined() && in[i].prefers_channels_last()) {
      lead = &in[i];
      break;
    }
  if (!lead || !channels_last_kernels_allowed(*lead)) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!((mask >> i) & 1u)) continue;
    const Tensor& t = in[i];
    if (!t.defined() || t.shape() != lead->shape() || t.dtype() != lead->dtype()) return false;
  }
  const DType d = lead->dtype();
  return d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

namespace detail {

void check_same_device(std::string_view op, std::span<const Tensor> in, Device& dev) {
  bool first = true;
  for (auto& t : in) {
    if (!t.defined()) continue;
    if (first) {
      dev = t.device();
      first = false;
    } else {
      RK_CHECK(t.device() == dev, "[{}] inputs on different devices ({} and {})", op,
               device_name(dev), device_name(t.device()));
    }
  }
}

bool has_low_precision(std::span<const Tensor> in, std::span<const Tensor> out) {
  for (auto& t : in)
    if (t.defined() && is_low_precision(t.dtype())) return true;
  for (auto& t : out)
    if (t.defined() && is_low_precision(t.dtype())) return true;
  return false;
}

namespace {
// Elementwise conversion between f32 and bf16/f16 of two dense tensors of one shape: the cast
// op's cpu kernel (vectorised, rounding to nearest even), the reference loops otherwise. (Inside
// a kernel call, so not an op of its own: its buffers are the kernel's workspace.)
void convert(const Tensor& src, const Tensor& dst) {
  if (src.is_meta() || src.numel() == 0) return;
  KernelCtx ctx;
  Tensor out = dst;
  std::span<Tensor> outs(&out, 1);
  if (!Cast::cpu(ctx, std::span<const Tensor>(&src, 1), outs, {dst.dtype()}).ok)
    Cast::ref(ctx, std::span<const Tensor>(&src, 1), outs, {dst.dtype()});
}

// An f32 workspace tensor in t's layout (a channels-last call stays one: its kernel reads the
// strides, and convert's flat loop needs both sides in one layout).
Tensor f32_like(KernelCtx& ctx, const Tensor& t) {
  Tensor w = ctx.workspace_tensor(t.shape(), DType::f32);
  if (!t.prefers_channels_last()) return w;
  return make_view(w, t.shape(), channels_last_strides(t.shape()), w.offset());
}
}  // namespace

std::vector<Tensor> widen(KernelCtx& ctx, std::span<const Tensor> in) {
  std::vector<Tensor> r(in.begin(), in.end());
  for (auto& t : r)
    if (t.defined() && is_low_precision(t.dtype())) {
      Tensor w = f32_like(ctx, t);
      // convert's loop is flat: it needs both sides in one layout; any other strides (an op that
      // takes strided inputs, say contiguous of a transposed bf16 matrix) go element by element.
      if (t.is_contiguous() || t.prefers_channels_last())
        convert(t, w);
      else
        raw_copy(w, t);
      t = w;
    }
  return r;
}

std::vector<Tensor> f32_outputs(KernelCtx& ctx, std::span<const Tensor> out) {
  std::vector<Tensor> r(out.begin(), out.end());
  for (auto& t : r)
    if (t.defined() && is_low_precision(t.dtype())) t = f32_like(ctx, t);
  return r;
}

void narrow(std::span<const Tensor> wide, std::span<Tensor> out) {
  for (size_t i = 0; i < out.size(); ++i)
    if (!wide[i].same(out[i])) convert(wide[i], out[i]);
}

void note_failure(std::string_view op, std::span<const Tensor> in) {
  t_failure.op = std::string(op);
  t_failure.scope = current_scope();
  t_failure.in_shapes.clear();
  for (auto& t : in) t_failure.in_shapes.push_back(t.defined() ? t.shape() : Shape{});
}

Tensor make_output(std::string_view op, const TensorSpec& spec, std::span<const Tensor> in, int alias, Device dev) {
  if (alias < 0) {
    Tensor t = Tensor::empty(spec.shape, spec.dtype, dev, spec.format);
    if (fill_outputs_with_nan() && dev == Device::cpu && is_floating(t.dtype())) raw_fill(t, std::nan(""));
    return t;
  }
  RK_CHECK(size_t(alias) < in.size() && in[size_t(alias)].defined(), "[{}] the input written in place is missing", op);
  const Tensor& t = in[size_t(alias)];
  RK_CHECK(t.shape() == spec.shape && t.dtype() == spec.dtype, "[{}] writes {} in place but its result is {} {}", op,
           t.str(), shape_str(spec.shape), dtype_name(spec.dtype));
  return t;
}

void make_dense(std::vector<Tensor>& kin, uint32_t keep, uint32_t channels_last) {
  for (size_t i = 0; i < kin.size(); ++i) {
    Tensor& t = kin[i];
    if (!t.defined() || ((keep >> i) & 1u)) continue;  // an input written in place stays itself
    NoGrad no_grad;  // the caller's node differentiates through the original input
    if (((channels_last >> i) & 1u) && t.dim() == 4) {
      if (!t.is_channels_last()) t = call1<Contiguous>({t}, {.channels_last = true});
    } else if (!t.is_contiguous()) {
      t = call1<Contiguous>({t});
    }
  }
}

namespace {
// The reference kernels read and write dense tensors (plain loops over NCHW). A channels-last
// call whose fast kernel declined gets them on dense workspace copies, the results copied back
// into its channels-last outputs; an op that takes strided inputs gets its tensors as they are.
void run_ref(int id, KernelFn ref, KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out,
             const void* attrs) {
  bool dense = true;
  for (auto& t : in) dense = dense && (!t.defined() || t.is_contiguous());
  for (auto& t : out) dense = dense && (!t.defined() || t.is_contiguous());
  if (dense || op_info(id).takes_strided) {
    ref(ctx, in, out, attrs);
    return;
  }
  std::vector<Tensor> din(in.begin(), in.end()), dout(out.begin(), out.end());
  for (auto& t : din)
    if (t.defined() && !t.is_contiguous()) {
      Tensor d = ctx.workspace_tensor(t.shape(), t.dtype());
      raw_copy(d, t);
      t = d;
    }
  for (auto& t : dout)
    if (t.defined() && !t.is_contiguous()) t = ctx.workspace_tensor(t.shape(), t.dtype());
  ref(ctx, din, dout, attrs);
  for (size_t i = 0; i < out.size(); ++i)
    if (!dout[i].same(out[i])) raw_copy(out[i], dout[i]);
}

void run_kernels_unguarded(int id, std::string_view op, Device dev, std::span<const Tensor> kin,
                           std::span<Tensor> out, const void* attrs, KernelRun& run) {
  const KernelTable& table = kernel_table();
  const KernelFn cpu = table.cpu[size_t(id)], ref = table.ref[size_t(id)];
  switch (dev) {
    case Device::cpu: {
      KernelCtx ctx;
      bool done = false;
      if (cpu && !force_reference()) {
        Support s = cpu(ctx, kin, out, attrs);
        done = s.ok;
        if (!done) run.skipped = s.why;
      } else {
        run.skipped = cpu ? "reference forced" : "no cpu kernel";
      }
      if (done) {
        run.kernel = "cpu";
      } else if (has_low_precision(kin, out)) {
        // No bf16/f16 kernel took the call: compute in f32 and round the outputs back.
        bool wide_done = false;
        run_widened(ctx, kin, out, [&](std::span<const Tensor> win, std::span<Tensor> wout) {
          if (cpu && !force_reference()) wide_done = cpu(ctx, win, wout, attrs).ok;
          if (!wide_done) {
            run_ref(id, ref, ctx, win, wout, attrs);
            run.macs_counted = ctx.macs_counted();
          }
          return true;
        });
        run.kernel = wide_done ? "cpu-f32" : "ref-f32";
      } else {
        run_ref(id, ref, ctx, kin, out, attrs);
        run.kernel = "ref";
        run.macs_counted = ctx.macs_counted();
      }
      run.workspace_bytes = ctx.workspace_bytes();
      if (observing_ops()) {
        run.impl = ctx.impl();
        run.algo = ctx.algo();
        run.lane_use = ctx.lane_use();
        run.reorder_bytes = ctx.reorder_bytes();
        run.work_share = ctx.work_share();
        run.unread_bytes = ctx.unread_bytes();
      }
      return;
    }
    case Device::meta: {
      // Planning: the cpu kernel requests its workspace (accounted on meta) and runs nothing.
      if (!cpu || !plan_kernels_on_meta() || !*table.cpu_plans[size_t(id)] || force_reference()) return;
      KernelCtx ctx(KernelCtx::Mode::plan);
      Support s = cpu(ctx, kin, out, attrs);
      if (s.ok) {
        run.kernel = "plan";
      } else {
        run.skipped = s.why;
        // As on the cpu: no low-precision kernel took the call, so it computes in f32 on
        // widened copies (accounted here as they will be there).
        if (has_low_precision(kin, out)) {
          bool wide_ok = false;
          run_widened(ctx, kin, out, [&](std::span<const Tensor> win, std::span<Tensor> wout) {
            wide_ok = cpu(ctx, win, wout, attrs).ok;
            return true;
          });
          run.kernel = wide_ok ? "plan-f32" : "plan-ref-f32";
        }
      }
      run.workspace_bytes = ctx.workspace_bytes();
      run.impl = ctx.impl();
      run.algo = ctx.algo();
      run.lane_use = ctx.lane_use();
      run.reorder_bytes = ctx.reorder_bytes();
      run.work_share = ctx.work_share();
      run.unread_bytes = ctx.unread_bytes();
      return;
    }
    case Device::cuda: {
      KernelCtx ctx;
      Support s = table.cuda[size_t(id)](ctx, kin, out, attrs);
      RK_CHECK(s.ok, "[{}] no cuda kernel: {}", op, s.why);
      run.kernel = "cuda";
      run.workspace_bytes = ctx.workspace_bytes();
      return;
    }
  }
}
}  // namespace

// A library's own exception (oneDNN's "could not create a primitive", std::bad_alloc) names no
// op and no shape; it leaves here as a reckon::Error that names both.
void run_kernels(int id, std::string_view op, Device dev, std::span<const Tensor> kin, std::span<Tensor> out,
                 const void* attrs, KernelRun& run) {
  auto where = [&] {
    std::string s;
    for (const Tensor& t : kin) {
      if (!s.empty()) s += ", ";
      s += t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), fmt::join(t.shape(), "x")) : "none";
    }
    return fmt::format("[{}] on {} with inputs ({})", op, device_name(dev), s);
  };
  try {
    run_kernels_unguarded(id, op, dev, kin, out, attrs, run);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("{}: out of memory (std::bad_alloc)", where()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", where(), e.what()));
  }
}

void report(int id, std::string_view op, const void* attrs, const Cost& cost, KernelRun&& run,
            std::span<const Tensor> in, std::span<const Tensor> out, int64_t saved_bytes, SavedSet saved,
            uint32_t aliases, Tag out_tag) {
  OpRecord r;
  r.op = op;
  r.op_id = id;
  r.attrs = attrs;
  r.inputs = in;
  r.outputs = out;
  r.scope = current_scope();
  r.backward = in_backward();
  r.recompute = recomputing();
  r.phase = current_phase();
  r.saved = saved;
  r.aliases = aliases;
  if (autocast_active()) r.autocast = autocast_state().dtype;
  r.algo = run.algo;
  r.lane_use = run.lane_use;
  r.reorder_bytes = run.reorder_bytes;
  r.work_share = run.work_share;
  r.unread_bytes = run.unread_bytes;
  r.out_tag = out_tag;
  r.cost = cost;
  r.kernel = run.kernel;
  r.skipped = std::move(run.skipped);
  for (auto& t : in) r.in_shapes.push_back(t.defined() ? t.shape() : Shape{});
  for (auto& t : in) r.in_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
  for (auto& t : out) r.out_shapes.push_back(t.shape());
  r.macs_counted = run.macs_counted;
  r.workspace_bytes = run.workspace_bytes;
  r.saved_bytes = saved_bytes;
  r.impl = std::move(run.impl);
  notify_ops(r);
}

}  // namespace detail
}  // namespace reckon
