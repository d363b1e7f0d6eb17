// `reckon graph MODEL [--step] [--json]`: the program a model runs, as the graph capture records
// it (graph/graph.h): every op call a node with its attributes, its input and output values, its
// module scope and phase. Without --step, the forward pass in eval mode (what an export or the
// inference engine reads); with --step, a whole training step (forward, loss, backward and the
// optimizer's update) as the ledger reads it. Captured on the meta device: no data, no kernels.
#include <cstdio>
#include <string>

#include "command.h"
#include "reckon/graph/capture.h"
#include "reckon/ledger/ledger.h"
#include "reckon/nn/graph_module.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/autocast.h"

using namespace reckon;

namespace {

struct GraphArgs {
  std::string model;
  int64_t batch = 1;
  bool step = false;
  bool json = false;
  std::string precision = "fp32";
  std::string optimizer = "sgd";
  int64_t accum = 1;
  bool recompute = false;
};

int run(const GraphArgs& a) {
  graph::Graph g;
  if (a.step) {
    LedgerConfig cfg;
    cfg.batch = a.batch;
    cfg.precision = a.precision;
    cfg.optimizer = a.optimizer;
    cfg.accum = a.accum;
    cfg.recompute = a.recompute;
    cfg.plan_workspace = false;  // the program, not this cpu's kernel plans
    g = training_step_graph(a.model, cfg);
  } else {
    RK_CHECK(a.batch > 0, "[graph] --batch must be positive, got {}", a.batch);
    nn::ModelConfig mc;
    mc.device = Device::meta;
    auto m = onnx::make_model(a.model, mc);
    m->eval();
    Shape in = onnx::model_input_shape(a.model, mc);
    in.insert(in.begin(), a.batch);
    Tensor x;
    {
      TagGuard tag(Tag::input);
      x = Tensor::empty(in, DType::f32, Device::meta);
    }
    Autocast ac(precision_dtype(a.precision));
    g = nn::capture_forward(*m, x);
  }
  std::fputs(a.json ? (g.to_json() + "\n").c_str() : g.str().c_str(), stdout);
  return 0;
}

tools::RegisterCommand reg_graph([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static GraphArgs a;
  sub = app.add_subcommand("graph", "the program a model runs: every op call as a node (forward, or --step)");
  sub->add_option("model", a.model, "zoo model name (reckon models lists them) or an .onnx file")->required();
  sub->add_option("--batch", a.batch, "images per (micro-)batch")->capture_default_str();
  sub->add_flag("--step", a.step, "a whole training step: forward, loss, backward, optimizer");
  sub->add_option("--precision", a.precision, "fp32 | bf16 | fp16 (autocast)")->capture_default_str();
  sub->add_option("--optimizer", a.optimizer, "with --step: sgd or adamw")->capture_default_str();
  sub->add_option("--accum", a.accum, "with --step: micro-batches per optimizer step")->capture_default_str();
  sub->add_flag("--recompute", a.recompute, "with --step: recompute each block's activations in backward");
  sub->add_flag("--json", a.json, "print the graph as JSON (graph::Graph::from_json reads it back)");
  return [] { return run(a); };
});

}  // namespace
