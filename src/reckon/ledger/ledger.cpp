// The ledger: one training step on the meta device, read back from the op records and the
// meta tracker (ledger.h). The measured side runs the same step function on the cpu.
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/process.h"
#include "reckon/ledger/time_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <tuple>

#include "reckon/graph/capture.h"
#include "reckon/nn/graph_module.h"
#include "reckon/nn/models/registry.h"
#include "reckon/nn/module.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"
#include "reckon/ops/op_list.h"
#include "reckon/nn/recompute.h"
#include "reckon/optim/factory.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"

namespace reckon {

namespace {

using Clock = std::chrono::steady_clock;

// More classes than any dataset has (ImageNet-21k has 21,841), and few enough that a classifier's
// weight cannot overflow a size.
constexpr int64_t kMaxClasses = int64_t(1) << 24;

void check_config(const LedgerConfig& cfg) {
  RK_CHECK(cfg.batch > 0, "[ledger] --batch must be positive, got {}", cfg.batch);
  RK_CHECK(cfg.precision == "fp32" || cfg.precision == "bf16" || cfg.precision == "fp16",
           "[ledger] unknown precision '{}' (fp32, bf16 or fp16)", cfg.precision);
  RK_CHECK(cfg.accum >= 1, "[ledger] --accum (gradient accumulation) must be at least 1 micro-batch, got {}", cfg.accum);
  checked_mul(cfg.batch, cfg.accum, "[ledger] --batch x --accum (the effective batch)");
  train::grad_scaler_on(cfg.grad_scaler, DType::f32);  // throws naming --grad-scaler
  RK_CHECK(cfg.optimizer == "sgd" || cfg.optimizer == "adamw", "[ledger] unknown optimizer '{}' (sgd or adamw)",
           cfg.optimizer);
  RK_CHECK(cfg.momentum >= 0.0, "[ledger] SGD momentum must be >= 0, got {}", cfg.momentum);
  RK_CHECK(cfg.num_classes >= 0 && cfg.num_classes <= kMaxClasses,
           "[ledger] --classes must be 1 to {} (0: the model's default), got {}", kMaxClasses, cfg.num_classes);
  RK_CHECK(cfg.dataset_size >= 0, "[ledger] the dataset size must be >= 0, got {}", cfg.dataset_size);
  RK_CHECK(cfg.epochs >= 1, "[ledger] the number of epochs must be >= 1, got {}", cfg.epochs);
  RK_CHECK(cfg.loader_batches >= 0 && cfg.eval_loader_batches >= 0 && cfg.last_batch >= 0,
           "[ledger] loader batches (training, evaluation) and the epoch's last batch must be >= 0, got {}, {}, {}",
           cfg.loader_batches, cfg.eval_loader_batches, cfg.last_batch);
  RK_CHECK(cfg.eval_batch >= 0 && cfg.eval_batch <= cfg.eval_samples && cfg.val_batch >= 0 &&
               cfg.val_batch <= cfg.val_samples,
           "[ledger] an evaluation's batch must be 0 to its split's samples, got {} of {} (test), {} of {} (validation)",
           cfg.eval_batch, cfg.eval_samples, cfg.val_batch, cfg.val_samples);
  RK_CHECK(cfg.measure_steps >= 1, "[ledger] measure_steps must be >= 1, got {}", cfg.measure_steps);
  if (!cfg.conv_algo.empty()) parse_conv_algorithm(cfg.conv_algo, "[ledger] --conv-algo");
  train::parse_activation_layout(cfg.memory_format);  // throws naming --memory-format
  if (device_key(cfg.device) != "cpu") device_spec(cfg.device);  // throws naming the known devices (the cpu: run_ledger)
}

void check_sample_shape(const Shape& s) {
  bool ok = s.size() == 3;
  for (auto d : s) ok = ok && d > 0;
  RK_CHECK(ok, "[ledger] the input must be one sample's C x H x W with positive sizes, got {}", shape_str(s));
}

// SGD (lr 0.01, the config's momentum) or AdamW with PyTorch's defaults: each optimizer's own
// lr and weight decay (optim/factory.h).
std::unique_ptr<optim::Optimizer> make_optimizer(const LedgerConfig& cfg, std::vector<Tensor> params) {
  return optim::make_optimizer({.name = cfg.optimizer, .momentum = cfg.momentum}, std::move(params));
}

// Bytes of the distinct storages of a module's parameters and buffers (what it holds in `param`).
int64_t module_bytes(const nn::Module& m) {
  std::unordered_set<const Storage*> seen;
  int64_t b = 0;
  auto add = [&](const std::vector<std::pair<std::string, Tensor>>& ts) {
    for (const auto& [n, t] : ts)
      if (seen.insert(&t.storage()).second) b += t.storage().bytes();
  };
  add(m.named_parameters());
  add(m.named_buffers());
  return b;
}

// The tracker's live bytes that belong to others (not this model, not this step): subtracted
// from everything the step reports.
struct Others {
  std::array<int64_t, kNumTags> bytes{};
  int64_t total = 0;
};
Others others_now(Device d, const nn::Module& m) {
  MemStats s = tracker(d).stats();
  Others o;
  o.bytes = s.live_bytes;
  o.bytes[int(Tag::param)] -= module_bytes(m);
  for (auto b : o.bytes) o.total += b;
  return o;
}
LedgerMemory memory_since(Device d, const Others& o) {
  MemStats s = tracker(d).stats();
  LedgerMemory m;
  for (int i = 0; i < kNumTags; ++i) {
    m.at_peak_bytes[size_t(i)] = s.at_peak_bytes[size_t(i)] - o.bytes[size_t(i)];
    m.tag_peak_bytes[size_t(i)] = s.peak_bytes[size_t(i)] - o.bytes[size_t(i)];
  }
  m.peak_bytes = s.peak_total_bytes - o.total;
  return m;
}

// The ledger's view of one op call: a node of the captured step (the prediction) or a record of
// the measured one, read by its phase: the ops the engine runs between nodes (the seed gradient,
// gradient sums where branches meet) carry no module scope and are backward ops of "(autograd)";
// recomputed forward ops run during backward and count as backward work; the optimizer's are
// under "(optimizer)" (train::Step's scope).
struct LedgerOp {
  int op = -1;
  std::string_view name;
  std::string row;        // the row it belongs to
  Phase phase = Phase::forward;
  bool recompute() const { return phase == Phase::recompute; }
  bool backward() const { return phase == Phase::backward || phase == Phase::recompute; }
  Cost cost;
  KernelAlgo algo = KernelAlgo::none;
  double lane_use = 1.0;
  int64_t reorder_bytes = 0;  // its kernel's own layout conversions (KernelCtx::reorder_bytes)
  double work_share = 1.0;    // KernelCtx::work_share
  int64_t unread_bytes = 0;   // KernelCtx::unread_bytes
  std::string_view kernel;
  std::string_view impl;  // the implementation the kernel chose, if it said (oneDNN's name)
  std::vector<DType> in_dtypes;
  bool has_output = false;
  Shape out_shape;        // of output 0
  ConvShape conv;         // a convolution's or matrix product's shape class inputs (time_model.h), else 0s
  bool in_place = false;  // reads_what_it_writes (time_model.h): timed at the in-place bandwidth
  int64_t workspace_bytes = 0, saved_bytes = 0;
};

// An op family for what its first run adds to a process: the op and the implementation its
// kernel chose ("conv2d | jit:avx512_core", "conv2d | reckon small_direct"), which the meta
// device's planning names as the cpu's run does; the op alone where the kernel does not say.
std::string op_family(std::string_view op, std::string_view impl) {
  return impl.empty() ? std::string(op) : fmt::format("{} | {}", op, impl);
}

std::string row_key(const std::string& scope) { return scope.empty() ? "(model)" : scope; }
std::string row_of(const std::string& scope, Phase phase, bool in_backward_node) {
  if (scope.empty() && phase == Phase::backward && !in_backward_node) return "(autograd)";  // outside any node
  return row_key(scope);
}

// What a node and a record share (the dtypes and the output shape each gives its own way).
template <class R>
LedgerOp ledger_op_common(const R& r, int op, std::string_view name, bool in_backward_node) {
  LedgerOp o;
  o.op = op;
  o.name = name;
  o.row = row_of(r.scope, r.phase, in_backward_node);
  o.phase = r.phase;
  o.cost = r.cost;
  o.algo = r.algo;
  o.lane_use = r.lane_use;
  o.reorder_bytes = r.reorder_bytes;
  o.work_share = r.work_share;
  o.unread_bytes = r.unread_bytes;
  o.kernel = r.kernel;
  o.impl = r.impl;
  o.workspace_bytes = r.workspace_bytes;
  o.saved_bytes = r.saved_bytes;
  return o;
}

LedgerOp ledger_op(const graph::Graph& g, const graph::Node& n) {
  LedgerOp o = ledger_op_common(n, n.op, n.op_name(), n.in_backward_node);
  std::vector<Shape> ins, outs;
  for (int id : n.inputs) {
    o.in_dtypes.push_back(id >= 0 ? g.value(id).spec.dtype : DType::f32);
    ins.push_back(id >= 0 ? g.value(id).spec.shape : Shape{});
  }
  for (int id : n.outputs) outs.push_back(g.value(id).spec.shape);
  o.conv = conv_shape(o.name, ins, outs);
  o.in_place = reads_what_it_writes(n.op, n.aliases, n.outputs.size());
  o.has_output = !n.outputs.empty();
  if (o.has_output) o.out_shape = g.value(n.outputs[0]).spec.shape;
  return o;
}
std::vector<LedgerOp> ledger_ops(const graph::Graph& g) {
  std::vector<LedgerOp> r;
  r.reserve(g.nodes.size());
  for (const auto& n : g.nodes) r.push_back(ledger_op(g, n));
  return r;
}

LedgerOp ledger_op(const OpRecord& r) {
  LedgerOp o = ledger_op_common(r, r.op_id, r.op, r.backward);
  o.in_dtypes = r.in_dtypes;
  o.conv = conv_shape(o.name, r.in_shapes, r.out_shapes);
  o.in_place = reads_what_it_writes(r.op_id, r.aliases, r.out_shapes.size());
  o.has_output = !r.out_shapes.empty();
  if (o.has_output) o.out_shape = r.out_shapes[0];
  return o;
}

std::unique_ptr<optim::GradScaler> make_scaler(const LedgerConfig& cfg) {
  if (train::grad_scaler_on(cfg.grad_scaler, precision_dtype(cfg.precision)))
    return std::make_unique<optim::GradScaler>();
  return nullptr;
}

// One training step as the trainer runs it (train::Step): cfg.accum micro-batches of x, one
// update. The gradients were dropped before.
// With a capture, each micro-batch's loss is marked as an output of the graph.
int64_t train_step(nn::Module& m, optim::Optimizer& opt, optim::GradScaler* scaler, const LedgerConfig& cfg,
                   const Tensor& x, const Tensor& y, graph::Capture* cap = nullptr) {
  train::Step step(m, opt, scaler,
                   {.precision = precision_dtype(cfg.precision), .layout = train::parse_activation_layout(cfg.memory_format)});
  if (cap) step.on_loss = [cap](const Tensor& loss) { cap->mark_output(loss); };
  int64_t classes = 0;
  step.begin(x.size(0) * cfg.accum);
  for (int64_t k = 0; k < cfg.accum; ++k) {
    train::MicroResult r = step.micro(x, y);
    classes = r.logits.dim() == 2 ? r.logits.size(1) : 0;
  }
  step.finish();
  return classes;
}

// The precision an op computes in, for its peak (time_model.h).
std::string op_precision(const LedgerOp& r) { return compute_precision(r.in_dtypes); }

// A batch of `n` samples shaped like x, as the loader makes them (input-tagged; zeros on the cpu,
// so that a measured evaluation reads valid labels).
std::pair<Tensor, Tensor> loader_batch(Device d, const Shape& sample_of, int64_t n) {
  TagGuard tag(Tag::input);
  Shape s = sample_of;
  s[0] = n;
  if (d == Device::meta) return {Tensor::empty(s, DType::f32, d), Tensor::empty({n}, DType::i64, d)};
  return {Tensor::zeros(s, DType::f32, d), Tensor::zeros({n}, DType::i64, d)};
}

// Runs `one` (a step, an evaluation batch) until the allocator's blocks stop changing, 8 times at
// most. (A request may take a cached block of a larger class, so a second run can map a block the
// first did not; the blocks stop changing within a few: alexnet at batch 64 maps 2.4 MiB more in
// its second and third steps.)
template <class F>
void until_blocks_stable(Device d, F&& one) {
  for (int i = 0, same = 0; i < 8 && !same; ++i) {
    const HostMemory before = host_memory(d);
    one();
    const HostMemory after = host_memory(d);
    same = i > 0 && after.mapped_bytes == before.mapped_bytes && after.resident_bytes == before.resident_bytes &&
           after.small_held_bytes == before.small_held_bytes;
  }
}

void steps_until_stable(Device d, nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler,
                        const LedgerConfig& cfg, const Tensor& x, const Tensor& y) {
  until_blocks_stable(d, [&] {
    train_step(model, opt, scaler, cfg, x, y);
    opt.zero_grad();
  });
}

// One evaluation batch as train::evaluate runs it: no gradients, the run's autocast, the loss
// summed, the logits read as f32 (train::count_correct).
void eval_forward(nn::Module& model, const LedgerConfig& cfg, const Tensor& x, const Tensor& y) {
  NoGrad ng;
  Autocast ac(precision_dtype(cfg.precision));
  Tensor logits = model(x);
  Tensor loss = cross_entropy(logits, y, {.reduction = Reduction::sum});
  Tensor scores = contiguous(cast(logits, DType::f32));
}

// The evaluation of one split of `samples` images between epochs as train::evaluate runs it: eval
// mode, no gradients, the run's autocast, its loader's batches of `batch` (batch <= samples), the
// loss summed; batches until the allocator's blocks stop changing (a later batch may take a larger
// cached block than the first did and map another), then its last, shorter batch. The loader
// holds the batches it prepared ahead of the first: its prefetch (eval_loader_batches), but no
// more than the split has after it. At a batch other than the step's the allocator's cache is
// handed back before and after (as the trainer does).
void eval_pass(Device d, nn::Module& model, const LedgerConfig& cfg, const Shape& x_shape, int64_t batch,
               int64_t samples) {
  RK_CHECK(batch > 0 && batch <= samples, "[ledger] an evaluation batch of {} for a split of {} samples", batch,
           samples);
  const int64_t full = samples / batch, last = samples % batch;
  const bool other_batch = batch != cfg.batch;
  if (other_batch) host_memory_trim(d);
  model.eval();
  std::vector<std::pair<Tensor, Tensor>> batches;
  const int64_t ahead = std::min<int64_t>(cfg.eval_loader_batches, full + (last > 0) - 1);
  for (int64_t i = 1; i <= ahead; ++i) batches.push_back(loader_batch(d, x_shape, i < full ? batch : last));
  until_blocks_stable(d, [&] {
    auto [x, y] = loader_batch(d, x_shape, batch);  // the loader's next, the oldest freed
    eval_forward(model, cfg, x, y);
  });
  batches.clear();  // nothing is left to prepare ahead of the last
  if (last > 0) {  // the split's last, shorter batch: blocks of its own sizes
    auto [x, y] = loader_batch(d, x_shape, last);
    eval_forward(model, cfg, x, y);
  }
  model.train();
  if (other_batch) host_memory_trim(d);
}

// Warm-up steps before the observed one: the optimizer's state then exists, and the allocator's
// cache holds the blocks a long run keeps; with the run around the step (the config's
// loader_batches, last_batch, eval_batch and val_batch), an epoch's end and evaluation too, in the
// trainer's order. Returns the loader's batches, to be kept alive over the observed step.
// The meta device and the measured run take the same steps.
std::vector<Tensor> warm_up(Device d, nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler,
                            const LedgerConfig& cfg, const Tensor& x, const Tensor& y) {
  std::vector<Tensor> held;
  auto prefetch = [&] {  // the loader's batches prepared ahead of the step's
    for (int i = 0; i < cfg.loader_batches; ++i) {
      auto [bx, by] = loader_batch(d, x.shape(), x.size(0));
      held.push_back(bx), held.push_back(by);
    }
  };
  prefetch();
  steps_until_stable(d, model, opt, scaler, cfg, x, y);
  if (cfg.last_batch > 0 || cfg.eval_batch > 0 || cfg.val_batch > 0) {
    // The epoch's end: the loader has nothing prepared; the trainer still holds its last batch
    // (the short one, if any) while it evaluates.
    held.clear();
    Tensor lx, ly;
    if (cfg.last_batch > 0) {
      std::tie(lx, ly) = loader_batch(d, x.shape(), cfg.last_batch);
      train_step(model, opt, scaler, cfg, lx, ly);
      opt.zero_grad();
    }
    if (cfg.eval_batch > 0) eval_pass(d, model, cfg, x.shape(), cfg.eval_batch, cfg.eval_samples);
    if (cfg.val_batch > 0) eval_pass(d, model, cfg, x.shape(), cfg.val_batch, cfg.val_samples);
    lx = ly = Tensor();
    prefetch();  // the next epoch's
    steps_until_stable(d, model, opt, scaler, cfg, x, y);
  }
  return held;
}

struct MetaRun {
  std::shared_ptr<graph::Graph> graph;  // the observed step, captured
  std::vector<LedgerOp> ops;            // its nodes as the ledger reads them
  LedgerMemory memory;
  std::vector<LedgerMemSample> timeline;
  int64_t classes = 0;
  int64_t input_bytes = 0;
};

MetaRun run_on_meta(nn::Module& model, const Shape& in_shape, const LedgerConfig& cfg, const std::string& label) {
  RK_CHECK(model.device() == Device::meta, "[ledger] {}: the model must be built on the meta device, not {}", label,
           device_name(model.device()));
  MetaRun r;
  host_memory_restart(Device::meta);  // blocks cached by earlier meta runs are not this process's
  PlanKernelsOnMeta plan(cfg.plan_workspace);
  model.train();
  model.zero_grad(true);
  auto opt = make_optimizer(cfg, model.parameters());
  auto scaler = make_scaler(cfg);
  Others others = others_now(Device::meta, model);
  Tensor x, y;
  {
    TagGuard tag(Tag::input);
    x = Tensor::empty(in_shape, DType::f32, Device::meta);
    y = Tensor::empty({in_shape[0]}, DType::i64, Device::meta);
  }
  r.input_bytes = x.nbytes();
  clear_op_failure();
  try {
    const std::vector<Tensor> loader_held = warm_up(Device::meta, model, *opt, scaler.get(), cfg, x, y);
    tracker(Device::meta).reset_peak();
    graph::Capture cap;
    nn::declare_module(cap, model);
    cap.declare(x, graph::ValueKind::input, "x");
    cap.declare(y, graph::ValueKind::input, "target");
    // After every op the capture records (in the same order, so sample i is node i): the live
    // accounts by tag, the step's own.
    ObserveOps sample([&](const OpRecord& rec) {
      const MemStats s = tracker(Device::meta).stats();
      LedgerMemSample m{.node = int(r.timeline.size()), .phase = rec.phase};
      for (int i = 0; i < kNumTags; ++i) m.live_bytes[size_t(i)] = s.live_bytes[size_t(i)] - others.bytes[size_t(i)];
      r.timeline.push_back(m);
    });
    r.classes = train_step(model, *opt, scaler.get(), cfg, x, y, &cap);
    r.graph = std::make_shared<graph::Graph>(cap.finish());
  } catch (const Error& e) {
    model.zero_grad(true);
    const OpFailure& f = last_op_failure();
    if (f.op.empty()) throw Error(fmt::format("[ledger] {} with input {}: {}", label, shape_str(in_shape), e.what()));
    std::string type;
    for (auto& [name, mod] : model.named_modules())
      if (name == f.scope) type = mod->type_name();
    std::string shapes;
    for (const auto& s : f.in_shapes)
      if (!s.empty()) shapes += (shapes.empty() ? "" : ", ") + shape_str(s);
    throw Error(fmt::format("[ledger] {} with input {}: the shape broke at layer {}{}, op {} on {}: {}", label,
                            shape_str(in_shape), row_key(f.scope), type.empty() ? "" : " (" + type + ")", f.op,
                            shapes, e.what()));
  }
  r.memory = memory_since(Device::meta, others);
  const HostMemory hm = host_memory(Device::meta);
  r.memory.allocator_resident_bytes = hm.peak_resident_bytes;
  r.memory.allocator_cached_bytes = hm.cached_bytes;
  r.ops = ledger_ops(*r.graph);
  opt.reset();
  model.zero_grad(true);
  return r;
}

void build_rows(Ledger& L, nn::Module& model, const std::vector<LedgerOp>& recs) {
  // Every sum is checked: a batch of 10^12 images is a fine shape on the meta device, but its
  // step's MACs pass 2^63, and a wrapped count would be printed as a prediction.
  const std::string what = fmt::format("[ledger] the step's costs at --batch {}", L.config.batch);
  auto acc = [&what](int64_t& sum, int64_t v) { sum = checked_add(sum, v, what); };
  std::unordered_map<std::string, const nn::Module*> mods;
  for (auto& [name, mod] : model.named_modules()) mods[name] = mod;
  std::unordered_map<std::string, size_t> index;
  std::vector<std::vector<std::string>> bwd_ops;  // per row: backward op names, for rows with no forward op
  for (const LedgerOp& r : recs) {
    const std::string& key = r.row;
    auto it = index.find(key);
    if (it == index.end()) {
      LedgerRow row;
      row.scope = key;
      if (auto m = mods.find(key == "(model)" ? std::string() : key); m != mods.end() && key != "(loss)") {
        row.type = m->second->type_name();
        for (const auto& [n, t] : m->second->local_parameters()) acc(row.params, t.numel());
      }
      it = index.emplace(key, L.rows.size()).first;
      L.rows.push_back(std::move(row));
      bwd_ops.emplace_back();
    }
    LedgerRow& row = L.rows[it->second];
    const int64_t flops = checked_add(checked_mul(2, r.cost.macs, what), r.cost.flops, what),
                  bytes = checked_add(r.cost.bytes_read, r.cost.bytes_written, what);
    row.num_ops++;
    acc(row.bytes_moved, bytes);
    row.workspace_bytes = std::max(row.workspace_bytes, r.workspace_bytes);
    const OpClass cls = op_info(r.op).op_class;
    if (r.recompute()) acc(L.totals.recompute_macs, r.cost.macs);
    if (r.algo == KernelAlgo::winograd) L.totals.winograd_ops++;
    if (cls == OpClass::update) acc(L.totals.optimizer_bytes, bytes);
    if (r.backward()) {
      acc(row.bwd_macs, r.cost.macs);
      acc(row.bwd_flops, flops);
      auto& names = bwd_ops[it->second];
      if (std::find(names.begin(), names.end(), r.name) == names.end()) names.emplace_back(r.name);
    } else {
      acc(row.fwd_macs, r.cost.macs);
      acc(row.fwd_flops, flops);
      acc(row.saved_bytes, r.saved_bytes);
      if (r.has_output && r.phase == Phase::forward) row.out_shape = r.out_shape;
      if (std::find(row.ops.begin(), row.ops.end(), r.name) == row.ops.end()) row.ops.emplace_back(r.name);
      if (cls == OpClass::conv) acc(L.totals.conv_macs, r.cost.macs);
      if (cls == OpClass::linear) acc(L.totals.linear_macs, r.cost.macs);
    }
  }
  for (size_t i = 0; i < L.rows.size(); ++i)
    if (L.rows[i].ops.empty()) L.rows[i].ops = bwd_ops[i];
  for (auto& row : L.rows) {
    row.intensity = row.bytes_moved > 0 ? double(row.fwd_flops + row.bwd_flops) / double(row.bytes_moved) : 0.0;
    acc(L.totals.fwd_macs, row.fwd_macs);
    acc(L.totals.bwd_macs, row.bwd_macs);
    acc(L.totals.flops, checked_add(row.fwd_flops, row.bwd_flops, what));
    acc(L.totals.bytes_moved, row.bytes_moved);
    acc(L.totals.saved_bytes, row.saved_bytes);
    L.totals.num_ops += row.num_ops;
  }
}

// The FLOPs an op costs on a device (time_model.h: Winograd discounted on the calibrated cpu).
double op_flops(const DeviceSpec& dev, const LedgerOp& r) {
  return device_flops(dev, r.cost, r.algo, r.lane_use, r.work_share);
}

// An op's time on a device by the time model (time_model.h): its family's line over the roofline.
// The family the time model times a call by (time_model.h: time_family).
std::string time_family_of(const LedgerOp& r) { return time_family(r.name, r.impl, op_precision(r), conv_class(r.conv)); }

OpTime time_of(const DeviceSpec& dev, const LedgerOp& r) {
  return op_time(dev, r.name, r.impl, op_precision(r), r.conv, op_flops(dev, r),
                 kernel_bytes(dev, r.cost, r.unread_bytes), r.in_place, working_set_of(r.phase, r.in_place),
                 double(r.reorder_bytes));
}

// Every op's time on one device; per row into time_s (or cpu_time_s). An op's fixed cost is
// overhead, the rest compute or memory by which side of its roofline bounds it.
LedgerTime time_on(const DeviceSpec& dev, const Ledger& L, const std::vector<LedgerOp>& recs) {
  LedgerTime t;
  t.device = dev;
  t.precision = L.config.precision;
  t.peak_flops = dev.peak(t.precision);
  t.ridge = dev.ridge(t.precision);
  for (const LedgerOp& r : recs) {
    const OpTime ot = time_of(dev, r);
    t.memory_s += ot.reorder_s;  // a kernel's layout conversions move memory whatever bounds the op
    if (ot.compute_bound) {
      t.compute_s += ot.total_s - ot.fixed_s - ot.reorder_s;
      t.compute_bound_ops++;
    } else {
      t.memory_s += ot.total_s - ot.fixed_s - ot.reorder_s;
      t.memory_bound_ops++;
    }
    t.overhead_s += ot.fixed_s;
    if (r.phase == Phase::optimizer) t.optimizer_s += ot.total_s;
    const std::string_view src = ot.source;
    (src == "family" ? t.family_line_ops : src == "op" ? t.op_line_ops : t.roofline_ops)++;
    if (src == "roofline" && !dev.op_families.empty()) {
      std::string f = time_family_of(r);
      if (std::find(t.roofline_families.begin(), t.roofline_families.end(), f) == t.roofline_families.end())
        t.roofline_families.push_back(std::move(f));
    }
  }
  t.step_s = t.compute_s + t.memory_s + t.overhead_s;
  t.fits = L.memory.peak_bytes <= dev.memory_bytes;
  if (L.config.dataset_size > 0) {
    t.steps_per_epoch = (L.config.dataset_size + L.totals.batch - 1) / L.totals.batch;
    t.epochs = L.config.epochs;
    t.run_s = double(t.steps_per_epoch) * double(t.epochs) * t.step_s;
  }
  return t;
}

void row_times(Ledger& L, const std::vector<LedgerOp>& recs, const DeviceSpec& dev, const DeviceSpec& cpu) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < L.rows.size(); ++i) index[L.rows[i].scope] = i;
  // A layer is compute-bound when its ops' compute side outweighs their memory side, each op's
  // bytes at the bandwidth of its working set (time_model.h: memory_s): on a device with one
  // bandwidth, intensity >= the ridge.
  std::vector<double> compute_s(L.rows.size()), memory_s(L.rows.size());
  for (const LedgerOp& r : recs) {
    const size_t i = index.at(r.row);
    const OpTime t = time_of(dev, r);
    L.rows[i].time_s += t.total_s;
    L.rows[i].cpu_time_s += time_of(cpu, r).total_s;
    compute_s[i] += t.compute_s;
    memory_s[i] += t.memory_s;
  }
  for (size_t i = 0; i < L.rows.size(); ++i)
    L.rows[i].compute_bound = compute_s[i] > 0 && compute_s[i] >= memory_s[i];
}

