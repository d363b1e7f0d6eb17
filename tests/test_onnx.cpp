// ONNX: export (every zoo model, checked by the ONNX library and run by ONNX Runtime with the same
// outputs as reckon, at a fixed and a dynamic batch), import (round trip, the ledger of an
// imported model, fine-tuning it), ONNX's own node tests, and bad files (each a clear error).
// ONNX Runtime is the oracle: scripts/onnx_ort_check.py, run by the python3 on PATH (pip's
// onnx and onnxruntime; .ci/run installs them). Without them these tests fail, not skip.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "reckon/io/npy.h"
#include "reckon/ledger/ledger.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/onnx/node_tests.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"
#include "reckon/train/trainer.h"
#include "test_util.h"

using namespace reckon;
namespace fs = std::filesystem;
namespace ro = reckon::onnx;

namespace {

using test_util::python;
int run(const std::string& cmd) { return test_util::run_shell(cmd); }

std::string ort_check() { return python() + " " + RECKON_SOURCE_DIR "/scripts/onnx_ort_check.py"; }

Tensor random_input(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::empty(s, DType::f32, Device::cpu);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = float(g.normal());
  return x;
}

Tensor forward(nn::Module& m, const Tensor& x) {
  NoGrad ng;
  m.eval();
  return m(x);
}

}  // namespace

// ---- export: every zoo model, in ONNX Runtime ----
class ExportZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportZoo, PassesTheCheckerAndOnnxRuntimeAgreesAtAFixedAndADynamicBatch) {
  const std::string name = GetParam();
  fs::path d = test_util::fresh_dir("onnx", "zoo_" + name);
  manual_seed(7);
  auto m = nn::make_model(name);
  // Batch norm's statistics and affine away from 0 and 1, so exporting them wrong shows.
  for (const auto& [n, t] : m->named_buffers()) {
    if (n.find("running_mean") != std::string::npos) fill_uniform_(t, -0.1, 0.1);
    if (n.find("running_var") != std::string::npos) fill_uniform_(t, 0.5, 1.5);
  }
  for (const auto& [n, t] : m->named_parameters())
    if (t.dim() == 1) fill_uniform_(t, n.find("bias") != std::string::npos ? -0.1 : 0.5, n.find("bias") != std::string::npos ? 0.1 : 1.5);
  Shape chw = nn::model_input_shape(name);
  auto batch = [&](int64_t n) {
    Shape s = chw;
    s.insert(s.begin(), n);
    return s;
  };
  Tensor x2 = random_input(batch(2), 1), x3 = random_input(batch(3), 2);
  io::write_npy((d / "x2.npy").string(), x2);
  io::write_npy((d / "x3.npy").string(), x3);
  io::write_npy((d / "y2.npy").string(), forward(*m, x2));
  io::write_npy((d / "y3.npy").string(), forward(*m, x3));
  ro::write_file_atomic((d / "fixed.onnx").string(), ro::export_module(*m, batch(2)));
  ro::ExportOptions dyn;
  dyn.dynamic_batch = true;
  dyn.opset = 13;
  ro::write_file_atomic((d / "dynamic.onnx").string(), ro::export_module(*m, batch(1), dyn));
  const std::string p = d.string();
  EXPECT_EQ(run(ort_check() + " " + p + "/fixed.onnx " + p + "/x2.npy " + p + "/y2.npy"), 0) << name;
  EXPECT_EQ(run(ort_check() + " " + p + "/dynamic.onnx " + p + "/x2.npy " + p + "/y2.npy " + p + "/x3.npy " + p +
                "/y3.npy"), 0) << name;
  // Parameter names are the initializer names.
  ro::Model back = ro::load(p + "/fixed.onnx");
  for (const auto& [n, t] : m->named_parameters()) EXPECT_NE(back.initializer(n), nullptr) << n;
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Onnx, ExportZoo, ::testing::ValuesIn(nn::model_names()),
                         [](const auto& info) { return info.param; });

