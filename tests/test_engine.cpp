// The inference engine: each pass keeps every zoo model's and imported model's outputs (within
// 1e-5 of the largest output), batch-norm folding holds in double, the arena is predicted exactly
// and a run allocates nothing, and an imported resnet18 runs with no reorder between its
// convolutions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reckon/engine/engine.h"
#include "reckon/engine/passes.h"
#include "reckon/graph/interpreter.h"
#include "reckon/io/npy.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"
#include "reckon/data/dataset.h"
#include "reckon/train/eval.h"
#include "test_util.h"

using namespace reckon;
namespace fs = std::filesystem;
namespace en = reckon::engine;

namespace {

using test_util::python;
using test_util::run_shell;

Tensor random_tensor(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  Tensor x = Tensor::empty(s, DType::f32, Device::cpu);
  fill_uniform_(x, lo, hi, g);
  return x;
}

// Batch norms with statistics and affine parameters that are not the identity, so folding them
// is a real test.
void randomise_batch_norms(nn::Module& m, uint64_t seed) {
  Generator g(seed);
  for (auto& [name, t] : m.state_dict()) {
    auto ends = [&name = name](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (!is_floating(t.dtype())) continue;
    if (ends("running_var")) fill_uniform_(t, 0.5, 2.0, g);
    else if (ends("running_mean")) fill_uniform_(t, -0.2, 0.2, g);
    else if (t.dim() == 1 && ends(".weight") && m.state_dict().contains(name.substr(0, name.size() - 6) + "running_var"))
      fill_uniform_(t, 0.5, 1.5, g);
  }
}

Tensor eager(nn::Module& m, const Tensor& x) {
  NoGrad ng;
  const bool was = m.is_training();
  m.eval();
  Tensor y = m(x);
  m.train(was);
  return y;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::abs(v));
  return m;
}
double max_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector(), vb = b.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// The engine's output for x with these options.
Tensor engine_out(nn::Module& m, const Tensor& x, const en::EngineOptions& o) {
  en::Engine e(en::make_program(m, x.shape()), o);
  return e.run(x);
}

// Every pass on its own, none, all, and all with plain layouts: each against eager.
void check_passes(nn::Module& m, const Tensor& x, const std::string& what) {
  const Tensor ref = eager(m, x);
  const double tol = 1e-5 * std::max(1.0, max_abs(ref));
  std::vector<std::vector<std::string>> sets = {{}, {"all"}};
  for (const auto& p : en::pass_names()) sets.push_back({p});
  for (const auto& s : sets) {
    en::EngineOptions o;
    o.passes = s;
    const std::string label = s.empty() ? "no pass" : s[0];
    EXPECT_LE(max_diff(engine_out(m, x, o), ref), tol) << what << " with " << label;
  }
  en::EngineOptions plain;
  plain.blocked_layouts = false;
  EXPECT_LE(max_diff(engine_out(m, x, plain), ref), tol) << what << " with plain layouts";
}

}  // namespace

// ---- the memory plan on its own ----
TEST(EnginePlan, BuffersAliveTogetherNeverOverlap) {
  Generator g(7);
  std::vector<en::Buffer> b;
  int64_t peak_lower_bound = 0;
  for (int i = 0; i < 200; ++i) {
    en::Buffer x;
    x.bytes = 1 + int64_t(g.next_u64() % 100000);
    x.first = int(g.next_u64() % 50);
    x.last = x.first + int(g.next_u64() % 10);
    b.push_back(x);
  }
  for (int t = 0; t < 60; ++t) {
    int64_t live = 0;
    for (const auto& x : b)
      if (x.first <= t && t <= x.last) live += x.bytes;
    peak_lower_bound = std::max(peak_lower_bound, live);
  }
  const int64_t total = en::plan_arena(b);
  EXPECT_GE(total, peak_lower_bound);
  int64_t sum = 0;
  for (const auto& x : b) sum += x.bytes;
  EXPECT_LT(total, sum);  // sharing happened
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].offset % 64, 0);
    EXPECT_LE(b[i].offset + b[i].bytes, total);
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool together = b[i].first <= b[j].last && b[j].first <= b[i].last;
      const bool apart = b[i].offset + b[i].bytes <= b[j].offset || b[j].offset + b[j].bytes <= b[i].offset;
      EXPECT_TRUE(!together || apart) << i << " and " << j;
    }
  }
}

