// What an op is. Every op is one struct that carries, in one place:
//   kName                      the op's name (errors, ledger, ONNX report)
//   Attrs                      its non-tensor arguments
//   infer(in, attrs)           output shapes/dtypes, or reckon::Error naming the bad argument
//   cost(in, out, attrs)       MACs, other FLOPs, bytes read and written
//   saved(attrs, needs)        which inputs/outputs the autograd node keeps (= activation memory),
//                              given which inputs need a gradient
//   Attrs::RK_FIELDS(...)      the attributes as data: names and members, for JSON and replay
//   ref(ctx, in, out, attrs)   the reference kernel: plain loops, f32 and f64, counts its MACs
//   cpu(ctx, in, out, attrs)   optional fast kernel; returns Support{false, why} to decline
//   backward(args, attrs)      input gradients written with other ops, or kNoGradient = "why"
//   onnx(args, attrs)          its ONNX mapping as code (ops/onnx_map.h), or kNotExportable = "why"
//   kAmp = AmpPolicy::lower    optional: its mixed-precision rule (ops/autocast.h; default promote)
//   alias_of(out, attrs)       optional: an in-place op's output `out` is input alias_of(...) itself
//                              (written in place, not allocated); -1 for an output it allocates
//   kOverwrites = true         optional, with alias_of: it writes its in-place outputs without
//                              reading them first (fill_, copy_), which the ledger's bandwidth tells
//                              apart from an update that reads what it writes (ledger/time_model.h)
//   kClass = OpClass::conv     optional: what the ledger groups it by (conv, linear, update, write)
//   kTakesStrided = true       optional: its kernels take strided inputs (else the dispatcher
//                              makes them dense first, with a recorded `contiguous` op)
//   channels_last(in, attrs)   optional, with kChannelsLastIn / kChannelsLastOut (bit masks): true
//                              when this call runs channels-last (NHWC, core/tensor.h), because an
//                              input is and its fast kernel takes it. The dispatcher then makes the
//                              inputs of kChannelsLastIn channels-last (a recorded `contiguous`
//                              op where one is not) and allocates the outputs of kChannelsLastOut
//                              so; other inputs are made dense, other outputs are contiguous.
// Kernels are declared here and defined under kernels/; the dispatcher (dispatch.h) is the
// only code that calls them, through the per-device table generated from the one list
// (op_list.h). This file is not an op registry: the list is op_list.h.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/reflect.h"
#include "reckon/core/tensor.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/onnx_map.h"