TEST(OnnxExport, PreflightNamesEveryLayerThatDoesNotLower) {
  manual_seed(1);
  auto m = nn::make_model("tinycnn");
  m->train();  // batch norm in training mode does not lower
  graph::Graph g = nn::capture_forward(*m, Tensor::zeros({2, 1, 28, 28}));
  auto problems = ro::preflight(g);
  int bn = 0;
  for (const auto& p : problems) bn += p.op == "batch_norm2d";
  EXPECT_EQ(bn, 3);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].str().find("layer "), std::string::npos);
  int training = 0;
  for (const auto& p : problems) training += p.str().find("training mode") != std::string::npos;
  EXPECT_EQ(training, 3);
  EXPECT_NE(test_util::error_of([&] { ro::preflight(g, {.opset = 12}); }).find("opsets 13 to 17"), std::string::npos);
  // A failed export leaves an existing file as it was.
  fs::path d = test_util::fresh_dir("onnx", "preflight");
  test_util::write_file(d / "m.onnx", "old");
  EXPECT_NE(test_util::error_of([&] {
              ro::write_file_atomic((d / "m.onnx").string(),
                                      ro::export_graph(g, [](const graph::Value&) { return Tensor(); }));
            }).find("do not lower"),
            std::string::npos);
  EXPECT_EQ(test_util::read_file(d / "m.onnx"), "old");
  fs::remove_all(d);
}

TEST(OnnxExport, OpsWithoutAMappingSayWhy) {
  for (const OpInfo& i : op_registry()) {
    EXPECT_TRUE((i.to_onnx != nullptr) != !i.not_exportable.empty()) << i.name;
  }
  EXPECT_EQ(op_info(op_id_of("cross_entropy")).to_onnx, nullptr);
  EXPECT_NE(op_info(op_id_of("conv2d")).to_onnx, nullptr);
}

// ---- import ----
namespace {
// The graph of a file as comparable text: nodes (type, inputs, outputs, attributes) and
// initializers (name, dims, bytes).
std::pair<std::vector<std::string>, std::map<std::string, std::string>> graph_of(const std::string& bytes) {
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  std::vector<std::string> nodes;
  for (const auto& n : m.graph().node()) {
    ::onnx::NodeProto c = n;
    c.clear_name();
    nodes.push_back(c.SerializeAsString());
  }
  std::map<std::string, std::string> inits;
  for (const auto& t : m.graph().initializer()) inits[t.name()] = t.SerializeAsString();
  return {nodes, inits};
}
}  // namespace

TEST(OnnxImport, RoundTripGivesTheSameGraphAndOutputs) {
  for (const std::string name : {"lenet5", "tinycnn", "resnet18_cifar", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    manual_seed(3);
    auto m = nn::make_model(name);
    Shape in = nn::model_input_shape(name);
    in.insert(in.begin(), 2);
    const std::string first = ro::export_module(*m, in);
    auto model = std::make_shared<const ro::Model>(ro::parse(first, name + ".onnx", ""));
    ro::OnnxModule im(model);
    Tensor x = random_input(in, 5);
    Tensor want = forward(*m, x), got = forward(im, x);
    ASSERT_EQ(got.shape(), want.shape());
    double err = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      err = std::max(err, std::fabs(got.get(i) - want.get(i)));
      scale = std::max(scale, std::fabs(want.get(i)));
    }
    EXPECT_LE(err, 1e-5 * scale);
    EXPECT_EQ(im.num_parameters(), m->num_parameters());
    const std::string second = ro::export_module(im, in);
    auto [n1, i1] = graph_of(first);
    auto [n2, i2] = graph_of(second);
    EXPECT_EQ(n1, n2);
    EXPECT_EQ(i1, i2);
  }
}

