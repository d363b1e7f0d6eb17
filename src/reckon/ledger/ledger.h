// The ledger: what one training step of a model costs, predicted before anything runs.
// It runs the real training step (forward, cross-entropy loss, backward, optimizer step) on the
// meta device and reads only what the framework records there: the dispatcher's OpRecords
// (ObserveOps: cost, saved bytes, planned workspace, module scope) and the meta tracker's
// accounts (memory by tag at the moment of peak). It never re-derives a formula of its own.
// With `measure`, the same step runs for real on the cpu and the tracker's accounts, the process's
// resident memory and the time per layer are set beside the prediction.
// The step is train::Step (optim/step.h), the trainer's own: autocast, accumulation over
// `accum` micro-batches, loss scaling, recomputation; each op is timed at the peak of the dtype
// it runs in (bf16 ops at the device's bf16 peak).
// Not here: data loading, multi-device steps.
#pragma once
#include <array>
#include <map>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reckon/core/allocator.h"
#include "reckon/core/tensor.h"
#include "reckon/ledger/devices.h"
#include "reckon/graph/graph.h"
#include "reckon/ops/op.h"

namespace reckon::nn {
class Module;
}

namespace reckon {

struct LedgerConfig {
  int64_t batch = 1;
  Shape input;                      // (C, H, W) of one sample; empty: the model's default
  int64_t num_classes = 0;          // 0: the model's default
  std::string precision = "fp32";   // fp32, bf16 or fp16 (autocast, as `reckon train --precision`)
  int64_t accum = 1;                // micro-batches of `batch` per optimizer step (effective batch x accum)
  bool recompute = false;           // recompute blocks in backward (nn/recompute.h)
  std::string conv_algo;            // "auto" | "direct" (ops/conv.h); "": the process's setting
  std::string memory_format = "auto";  // activations: auto | contiguous | channels_last (optim/step.h)
  std::string grad_scaler = "auto"; // loss scaling: auto (fp16 only), on, off
  std::string optimizer = "sgd";    // "sgd" (with momentum below) or "adamw" (PyTorch defaults)
  // Parameters not trained (fine-tuning): each a state_dict name or a module path prefix
  // ("features" freezes features.*); they get no gradient, no optimizer state, and the layers
  // that only they needed save nothing for backward. Zoo models only (ledger(name, cfg)).
  std::vector<std::string> freeze;
  double momentum = 0.9;            // SGD momentum (0: no momentum buffer)
  std::string device = "cpu";       // catalog key (devices.h) the step is timed for
  int64_t dataset_size = 0;         // images per epoch; 0: no whole-run estimate
  int64_t epochs = 1;
  // The run around the step, as `reckon train` runs it (0: none), taken by the warm-up steps in
  // the trainer's order so that the allocator's blocks at their peak are the run's: input batches
  // the loader holds beside the step's (its prefetch), an epoch's last micro-batch when shorter,
  // and the evaluation between epochs of the test split (eval_samples images at eval_batch; eval
  // mode, no gradients; its own loader holding eval_loader_batches ahead, at most what the split
  // has left), then (--val-split) of the validation split, at its own batch. The observed step is
  // still one step of `batch`; the memory figures are the peak over all of it.
  int loader_batches = 0;
  int eval_loader_batches = 0;
  int64_t last_batch = 0;
  int64_t eval_batch = 0, eval_samples = 0;  // eval_batch <= eval_samples
  int64_t val_batch = 0, val_samples = 0;    // val_batch <= val_samples
  bool plan_workspace = true;       // let cpu kernels plan their workspace on meta
  bool measure = false;             // also run the step for real on the cpu and compare
  int measure_steps = 3;            // timed steps after one warm-up step (best per op kept)
  std::function<void(const std::string&)> progress;  // told what runs next (may be empty)
};

// One layer: the ops recorded under one module scope ("features.0"), forward and backward.
// Ops outside any module are under "(model)" (the root's own ops), "(loss)", "(autograd)"
// (gradients summed where branches meet) and "(optimizer)" (the last row: the update).
struct LedgerRow {
  std::string scope;
  std::string type;                // the module's type name ("Conv2d"); "" outside modules
  std::vector<std::string> ops;    // distinct forward op names in order (backward ones if none)
  Shape out_shape;                 // first output of the last forward op
  int64_t params = 0;              // elements of this module's own parameters
  int64_t fwd_macs = 0, bwd_macs = 0;
  int64_t fwd_flops = 0, bwd_flops = 0;  // 2 x MACs + the ops' other FLOPs
  int64_t saved_bytes = 0;         // activation bytes saved for backward (OpRecord.saved_bytes)
  int64_t bytes_moved = 0;         // bytes read + written, forward and backward
  int64_t workspace_bytes = 0;     // largest planned kernel workspace of one op
  int num_ops = 0;                 // op calls, forward and backward
  double intensity = 0;            // FLOPs per byte moved
  // On the config's device: the sum over the layer's ops of their time model's line
  // (time_model.h: the family's fixed cost + scale x roofline; the GPUs: the roofline + the
  // per-op overhead); compute-bound when intensity >= the device's ridge point.
  double time_s = 0;
  bool compute_bound = false;
  double cpu_time_s = 0;           // the same on this machine's cpu (for --measure)
  double measured_s = -1;          // --measure: measured time on the cpu (best of the timed steps per op)
};

struct LedgerTotals {
  int64_t batch = 0;              // the effective batch (micro-batch x accum): per_image divides by it
  int64_t params = 0, param_bytes = 0;  // parameters (elements, bytes), buffers not included
  int64_t trainable_params = 0;         // parameters that require a gradient (not frozen)
  int64_t fwd_macs = 0, bwd_macs = 0;
  int64_t conv_macs = 0, linear_macs = 0;  // forward conv2d / linear + matmul MACs
  int64_t flops = 0;              // 2 x (fwd + bwd MACs) + the ops' other FLOPs, one step
  int64_t bytes_moved = 0;
  int64_t saved_bytes = 0;
  int64_t recompute_macs = 0;     // forward MACs run again in backward (recomputation's price)
  int64_t winograd_ops = 0;       // convolution calls whose kernel chose Winograd (OpRecord::impl)
  int64_t input_bytes = 0;        // the images of one step (x); targets are input-tagged too
  int64_t optimizer_bytes = 0;     // bytes the optimizer's update ops declare (read + written)
  int64_t num_ops = 0;
  double per_image(int64_t v) const { return double(v) / double(batch); }
};

struct LedgerMemory {
  std::array<int64_t, kNumTags> at_peak_bytes{};  // by tag, at the moment of the peak
  std::array<int64_t, kNumTags> tag_peak_bytes{}; // each tag's own peak
  int64_t peak_bytes = 0;
  // The process's peak resident memory (VmHWM: what the OS counts, and what runs a machine out
  // of memory), predicted (ledger/process.h) as the sum of: the process's resident memory once
  // the step is planned (code, libraries, oneDNN's primitives: the meta step creates them); the
  // pages reckon's allocator will hold at its peak, live blocks and its cache of freed ones
  // (host_memory on the meta device); and what running the kernels adds (threads, code they
  // run: measured once per binary).
  int64_t process_planned_bytes = 0;
  int64_t allocator_resident_bytes = 0;
  int64_t allocator_cached_bytes = 0;  // of allocator_resident_bytes: freed blocks kept (at the step's end)
  int64_t process_overhead_bytes = 0;
  std::string process_overhead_source;
  int64_t process_peak_bytes = 0;
};

struct LedgerTime {
  DeviceSpec device;
  std::string precision;
  double peak_flops = 0, ridge = 0;  // ridge point, FLOPs per byte
  double step_s = 0;                 // predicted time of one step
  double compute_s = 0, memory_s = 0, overhead_s = 0;  // the step's ops split by what bounds them
  double optimizer_s = 0;            // the optimizer phase's ops (updates, the scaler's unscale), in the step
  int64_t compute_bound_ops = 0, memory_bound_ops = 0;
  // Which line of the time model (time_model.h) timed each op: its family's, its op's (over the
  // op's families), or the bare roofline with the per-op overhead (every op on a datasheet GPU;
  // on the cpu an op the calibration's probe never ran).
  int64_t family_line_ops = 0, op_line_ops = 0, roofline_ops = 0;
  std::vector<std::string> roofline_families;  // the families of those roofline_ops (the cpu), once each
  bool fits = true;                  // predicted peak <= device memory
  int64_t steps_per_epoch = 0;       // ceil(dataset_size / batch); 0 without a dataset
  int64_t epochs = 0;
  double run_s = 0;                  // steps_per_epoch x epochs x step_s
};

struct LedgerMeasured {
  bool ran = false;
  int steps = 0;
  LedgerMemory memory;               // tracker(Device::cpu) over the timed steps
  int64_t unplanned_workspace_bytes = 0;  // workspace requested by kernels that do not plan
  std::string unplanned_ops;         // which ops those were
  int64_t process_peak_bytes = 0;        // VmHWM after the steps: the process's peak over its life
  int64_t allocator_resident_bytes = 0;  // host_memory(cpu).peak_resident_bytes: the allocator's share
  // What each op family ("conv2d | jit:avx512_core": the op and its kernel's implementation, or
  // the op alone) added to the process's resident memory the first time it ran, beyond the
  // allocator's blocks (its code, mostly); what process.h's probes read.
  std::map<std::string, int64_t> first_run_bytes;
  double step_s = 0;                 // sum of the per-op best times + the (best) time after the last op
  double optimizer_s = 0;            // the optimizer phase's ops (best per op), in step_s
  double best_step_wall_s = 0;       // the fastest timed step, wall clock
  double fp32_flops_now = 0;         // the cpu's fp32 peak just after the timed steps (devices.h)
  // Each op call of the step in order (`--json`'s measured.ops): its row, op, phase, the time
  // family the ledger times it by, its best measured time (from the previous op's end to its own,
  // as the rows sum them) and the cpu time the ledger predicted for it (-1, and the family of the
  // kernel that ran, where the measured step's calls did not line up with the meta device's).
  struct Op {
    std::string row, op, phase, family;
    double measured_s = 0, predicted_s = -1;
  };
  std::vector<Op> ops;
};

// One point of the step's memory timeline: live bytes by tag on the meta device right after an op
// call of the captured step (node `node` of the graph), tensors alive before the step excluded as
// in LedgerMemory. Between two calls (inside a kernel) the live total can be higher: the exact peak
// is LedgerMemory::peak_bytes.
struct LedgerMemSample {
  int node = 0;
  Phase phase = Phase::forward;
  std::array<int64_t, kNumTags> live_bytes{};
};

struct Ledger {
  std::string model;             // zoo name or the root module's type name
  std::string model_type;
  Shape input_shape;             // (N, C, H, W)
  int64_t num_classes = 0;
  LedgerConfig config;
  std::vector<LedgerRow> rows;
  LedgerTotals totals;
  LedgerMemory memory;           // predicted on the meta device
  std::vector<LedgerMemSample> timeline;  // after each op of the captured step (what --html draws)
  std::vector<LedgerTime> times; // config.device first, then the other catalog devices
  LedgerMeasured measured;
  // The step it read: the training step captured on the meta device, every op call a node.
  std::shared_ptr<const graph::Graph> graph;
};

// Builds zoo model `model_name` on the meta device and runs one training step on it.
// requires: cfg.batch > 0, cfg.input empty or 3 positive sizes, cfg.precision fp32/bf16/fp16,
//           cfg.optimizer "sgd" or "adamw", cfg.device in device_names().
// ensures:  rows in order of first appearance; memory excludes tensors alive before the call.
// Throws reckon::Error naming the layer (module scope) where a shape broke.
Ledger ledger(const std::string& model_name, const LedgerConfig& cfg);

// The same for a built module. model must be on the meta device; input_shape is one sample's
// (C, H, W) (cfg.input is ignored). With cfg.measure, cpu_model is the same architecture on the
// cpu (its parameters are updated by the measured steps).
Ledger ledger(nn::Module& model, const Shape& input_shape, const LedgerConfig& cfg,
              nn::Module* cpu_model = nullptr);

// The training step ledger(model_name, cfg) reads, captured on the meta device: every op call of
// the forward, the loss, backward and the optimizer's update, as a graph (`reckon graph --step`).
graph::Graph training_step_graph(const std::string& model_name, const LedgerConfig& cfg);

// The ledger as a text report (what `reckon ledger` prints) and as JSON.
std::string format_ledger(const Ledger& l);
std::string ledger_json(const Ledger& l);
// The ledger as one self-contained HTML page (inline SVG, no script, nothing fetched): the memory
// timeline stacked by tag with the peak marked, the layers on the device's roofline (predicted,
// and measured where --measure ran on the cpu), and the per-layer table (ledger/html.cpp).
std::string ledger_html(const Ledger& l);

// "4GiB", "512MiB", "1.5GB", "1000000" (bytes) -> bytes; throws naming flag when unreadable.
int64_t parse_bytes(const std::string& text, const std::string& flag);
// "36.8 MiB"; "1.08 G"; "62,378,344".
std::string format_mib(int64_t bytes);
// bytes in the unit that shows them (B, KiB, MiB, ...): a budget of 1 KiB is not "0.0 MiB".
std::string format_bytes(int64_t bytes);
std::string format_si(double v);
std::string format_count(int64_t v);

}  // namespace reckon
