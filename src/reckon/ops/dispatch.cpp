#include "reckon/ops/dispatch.h"

#include <cstring>

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

namespace {
thread_local bool t_recomputing = false;
}
Recomputing::Recomputing() : prev_(t_recomputing) { t_recomputing = true; }
Recomputing::~Recomputing() { t_recomputing = prev_; }
bool recomputing() { return t_recomputing; }

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

Tensor contiguous_copy(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), t.dtype(), t.device());
  if (t.is_meta()) return r;
  // Walk the strided source with an odometer; inner dimension copied by a typed loop.
  const int64_t nd = t.dim();
  const int64_t es = int64_t(dtype_size(t.dtype()));
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(r.raw_data());
  if (nd == 0) {
    std::memcpy(dst, src, size_t(es));
    return r;
  }
  const auto& shape = t.shape();
  const auto& st = t.strides();
  int64_t inner = shape[nd - 1], inner_stride = st[nd - 1];
  int64_t outer = t.numel() / std::max<int64_t>(inner, 1);
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd - 1; ++d) off += idx[size_t(d)] * st[d];
    const char* s = src + off * es;
    if (inner_stride == 1) {
      std::memcpy(dst, s, size_t(inner * es));
    } else if (es == 4) {
      auto* d4 = reinterpret_cast<uint32_t*>(dst);
      auto* s4 = reinterpret_cast<const uint32_t*>(s);
      for (int64_t i = 0; i < inner; ++i) d4[i] = s4[i * inner_stride];
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + i * es, s + i * inner_stride * es, size_t(es));
    }
    dst += inner * es;
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  return r;
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
// op's cpu kernel (vectorised, rounding to nearest even), the reference loops otherwise.
void convert(const Tensor& src, const Tensor& dst) {
  if (src.is_meta() || src.numel() == 0) return;
  KernelCtx ctx;
  Tensor out = dst;
  std::span<Tensor> outs(&out, 1);
  if (!Cast::cpu(ctx, std::span<const Tensor>(&src, 1), outs, {dst.dtype()}).ok)
    Cast::ref(ctx, std::span<const Tensor>(&src, 1), outs, {dst.dtype()});
}
}  // namespace

std::vector<Tensor> widen(KernelCtx& ctx, std::span<const Tensor> in) {
  std::vector<Tensor> r(in.begin(), in.end());
  for (auto& t : r)
    if (t.defined() && is_low_precision(t.dtype())) {
      Tensor w = ctx.workspace_tensor(t.shape(), DType::f32);
      convert(t, w);
      t = w;
    }
  return r;
}

std::vector<Tensor> f32_outputs(KernelCtx& ctx, std::span<const Tensor> out) {
  std::vector<Tensor> r(out.begin(), out.end());
  for (auto& t : r)
    if (t.defined() && is_low_precision(t.dtype())) t = ctx.workspace_tensor(t.shape(), DType::f32);
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

void report(std::string_view op, const Cost& cost, std::string_view kernel, std::string skipped,
            std::span<const Tensor> in, std::span<const Tensor> out, int64_t macs_counted,
            int64_t workspace_bytes, int64_t saved_bytes, std::string impl) {
  OpRecord r;
  r.op = op;
  r.scope = current_scope();
  r.backward = in_backward();
  r.recompute = recomputing();
  r.cost = cost;
  r.kernel = kernel;
  r.skipped = std::move(skipped);
  for (auto& t : in) r.in_shapes.push_back(t.defined() ? t.shape() : Shape{});
  for (auto& t : in) r.in_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
  for (auto& t : out) r.out_shapes.push_back(t.shape());
  r.macs_counted = macs_counted;
  r.workspace_bytes = workspace_bytes;
  r.saved_bytes = saved_bytes;
  r.impl = std::move(impl);
  notify_ops(r);
}

}  // namespace detail
}  // namespace reckon