TEST(OnnxImport, LedgerOfAnImportedModelEqualsTheZoo) {
  fs::path d = test_util::fresh_dir("onnx", "ledger");
  for (const std::string name : {"resnet18_cifar", "lenet5", "alexnet_tv"}) {
    SCOPED_TRACE(name);
    manual_seed(1);
    auto m = nn::make_model(name);
    Shape in = nn::model_input_shape(name);
    in.insert(in.begin(), 1);
    const std::string path = (d / (name + ".onnx")).string();
    ro::ExportOptions o;
    o.dynamic_batch = true;
    ro::write_file_atomic(path, ro::export_module(*m, in, o));
    LedgerConfig cfg;
    cfg.batch = 4;
    cfg.plan_workspace = false;
    Ledger zoo = ledger(name, cfg), file = ledger(path, cfg);
    EXPECT_EQ(file.totals.params, zoo.totals.params);
    EXPECT_EQ(file.totals.fwd_macs, zoo.totals.fwd_macs);
    EXPECT_EQ(file.totals.bwd_macs, zoo.totals.bwd_macs);
    if (name == "alexnet_tv") {
      // The exported forward is the eval one: its dropout is gone, and with it the masks it saves.
      EXPECT_LT(file.totals.saved_bytes, zoo.totals.saved_bytes);
      continue;
    }
    EXPECT_EQ(file.totals.saved_bytes, zoo.totals.saved_bytes);
    // The file has no num_batches_tracked (the forward never reads it): the peak is that much lower.
    int64_t counters = 0;
    for (const auto& [n, t] : m->named_buffers())
      if (n.find("num_batches_tracked") != std::string::npos) counters += t.nbytes();
    EXPECT_EQ(file.memory.peak_bytes, zoo.memory.peak_bytes - counters);
  }
  fs::remove_all(d);
}

TEST(OnnxImport, FineTuningAnImportedLenet5MatchesTheZooModel) {
  fs::path d = test_util::fresh_dir("onnx", "finetune");
  train::TrainConfig base;  // the recipe, one epoch
  base.epochs = 1;
  base.verbose = 0;
  // The file holds the zoo model's initial weights for the recipe's seed.
  manual_seed(base.seed);
  auto m = nn::make_model("lenet5", {.num_classes = 10, .in_channels = 1});
  ro::ExportOptions o;
  o.dynamic_batch = true;
  const std::string path = (d / "lenet5.onnx").string();
  ro::write_file_atomic(path, ro::export_module(*m, {1, 1, 28, 28}, o));
  train::TrainConfig zc = base, oc = base;
  zc.out = (d / "zoo").string();
  oc.out = (d / "onnx").string();
  oc.model = path;
  train::TrainResult zr = train::train(zc), orr = train::train(oc);
  std::printf("one epoch of the recipe: zoo lenet5 %.2f%%, imported lenet5.onnx %.2f%%\n",
              100 * zr.final_eval.accuracy, 100 * orr.final_eval.accuracy);
  EXPECT_NEAR(orr.final_eval.accuracy, zr.final_eval.accuracy, 0.003);
  EXPECT_GT(orr.final_eval.accuracy, 0.8);
  // ... and the fine-tuned weights export back.
  auto tuned = ro::make_model(path);
  nn::StateDict sd;
  EXPECT_NO_THROW(ro::export_module(*tuned, {2, 1, 28, 28}));
  fs::remove_all(d);
}

// ---- ONNX's own node tests ----
TEST(OnnxNodeTests, PassAtLeastAsManyAsOnnxRuntime) {
  const std::string dir = "/usr/share/libonnx-testdata/data/node";
  ASSERT_TRUE(fs::is_directory(dir)) << "apt-get install libonnx-testdata";
  auto results = ro::run_node_tests(dir);
  // The operators the issue lists (ONNX Runtime 1.32 passes 214 of Debian's cases that use only these).
  const std::set<std::string> listed = {
      "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid",
      "HardSigmoid", "HardSwish", "Tanh", "Softmax", "LogSoftmax", "MaxPool", "AveragePool", "GlobalAveragePool",
      "ReduceMean", "Flatten", "Reshape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Split", "Slice",
      "Transpose", "Pad", "Constant", "Identity", "Dropout", "BatchNormalization", "LRN"};
  // Known failures, each for a reason: random masks (training dropout, as ONNX Runtime), the
  // sequence and optional identities (ONNX Runtime fails those too), casts through strings or
  // through bfloat16 stored as uint16.
  auto known = [](const std::string& n) {
    return n.rfind("test_training_dropout", 0) == 0 || n == "test_identity_opt" || n == "test_identity_sequence" ||
           n.find("STRING") != std::string::npos || n.find("BFLOAT16") != std::string::npos;
  };
  int listed_cases = 0, listed_passed = 0, eligible = 0;
  for (const auto& r : results) {
    if (!r.eligible) continue;
    ++eligible;
    if (!known(r.name)) {
      EXPECT_TRUE(r.passed) << r.name << ": " << r.why;
    }
    bool in_list = std::all_of(r.ops.begin(), r.ops.end(), [&](const std::string& o) { return listed.count(o) > 0; });
    if (in_list) ++listed_cases, listed_passed += r.passed;
  }
  EXPECT_GE(results.size(), 900u);
  EXPECT_GE(listed_passed, 214) << "of " << listed_cases;
  EXPECT_GE(eligible, listed_cases);
}

