// `reckon ledger MODEL --batch N ...`: what one training step of a zoo model costs (memory by
// tag, MACs per layer, time on a device), predicted on the meta device; with --measure, set
// beside the same step run for real on this cpu. The work is reckon::ledger() (ledger/ledger.h);
// this file only reads the arguments and prints.
#include <cstdio>
#include <string>

#include "command.h"
#include "reckon/core/error.h"
#include "reckon/ledger/inference.h"
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/process.h"
#include "reckon/onnx/export.h"

using namespace reckon;

namespace {

struct LedgerArgs {
  std::string model;
  int64_t batch = 1;
  std::string input;
  int64_t classes = 0;
  std::string precision = "fp32";
  int64_t accum = 1;
  bool recompute = false;
  std::string conv_algo;
  std::string memory_format = "auto";
  std::string grad_scaler = "auto";
  std::string optimizer = "sgd";
  double momentum = 0.9;
  std::vector<std::string> freeze;
  std::string device = "cpu";
  int64_t dataset_size = 0;
  int64_t epochs = 1;
  bool measure = false;
  int measure_steps = 3;
  bool json = false;
  bool recalibrate = false;
  bool inference = false;
  std::vector<std::string> passes{"all"};
  bool plain_layouts = false;
  std::string html;
};

// --inference: the deployment ledger (ledger/inference.h).
int run_inference(const LedgerArgs& a) {
  InferenceConfig cfg;
  cfg.batch = a.batch;
  if (!a.input.empty()) cfg.input = tools::parse_input(a.input, "ledger");
  RK_CHECK(a.precision == "fp32" || a.precision == "int8",
           "[ledger] --inference --precision {}: the engine runs fp32 and int8 (bf16 is not built yet)", a.precision);
  cfg.precision = a.precision;
  cfg.device = a.device;
  cfg.passes = a.passes;
  if (cfg.passes.size() == 1 && cfg.passes[0] == "none") cfg.passes.clear();
  cfg.blocked_layouts = !a.plain_layouts;
  cfg.measure = a.measure;
  cfg.progress = [](const std::string& what) { std::fprintf(stderr, "... %s\n", what.c_str()); };
  InferenceLedger l = inference_ledger(a.model, cfg);
  std::fputs((a.json ? inference_json(l) : format_inference(l)).c_str(), stdout);
  return 0;
}


int run(const LedgerArgs& a) {
  LedgerConfig cfg;
  cfg.batch = a.batch;
  if (!a.input.empty()) cfg.input = tools::parse_input(a.input, "ledger");
  cfg.num_classes = a.classes;
  cfg.precision = a.precision;
  cfg.accum = a.accum;
  cfg.recompute = a.recompute;
  cfg.conv_algo = a.conv_algo;
  cfg.memory_format = a.memory_format;
  cfg.grad_scaler = a.grad_scaler;
  cfg.optimizer = a.optimizer;
  cfg.momentum = a.momentum;
  cfg.freeze = a.freeze;
  cfg.device = a.device;
  cfg.dataset_size = a.dataset_size;
  cfg.epochs = a.epochs;
  cfg.measure = a.measure;
  cfg.measure_steps = a.measure_steps;
  cfg.progress = [](const std::string& what) { std::fprintf(stderr, "... %s\n", what.c_str()); };
  if (a.recalibrate) {
    // Measured again now; a busy moment does not replace a quiet calibration (calibration_to_keep).
    const Recalibration r = recalibrate_cpu();
    if (r.fresh_kept)
      std::fprintf(stderr, "calibration: %s\n", calibration_quality(r.kept).c_str());
    else
      std::fprintf(stderr, "calibration: other processes took %.0f%% of the CPU while it ran; kept the one of %s (%s)\n",
                   100 * r.fresh.others_cpu_share, r.kept.calibrated_at.c_str(), calibration_quality(r.kept).c_str());
    std::fprintf(stderr, "process: %s\n", process_overhead(true).source.c_str());
  }
  if (a.inference) return run_inference(a);
  Ledger l = ledger(a.model, cfg);
  if (!a.html.empty()) {
    onnx::write_file_atomic(a.html, ledger_html(l));
    std::fprintf(stderr, "wrote %s\n", a.html.c_str());
  }
  std::fputs((a.json ? ledger_json(l) : format_ledger(l)).c_str(), stdout);
  return 0;
}

tools::RegisterCommand reg_ledger([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static LedgerArgs a;
  sub = app.add_subcommand("ledger", "what one training step costs: memory by tag, MACs per layer, time per device");
  sub->add_option("model", a.model, "zoo model name (reckon models lists them) or an .onnx file")->required();
  sub->add_option("--batch", a.batch, "images per micro-batch (per step without --accum)")->required();
  sub->add_option("--input", a.input, "one sample's CxHxW (default: the model's)");
  sub->add_option("--classes", a.classes, "number of classes (default: the model's)")->check(CLI::PositiveNumber);
  sub->add_option("--precision", a.precision, "fp32 | bf16 | fp16 (autocast, f32 master weights); with --inference: fp32 | int8")
      ->capture_default_str();
  sub->add_option("--accum", a.accum, "micro-batches per optimizer step (gradient accumulation)")->capture_default_str();
  sub->add_flag("--recompute", a.recompute, "recompute each block's activations in backward");
  sub->add_option("--conv-algo", a.conv_algo, "auto | direct: the convolution algorithm (default: RECKON_CONV_ALGO, else auto)");
  sub->add_option("--memory-format", a.memory_format,
                  "auto | contiguous | channels_last: the step's activations (auto: channels_last in bf16)")
      ->capture_default_str();
  sub->add_option("--grad-scaler", a.grad_scaler, "loss scaling: auto (fp16 only) | on | off")->capture_default_str();
  sub->add_option("--optimizer", a.optimizer, "sgd or adamw")->capture_default_str();
  sub->add_option("--momentum", a.momentum, "SGD momentum (0: none)")->capture_default_str();
  sub->add_option("--freeze", a.freeze,
                  "parameters not trained: a state_dict name or module prefix, e.g. --freeze conv1 --freeze layer1 "
                  "(repeatable)");
  sub->add_option("--device", a.device, "cpu, a100, a100-80gb, h100, h200, l4, rtx4090")->capture_default_str();
  sub->add_option("--dataset-size", a.dataset_size, "images per epoch, for the time of a whole run");
  sub->add_option("--epochs", a.epochs, "epochs of the whole run")->capture_default_str();
  sub->add_flag("--measure", a.measure, "also run the step on this cpu and print predicted vs measured");
  sub->add_option("--measure-steps", a.measure_steps, "timed steps with --measure")->capture_default_str();
  sub->add_flag("--json", a.json, "print JSON instead of tables");
  sub->add_flag("--recalibrate", a.recalibrate, "measure this cpu again (peak, bandwidth, per-op overhead)");
  sub->add_flag("--inference", a.inference,
                "the deployment ledger: latency, arena and size of the inference engine's forward (with --measure: run it)");
  sub->add_option("--passes", a.passes, "with --inference: engine passes (all, none, or names)")->delimiter(',');
  sub->add_flag("--plain-layouts", a.plain_layouts, "with --inference: keep every value NCHW");
  sub->add_option("--html", a.html,
                  "also write the ledger as one self-contained page: memory timeline by tag, roofline, per-layer table")
      ->excludes(sub->get_option("--inference"));
  return [] { return run(a); };
});

}  // namespace
