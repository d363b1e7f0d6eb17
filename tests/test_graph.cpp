// The graph IR (graph/): capture, printing, JSON, the interpreter, GraphModule, and the op list's
// per-device kernel table.
//  - a captured forward of lenet5 and resnet18_cifar shows every op, value, parameter name and
//    module scope, and its JSON (and a whole training step's) round-trips;
//  - replaying a captured training step gives bit-identical weights, buffers, optimizer state and
//    loss to the eager step, for every zoo model (one thread, fixed seed);
//  - a GraphModule around a captured forward trains like the module it came from;
//  - bad graphs and unbound leaves fail with errors that name the node or value.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <set>

#include "reckon/graph/capture.h"
#include "reckon/graph/interpreter.h"
#include "reckon/ledger/ledger.h"
#include "reckon/nn/graph_module.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"
#include "test_util.h"

using namespace reckon;
using reckon::test_util::error_of;

namespace {

// A model's forward on the meta device, captured (train mode: batch norm as it trains).
graph::Graph meta_forward(const std::string& name, int64_t batch) {
  nn::ModelConfig mc;
  mc.device = Device::meta;
  auto m = nn::make_model(name, mc);
  Shape in = nn::model_input_shape(name, mc);
  in.insert(in.begin(), batch);
  TagGuard tag(Tag::input);
  Tensor x = Tensor::empty(in, DType::f32, Device::meta);
  return nn::capture_forward(*m, x);
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())) == 0;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  raw_copy(c, t);
  return c;
}

nn::StateDict clone_all(const nn::StateDict& d) {
  nn::StateDict r;
  for (const auto& [k, t] : d) r.insert(k, clone(t));
  return r;
}

}  // namespace

TEST(Graph, PrintedForwardShowsEveryOpValueParameterAndScope) {
  for (const std::string name : {"lenet5", "resnet18_cifar"}) {
    SCOPED_TRACE(name);
    nn::ModelConfig mc;
    mc.device = Device::meta;
    auto m = nn::make_model(name, mc);
    graph::Graph g = meta_forward(name, 2);
    const std::string s = g.str();
    // Every node is one line, with its op; every parameter and buffer is a named leaf.
    std::set<std::string> ops;
    for (const auto& n : g.nodes) ops.insert(std::string(n.op_name()));
    for (const auto& op : ops) EXPECT_NE(s.find(" = " + op + "("), std::string::npos) << op;
    for (const auto& [pname, t] : m->named_parameters()) {
      EXPECT_NE(s.find("parameter  %" + pname + " "), std::string::npos) << pname;
      EXPECT_GE(g.find_leaf(pname), 0) << pname;
    }
    for (const auto& [bname, t] : m->named_buffers()) EXPECT_NE(s.find("buffer     %" + bname + " "), std::string::npos) << bname;
    // Every layer with parameters appears as a scope, and every scope is a module path.
    std::set<std::string> paths;
    for (const auto& [path, mod] : m->named_modules()) {
      paths.insert(path);
      if (!mod->local_parameters().empty()) EXPECT_NE(s.find("@" + path + " "), std::string::npos) << path;
    }
    for (const auto& n : g.nodes) EXPECT_TRUE(paths.count(n.scope)) << n.scope;
    EXPECT_NO_THROW(g.validate());
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.value(g.outputs[0]).spec.shape, (Shape{2, 10}));
    // One node per op call, and as many lines.
    size_t lines = 0;
    for (char c : s) lines += c == '\n';
    EXPECT_EQ(lines, 1 + g.leaves().size() + g.nodes.size() + 1);
  }
}