// ---- each pass keeps the zoo's outputs ----
class EngineZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineZoo, EveryPassKeepsTheOutputs) {
  auto m = nn::make_model(GetParam());
  randomise_batch_norms(*m, 3);
  Shape in = onnx::model_input_shape(GetParam());
  in.insert(in.begin(), 2);
  check_passes(*m, random_tensor(in, 11), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineZoo,
                         ::testing::Values("tinycnn", "lenet5", "alexnet", "alexnet_tv", "vgg11", "vgg16", "resnet18",
                                           "resnet34", "resnet18_cifar", "mobilenet_v2", "resnet50"),
                         [](const auto& info) { return info.param; });

// ---- what the passes make of the zoo ----
TEST(EnginePasses, Resnet18CifarFusesEveryBatchNormAndActivation) {
  auto m = nn::make_model("resnet18_cifar");
  en::Engine e(en::make_program(*m, {1, 3, 32, 32}));
  int convs = 0, with_sum = 0;
  for (const auto& n : e.program().graph.nodes) {
    EXPECT_NE(n.op, op_id<reckon::BatchNorm2d>) << n.scope;
    EXPECT_NE(n.op, op_id<reckon::Relu>) << n.scope;
    EXPECT_NE(n.op, op_id<Add>) << n.scope;
    if (n.op == op_id<Conv2d>) ++convs;
    if (n.op == op_id<FusedConv2d>) {
      ++convs;
      with_sum += has_sum(static_cast<const FusedConvAttrs*>(n.attrs.get())->post);
    }
  }
  EXPECT_EQ(convs, 20);
  EXPECT_EQ(with_sum, 8);  // the eight residual adds, each in a conv
  // The folded graph does fewer FLOPs' worth of bytes: each pass reports what it saved.
  for (const auto& r : e.passes())
    if (r.name == std::string("fold_batch_norm")) {
      EXPECT_EQ(r.rewrites, 20);
      EXPECT_LT(r.bytes_after, r.bytes_before);
      EXPECT_EQ(r.nodes_before - r.nodes_after, 20);
    }
}

TEST(EnginePasses, PatternsBecomeOneElementwiseOp) {
  // x * sigmoid(x), x * clamp(x/6 + 1/2, 0, 1), and a chain exp -> affine -> tanh.
  class M : public nn::Module {
   public:
    M() : Module("m", Device::cpu) {}
    Tensor forward(const Tensor& x) override {
      Tensor a = mul(x, sigmoid(x));
      Tensor b = hardswish(a);
      return tanh(affine(exp(b), 0.5, -1.0));
    }
  } m;
  Tensor x = random_tensor({2, 3, 4, 5}, 5, -3, 3);
  en::Engine e(en::make_program(m, x.shape()));
  ASSERT_EQ(e.program().graph.nodes.size(), 1u) << e.program().graph.str();
  const auto& post = static_cast<const PostOpsAttrs*>(e.program().graph.nodes[0].attrs.get())->post;
  EXPECT_EQ(post_ops_str(post), "silu+hardswish[0.166667,0.5]+exp+affine[0.5,-1]+tanh");
  check_passes(m, x, "patterns");
}

// ---- batch-norm folding, in double ----
TEST(EnginePasses, BatchNormFoldingHoldsInDouble) {
  class M : public nn::Module {
   public:
    M() : Module("m", Device::cpu) {
      conv = register_module("conv", std::make_shared<nn::Conv2d>(3, 5, 3, nn::Conv2dOptions{1, 1, 1, 1, true}));
      bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(5));
    }
    Tensor forward(const Tensor& x) override { return (*bn)((*conv)(x)); }
    std::shared_ptr<nn::Conv2d> conv;
    std::shared_ptr<nn::BatchNorm2d> bn;
  } m;
  randomise_batch_norms(m, 9);
  en::Program p = en::make_program(m, {2, 3, 6, 6});
  // The same program in double: every constant and the input as f64.
  for (auto& [id, t] : p.constants) {
    t = cast(t, DType::f64);
    p.graph.values[size_t(id)].spec.dtype = DType::f64;
  }
  for (auto& v : p.graph.values) v.spec.dtype = DType::f64;
  Tensor x = cast(random_tensor({2, 3, 6, 6}, 2), DType::f64);
  auto run = [&](const en::Program& q) {
    return graph::run(q.graph, [&](const graph::Value& v) { return v.id == q.input ? x : q.constants.at(v.id); })[0];
  };
  const Tensor before = run(p);
  en::Program folded = p;
  EXPECT_EQ(en::fold_batch_norm(folded), 1);
  EXPECT_EQ(folded.graph.nodes.size(), 1u);
  const Tensor after = run(folded);
  EXPECT_EQ(after.dtype(), DType::f64);
  EXPECT_LE(max_diff(before, after), 1e-12 * std::max(1.0, max_abs(before)));
}