// ---- bad files: one clear error each, never a crash ----
class OnnxBad : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = test_util::fresh_dir("onnx", "bad");
    manual_seed(1);
    auto m = nn::make_model("lenet5");
    good_ = ro::export_module(*m, {1, 1, 28, 28});
    ASSERT_TRUE(proto_.ParseFromString(good_));
  }
  void TearDown() override { fs::remove_all(d_); }
  // The error of loading (and running) bytes written to a file of this name.
  std::string load_error(const std::string& bytes, const std::string& name = "m.onnx") {
    const std::string p = (d_ / name).string();
    test_util::write_file(p, bytes);
    try {  // "" when it loads and runs: the good file's cases expect that
      auto m = std::make_shared<const ro::Model>(ro::load(p));
      ro::OnnxModule mod(m);
      forward(mod, Tensor::zeros({1, 1, 28, 28}));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string load_error(const ::onnx::ModelProto& m) { return load_error(m.SerializeAsString()); }
  // A copy of the model whose first initializer is external data at `location`; *t is that
  // initializer, for more keys.
  ::onnx::ModelProto with_external(const std::string& location, ::onnx::TensorProto** t = nullptr) {
    auto m = proto_;
    auto* init = m.mutable_graph()->mutable_initializer(0);
    init->clear_raw_data();
    init->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* kv = init->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    if (t) *t = init;
    return m;
  }
  fs::path d_;
  std::string good_;
  ::onnx::ModelProto proto_;
};

TEST_F(OnnxBad, TheGoodFileLoads) { EXPECT_EQ(load_error(good_), ""); }

TEST_F(OnnxBad, MalformedAndTruncated) {
  std::string e = load_error("this is not a protobuf \xff\xff\xff");
  EXPECT_NE(e.find("m.onnx"), std::string::npos) << e;
  EXPECT_NE(e.find("not a valid ONNX model"), std::string::npos) << e;
  e = load_error(good_.substr(0, good_.size() / 2));
  EXPECT_NE(e.find("not a valid ONNX model"), std::string::npos) << e;
  e = load_error("");
  EXPECT_NE(e.find("no graph"), std::string::npos) << e;
}

TEST_F(OnnxBad, UnknownOpNamesTheNodeTheTypeAndTheOpset) {
  auto m = proto_;
  m.mutable_graph()->mutable_node(1)->set_op_type("FancyRelu");
  std::string e = load_error(m);
  EXPECT_NE(e.find("FancyRelu"), std::string::npos) << e;
  EXPECT_NE(e.find("opset 17"), std::string::npos) << e;
  EXPECT_NE(e.find(m.graph().node(1).name()), std::string::npos) << e;
  m = proto_;
  m.mutable_graph()->mutable_node(1)->set_domain("com.example");
  EXPECT_NE(load_error(m).find("domain 'com.example'"), std::string::npos);
}

TEST_F(OnnxBad, UnsupportedOpset) {
  auto m = proto_;
  m.mutable_opset_import(0)->set_version(21);
  EXPECT_NE(load_error(m).find("opset 21 is not supported"), std::string::npos);
  m.clear_opset_import();
  EXPECT_NE(load_error(m).find("no opset"), std::string::npos);
}

TEST_F(OnnxBad, CycleAndDanglingInput) {
  auto m = proto_;
  auto* g = m.mutable_graph();
  // node 0 reads node 1's output: a cycle (or nodes out of order).
  g->mutable_node(0)->set_input(0, g->node(1).output(0));
  std::string e = load_error(m);
  EXPECT_NE(e.find("cycle"), std::string::npos) << e;
  m = proto_;
  m.mutable_graph()->mutable_node(2)->set_input(0, "nowhere");
  e = load_error(m);
  EXPECT_NE(e.find("'nowhere'"), std::string::npos) << e;
  EXPECT_NE(e.find("dangling"), std::string::npos) << e;
}

TEST_F(OnnxBad, ValueInfoThatDisagreesWithReckonsShapes) {
  auto m = proto_;
  auto* vi = m.mutable_graph()->add_value_info();
  vi->set_name(m.graph().node(0).output(0));
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  for (int64_t d : {1, 6, 27, 28}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  std::string e = load_error(m);
  EXPECT_NE(e.find("by reckon's shape inference but the file says [1, 6, 27, 28]"), std::string::npos) << e;
  tt->mutable_shape()->mutable_dim(2)->set_dim_value(28);  // right: loads
  EXPECT_EQ(load_error(m), "");
}

TEST_F(OnnxBad, MissingInitializer) {
  auto m = proto_;
  auto* inits = m.mutable_graph()->mutable_initializer();
  const std::string gone = inits->Get(0).name();
  inits->erase(inits->begin());
  std::string e = load_error(m);
  EXPECT_NE(e.find("'" + gone + "'"), std::string::npos) << e;
}

TEST_F(OnnxBad, NegativeAndOverflowingDims) {
  auto m = proto_;
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, -6);
  EXPECT_NE(load_error(m).find("negative dim -6"), std::string::npos);
  m = proto_;
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  for (int i = 0; i < 4; ++i) t->add_dims(int64_t(1) << 20);
  std::string e = load_error(m);
  EXPECT_NE(e.find("overflow"), std::string::npos) << e;
  m = proto_;
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, 7);  // data shorter than its dims
  e = load_error(m);
  EXPECT_NE(e.find("bytes of data"), std::string::npos) << e;
  EXPECT_NE(e.find(m.graph().initializer(0).name()), std::string::npos) << e;
}