namespace reckon {

// Which inputs of a call need a gradient: bit i for input i.
struct NeedsGrad {
  uint32_t bits = 0;
  constexpr bool operator[](size_t i) const { return (bits >> i) & 1u; }
  constexpr bool any() const { return bits != 0; }
};

// Which part of a training step an op call belongs to: the graph's nodes and the ledger's rows
// carry it. backward: run by the autograd engine (the nodes' backward ops and the gradient sums
// between them); recompute: a forward op run again in backward (autograd/checkpoint.h);
// optimizer: the update (the optimizers and the loss scaler set it).
enum class Phase : uint8_t { forward, backward, recompute, optimizer };
std::string_view phase_name(Phase p);
Phase current_phase();
class PhaseGuard {
 public:
  explicit PhaseGuard(Phase p);
  ~PhaseGuard();
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  Phase prev_;
};

// What the ledger groups an op by (op traits, instead of matching names).
enum class OpClass : uint8_t {
  other,
  conv,    // convolutions (forward; their backward ops too, told apart by phase)
  linear,  // linear, matmul
  update,  // an optimizer's update of its parameters and state
  write,   // fills, copies and in-place adds: gradient accumulation, zeroing, loss scaling
};
template <class Op>
constexpr OpClass op_class() {
  if constexpr (requires { Op::kClass; })
    return Op::kClass;
  else
    return OpClass::other;
}

// How a kernel computed, where it has a choice the ledger times differently (kernels note it).
enum class KernelAlgo : uint8_t { none, direct, winograd };

struct Cost {
  int64_t macs = 0;           // multiply-accumulates (FLOPs = 2 x MACs)
  int64_t flops = 0;          // other floating-point operations (adds, exps, compares...)
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  Cost& operator+=(const Cost& o) {
    macs += o.macs;
    flops += o.flops;
    bytes_read += o.bytes_read;
    bytes_written += o.bytes_written;
    return *this;
  }
};

// Bytes of all defined tensors / specs: the default traffic of an op.
int64_t bytes_of(std::span<const Tensor> ts);
int64_t bytes_of(std::span<const TensorSpec> ts);
// Elementwise default: n flops per output element, reads all inputs, writes all outputs.
Cost elementwise_cost(std::span<const Tensor> in, std::span<const TensorSpec> out,
                      int64_t flops_per_elem);

// Which tensors an op's autograd node keeps: bit i of inputs/outputs = keep input/output i.
struct SavedSet {
  uint32_t inputs = 0;
  uint32_t outputs = 0;
};

// The saved set of a product of two inputs (conv, linear, matmul): the gradient of each needs
// the other, so input 0 is kept only when input 1 needs a gradient and input 1 only when input 0
// does. A frozen layer (its weight needs none) keeps nothing of its input.
constexpr SavedSet saved_for_product(NeedsGrad needs) {
  return {(needs[1] ? 1u : 0u) | (needs[0] ? 2u : 0u), 0};
}

// A kernel's answer to "can you run this call?".
struct Support {
  bool ok = true;
  const char* why = "";
  static Support yes() { return {true, ""}; }
  static Support no(const char* why) { return {false, why}; }
};

// What a kernel can ask of the framework while it runs.
// A planning context (Mode::plan) is what the dispatcher hands a cpu kernel on the meta
// device when kernel planning is on (PlanKernelsOnMeta): the kernel requests exactly the
// workspace it would request for real, which is then accounted on the meta device, and
// returns without touching data (tensors are meta: raw_data() is null).
class KernelCtx {
 public:
  enum class Mode : uint8_t { run, plan };
  explicit KernelCtx(Mode m = Mode::run) : mode_(m) {}
  bool planning() const { return mode_ == Mode::plan; }
  // Reference kernels report the MACs they actually perform; the op harness checks the sum
  // against cost().macs.
  void count_macs(int64_t n) { macs_counted_ += n; }
  int64_t macs_counted() const { return macs_counted_; }
  // Scratch memory, tagged `workspace`, freed when the tensor handle dies.
  Tensor workspace(int64_t bytes);
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // A tensor of workspace that lives as long as this context (the kernel call); meta when planning.
  Tensor workspace_tensor(const Shape& shape, DType dtype);
  // n zeroed elements of workspace that live as long as this context (the kernel call).
  // The implementation a kernel chose when it has several (oneDNN's name for it, e.g.
  // "jit_wino_4x3:avx512_core"); it goes into the op record, where the ledger times it.
  void note_impl(std::string s, KernelAlgo algo = KernelAlgo::none) {
    impl_ = std::move(s);
    algo_ = algo;
  }
  const std::string& impl() const { return impl_; }
  KernelAlgo algo() const { return algo_; }
  // The share of the vector lanes the kernel's multiply-adds fill, where rows shorter than a
  // vector leave some idle (reckon's small direct convolutions: LeNet-5's 10-wide rows in 16
  // lanes, 0.625). The ledger times the work issued, the op's FLOPs / lane_use, so that one
  // line per family holds for layers of other widths.
  void note_lane_use(double share) { lane_use_ = share; }
  double lane_use() const { return lane_use_; }
  // Bytes a kernel's own layout conversions move, read plus written (oneDNN's reorders of the
  // weights into its blocked layout and back, of dy or x where a primitive wants another layout),
  // noted while planning too. Their time depends on the bytes converted, not on the op's work:
  // the ledger times them apart (DeviceSpec::reorder_bandwidth), where a line over the op's
  // roofline had put resnet18_cifar's 512-channel 3x3 layers at batch 1 at a third of their time.
  void note_reorder(int64_t bytes) { reorder_bytes_ += bytes; }
  int64_t reorder_bytes() const { return reorder_bytes_; }
  // The share of the op's counted MACs its kernel computes, and the bytes of its counted traffic
  // it never reads: oneDNN's direct convolutions skip the taps on padding and the weights no
  // output reads (conv_impl_skips_padding, conv_tap_shares: ops/conv.h). The wide time probe's
  // 3x3 layers on 1x1 images compute a ninth of their MACs: counted in full, that line had timed
  // resnet18_cifar's 4x4 layers at a third of their time.
  void note_work(double share, int64_t unread_bytes) {
    work_share_ = share;
    unread_bytes_ = unread_bytes;
  }
  double work_share() const { return work_share_; }
  int64_t unread_bytes() const { return unread_bytes_; }
  // Elements of T per thread in a scratch buffer split between threads: n rounded up to whole
  // 64-byte cache lines (scratch is 64-byte aligned), so that no two threads write one line.
  // Without it, 2 threads each summing rows of 6 floats into neighbouring slices took 10x longer.
  template <class T>
  static constexpr int64_t per_thread(int64_t n) {
    constexpr int64_t k = 64 / int64_t(sizeof(T)) > 0 ? 64 / int64_t(sizeof(T)) : 1;
    return (n + k - 1) / k * k;
  }
  template <class T>
  T* scratch(int64_t n) {
    held_.push_back(workspace(n * int64_t(sizeof(T))));
    T* p = static_cast<T*>(held_.back().raw_data());
    if (p) std::fill_n(p, n, T(0));
    return p;
  }

