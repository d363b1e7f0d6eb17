// `reckon export MODEL --out model.onnx`: a model's eval-mode forward as an ONNX file (opset
// 13..17, a fixed or dynamic batch), checked by the ONNX library before it is written.
// `reckon ops`: every op of the one list, with its ONNX mapping or why it has none.
// `reckon onnx-test DIR`: ONNX's own node tests, run by reckon's importer, pass/fail per operator.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "reckon/io/checkpoint.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/onnx/node_tests.h"
#include "reckon/ops/op_list.h"

using namespace reckon;

namespace {

struct ExportArgs {
  std::string model, checkpoint, out, batch = "1", input;
  int opset = 17;
  bool check = false;
};

int run_export(const ExportArgs& a) {
  onnx::ExportOptions o;
  o.opset = a.opset;
  int64_t batch = 1;
  if (a.batch == "dynamic") {
    o.dynamic_batch = true;
  } else {
    const bool digits = !a.batch.empty() && a.batch.size() <= 9 &&
                        a.batch.find_first_not_of("0123456789") == std::string::npos;
    RK_CHECK(digits && std::stoll(a.batch) > 0, "[export] --batch must be a positive number or 'dynamic', got '{}'",
             a.batch);
    batch = std::stoll(a.batch);
  }
  nn::ModelConfig mc;
  Shape chw;
  if (!a.input.empty()) {
    chw = tools::parse_input(a.input, "export");
    mc.in_channels = chw[0];
  }
  io::Checkpoint ck;
  if (!a.checkpoint.empty()) ck = io::read_checkpoint(a.checkpoint);  // first: a bad file writes nothing
  if (chw.empty()) chw = onnx::model_input_shape(a.model, mc);
  if (!a.checkpoint.empty() && !onnx::is_onnx_path(a.model)) {
    // The classifier's width comes from the checkpoint (a model trained on 10 classes).
    for (const auto& [name, t] : ck.model_state)
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && t.dim() == 2) mc.num_classes = t.size(0);
  }
  auto model = onnx::make_model(a.model, mc);
  if (!a.checkpoint.empty()) io::load_model_state(ck, *model, a.model);
  Shape in = chw;
  in.insert(in.begin(), batch);
  if (a.check) {
    // The pre-flight alone: nothing is written.
    model->eval();
    Tensor x = Tensor::zeros(in, DType::f32, Device::cpu);
    graph::Graph g = nn::capture_forward(*model, x);
    auto problems = onnx::preflight(g, o);
    for (const auto& p : problems) std::printf("%s\n", p.str().c_str());
    std::printf("%s: %zu nodes, %zu do not lower to opset %d\n", a.model.c_str(), g.nodes.size(), problems.size(),
                a.opset);
    return problems.empty() ? 0 : 1;
  }
  RK_CHECK(!a.out.empty(), "[export] --out is required (or --check for the pre-flight alone)");
  const std::string bytes = onnx::export_module(*model, in, o);
  onnx::write_file_atomic(a.out, bytes);
  std::printf("wrote %s: %s, opset %d, input [%s, %lld, %lld, %lld], %zu bytes, checked by the ONNX library\n",
              a.out.c_str(), a.model.c_str(), a.opset, o.dynamic_batch ? "batch" : std::to_string(batch).c_str(),
              (long long)chw[0], (long long)chw[1], (long long)chw[2], bytes.size());
  return 0;
}

tools::RegisterCommand reg_export([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static ExportArgs a;
  sub = app.add_subcommand("export", "a model's eval-mode forward as an ONNX file, checked by the ONNX library");
  sub->add_option("model", a.model, "zoo model name or an .onnx file")->required();
  sub->add_option("--checkpoint", a.checkpoint, "weights: a reckon checkpoint or a safetensors state dict");
  sub->add_option("--out", a.out, "the .onnx file to write");
  sub->add_option("--opset", a.opset, "ONNX opset, 13 to 17")->capture_default_str();
  sub->add_option("--batch", a.batch, "the input's batch: a number, or 'dynamic' (a symbolic dim)")
      ->capture_default_str();
  sub->add_option("--input", a.input, "one sample's CxHxW (default: the model's)");
  sub->add_flag("--check", a.check, "only the pre-flight: list every op that does not lower, write nothing");
  return [] { return run_export(a); };
});