TEST_F(OnnxBad, ExternalDataMustStayInTheModelsDirectory) {
  test_util::write_file(d_ / ".." / "outside.bin", std::string(4096, '\0'));
  for (const std::string loc : {"../outside.bin", "/etc/passwd", "sub/../../outside.bin"}) {
    std::string e = load_error(with_external(loc));
    EXPECT_TRUE(e.find("absolute") != std::string::npos || e.find("leaves the model's directory") != std::string::npos)
        << loc << ": " << e;
  }
  // A link inside the directory that points out of it.
  fs::create_symlink(d_ / ".." / "outside.bin", d_ / "link.bin");
  EXPECT_NE(load_error(with_external("link.bin")).find("outside the model's directory"), std::string::npos);
  fs::remove(d_ / ".." / "outside.bin");
  // Inside, but past the end of the data file.
  test_util::write_file(d_ / "w.bin", std::string(16, '\0'));
  ::onnx::TensorProto* t = nullptr;
  auto m = with_external("w.bin", &t);
  auto* off = t->add_external_data();
  off->set_key("offset");
  off->set_value("8");
  auto* len = t->add_external_data();
  len->set_key("length");
  len->set_value("4096");
  EXPECT_NE(load_error(m).find("runs past the end"), std::string::npos);
}

TEST_F(OnnxBad, OverTwoGiBIsRefusedBeforeReading) {
  const fs::path p = d_ / "huge.onnx";
  { std::ofstream f(p); }
  fs::resize_file(p, (uint64_t(1) << 31) + 10);  // sparse: no disk used
  std::string e = test_util::error_of([&] { ro::load(p.string()); });
  EXPECT_NE(e.find("huge.onnx"), std::string::npos) << e;
  EXPECT_NE(e.find("2 GiB"), std::string::npos) << e;
}

TEST_F(OnnxBad, TheCommandsExitOneWithTheFileInTheMessage) {
  test_util::write_file(d_ / "junk.onnx", "junk");
  const std::string reckon = (fs::read_symlink("/proc/self/exe").parent_path() / "reckon").string();
  const std::string err = (d_ / "err.txt").string();
  EXPECT_EQ(run("'" + reckon + "' ledger '" + (d_ / "junk.onnx").string() + "' --batch 2 2>'" + err + "' >/dev/null"), 1);
  const std::string s = test_util::read_file(err);
  EXPECT_NE(s.find("junk.onnx"), std::string::npos) << s;
}

// ---- torchvision's models as torch's exporter writes them ----
// scripts/export_torchvision.py (torch and torchvision from pip) writes each test's model.
class Torchvision : public ::testing::TestWithParam<std::string> {};