 private:
  Mode mode_ = Mode::run;
  KernelAlgo algo_ = KernelAlgo::none;
  double lane_use_ = 1.0;
  int64_t reorder_bytes_ = 0;
  double work_share_ = 1.0;
  int64_t unread_bytes_ = 0;
  std::string impl_;
  std::vector<Tensor> held_;
  int64_t macs_counted_ = 0;
  int64_t workspace_bytes_ = 0;
};

// Layout conversions of an input that the next kernels of the same backward may reuse. A
// convolution's backward computes dx and dw from the same dy, and each oneDNN kernel would
// reorder dy into its blocked layout. While a ShareConversions lives (Conv2d::backward), a kernel
// keeps its converted copy here, keyed by the source's storage and offset (the payload is the
// kernel's: the copy and its layout), and the next kernel that wants the same layout finds it.
// The storage is held weakly: a source freed meanwhile (an autocast copy of dy made for one
// call) matches nothing, even if a new storage takes its address.
// The copies are workspace, alive until the scope ends, on the meta device as on the cpu.
class ShareConversions {
 public:
  struct Entry {
    std::weak_ptr<Storage> storage;
    int64_t offset = 0;
    std::shared_ptr<void> payload;
  };
  ShareConversions();
  ~ShareConversions();
  ShareConversions(const ShareConversions&) = delete;
  ShareConversions& operator=(const ShareConversions&) = delete;
  // The innermost scope's entries on this thread; null outside any.
  static std::vector<Entry>* active();

 private:
  std::vector<Entry> entries_;
  ShareConversions* prev_;
};

// What backward receives. Tensors not in the op's saved set are undefined; every input's
// spec is kept (shapes are free), as is whether each input needs a gradient.
struct BackwardArgs {
  std::vector<Tensor> inputs;         // saved inputs (undefined where not saved)
  std::vector<Tensor> outputs;        // saved outputs (undefined where not saved)
  std::vector<TensorSpec> input_specs;
  std::vector<Tensor> grad_outputs;   // undefined where no gradient flowed
  std::vector<bool> needs_grad;       // per input
};

// Everything the dispatcher knows about one op call: the node it is. Observers (the graph
// capture, the ledger's measurement, tests) receive it. The fields marked "during the callback"
// point into the call and are valid only while the observer runs; a stored copy must not use
// them (the graph capture turns them into values and copies the attributes).
struct OpRecord {
  std::string_view op;
  int op_id = -1;           // index in the one list (op_list.h)
  const void* attrs = nullptr;  // the call's Op::Attrs (during the callback)
  std::span<const Tensor> inputs, outputs;  // the tensors the kernel read and wrote (during the callback)
  std::string scope;        // module path, e.g. "features.0"
  bool backward = false;    // ran inside a backward pass
  bool recompute = false;   // a forward op run again in backward to rebuild dropped activations
  Phase phase = Phase::forward;
  SavedSet saved;           // what the autograd node keeps (0 when no node was recorded)
  uint32_t aliases = 0;     // bit i: output i is an input written in place
  DType autocast = DType::f32;  // the autocast dtype applied to the call (f32: none)
  KernelAlgo algo = KernelAlgo::none;
  double lane_use = 1.0;        // KernelCtx::lane_use
  int64_t reorder_bytes = 0;    // KernelCtx::reorder_bytes
  double work_share = 1.0;      // KernelCtx::work_share
  int64_t unread_bytes = 0;     // KernelCtx::unread_bytes
  Tag out_tag = Tag::temporary; // the tag the outputs were allocated under
  Cost cost;
  std::string_view kernel;  // "cpu", "ref", "view", "none" (meta) or "plan" (meta, cpu kernel planned)
  std::string skipped;      // why the fast kernel was not used ("" if it was)
  std::string impl;         // the implementation the kernel chose, if it said (KernelCtx::note_impl)
  std::vector<Shape> in_shapes, out_shapes;
  std::vector<DType> in_dtypes;   // per input (f32 for an undefined one)
  int64_t macs_counted = -1;  // what the reference kernel counted, -1 if it did not run
  int64_t workspace_bytes = 0;
  int64_t saved_bytes = 0;    // bytes of newly saved-for-backward tensors
};

using OpObserver = std::function<void(const OpRecord&)>;
// Installs an observer for the calling thread while the guard lives (they nest).
class ObserveOps {
 public:
  explicit ObserveOps(OpObserver f);
  ~ObserveOps();
  ObserveOps(const ObserveOps&) = delete;
  ObserveOps& operator=(const ObserveOps&) = delete;
};
bool observing_ops();
void notify_ops(const OpRecord& r);

// Module path scope ("layer1.0.conv1"): nn::Module pushes its name while it runs.
class ScopeGuard {
 public:
  explicit ScopeGuard(const std::string& name);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
};
const std::string& current_scope();
void set_scope_for_backward(const std::string* scope, bool backward);  // engine use
bool in_backward();
// Sets the scope to `scope` itself (not appended) and whether ops run inside a backward node,
// while it lives, then restores both (the graph interpreter replays each node so).
class ScopeOverride {
 public:
  ScopeOverride(const std::string* scope, bool backward);
  ~ScopeOverride();
  ScopeOverride(const ScopeOverride&) = delete;
  ScopeOverride& operator=(const ScopeOverride&) = delete;