int run_ops(bool json) {
  nlohmann::json j = nlohmann::json::array();
  if (!json) std::printf("%-32s %-5s %-9s %s\n", "op", "cpu", "backward", "ONNX");
  for (const OpInfo& i : op_registry()) {
    const std::string onnx = i.to_onnx ? "exports" : "not exportable: " + std::string(i.not_exportable);
    if (json)
      j.push_back({{"op", i.name}, {"cpu_kernel", i.has_cpu_kernel}, {"differentiable", i.differentiable},
                   {"onnx", i.to_onnx != nullptr}, {"not_exportable", i.not_exportable}});
    else
      std::printf("%-32s %-5s %-9s %s\n", std::string(i.name).c_str(), i.has_cpu_kernel ? "yes" : "-",
                  i.differentiable ? "yes" : "-", onnx.c_str());
  }
  if (json) std::printf("%s\n", j.dump(2).c_str());
  else std::printf("ONNX import maps: %s\n", fmt::format("{}", fmt::join(onnx::supported_ops(), ", ")).c_str());
  return 0;
}

tools::RegisterCommand reg_ops([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static bool json = false;
  sub = app.add_subcommand("ops", "every op: its kernels, its backward and its ONNX mapping (the coverage report)");
  sub->add_flag("--json", json, "print JSON");
  return [] { return run_ops(json); };
});

struct OnnxTestArgs {
  std::string dir = "/usr/share/libonnx-testdata/data/node";
  std::string filter;
  bool verbose = false, json = false;
};

int run_onnx_test(const OnnxTestArgs& a) {
  auto results = onnx::run_node_tests(a.dir, a.filter);
  struct Count { int cases = 0, passed = 0; };
  std::map<std::string, Count> per_op;
  int eligible = 0, passed = 0;
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : results) {
    if (!r.eligible) continue;
    ++eligible;
    passed += r.passed;
    for (const auto& op : r.ops) {
      per_op[op].cases += 1;
      per_op[op].passed += r.passed;
    }
    if (a.verbose && !a.json) std::printf("%s %s%s%s\n", r.passed ? "PASS" : "FAIL", r.name.c_str(),
                                          r.passed ? "" : ": ", r.why.c_str());
    j.push_back({{"name", r.name}, {"ops", r.ops}, {"passed", r.passed}, {"why", r.why}});
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"cases", results.size()}, {"eligible", eligible}, {"passed", passed},
                                       {"results", j}}.dump(2).c_str());
  } else {
    std::printf("%-20s %6s %6s\n", "operator", "cases", "passed");
    for (const auto& [op, c] : per_op) std::printf("%-20s %6d %6d\n", op.c_str(), c.cases, c.passed);
    std::printf("%zu node tests in %s; %d use only operators reckon imports; %d of them pass\n", results.size(),
                a.dir.c_str(), eligible, passed);
  }
  return 0;
}

tools::RegisterCommand reg_onnx_test([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static OnnxTestArgs a;
  sub = app.add_subcommand("onnx-test", "ONNX's own node tests (libonnx-testdata) run by reckon's importer");
  sub->add_option("dir", a.dir, "the node tests' directory")->capture_default_str();
  sub->add_option("--filter", a.filter, "only cases whose name contains this");
  sub->add_flag("--verbose", a.verbose, "one line per case, with the first failure");
  sub->add_flag("--json", a.json, "print JSON");
  return [] { return run_onnx_test(a); };
});

}  // namespace