// ---- the arena: predicted exactly, and the only memory a run uses ----
TEST(EngineMemory, ArenaIsPredictedOnMetaAndARunAllocatesNothing) {
  for (const std::string name : {"lenet5", "resnet18_cifar", "mobilenet_v2"}) {
    Shape in = onnx::model_input_shape(name);
    in.insert(in.begin(), 4);
    nn::ModelConfig meta_cfg;
    meta_cfg.device = Device::meta;
    auto meta = nn::make_model(name, meta_cfg);
    en::Engine planned(en::make_program(*meta, in));
    EXPECT_FALSE(planned.can_run());

    auto m = nn::make_model(name);
    en::Program prog = en::make_program(*m, in);
    const int64_t before = tracker(Device::cpu).stats().live_bytes[size_t(Tag::activation)];
    en::Engine e(std::move(prog));
    const int64_t arena_live = tracker(Device::cpu).stats().live_bytes[size_t(Tag::activation)] - before;
    EXPECT_EQ(e.arena_bytes(), planned.arena_bytes()) << name;
    EXPECT_EQ(arena_live, e.arena_bytes()) << name;
    EXPECT_EQ(e.weight_bytes(), planned.weight_bytes()) << name;
    EXPECT_LT(e.arena_bytes(), e.values_bytes()) << name;  // buffers share the arena

    Tensor x = random_tensor(in, 1), y = Tensor::empty(e.output_shape());
    e.run(x, y);  // warm
    const auto s0 = tracker(Device::cpu).stats();
    for (int i = 0; i < 3; ++i) e.run(x, y);
    const auto s1 = tracker(Device::cpu).stats();
    EXPECT_EQ(s1.num_allocs, s0.num_allocs) << name << ": a run allocated";
    EXPECT_EQ(s1.live_total_bytes, s0.live_total_bytes) << name;
    for (const auto& s : e.steps()) EXPECT_NE(s.kind, "kernel") << name << ": " << s.name << " " << s.op;
  }
}