 private:
  const std::string* prev_scope_;
  bool prev_backward_;
};
// Recomputation (activation checkpointing): while a Recomputing guard lives, op records say
// recompute = true (the ledger counts their MACs as the price of the memory saved).
class Recomputing {
 public:
  Recomputing();
  ~Recomputing();
  Recomputing(const Recomputing&) = delete;
  Recomputing& operator=(const Recomputing&) = delete;

 private:
  bool prev_;
};
bool recomputing();

// Kernel planning on the meta device. A cpu kernel that can plan says so by setting
// cpu_kernel_plans<Op> = true at static initialisation (kernels/cpu/conv.cpp, matmul.cpp).
// While a PlanKernelsOnMeta guard is on (the ledger turns it on; the default is off), the
// dispatcher calls such a kernel on meta tensors with a planning context, so the workspace the
// real run will request is accounted on the meta device at the same moment of the same op.
template <class Op>
inline bool cpu_kernel_plans = false;
class PlanKernelsOnMeta {
 public:
  explicit PlanKernelsOnMeta(bool on = true);
  ~PlanKernelsOnMeta();
  PlanKernelsOnMeta(const PlanKernelsOnMeta&) = delete;
  PlanKernelsOnMeta& operator=(const PlanKernelsOnMeta&) = delete;

 private:
  bool prev_;
};
bool plan_kernels_on_meta();

// The last op call on this thread whose shape inference threw: the op and the module scope it
// ran in, so a caller catching the error can name the layer where the shape broke.
struct OpFailure {
  std::string op;
  std::string scope;
  std::vector<Shape> in_shapes;
};
const OpFailure& last_op_failure();
void clear_op_failure();

// Forcing the reference kernels (tests compare the fast kernels against them).
class ForceReference {
 public:
  explicit ForceReference(bool on = true);
  ~ForceReference();

 private:
  bool prev_;
};
bool force_reference();

// Tests: fill every op output with NaN before its kernel runs, so a kernel that leaves an
// element unwritten is caught.
class FillOutputsWithNaN {
 public:
  explicit FillOutputsWithNaN(bool on = true);
  ~FillOutputsWithNaN();