TEST_P(Torchvision, ImportsAndRunsAsOnnxRuntimeDoes) {
  const std::string name = GetParam();
  const fs::path d = test_util::fresh_dir("onnx", "tv_" + name);
  const std::string p = d.string(), path = p + "/" + name + ".onnx";
  ASSERT_EQ(run(python() + " " RECKON_SOURCE_DIR "/scripts/export_torchvision.py " + p + " " + name + " >" + p +
                "/log.txt 2>&1"), 0)
      << "scripts/export_torchvision.py failed (pip install torch torchvision): see " << p << "/log.txt";
  std::ifstream mf(d / (name + ".json"));
  const auto entry = nlohmann::json::parse(mf);
  auto m = ro::make_model(path);
  Tensor x = io::read_npy(p + "/" + name + ".x.npy");
  io::write_npy(p + "/" + name + ".y.npy", forward(*m, x));
  EXPECT_EQ(run(ort_check() + " " + path + " " + p + "/" + name + ".x.npy " + p + "/" + name + ".y.npy"), 0) << name;
  // Torch's own count, where the exporter kept the batch norms (folded, they become conv biases).
  if (!entry["bn_folded"].get<bool>()) {
    EXPECT_EQ(m->num_parameters(), entry["params"].get<int64_t>());
  }
  if (!entry["zoo"].is_null()) {
    LedgerConfig cfg;
    cfg.batch = 1;
    cfg.plan_workspace = false;
    const std::string zoo = entry["zoo"];
    Ledger a = ledger(path, cfg), b = ledger(zoo, cfg);
    EXPECT_EQ(a.totals.params, b.totals.params) << zoo;
    EXPECT_EQ(a.totals.fwd_macs, b.totals.fwd_macs) << zoo;
  }
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Onnx, Torchvision,
                         ::testing::Values("alexnet", "vgg11", "vgg16", "resnet18", "resnet50", "mobilenet_v2",
                                           "squeezenet1_1", "googlenet", "mobilenet_v3_small", "efficientnet_b0",
                                           "shufflenet_v2_x1_0", "densenet121"),
                         [](const auto& info) { return info.param; });