// The same step for real on the cpu: memory by tag, resident memory and time per layer.
void measure_on_cpu(Ledger& L, nn::Module& model, const Shape& in_shape, const std::vector<LedgerOp>& meta_recs) {
  const LedgerConfig& cfg = L.config;
  LedgerMeasured& M = L.measured;
  RK_CHECK(model.device() == Device::cpu, "[ledger] --measure: the measured model must be on the cpu, not {}",
           device_name(model.device()));
  model.train();
  model.zero_grad(true);
  host_memory_restart(Device::cpu);  // the allocator's peak window is this run's (as on meta)
  auto opt = make_optimizer(cfg, model.parameters());
  auto scaler = make_scaler(cfg);
  Others others = others_now(Device::cpu, model);
  Tensor x, y;
  {
    TagGuard tag(Tag::input);
    x = Tensor::empty(in_shape, DType::f32, Device::cpu);
    Generator g(0x1ed9e7);
    fill_uniform_(x, -1.0, 1.0, g);
    y = Tensor::empty({in_shape[0]}, DType::i64, Device::cpu);
    for (int64_t i = 0; i < in_shape[0]; ++i) y.set(i, double(i % std::max<int64_t>(L.num_classes, 1)));
  }
  // What each op adds to the process the first time it runs, beyond the allocator's blocks: the
  // code it runs (oneDNN's drivers, reckon's kernels), by op name (ledger/process.h sums it per
  // op family). OpenMP's threads start first, so that their stacks are no op's.
#pragma omp parallel
  { (void)0; }
  {
    auto allocator_now = [] {
      const HostMemory h = host_memory(Device::cpu);
      return h.resident_bytes + h.small_held_bytes;
    };
    int64_t last_rss = process_rss_bytes(), last_alloc = allocator_now();
    ObserveOps obs([&](const OpRecord& r) {
      const int64_t rss = process_rss_bytes(), alloc = allocator_now();
      M.first_run_bytes[op_family(r.op, r.impl)] += (rss - last_rss) - (alloc - last_alloc);
      last_rss = rss;
      last_alloc = alloc;
    });
    train_step(model, *opt, scaler.get(), cfg, x, y);
    opt->zero_grad();
  }
  const std::vector<Tensor> loader_held = warm_up(Device::cpu, model, *opt, scaler.get(), cfg, x, y);  // and oneDNN's plans
  tracker(Device::cpu).reset_peak();

  // Each op's time is the wall time from the previous op's record to its own (so the engine's
  // and the dispatcher's work between kernels is counted); the best of the timed steps is kept
  // per op, since a machine shared with other jobs slows some steps down.
  std::vector<LedgerOp> recs;
  std::vector<std::string> families;  // each op's time family (its impl known only in the callback)
  std::vector<double> op_s;
  double best_step_s = 1e30, best_tail_s = 1e30;
  for (int s = 0; s < cfg.measure_steps; ++s) {
    opt->zero_grad();
    size_t i = 0;
    const auto t0 = Clock::now();
    auto last = t0;
    {
      ObserveOps obs([&](const OpRecord& r) {
        const auto now = Clock::now();
        if (s == 0) {
          recs.push_back(ledger_op(r));
          families.push_back(time_family_of(recs.back()));
          recs.back().impl = {};  // a view of the record's string, which dies with the callback
          op_s.push_back(1e30);
        }
        if (i < op_s.size()) op_s[i] = std::min(op_s[i], std::chrono::duration<double>(now - last).count());
        ++i;
        last = Clock::now();
      });
      train_step(model, *opt, scaler.get(), cfg, x, y);
    }
    const auto t1 = Clock::now();
    best_tail_s = std::min(best_tail_s, std::chrono::duration<double>(t1 - last).count());
    best_step_s = std::min(best_step_s, std::chrono::duration<double>(t1 - t0).count());
  }
  M.ran = true;
  M.steps = cfg.measure_steps;
  M.step_s = best_tail_s;  // after the last op: the end of the step
  for (size_t k = 0; k < op_s.size(); ++k) {
    M.step_s += op_s[k];
    if (recs[k].phase == Phase::optimizer) M.optimizer_s += op_s[k];
  }
  M.best_step_wall_s = best_step_s;
  M.memory = memory_since(Device::cpu, others);
  M.process_peak_bytes = process_hwm_bytes();
  M.allocator_resident_bytes = host_memory(Device::cpu).peak_resident_bytes;

  std::unordered_map<std::string, size_t> index;
  for (size_t k = 0; k < L.rows.size(); ++k) index[L.rows[k].scope] = k;
  for (auto& row : L.rows) row.measured_s = 0;
  for (size_t k = 0; k < recs.size(); ++k) {
    auto it = index.find(recs[k].row);
    if (it != index.end()) L.rows[it->second].measured_s += op_s[k];
  }
  const bool aligned = recs.size() == meta_recs.size();
  {
    const DeviceSpec cpu = device_spec("cpu");
    for (size_t k = 0; k < recs.size(); ++k) {
      const LedgerOp& r = recs[k];
      LedgerMeasured::Op o{r.row, std::string(r.name), std::string(phase_name(r.phase)), families[k], op_s[k], -1};
      if (aligned && meta_recs[k].op == r.op && meta_recs[k].row == r.row && meta_recs[k].phase == r.phase) {
        const LedgerOp& m = meta_recs[k];  // what the ledger timed
        o.predicted_s = time_of(cpu, m).total_s;
        o.family = time_family_of(m);
      }
      M.ops.push_back(std::move(o));
    }
  }
  // Workspace the meta device could not see: kernels that ran here but do not plan.
  std::vector<std::string> names;
  for (size_t k = 0; k < recs.size(); ++k) {
    if (recs[k].workspace_bytes <= 0) continue;
    if (aligned && meta_recs[k].op == recs[k].op && meta_recs[k].workspace_bytes == recs[k].workspace_bytes) continue;
    M.unplanned_workspace_bytes = std::max(M.unplanned_workspace_bytes, recs[k].workspace_bytes);
    std::string n = std::string(recs[k].name) + " (" + std::string(recs[k].kernel) + ")";
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  for (const auto& n : names) M.unplanned_ops += (M.unplanned_ops.empty() ? "" : ", ") + n;
  M.fp32_flops_now = fp32_flops_now();  // last: its buffers are no part of the step's memory,
  host_memory_trim(Device::cpu);        // nor kept for a later one
  opt.reset();
  model.zero_grad(true);
}

Ledger run_ledger(const std::string& label, nn::Module& model, const Shape& sample, const LedgerConfig& cfg,
                  const std::function<nn::Module*()>& cpu_model_of) {
  check_config(cfg);
  check_sample_shape(sample);
  {  // a batch no 64-bit size holds is refused naming the arguments, before anything is built
    const std::string in = fmt::format("{}x{}x{}", sample[0], sample[1], sample[2]);
    const std::string what = fmt::format("[ledger] --batch {} of --input {}", cfg.batch, in);
    checked_mul(cfg.batch, checked_mul(checked_mul(sample[0], sample[1], what), sample[2], what), what);
  }
  ConvAlgorithmScope algo(cfg.conv_algo);  // the meta step and the measured one alike
  Ledger L;
  L.model = label;
  L.model_type = model.type_name();
  L.config = cfg;
  L.input_shape = sample;
  L.input_shape.insert(L.input_shape.begin(), cfg.batch);
  auto say = [&](const std::string& what) {
    if (cfg.progress) cfg.progress(what);
  };
  say(fmt::format("{}: one training step on the meta device", label));
  MetaRun run = run_on_meta(model, L.input_shape, cfg, label);
  // The process once the step is planned: what it holds besides the allocator's blocks.
  {
    const HostMemory cpu_blocks = host_memory(Device::cpu);
    run.memory.process_planned_bytes = process_rss_bytes() - cpu_blocks.resident_bytes - cpu_blocks.small_held_bytes;
  }
  L.num_classes = run.classes;
  L.memory = run.memory;
  L.timeline = std::move(run.timeline);
  L.totals.batch = cfg.batch * cfg.accum;
  L.totals.input_bytes = run.input_bytes;
  for (const auto& p : model.parameters()) {
    L.totals.params += p.numel();
    L.totals.param_bytes += p.nbytes();
    if (p.requires_grad()) L.totals.trainable_params += p.numel();
  }
  build_rows(L, model, run.ops);
  // The optimizer's update is its ops' (sgd_update, adam_update, the scaler's unscale), each
  // with its declared cost, under "(optimizer)".
  for (auto& row : L.rows)
    if (row.scope == "(optimizer)") row.type = cfg.optimizer == "adamw" ? "AdamW" : "SGD";

  say("timing: the device catalog (this cpu is calibrated once, then cached)");
  if (cfg.measure) calibrate_cpu_in_child();  // a calibration's buffers are not the measured step's peak
  const DeviceSpec dev = device_spec(cfg.device), cpu = device_spec("cpu");
  {
    const ProcessOverhead po = process_overhead();
    std::vector<std::string> names;
    for (const LedgerOp& r : run.ops) names.push_back(op_family(r.name, r.impl));
    std::string how;
    L.memory.process_overhead_bytes = po.bytes_for(names, &how);
    L.memory.process_overhead_source = po.measured ? po.source + "; " + how : po.source;
    L.memory.process_peak_bytes =
        L.memory.process_planned_bytes + L.memory.allocator_resident_bytes + L.memory.process_overhead_bytes;
  }
  row_times(L, run.ops, dev, cpu);
  L.times.push_back(time_on(dev, L, run.ops));
  for (const auto& name : device_names())
    if (name != dev.name) L.times.push_back(time_on(device_spec(name), L, run.ops));

  if (cfg.measure) {
    RK_CHECK(double(L.memory.peak_bytes) < 0.8 * double(cpu.memory_bytes),
             "[ledger] {}: not measuring: the step needs {} (predicted) and this machine has {} of memory", label,
             format_mib(L.memory.peak_bytes), format_mib(cpu.memory_bytes));
    nn::Module* cpu_model = cpu_model_of();
    RK_CHECK(cpu_model != nullptr, "[ledger] {}: measuring needs the model built on the cpu too", label);
    say(fmt::format("{}: measuring the same step on the cpu (warm-up steps + {} timed steps)", label, cfg.measure_steps));
    measure_on_cpu(L, *cpu_model, L.input_shape, run.ops);
  }
  L.graph = std::move(run.graph);
  return L;
}

}  // namespace