TEST(Graph, JsonRoundTripsForwardAndTrainingStep) {
  LedgerConfig cfg;
  cfg.batch = 2;
  cfg.plan_workspace = false;
  cfg.optimizer = "adamw";
  std::vector<graph::Graph> graphs;
  graphs.push_back(meta_forward("lenet5", 3));
  graphs.push_back(meta_forward("resnet18_cifar", 2));
  graphs.push_back(training_step_graph("resnet18_cifar", cfg));
  cfg.precision = "bf16";
  cfg.accum = 2;
  cfg.recompute = true;
  graphs.push_back(training_step_graph("mobilenet_v2", cfg));
  for (const auto& g : graphs) {
    const std::string j = g.to_json();
    graph::Graph back = graph::Graph::from_json(j);
    EXPECT_EQ(back.to_json(), j);
    EXPECT_EQ(back.str(), g.str());
    EXPECT_EQ(back.nodes.size(), g.nodes.size());
  }
  // The step has every phase, and the optimizer's updates write the parameters in place.
  const graph::Graph& step = graphs[2];
  std::set<Phase> phases;
  int updates = 0;
  for (const auto& n : step.nodes) {
    phases.insert(n.phase);
    if (n.op == op_id<AdamUpdate>) {
      ++updates;
      const graph::Value& p = step.value(n.outputs[0]);
      EXPECT_EQ(p.alias_of, n.inputs[0]);
      EXPECT_EQ(step.value(n.inputs[0]).kind, graph::ValueKind::parameter);
    }
  }
  EXPECT_EQ(phases, (std::set<Phase>{Phase::forward, Phase::backward, Phase::optimizer}));
  EXPECT_EQ(updates, 62) << "one adam_update per parameter tensor of resnet18_cifar";
}

TEST(Graph, BadGraphsNameTheProblem) {
  graph::Graph g = meta_forward("lenet5", 1);
  std::string j = g.to_json();
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = j;
    size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  EXPECT_NE(error_of([&] { graph::Graph::from_json(replaced("\"op\":\"relu\"", "\"op\":\"frobnicate\"")); })
                .find("unknown op 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { graph::Graph::from_json(replaced("\"padding\":[2,2]", "\"padding\":[2,2,2]")); })
                .find("[conv2d] attributes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { graph::Graph::from_json(replaced("\"groups\":1", "\"groupz\":1")); })
                .find("unknown attribute 'groupz'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { graph::Graph::from_json("{\"format\": \"onnx\"}"); }).find("not a reckon graph"),
            std::string::npos);
  EXPECT_NE(error_of([&] { graph::Graph::from_json("{nope"); }).find("[graph]: not valid JSON"), std::string::npos);
  // A node reading a value written after it.
  graph::Graph bad = g;
  std::swap(bad.nodes[0], bad.nodes[1]);
  EXPECT_NE(error_of([&] { bad.validate(); }).find("reads %"), std::string::npos);
  // Running with a leaf unbound names it.
  EXPECT_NE(error_of([&] { graph::run(g, [](const graph::Value&) { return Tensor(); }); }).find("%x"),
            std::string::npos);
}

TEST(Graph, ReplayedTrainingStepIsBitIdenticalForEveryZooModel) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (const auto& name : nn::model_names()) {
    for (const std::string opt_name : {"sgd", "adamw"}) {
      if (opt_name == "adamw" && name != "lenet5" && name != "mobilenet_v2" && name != "resnet18_cifar") continue;
      SCOPED_TRACE(name + " " + opt_name);
      manual_seed(7);
      auto model = nn::make_model(name);
      model->train();
      std::unique_ptr<optim::Optimizer> opt;
      if (opt_name == "sgd")
        opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
      else
        opt = std::make_unique<optim::AdamW>(model->parameters());
      // Small inputs where the model's adaptive pooling allows (the step's ops are the same).
      const int64_t batch = name == "lenet5" || name == "tinycnn" ? 8 : 2;
      Shape in = nn::model_input_shape(name);
      if (name.rfind("vgg", 0) == 0) in = {3, 32, 32};
      if (name == "alexnet_tv" || name == "resnet18" || name == "resnet34" || name == "resnet50" ||
          name == "mobilenet_v2")
        in = {3, 64, 64};
      in.insert(in.begin(), batch);
      Tensor x, y;
      {
        TagGuard tag(Tag::input);
        x = Tensor::empty(in);
        fill_uniform_(x, -1.0, 1.0);
        y = Tensor::empty({batch}, DType::i64);
        for (int64_t i = 0; i < batch; ++i) y.set(i, double((i * 3) % 10));
      }
      auto step = [&] {
        train::Step s(*model, *opt, nullptr, {});
        s.begin(batch);
        double loss = s.micro(x, y).loss;
        s.finish();
        return loss;
      };
      step();  // warm-up: the optimizer's state exists
      const nn::StateDict weights0 = clone_all(model->state_dict()), state0 = clone_all(opt->state_dict());
      const auto rng0 = default_generator().state();

      // Eager, captured.
      graph::Capture cap;
      nn::declare_module(cap, *model);
      cap.declare(x, graph::ValueKind::input, "x");
      cap.declare(y, graph::ValueKind::input, "target");
      train::Step s(*model, *opt, nullptr, {});
      s.on_loss = [&](const Tensor& loss) { cap.mark_output(loss); };
      s.begin(batch);
      const double eager_loss = s.micro(x, y).loss;
      s.finish();
      graph::Graph g = cap.finish();
      const nn::StateDict weights1 = clone_all(model->state_dict()), state1 = clone_all(opt->state_dict());

      // Back to the start, then the graph alone.
      model->load_state_dict(weights0);
      opt->load_state_dict(state0);
      default_generator().set_state(rng0);
      model->zero_grad();
      const nn::StateDict live_weights = model->state_dict(), live_state = opt->state_dict();
      std::vector<Tensor> out;
      {
        NoGrad no_grad;
        out = graph::run(g, [&](const graph::Value& v) -> Tensor {
          if (v.name == "x") return x;
          if (v.name == "target") return y;
          if (const Tensor* t = live_weights.find(v.name)) return *t;
          if (v.name.rfind("optimizer.", 0) == 0)
            if (const Tensor* t = live_state.find(v.name.substr(std::strlen("optimizer.")))) return *t;
          return Tensor();
        });
      }
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].item(), eager_loss);
      for (const auto& [k, t] : model->state_dict()) EXPECT_TRUE(bits_equal(t, weights1.at(k))) << k;
      for (const auto& [k, t] : opt->state_dict())
        if (k.find(".step") == std::string::npos) EXPECT_TRUE(bits_equal(t, state1.at(k))) << k;
    }
  }
  omp_set_num_threads(threads);
}

