// `reckon plan MODEL --memory 4GiB --batch 256`: how to train MODEL at an effective batch within
// a memory budget — every rung of the ladder (precision, micro-batch x accumulation,
// recomputation) with its predicted peak and step time, and the fastest that fits. The work is
// reckon::plan() (ledger/plan.h); this file only reads the arguments and prints.
#include <cstdio>
#include <string>

#include "command.h"
#include "reckon/core/error.h"
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/plan.h"

using namespace reckon;

namespace {

struct PlanArgs {
  std::string model;
  int64_t batch = 0;
  std::string memory;
  std::string device = "cpu";
  std::string input;
  int64_t classes = 0;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  std::string precisions = "fp32,bf16,fp16";
  bool no_recompute = false;
  bool no_direct_conv = false;
  bool json = false;
  bool quiet = false;
};

// "3x32x32" (or "3,32,32") -> {3, 32, 32}; "fp32,bf16" -> {"fp32", "bf16"}.
std::vector<std::string> split(const std::string& s, const std::string& seps) {
  std::vector<std::string> r(1);
  for (char c : s) {
    if (seps.find(c) != std::string::npos)
      r.emplace_back();
    else
      r.back() += c;
  }
  return r;
}

int run(const PlanArgs& a) {
  PlanConfig cfg;
  cfg.model = a.model;
  cfg.batch = a.batch;
  cfg.memory_bytes = parse_bytes(a.memory, "--memory");
  cfg.device = a.device;
  if (!a.input.empty()) cfg.input = tools::parse_input(a.input, "plan");
  cfg.num_classes = a.classes;
  cfg.optimizer = a.optimizer;
  cfg.momentum = a.momentum;
  cfg.precisions.clear();
  for (const auto& p : split(a.precisions, ","))
    if (!p.empty()) cfg.precisions.push_back(p);
  cfg.allow_recompute = !a.no_recompute;
  cfg.allow_direct_conv = !a.no_direct_conv;
  if (!a.quiet && !a.json) cfg.progress = [](const std::string& what) { std::fprintf(stderr, "... %s\n", what.c_str()); };
  Plan p = plan(cfg);
  std::fputs((a.json ? plan_json(p) : format_plan(p)).c_str(), stdout);
  if (!a.json) std::printf("(searched %zu rungs in %.2f s)\n", p.ladder.size(), p.search_s);
  return 0;
}

tools::RegisterCommand reg_plan([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static PlanArgs a;
  sub = app.add_subcommand("plan", "fit an effective batch into a memory budget: micro-batch, precision, accumulation, "
                                   "recomputation");
  sub->add_option("model", a.model, "zoo model name (reckon models lists them) or an .onnx file")->required();
  sub->add_option("--memory", a.memory, "the budget for the step's tracked memory (e.g. 4GiB, 512MiB)")->required();
  sub->add_option("--batch", a.batch, "the effective batch to keep (micro-batch x accumulation)")->required();
  sub->add_option("--device", a.device, "cpu, a100, a100-80gb, h100, h200, l4, rtx4090 (what the step is timed for)")
      ->capture_default_str();
  sub->add_option("--input", a.input, "one sample's CxHxW (default: the model's)");
  sub->add_option("--classes", a.classes, "number of classes (default: the model's)")->check(CLI::PositiveNumber);
  sub->add_option("--optimizer", a.optimizer, "sgd or adamw")->capture_default_str();
  sub->add_option("--momentum", a.momentum, "SGD momentum (0: none)")->capture_default_str();
  sub->add_option("--precisions", a.precisions, "precisions to try, in ladder order")->capture_default_str();
  sub->add_flag("--no-recompute", a.no_recompute, "do not try recomputing activations");
  sub->add_flag("--no-direct-conv", a.no_direct_conv,
                "do not try direct convolutions where Winograd's workspace does not fit");
  sub->add_flag("--json", a.json, "print JSON instead of the table");
  sub->add_flag("--quiet", a.quiet, "no progress lines on stderr");
  return [] { return run(a); };
});

}  // namespace