// Every operator the importer maps, called with too few inputs, integer inputs where floats go
// (and the reverse), and hostile attributes (zero strides and groups, out-of-range axes, negative
// pads, huge shapes): each call returns or throws reckon::Error naming the node, never crashes
// or throws anything else.
TEST(OnnxHostile, EveryOperatorWithBadInputsAndAttributesGivesAnError) {
  const Tensor fx = random_input({1, 2, 4, 4}, 3);
  Tensor ix = Tensor::empty({4}, DType::i64, Device::cpu);
  const int64_t iv[] = {0, -1, 99999999999LL, 2};
  for (int i = 0; i < 4; ++i) ix.set(i, double(iv[i]));
  const Tensor f0 = Tensor::from_vector({0.5}, {}, DType::f32), f1 = random_input({3}, 4);
  struct Variant {
    std::vector<int> inputs;  // 0: float x (1, 2, 4, 4), 1: int64 v, 2: a float scalar, 3: float (3)
    std::vector<std::pair<std::string, std::vector<int64_t>>> ints;
    bool huge = false;  // window attributes past int32: the windowed ops must refuse them by name
  };
  constexpr int64_t kHuge = int64_t(1) << 62;
  const std::vector<Variant> variants = {
      {{}, {}},
      {{0}, {}},
      {{1}, {}},
      {{0, 0}, {}},
      {{0, 1}, {}},
      {{0, 1, 1, 1, 1}, {}},
      {{0, 0, 0, 0, 0}, {{"strides", {0, 0}}, {"kernel_shape", {0, 0}}, {"dilations", {0, 0}}}},
      {{0, 0, 0}, {{"group", {0}}, {"axis", {99}}, {"perm", {5, 5}}, {"pads", {-1, -1, -1, -1}}}},
      {{0, 1}, {{"axes", {99, 99}}, {"split", {100}}, {"to", {999}}, {"size", {0}}}},
      {{0, 0}, {{"kernel_shape", {3, 3}}, {"strides", {1, 1}}, {"pads", {5, 5, 5, 5}}, {"output_shape", {-3, 100000}}}},
      {{2}, {}},
      {{3}, {}},
      {{3, 3}, {}},
      {{2, 1}, {}},
      {{3, 2, 2, 2, 2}, {}},
      {{0, 3, 3, 3, 3}, {{"axis", {-1}}}},
      {{1, 1}, {{"axis", {0}}}},
      {{0, 0, 0},
       {{"kernel_shape", {4, 4}}, {"strides", {kHuge, kHuge}}, {"dilations", {kHuge, 1}}, {"pads", {0, 0, kHuge, 0}}},
       true},
  };
  int calls = 0, errors = 0;
  for (const std::string& op : ro::supported_ops())
    for (int64_t opset : {7, 13, 17})
      for (const Variant& v : variants) {
        ::onnx::ModelProto p;
        p.set_ir_version(8);
        p.add_opset_import()->set_version(opset);
        auto* g = p.mutable_graph();
        auto* n = g->add_node();
        n->set_op_type(op);
        n->set_name("hostile");
        ro::RunArgs a;
        for (size_t i = 0; i < v.inputs.size(); ++i) {
          const std::string name = "in" + std::to_string(i);
          auto* gi = g->add_input();
          gi->set_name(name);
          gi->mutable_type()->mutable_tensor_type()->set_elem_type(v.inputs[i] == 1 ? 7 : 1);
          n->add_input(name);
          a.values[name] = v.inputs[i] == 0 ? fx : v.inputs[i] == 1 ? ix : v.inputs[i] == 2 ? f0 : f1;
        }
        n->add_output("y");
        n->add_output("y2");
        for (const auto& [name, vals] : v.ints) {
          auto* at = n->add_attribute();
          at->set_name(name);
          if (vals.size() == 1 && name != "axes" && name != "split") {
            at->set_type(::onnx::AttributeProto::INT);
            at->set_i(vals[0]);
          } else {
            at->set_type(::onnx::AttributeProto::INTS);
            for (int64_t x : vals) at->add_ints(x);
          }
        }
        g->add_output()->set_name("y");
        ++calls;
        try {
          ro::Model m = ro::parse(p.SerializeAsString(), "hostile.onnx", "");
          NoGrad ng;
          ro::run(m, a);
          if (v.huge && (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "ConvTranspose"))
            ADD_FAILURE() << op << " (opset " << opset << ") ran with window attributes of 2^62";
        } catch (const Error& e) {
          ++errors;
          EXPECT_NE(std::string(e.what()).find("hostile"), std::string::npos) << op << ": " << e.what();
          if (v.huge && (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "ConvTranspose"))
            EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << op << ": " << e.what();
        } catch (const std::exception& e) {
          ADD_FAILURE() << op << " (opset " << opset << "): not a reckon::Error: " << e.what();
        }
      }
  EXPECT_GT(errors, calls / 2);
}

// A ConvTranspose's output length s (in - 1) + (k - 1) d + 1 with a stride near the attributes'
// bound (2^31) on a long input (2^40 columns: the meta device holds it, as for the ledger) passes
// 2^63: refused by name rather than wrapped into a small or negative shape.
TEST(OnnxHostile, ConvTransposeOutputPastInt64IsRefused) {
  ::onnx::ModelProto p;
  p.set_ir_version(8);
  p.add_opset_import()->set_version(17);
  auto* g = p.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type("ConvTranspose");
  n->set_name("hostile");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  for (const char* name : {"x", "w"}) {
    auto* gi = g->add_input();
    gi->set_name(name);
    gi->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  }
  auto* at = n->add_attribute();
  at->set_name("strides");
  at->set_type(::onnx::AttributeProto::INTS);
  at->add_ints(1);
  at->add_ints((int64_t(1) << 31) - 1);
  g->add_output()->set_name("y");
  ro::RunArgs a;
  a.values["x"] = Tensor::empty({1, 1, 1, int64_t(1) << 40}, DType::f32, Device::meta);
  a.values["w"] = Tensor::empty({1, 1, 1, 1}, DType::f32, Device::meta);
  const std::string msg = test_util::error_of([&] {
    ro::Model m = ro::parse(p.SerializeAsString(), "hostile.onnx", "");
    NoGrad ng;
    ro::run(m, a);
  });
  EXPECT_NE(msg.find("hostile"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overflows a 64-bit"), std::string::npos) << msg;
}
