// The deployment ledger: what serving a model costs, before it serves. "Deployment looks at
// latency and size": it compiles the model with the inference engine (engine/engine.h) on the
// meta device (no weights needed) and reads the compiled step list: per step the fused op, its
// MACs, the bytes it moves in the layouts the engine chose, its arena offset and its latency
// (engine_step_time: on this cpu its step family's line, calibrated on the engine's own probe
// as the training ledger's are on the training step; on a GPU the roofline and a per-step
// overhead); totals: latency per request, requests/s, arena and weight bytes, the file
// size at fp32, bf16 and int8, reorders per run; and what each pass saved. At int8 the same for
// the quantized program, its int8 steps on the device's int8 peak. With `measure` the
// same engine is built with data on this cpu and run: measured latency per step and in total,
// the arena the run used and the allocations it made, beside the prediction with the error.
// Not here: batching policy, queueing, several models on one device.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/engine/engine.h"
#include "reckon/ledger/devices.h"
#include "reckon/ledger/time_model.h"

namespace reckon {

struct InferenceConfig {
  int64_t batch = 1;
  Shape input;                             // (C, H, W); empty: the model's
  std::string device = "cpu";
  // "fp32", or "int8": the program after the passes quantized (engine/quantize.h) before the
  // engine plans it: on the meta device with placeholder scales (the int8 program's ops, types
  // and layouts), with measure calibrated on the random input it is timed with.
  std::string precision = "fp32";
  std::vector<std::string> passes{"all"};  // engine passes ({}: none)
  bool blocked_layouts = true;
  bool measure = false;
  int measure_runs = 50;                   // timed runs with measure (after warm-up)
  std::function<void(const std::string&)> progress;
};

// One engine step's predicted time on a device. The roofline: compute at the fp32 peak (an int8
// product's MACs at the int8 peak; a Winograd convolution's direct FLOPs over the calibrated
// speedup; a direct loop's FLOPs over the share of the lanes it fills), the bytes it moves at the
// bandwidth of that working set. On a cpu whose calibration has a line for the step's family
// (engine_step_families: the op, its implementation and precision, then the op and precision),
// that line, fixed + scale x roofline, fitted on the probe networks compiled and timed step by
// step (EngineProbe); else the roofline plus the engine's per-step overhead.
struct EngineStepTime {
  double roofline_s = 0, total_s = 0, fixed_s = 0;
  bool compute_bound = false;
  std::string line;  // the family whose line timed it ("": the roofline and the overhead)
};
std::vector<std::string> engine_step_families(const engine::StepInfo& s);
EngineStepTime engine_step_time(const DeviceSpec& d, const engine::StepInfo& s);
// The probe networks (time_model.h) compiled by the engine in fp32 and int8 (calibrated on the
// random input they are timed with), all kept; each round() times every step over a few runs and
// keeps its fastest time over the rounds (their geometric mean returned: probe_rounds,
// time_model.h); fit(): a line per family. calibrate_cpu runs it.
class EngineProbe {
 public:
  explicit EngineProbe(const DeviceSpec& d);
  ~EngineProbe();
  double round();
  std::map<std::string, FamilyTime> fit() const;

 private:
  struct Case {
    std::unique_ptr<engine::Engine> e;
    Tensor x, y;
    std::vector<double> best;
  };
  const DeviceSpec& d_;
  std::vector<Case> cases_;
};

struct InferenceRow {
  engine::StepInfo step;
  double flops = 0;            // 2 x MACs + other FLOPs
  double predicted_s = 0;
  std::string line;            // the calibrated family line that timed it ("": roofline + overhead)
  std::string bound;           // "compute", "memory" or "overhead": what the prediction's larger part is
  double measured_s = -1;      // with measure: the fastest of the timed runs
};

struct InferenceLedger {
  std::string model;
  InferenceConfig config;
  DeviceSpec device;
  double step_overhead_s = 0;  // the engine's per-step overhead: a step whose family has no line pays it over its roofline
  Shape input_shape, output_shape;
  std::vector<InferenceRow> rows;
  std::vector<engine::PassReport> passes;
  int64_t int8_layers = 0;     // int8: conv/linear layers in int8
  int reorders = 0, reorders_plain = 0;  // per run, and with plain layouts (what choosing them saved)
  int64_t macs = 0, bytes_moved = 0;
  // The MACs on taps that read the input (a convolution's declared MACs less those that multiply
  // its padding: StepInfo::conv_tap_share), what a share of an int8 or fp32 peak is fairly taken of.
  double macs_read = 0;
  int64_t arena_bytes = 0, values_bytes = 0, weight_bytes = 0;
  int64_t params = 0;                      // constant elements (weights, biases, statistics)
  int64_t file_fp32 = 0, file_bf16 = 0, file_int8 = 0;  // weights' bytes at each precision
  int64_t onnx_file_bytes = -1;            // the .onnx file's own size, when the model is one
  // At int8: the bytes of the QDQ file `reckon quantize --out` writes for this program (its planned
  // int8 program exported as such, zeros for the data: the size does not depend on the values).
  int64_t int8_qdq_file_bytes = -1;
  double predicted_s = 0;                  // latency per request (one batch)
  // measure:
  bool measured = false;
  double measured_p50_s = 0, measured_p90_s = 0;
  int64_t measured_arena_bytes = 0;   // live bytes the engine's arena took on the cpu
  int64_t run_allocations = 0;        // allocations made by the timed runs (0: none)
};

InferenceLedger inference_ledger(const std::string& model_name, const InferenceConfig& cfg);
std::string format_inference(const InferenceLedger& l);
std::string inference_json(const InferenceLedger& l);

}  // namespace reckon