// ---- layouts: an imported resnet18 keeps its convolutions' layout end to end ----
TEST(EngineLayouts, ImportedResnet18HasNoReorderBetweenConvolutions) {
  const fs::path d = test_util::fresh_dir("engine", "r18");
  auto zoo = nn::make_model("resnet18");
  randomise_batch_norms(*zoo, 4);
  const std::string path = (d / "resnet18.onnx").string();
  onnx::write_file_atomic(path, onnx::export_module(*zoo, {1, 3, 224, 224}));
  auto m = onnx::make_model(path);
  en::Engine e(en::make_program(*m, {1, 3, 224, 224}));
  int convs = 0;
  for (const auto& s : e.steps()) {
    EXPECT_FALSE(s.reorder_between_convs) << s.name << " " << s.op;
    if (s.op.rfind("conv2d", 0) == 0) ++convs;
  }
  EXPECT_EQ(convs, 20);
  EXPECT_LE(e.reorders(), 1) << "only the flatten before fc reorders";
  // With plain layouts every convolution reorders its input and output.
  en::EngineOptions plain;
  plain.blocked_layouts = false;
  en::Engine p(en::make_program(*m, {1, 3, 224, 224}), plain);
  EXPECT_GT(p.reorders(), 20);
  Tensor x = random_tensor({1, 3, 224, 224}, 8);
  const Tensor ref = eager(*zoo, x);
  EXPECT_LE(max_diff(e.run(x), ref), 1e-5 * std::max(1.0, max_abs(ref)));
  fs::remove_all(d);
}

TEST(EngineErrors, WrongInputShapeAndAMetaProgramSayWhat) {
  auto m = nn::make_model("lenet5");
  en::Engine e(en::make_program(*m, {2, 1, 28, 28}));
  Tensor bad = Tensor::zeros({3, 1, 28, 28});
  try {
    e.run(bad);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("[2, 1, 28, 28]"), std::string::npos) << err.what();
  }
  nn::ModelConfig cfg;
  cfg.device = Device::meta;
  auto mm = nn::make_model("lenet5", cfg);
  en::Engine planned(en::make_program(*mm, {2, 1, 28, 28}));
  try {
    planned.run(Tensor::zeros({2, 1, 28, 28}));
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("meta"), std::string::npos) << err.what();
  }
  EXPECT_THROW(en::Engine(en::make_program(*m, {2, 1, 28, 28}), en::EngineOptions{{"fuse_everything"}}), Error);
}

// ---- imported torchvision models (scripts/export_torchvision.py writes each) ----
class EngineTorchvision : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineTorchvision, EveryPassKeepsTheOutputs) {
  const std::string name = GetParam();
  const fs::path d = test_util::fresh_dir("engine", "tv_" + name);
  const std::string p = d.string(), path = p + "/" + name + ".onnx";
  ASSERT_EQ(run_shell(python() + " " RECKON_SOURCE_DIR "/scripts/export_torchvision.py " + p + " " + name + " >" + p +
                    "/log.txt 2>&1"), 0)
      << "scripts/export_torchvision.py failed (pip install torch torchvision): see " << p << "/log.txt";
  auto m = onnx::make_model(path);
  check_passes(*m, io::read_npy(p + "/" + name + ".x.npy"), name);
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineTorchvision,
                         ::testing::Values("alexnet", "resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1",
                                           "googlenet", "mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x1_0",
                                           "densenet121"),
                         [](const auto& info) { return info.param; });

// ---- views: slices, transposes and reshapes of the arena, as shufflenet's channel shuffle ----
TEST(EngineViews, ChannelShuffleSlicesAndSums) {
  class M : public nn::Module {
   public:
    M() : Module("m", Device::cpu) { conv = register_module("conv", std::make_shared<nn::Conv2d>(8, 8, 1)); }
    std::shared_ptr<nn::Conv2d> conv;
    Tensor forward(const Tensor& x) override {
      const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
      // A strided slice next to a convolution's blocked output in one concat (oneDNN 2.6 got
      // that wrong: the engine makes slices dense first).
      Tensor a = narrow(x, 1, 0, c / 2), b = relu(narrow((*conv)(x), 1, c / 2, c / 2));
      Tensor y = concat({a, b}, 1);
      y = reshape(contiguous(permute(reshape(y, {n, 2, c / 2, h, w}), {0, 2, 1, 3, 4})), {n, c, h, w});
      y = add(y, narrow(y, 2, 0, 1));
      return affine(sum(y, {2, 3}), 0.25, 0.0);
    }
  } m;
  check_passes(m, random_tensor({2, 8, 3, 5}, 3), "channel shuffle");
}

