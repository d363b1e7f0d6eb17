// `reckon quantize`: post-training int8 quantization of a trained model (a zoo name with its
// checkpoint, or an .onnx file) on a dataset: calibration on batches of the training split, the
// int8 program (engine/quantize.h), and what it cost: a per-layer report (dtypes, scales, the
// observed range against the clipping threshold, SQNR of each layer's int8 output against its
// fp32 output), top-1 accuracy on the test split fp32 against int8 (both through the inference
// engine), the agreement of their predictions, weight bytes, arena bytes and latency of each.
// With several methods each is calibrated from the same observations and reported side by side.
// --out writes the first method's int8 program as a QDQ ONNX file (ops/quant.h) that ONNX Runtime
// runs. --keep-fp32 auto searches for the fewest layers (most sensitive first) to leave in fp32
// so that the accuracy drop is within --max-drop; it tunes on the images it evaluates (the test
// split, or its first --limit), as ONNX Runtime's and PyTorch's accuracy-driven flows tune on
// whatever split they are given. Not here: QAT (train/qat.h), importing QDQ files (onnx/).
#pragma once
#include <string>
#include <vector>

#include "reckon/data/loader.h"
#include <map>

#include "reckon/engine/quantize.h"

namespace reckon::train {

struct QuantizeArgs {
  std::string model, checkpoint, data = "fashion-mnist", normalize = "auto";
  int64_t calib_batches = 8;
  int64_t batch = 100;
  std::vector<std::string> methods = {"minmax"};  // "all": every method
  bool per_tensor = false;
  std::vector<std::string> keep_fp32;
  // --keep-fp32 auto: layers are left in fp32, the most sensitive first, until the top-1 drop on
  // the evaluated test images is at most max_drop points (layers in keep_fp32 stay fp32 too).
  bool keep_auto = false;
  double max_drop = 0.5;
  // Input ranges learnt by quantization-aware training (train/qat.h), by layer: they replace the
  // calibration's there (engine::fix_input_ranges), for every method.
  std::map<std::string, std::pair<double, double>> input_ranges;
  int threads = 0;
  int64_t limit = 0;  // test images evaluated (0: all)
  std::string out;           // the first method's int8 model as a QDQ .onnx file ("": none)
  std::string dump_outputs;  // the first method's int8 logits on the test images, as .npy ("": none)
};

struct LayerReport {
  engine::QuantLayer layer;
  double sqnr_db = 0;  // its int8 output against the fp32 program's, on the first calibration batch
};

// One step of the --keep-fp32 auto search: the layer added to the fp32 set, its sensitivity (the
// logits' SQNR against fp32 with only that layer in int8, on the first calibration batch) and
// the accuracy with every layer kept so far in fp32.
struct KeepStep {
  std::string layer;
  double alone_sqnr_db = 0;
  double accuracy = 0;
};

struct MethodReport {
  std::string method;
  double full_int8_accuracy = 0;  // every layer in int8 (before any --keep-fp32 auto search)
  std::vector<KeepStep> auto_steps;
  bool auto_met = true;           // the search reached --max-drop
  std::vector<LayerReport> layers;
  std::vector<std::string> kept_fp32;
  int quantize_steps = 0, dequantize_steps = 0;
  double int8_accuracy = 0, agreement = 0;  // top-1; predictions equal to fp32's
  double output_sqnr_db = 0;                // the logits against fp32's, over the test images
  int64_t int8_weight_bytes = 0, int8_arena_bytes = 0;
  double int8_ms = 0;                       // median engine latency per batch
  std::vector<std::string> impls;           // the oneDNN implementations the int8 convolutions chose
};

struct QuantizeReport {
  std::string model, data;
  int64_t calib_images = 0, test_images = 0, batch = 0;
  int64_t fixed_ranges = 0;  // layer inputs whose range came from QAT
  bool per_tensor = false;
  bool keep_auto = false;
  double max_drop = 0.5;
  data::Normalize normalize;  // what the inputs were normalised with (a QDQ file's user needs it)
  std::string out;            // the file written, if any
  int64_t out_bytes = 0;
  double fp32_accuracy = 0;
  int64_t fp32_weight_bytes = 0, fp32_arena_bytes = 0;
  double fp32_ms = 0;
  std::vector<MethodReport> methods;
};

QuantizeReport quantize_model(const QuantizeArgs& a);
std::string format_quantize(const QuantizeReport& r);

}  // namespace reckon::train