namespace {
// A zoo model for a ledger config on a device: its classes and input channels, recomputation and
// frozen parameters as the config says; and one sample's shape.
struct ZooModel {
  std::shared_ptr<nn::Module> model;
  Shape sample;
};
ZooModel zoo_model(const std::string& model_name, const LedgerConfig& cfg, Device device) {
  nn::ModelConfig mc;
  mc.num_classes = cfg.num_classes;
  if (!cfg.input.empty()) {
    check_sample_shape(cfg.input);
    mc.in_channels = cfg.input[0];
  }
  ZooModel z;
  z.sample = cfg.input.empty() ? onnx::model_input_shape(model_name, mc) : cfg.input;
  mc.device = device;
  z.model = onnx::make_model(model_name, mc);
  if (cfg.recompute) nn::enable_recompute(*z.model);
  if (!cfg.freeze.empty()) nn::freeze(*z.model, cfg.freeze, "[ledger] --freeze");
  return z;
}
}  // namespace

Ledger ledger(const std::string& model_name, const LedgerConfig& cfg) {
  KeepDefaultGenerator keep;
  check_config(cfg);
  ZooModel meta = zoo_model(model_name, cfg, Device::meta);
  std::shared_ptr<nn::Module> cpu;
  auto cpu_model = [&]() -> nn::Module* {
    if (cfg.progress) cfg.progress(fmt::format("{}: building the model on the cpu", model_name));
    cpu = zoo_model(model_name, cfg, Device::cpu).model;
    return cpu.get();
  };
  return run_ledger(model_name, *meta.model, meta.sample, cfg, cpu_model);
}

graph::Graph training_step_graph(const std::string& model_name, const LedgerConfig& cfg) {
  check_config(cfg);
  ZooModel meta = zoo_model(model_name, cfg, Device::meta);
  check_sample_shape(meta.sample);
  ConvAlgorithmScope algo(cfg.conv_algo);
  Shape in = meta.sample;
  in.insert(in.begin(), cfg.batch);
  return *run_on_meta(*meta.model, in, cfg, model_name).graph;
}

Ledger ledger(nn::Module& model, const Shape& input_shape, const LedgerConfig& cfg, nn::Module* cpu_model) {
  KeepDefaultGenerator keep;
  return run_ledger(model.type_name(), model, input_shape, cfg, [cpu_model] { return cpu_model; });
}

}  // namespace reckon