// ---- reckon eval's path: the engine over a real test set gives the eager answers ----
TEST(EngineEval, FashionMnistTestSetThroughTheEngineMatchesEager) {
  auto m = nn::make_model("lenet5");
  auto test_set = data::open_dataset("fashion-mnist", false, 0);
  const auto eager_r = train::evaluate(*m, *test_set, {}, 512, DType::f32, true, false);
  const auto engine_r = train::evaluate(*m, *test_set, {}, 512, DType::f32, true, true);
  EXPECT_EQ(eager_r.runner, "eager");
  EXPECT_EQ(engine_r.runner, "engine");
  ASSERT_EQ(engine_r.samples, 10000);
  ASSERT_EQ(engine_r.outputs.size(), eager_r.outputs.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < eager_r.outputs.size(); ++i) {
    worst = std::max(worst, double(std::abs(engine_r.outputs[i] - eager_r.outputs[i])));
    largest = std::max(largest, double(std::abs(eager_r.outputs[i])));
  }
  EXPECT_LE(worst, 1e-5 * std::max(1.0, largest));
  EXPECT_NEAR(engine_r.loss, eager_r.loss, 1e-5 * eager_r.loss);
  EXPECT_NEAR(engine_r.accuracy, eager_r.accuracy, 1.5e-4);  // an argmax tie may flip one sample
}