TEST(Graph, GraphModuleTrainsLikeTheModuleItCameFrom) {
  for (const std::string name : {"lenet5", "tinycnn"}) {
    SCOPED_TRACE(name);
    manual_seed(3);
    auto a = nn::make_model(name);
    Shape in = nn::model_input_shape(name);
    in.insert(in.begin(), 4);
    Tensor x = Tensor::empty(in);
    fill_uniform_(x, -1.0, 1.0);
    Tensor y = Tensor::full({4}, 2.0, DType::i64);
    a->train();
    auto g = std::make_shared<graph::Graph>(nn::capture_forward(*a, x));
    nn::GraphModule b(g);
    EXPECT_EQ(b.state_dict().keys(), a->state_dict().keys()) << "the same names as the module's state_dict";
    b.load_state_dict(a->state_dict());
    optim::SGD oa(a->parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::SGD ob(b.parameters(), {.lr = 0.05, .momentum = 0.9});
    for (int it = 0; it < 2; ++it) {
      Tensor la = cross_entropy((*a)(x), y), lb = cross_entropy(b(x), y);
      EXPECT_EQ(la.item(), lb.item());
      la.backward();
      lb.backward();
      oa.step();
      ob.step();
      oa.zero_grad();
      ob.zero_grad();
    }
    for (const auto& [k, t] : a->state_dict()) EXPECT_TRUE(bits_equal(t, b.state_dict().at(k))) << k;
    // Eval mode: batch norm from its running statistics, as the module.
    a->eval();
    b.eval();
    NoGrad ng;
    EXPECT_TRUE(bits_equal((*a)(x), b(x)));
  }
}

TEST(Graph, KernelTableHasEveryOpAndTheCudaStubAnswersNotBuilt) {
  const KernelTable& t = kernel_table();
  for (const auto& info : op_registry()) {
    EXPECT_NE(t.ref[size_t(info.id)], nullptr) << info.name;
    EXPECT_NE(t.cuda[size_t(info.id)], nullptr) << info.name;
    EXPECT_EQ(t.cpu[size_t(info.id)] != nullptr, info.has_cpu_kernel) << info.name;
    EXPECT_EQ(op_id_of(info.name), info.id);
  }
  KernelCtx ctx;
  Tensor x = Tensor::ones({3}), y = Tensor::empty({3});
  UnaryAttrs a;
  Support s = t.cuda[size_t(op_id<Relu>)](ctx, std::span<const Tensor>(&x, 1), std::span<Tensor>(&y, 1), &a);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(std::string(s.why).find("not built"), std::string::npos) << s.why;
  EXPECT_NE(error_of([] { Tensor::empty({2}, DType::f32, Device::cuda); }).find("no cuda device"), std::string::npos);
}
