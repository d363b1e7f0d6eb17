// `reckon quantize MODEL --checkpoint FILE --data SPEC`: post-training int8 quantization with
// calibration, and what it cost in accuracy, size and time (train/quantize.h).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/train/quantize.h"

namespace reckon {
namespace {

struct QuantizeCli {
  train::QuantizeArgs a;
  std::string method = "minmax";
  std::string keep;
  bool json = false;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> r;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) r.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return r;
}

tools::RegisterCommand reg_quantize([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static QuantizeCli c;
  sub = app.add_subcommand("quantize",
                           "int8 post-training quantization: calibration, a per-layer report, accuracy fp32 against int8");
  sub->add_option("model", c.a.model, "zoo model name or an .onnx file")->required();
  sub->add_option("--checkpoint", c.a.checkpoint,
                  "a reckon checkpoint or a safetensors state dict (an .onnx file brings its own weights)");
  sub->add_option("--data", c.a.data, "dataset spec: calibration on its training split, accuracy on its test split")
      ->capture_default_str();
  sub->add_option("--normalize", c.a.normalize, "auto (the checkpoint's figures) | none | M1,../S1,..")->capture_default_str();
  sub->add_option("--calib-batches", c.a.calib_batches, "calibration batches (of --batch training images)")
      ->capture_default_str();
  sub->add_option("--batch", c.a.batch, "batch size (calibration, evaluation and the timing)")->capture_default_str();
  sub->add_option("--method", c.method,
                  "minmax | moving-average | percentile[=P] | mse | entropy | all, or several separated by commas")
      ->capture_default_str();
  sub->add_flag("--per-tensor", c.a.per_tensor, "one weight scale per layer instead of one per output channel");
  sub->add_option("--keep-fp32", c.keep,
                  "layers (module scopes, comma separated) left in fp32; auto: the most sensitive, until the drop is "
                  "within --max-drop");
  sub->add_option("--max-drop", c.a.max_drop, "--keep-fp32 auto: the top-1 drop allowed, in points")
      ->capture_default_str();
  sub->add_option("--limit", c.a.limit, "evaluate only the first N test images (0: all)")->capture_default_str();
  sub->add_option("--threads", c.a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_option("--out", c.a.out, "write the (first) method's int8 model as a QDQ .onnx file ONNX Runtime runs");
  sub->add_option("--dump-outputs", c.a.dump_outputs, "write the (first) method's int8 logits on the test split as .npy");
  sub->add_flag("--json", c.json, "print JSON");
  return [] {
    c.a.methods = split_commas(c.method);
    for (const auto& k : split_commas(c.keep)) {
      if (k == "auto") c.a.keep_auto = true;
      else c.a.keep_fp32.push_back(k);
    }
    const train::QuantizeReport r = train::quantize_model(c.a);
    if (!c.json) {
      std::printf("%s", train::format_quantize(r).c_str());
      return 0;
    }
    nlohmann::json j{{"model", r.model},
                     {"data", r.data},
                     {"calib_images", r.calib_images},
                     {"test_images", r.test_images},
                     {"batch", r.batch},
                     {"per_tensor", r.per_tensor},
                     {"normalize", {{"mean", r.normalize.mean}, {"std", r.normalize.std}}},
                     {"out", r.out},
                     {"out_bytes", r.out_bytes},
                     {"fp32", {{"accuracy", r.fp32_accuracy},
                               {"weight_bytes", r.fp32_weight_bytes},
                               {"arena_bytes", r.fp32_arena_bytes},
                               {"ms_per_batch", r.fp32_ms}}}};
    for (const auto& m : r.methods) {
      nlohmann::json layers = nlohmann::json::array();
      for (const auto& l : m.layers)
        layers.push_back({{"name", l.layer.name},
                          {"op", l.layer.op},
                          {"x_dtype", l.layer.x_dtype},
                          {"y_dtype", l.layer.y_dtype},
                          {"x_scale", l.layer.x_scale},
                          {"y_scale", l.layer.y_scale},
                          {"w_scale_min", l.layer.w_scale_min},
                          {"w_scale_max", l.layer.w_scale_max},
                          {"y_min", l.layer.y_min},
                          {"y_max", l.layer.y_max},
                          {"y_threshold", l.layer.y_threshold},
                          {"sqnr_db", std::isfinite(l.sqnr_db) ? l.sqnr_db : 999.0}});
      nlohmann::json auto_steps = nlohmann::json::array();
      for (const auto& st : m.auto_steps)
        auto_steps.push_back({{"layer", st.layer}, {"alone_sqnr_db", st.alone_sqnr_db}, {"accuracy", st.accuracy}});
      j["methods"].push_back({{"method", m.method},
                              {"accuracy", m.int8_accuracy},
                              {"agreement", m.agreement},
                              {"logit_sqnr_db", std::isfinite(m.output_sqnr_db) ? m.output_sqnr_db : 999.0},
                              {"weight_bytes", m.int8_weight_bytes},
                              {"arena_bytes", m.int8_arena_bytes},
                              {"ms_per_batch", m.int8_ms},
                              {"quantize_steps", m.quantize_steps},
                              {"dequantize_steps", m.dequantize_steps},
                              {"kept_fp32", m.kept_fp32},
                              {"full_int8_accuracy", m.full_int8_accuracy},
                              {"auto_met", m.auto_met},
                              {"auto_steps", auto_steps},
                              {"conv_impls", m.impls},
                              {"layers", layers}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  };
});

}  // namespace
}  // namespace reckon