// ---- the commands ----
TEST(EngineCli, BenchInferAndTheDeploymentLedgerPrintTheirFigures) {
  const fs::path d = test_util::fresh_dir("engine", "cli");
  auto r = test_util::run_cli({"bench-infer", "lenet5", "--batch", "4", "--threads", "1", "--iters", "20", "--json"}, d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["iterations"].get<int>(), 20);
  EXPECT_GT(j["images_per_s"].get<double>(), 0);
  EXPECT_LE(j["p50_ms"].get<double>(), j["p99_ms"].get<double>());
  EXPECT_EQ(j["kernel_steps"].get<int>(), 0);
  EXPECT_EQ(j["passes"].size(), en::pass_names().size());

  r = test_util::run_cli({"ledger", "lenet5", "--batch", "4", "--inference", "--measure", "--json"}, d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  const auto& t = j["totals"];
  EXPECT_EQ(t["macs"].get<int64_t>(), 4 * 416520);  // lenet5's forward MACs per image (reckon models)
  EXPECT_GT(t["predicted_latency_ms"].get<double>(), 0);
  EXPECT_EQ(j["measured"]["arena_bytes"].get<int64_t>(), t["arena_bytes"].get<int64_t>());
  EXPECT_EQ(j["measured"]["run_allocations"].get<int64_t>(), 0);
  EXPECT_EQ(t["file_bytes"]["fp32"].get<int64_t>(), 4 * 61706);
  EXPECT_LT(t["file_bytes"]["int8"].get<int64_t>(), t["file_bytes"]["bf16"].get<int64_t>());
  for (const auto& s : j["steps"]) EXPECT_GE(s["measured_ms"].get<double>(), 0) << s["name"];

  // Bad input: one line naming the argument, exit 1 (or 2 for a usage error).
  r = test_util::run_cli({"bench-infer", "lenet5", "--precision", "bf16"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--precision bf16"), std::string::npos) << r.err;
  r = test_util::run_cli({"bench-infer", "lenet5", "--passes", "fuse_everything"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown pass 'fuse_everything'"), std::string::npos) << r.err;
  r = test_util::run_cli({"bench-infer", "lenet5", "--precision", "int4"}, d);
  EXPECT_EQ(r.exit_code, 2);
  // A thread count OpenMP would try to start: refused before anything runs.
  for (const char* cmd : {"bench-infer", "bench-train"}) {
    r = test_util::run_cli({cmd, "lenet5", "--threads", "100000"}, d);
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_NE(r.err.find("--threads must be between 0"), std::string::npos) << cmd << ": " << r.err;
  }
  fs::remove_all(d);
}

// A convolution's step says which share of its declared taps read the input, and which share of
// its weights some output reads: the deployment ledger times a oneDNN direct one on those (its
// kernels skip the padding; reckon's own, Winograd and gemm do not: ledger/inference.cpp).
TEST(EngineSteps, ConvolutionsSayHowMuchOfTheirTapsIsPadding) {
  struct Case {
    Shape x;
    int64_t stride;
    double taps, weights;
  };
  // 3x3, padding 1: on 4x4, 10 of 12 taps a dimension read the input; on 1x1, the centre alone;
  // stride 2 on 5 pixels: outputs over -1..1, 1..3, 3..5 read 7 of 9 taps a dimension, all of
  // the kernel's
  for (const Case& c : {Case{{1, 16, 4, 4}, 1, 100.0 / 144, 1.0}, Case{{2, 16, 1, 1}, 1, 1.0 / 9, 1.0 / 9},
                        Case{{1, 16, 5, 5}, 2, 49.0 / 81, 1.0}}) {
    nn::Conv2d conv(16, 32, 3, nn::Conv2dOptions{c.stride, 1, 1, 1, true});
    en::Engine e(en::make_program(conv, c.x));
    int convs = 0;
    for (const auto& s : e.steps()) {
      if (s.op.rfind("conv2d", 0) != 0) continue;
      ++convs;
      ASSERT_EQ(s.kind, "onednn") << s.op;
      EXPECT_NEAR(s.conv_tap_share, c.taps, 1e-12) << shape_str(c.x) << " stride " << c.stride;
      EXPECT_NEAR(s.conv_weight_share, c.weights, 1e-12) << shape_str(c.x) << " stride " << c.stride;
    }
    EXPECT_EQ(convs, 1);
  }
}

// ---- a residual that is also the convolution's input: never written in place ----
TEST(EngineMemory, AResidualThatIsTheConvolutionsInputIsCopiedNotOverwritten) {
  class M : public nn::Module {
   public:
    M() : Module("m", Device::cpu) {
      conv0 = register_module("conv0", std::make_shared<nn::Conv2d>(8, 8, 3, nn::Conv2dOptions{1, 1, 1, 1, true}));
      conv = register_module("conv", std::make_shared<nn::Conv2d>(8, 8, 3, nn::Conv2dOptions{1, 1, 1, 1, true}));
      fc0 = register_module("fc0", std::make_shared<nn::Linear>(8 * 24 * 24, 16));
      fc = register_module("fc", std::make_shared<nn::Linear>(16, 16));
    }
    std::shared_ptr<nn::Conv2d> conv0, conv;
    std::shared_ptr<nn::Linear> fc0, fc;
    Tensor forward(const Tensor& x) override {
      Tensor h = relu((*conv0)(x));                   // in the layout the next convolution takes
      Tensor y = relu(add((*conv)(h), h));           // conv(h) + h: h is both input and residual
      Tensor g = relu((*fc0)(reshape(y, {y.size(0), 8 * 24 * 24})));
      return add((*fc)(g), g);                        // the same for a linear layer
    }
  } m;
  check_passes(m, random_tensor({2, 8, 24, 24}, 6), "conv(x) + x");
  // oneDNN's convolution and inner product do not take dst over src: the residual that is also
  // the input is copied (this oneDNN happened to compute the aliased call right at these sizes).
  en::Engine e(en::make_program(m, {2, 8, 24, 24}));
  int fused = 0;
  for (const auto& s : e.steps())
    if (s.op.find("+sum") != std::string::npos) {
      ++fused;
      EXPECT_FALSE(s.in_place) << s.name << " " << s.op;
    }
  EXPECT_EQ(fused, 2);
}