 private:
  bool prev_;
};
bool fill_outputs_with_nan();

template <class Op>
concept HasCpuKernel = requires(KernelCtx& c, std::span<const Tensor> in, std::span<Tensor> out,
                                const typename Op::Attrs& a) {
  { Op::cpu(c, in, out, a) } -> std::same_as<Support>;
};
template <class Op>
concept HasBackward = requires(const BackwardArgs& b, const typename Op::Attrs& a) {
  { Op::backward(b, a) } -> std::same_as<std::vector<Tensor>>;
};
template <class Op>
concept HasViewKernel = requires(std::span<const Tensor> in, const typename Op::Attrs& a) {
  { Op::view(in, a) } -> std::same_as<Tensor>;
};
template <class Op>
concept HasInPlace = requires(const typename Op::Attrs& a) {
  { Op::alias_of(0, a) } -> std::same_as<int>;
};
template <class Op>
concept HasChannelsLast = requires(std::span<const Tensor> in, const typename Op::Attrs& a) {
  { Op::channels_last(in, a) } -> std::same_as<bool>;
  { Op::kChannelsLastIn } -> std::convertible_to<uint32_t>;
  { Op::kChannelsLastOut } -> std::convertible_to<uint32_t>;
};
// The one rule for an op whose kernels read and write raw buffers position by position (the
// elementwise ones and cast): it runs channels-last when some 4-D input of `mask` prefers it and
// every input of the mask has that input's shape (no broadcasting), dtype f32, bf16 or f16, on
// the cpu or meta (which decides alike, so the ledger sees the same reorders), with the fast
// kernels allowed.
bool elementwise_channels_last(std::span<const Tensor> in, uint32_t mask);
// What every channels_last rule asks first: t is on the cpu or meta (which decide alike; the
// CUDA kernels read NCHW) and the fast kernels are allowed (the reference ones read NCHW too).
bool channels_last_kernels_allowed(const Tensor& t);

template <class Op>
constexpr bool takes_strided() {
  if constexpr (requires { Op::kTakesStrided; })
    return Op::kTakesStrided;
  else
    return false;
}

// The kernel table's entry type: one function per (op, device), attributes type-erased.
using KernelFn = Support (*)(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const void* attrs);

// The compile-time contract of an op (checked for every entry of op_list.h).
template <class Op>
concept OpDef = requires(std::span<const Tensor> in, std::span<const TensorSpec> specs,
                         std::span<Tensor> out, const typename Op::Attrs& a, KernelCtx& c) {
  { Op::kName } -> std::convertible_to<std::string_view>;
  { Op::infer(in, a) } -> std::same_as<std::vector<TensorSpec>>;
  { Op::cost(in, specs, a) } -> std::same_as<Cost>;
  { Op::saved(a, NeedsGrad{}) } -> std::same_as<SavedSet>;
  requires Reflected<typename Op::Attrs>;
  requires HasViewKernel<Op> || requires { { Op::ref(c, in, out, a) } -> std::same_as<void>; };
  requires HasBackward<Op> || requires { { Op::kNoGradient } -> std::convertible_to<std::string_view>; };
  requires requires(OnnxArgs& o) { { Op::onnx(o, a) } -> std::same_as<std::vector<std::string>>; } ||
               requires { { Op::kNotExportable } -> std::convertible_to<std::string_view>; };
};

}  // namespace reckon

// Declaration helpers for op structs (definitions go in ops/*.cpp and kernels/*/*.cpp).
namespace reckon {
struct NoAttrs {
  RK_FIELDS()
};
}  // namespace reckon
#define RK_OP_DECLS(AttrsType)                                                              \
  using Attrs = AttrsType;                                                                  \
  static std::vector<::reckon::TensorSpec> infer(std::span<const ::reckon::Tensor> in,      \
                                                 const Attrs& a);                           \
  static ::reckon::Cost cost(std::span<const ::reckon::Tensor> in,                          \
                             std::span<const ::reckon::TensorSpec> out, const Attrs& a);    \
  static ::reckon::SavedSet saved(const Attrs& a, ::reckon::NeedsGrad needs)
#define RK_OP_ONNX                                                                          \
  static std::vector<std::string> onnx(::reckon::OnnxArgs& o, const Attrs& a)
#define RK_OP_REF                                                                           \
  static void ref(::reckon::KernelCtx& ctx, std::span<const ::reckon::Tensor> in,           \
                  std::span<::reckon::Tensor> out, const Attrs& a)
#define RK_OP_CPU                                                                           \
  static ::reckon::Support cpu(::reckon::KernelCtx& ctx, std::span<const ::reckon::Tensor> in, \
                               std::span<::reckon::Tensor> out, const Attrs& a)
#define RK_OP_BACKWARD                                                                      \
  static std::vector<::reckon::Tensor> backward(const ::reckon::BackwardArgs& b, const Attrs& a)
