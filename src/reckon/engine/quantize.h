// Post-training int8 quantization of a program (program.h) after the engine's passes: observers
// measure every value's range on calibration batches, a method turns each range into a scale,
// and the quantizer rewrites the fused graph into int8 ops (ops/quant.h) that the engine runs
// with oneDNN's int8 primitives:
//  - each conv and linear layer whose post-ops are relu, clamp and a residual sum becomes one
//    conv2d_int8 / linear_int8 with s8 weights (symmetric, per output channel unless per-tensor),
//    an int32 bias, and the requantization of its output fused in;
//  - activations are u8 where the calibration saw no negative value (after a relu) and s8
//    otherwise, both with zero point 0 (what oneDNN's int8 kernels take fastest, and the residual
//    sum post-op requires), with scale = threshold / 255 or / 127;
//  - pooling and views keep their input's 8-bit values and scale; every other op runs in f32
//    between a dequantize and, where an int8 op reads its result, a quantize (the boundaries are
//    steps the report and the ledger show);
//  - layers named in keep_fp32 stay f32.
// Methods (the threshold T of a value's |x| distribution; histograms of 2048 bins):
//   minmax (T = max |x|), moving-average (PyTorch's MovingAverageMinMaxObserver, averaging
//   constant 0.01, per batch), percentile (the P-th percentile, default 99.99), mse (the T that
//   minimises the expected squared error of rounding and clipping over the histogram), entropy
//   (TensorRT's KL-divergence search over thresholds from the quantized bin count up).
// Not here: quantization-aware training, QDQ ONNX import and export, or per-layer sensitivity
// search beyond the report (the CLI does that: train/quantize.h).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reckon/engine/program.h"

namespace reckon::engine {

// One value's observed distribution.
struct Observation {
  double min = 0, max = 0;          // over all batches
  double ema_min = 0, ema_max = 0;  // moving average of per-batch min and max
  int64_t batches = 0;
  double hist_range = 0;            // the histogram covers |x| in [0, hist_range]
  std::vector<double> hist;         // counts of |x|
  bool fixed = false;               // a range set by fix(): every method's threshold is max(|min|, |max|)
  bool observed() const { return batches > 0; }
};

// Observes every f32 value of a program (with data) over calibration batches.
class Calibrator {
 public:
  explicit Calibrator(const Program& p, int bins = 2048);
  // Every f32 value of p (which may be on the meta device) taken as observed in [0, 1], the
  // program's input in [-1, 1] (signed, so quantized s8 as a calibrated normalized input is): the int8
  // program quantize_program makes from it has the real one's ops, dtypes' sizes and layouts
  // (the deployment ledger plans it) but placeholder scales.
  static Calibrator assumed(const Program& p);
  // Runs the program eagerly on x (the program's input shape but any batch size) and updates
  // every value's observation.
  void observe(const Tensor& x);
  // Sets value v's range to [lo, hi] for every method (a range learnt by quantization-aware
  // training: train/qat.h). requires: lo <= hi, both finite.
  void fix(int v, double lo, double hi);
  const std::vector<Observation>& observations() const { return obs_; }
  int64_t batches() const { return batches_; }

 private:
  Calibrator(const Program& p, int bins, bool assumed);
  const Program& prog_;
  int bins_;
  int64_t batches_ = 0;
  std::vector<Observation> obs_;  // by value id
};

// Whether node n keeps its input's 8-bit values and scale in the int8 program (pooling, and views
// of one input); and the value whose quantization a value v takes, traced back through such nodes.
bool keeps_input_scale(const graph::Node& n);
int scale_source(const graph::Graph& g, int v);

// Fixes (Calibrator::fix) the range of each conv or linear layer's input named in `ranges` (by
// the layer's scope, as quantization-aware training learnt them: train/qat.h) at the value the
// int8 program quantizes for it: traced back through pooling and views (which keep their
// input's scale) to the value the layer before writes; "LAYER:out" fixes the range of that
// layer's output (a residual the int8 program reads). Returns how many ranges it fixed.
int64_t fix_input_ranges(const Program& p, Calibrator& cal, const std::map<std::string, std::pair<double, double>>& ranges);

// "minmax", "moving-average", "percentile" (P as percentile_p), "mse", "entropy".
struct QuantOptions {
  std::string method = "minmax";
  double percentile_p = 99.99;
  bool per_channel = true;              // weights: one scale per output channel (false: per tensor)
  std::vector<std::string> keep_fp32;   // layer scopes left in f32
};
// Checks a method name ("percentile=99.9" sets P); an Error naming it and the known ones.
void parse_method(const std::string& s, QuantOptions& o);
// The clipping threshold of one observation under a method, for `levels` positive steps.
double threshold(const Observation& ob, const QuantOptions& o, int levels);

// The two rules every int8 value follows (the rewrite below, and quantization-aware training's
// fake quantization: train/qat.h), defined once. Scales are float32 numbers (held as doubles), as
// an ONNX file stores them, so a program written as a QDQ file and read back is the same program:
// weights w (O, ...): s8, symmetric, scale max |w| / 127 per output channel (one per tensor when
// !per_channel; 1 where all are 0);
std::vector<double> weight_scales(const Tensor& w, bool per_channel);
// an activation observed down to `min` and clipped at `threshold` (> 0): u8 when min >= 0 (scale
// threshold / 255), else s8 (threshold / 127); zero point 0.
std::pair<DType, double> activation_qparams(double min, double threshold);

// One quantized layer, as the report prints it.
struct QuantLayer {
  std::string name, op;                // scope and the int8 op ("conv2d_int8")
  int fp32_output = -1;                // the value it computes in the f32 program
  int int8_output = -1;                // ... and in the int8 program
  std::string x_dtype, y_dtype;        // "u8" / "s8" / "f32"
  double x_scale = 0, y_scale = 0;
  double w_scale_min = 0, w_scale_max = 0;
  double y_min = 0, y_max = 0, y_threshold = 0;  // the observed range and the clipping point
};

struct QuantizedProgram {
  Program program;                     // runs on the engine (passes {} : already fused)
  std::vector<QuantLayer> layers;
  std::vector<std::string> kept_fp32;  // f32 nodes left between int8 ones ("scope (op)")
  int quantize_steps = 0, dequantize_steps = 0;
  // For each f32 program value: the int8 program value holding it and how (scale 0: f32 there).
  std::vector<int> value_map;
  std::vector<double> value_scale;
  std::vector<int64_t> value_zero_point;
};

// The int8 program of p (after the engine's passes) with the observations cal made of it. On the
// meta device its weights are meta tensors with scales of 1 (a program to plan, not to run).
QuantizedProgram quantize_program(const Program& p, const Calibrator& cal, const QuantOptions& o);

// Runs a program eagerly (its ops' own kernels), calling visit(value id, tensor) for every
// value it computes; returns the output.
Tensor run_program(const Program& p, const Tensor& x, const std::function<void(int, const Tensor&)>& visit = {});

// Signal-to-quantization-noise ratio of approx against exact, in dB (inf when equal).
double sqnr_db(const Tensor& exact, const Tensor& approx);

}  // namespace reckon::engine
