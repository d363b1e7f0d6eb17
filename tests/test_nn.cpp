// nn/ and optim/: the zoo against PyTorch (golden/param_counts.json, written by
// scripts/make_param_counts.py from scripts/torch_models.py), Module mechanics (names, scopes,
// state_dict, train/eval, tags), layer init, optimizer steps and schedules against PyTorch
// numbers, and short training runs on cpu and on the meta device.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "reckon/nn/init.h"
#include "reckon/nn/layers.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/schedule.h"

using namespace reckon;
namespace nn = reckon::nn;
namespace optim = reckon::optim;
using json = nlohmann::json;

namespace {

const json& golden() {
  static const json j = [] {
    std::ifstream f(std::string(RECKON_SOURCE_DIR) + "/golden/param_counts.json");
    EXPECT_TRUE(f.good()) << "golden/param_counts.json missing: run python3 scripts/make_param_counts.py";
    return json::parse(f);
  }();
  return j;
}

Shape to_shape(const json& j) { return j.get<std::vector<int64_t>>(); }

// Sum of the MACs of conv2d and linear ops (forward only) while f runs.
template <class F>
int64_t conv_linear_macs(F&& f) {
  int64_t macs = 0;
  ObserveOps obs([&](const OpRecord& r) {
    if (!r.backward && (r.op == "conv2d" || r.op == "linear")) macs += r.cost.macs;
  });
  f();
  return macs;
}

Tensor random_tensor(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  fill_uniform_(t, lo, hi, g);
  return t;
}

// mean((y - onehot(target))^2): a loss from ops that are there in every build.
Tensor mse_to_onehot(const Tensor& y, const std::vector<int64_t>& target) {
  Tensor t = Tensor::zeros(y.shape());
  for (size_t i = 0; i < target.size(); ++i) t.set(int64_t(i) * y.size(1) + target[i], 1.0);
  return mean(square(sub(y, t)));
}

}  // namespace

// ---------------------------------------------------------------- the zoo against PyTorch

TEST(Zoo, NamesMatchGolden) {
  std::set<std::string> ours, theirs;
  for (const auto& n : nn::model_names()) ours.insert(n);
  for (const auto& [n, v] : golden()["models"].items()) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
}

TEST(Zoo, ParametersBuffersAndStateDictMatchPyTorch) {
  for (const auto& [name, g] : golden()["models"].items()) {
    SCOPED_TRACE(name);
    nn::ModelConfig cfg;
    cfg.device = Device::meta;
    auto m = nn::make_model(name, cfg);
    nn::ModelConfig r = nn::resolve_model_config(name, cfg);
    EXPECT_EQ(r.num_classes, g["num_classes"].get<int64_t>());
    EXPECT_EQ(r.in_channels, g["in_channels"].get<int64_t>());
    EXPECT_EQ(nn::model_input_shape(name), to_shape(g["input_shape"]));
    EXPECT_EQ(m->num_parameters(), g["num_parameters"].get<int64_t>());

    auto params = m->named_parameters();
    ASSERT_EQ(params.size(), g["parameters"].size());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].first, g["parameters"][i][0].get<std::string>()) << "parameter " << i;
      EXPECT_EQ(params[i].second.shape(), to_shape(g["parameters"][i][1])) << params[i].first;
      EXPECT_EQ(params[i].second.name(), params[i].first);
      EXPECT_TRUE(params[i].second.requires_grad());
      EXPECT_TRUE(params[i].second.is_meta());
    }
    auto buffers = m->named_buffers();
    ASSERT_EQ(buffers.size(), g["buffers"].size());
    for (size_t i = 0; i < buffers.size(); ++i) {
      EXPECT_EQ(buffers[i].first, g["buffers"][i][0].get<std::string>());
      EXPECT_EQ(buffers[i].second.shape(), to_shape(g["buffers"][i][1])) << buffers[i].first;
      EXPECT_FALSE(buffers[i].second.requires_grad());
    }
    auto keys = m->state_dict().keys();
    EXPECT_EQ(keys, g["state_dict"].get<std::vector<std::string>>());
  }
}

TEST(Zoo, VariantsMatchPyTorch) {
  for (const auto& v : golden()["variants"]) {
    std::string name = v["model"];
    SCOPED_TRACE(name);
    nn::ModelConfig cfg{v["num_classes"].get<int64_t>(), v["in_channels"].get<int64_t>(), Device::meta};
    EXPECT_EQ(nn::make_model(name, cfg)->num_parameters(), v["num_parameters"].get<int64_t>());
  }
}

// The structure beyond names: strides and paddings show in the output shape and the MACs.
TEST(Zoo, MetaForwardShapesAndMacsMatchPyTorch) {
  for (const auto& [name, g] : golden()["models"].items()) {
    SCOPED_TRACE(name);
    nn::ModelConfig cfg;
    cfg.device = Device::meta;
    auto m = nn::make_model(name, cfg);
    m->eval();
    Shape in = nn::model_input_shape(name);
    in.insert(in.begin(), 2);
    Tensor y;
    int64_t macs = conv_linear_macs([&] {
      TagGuard tag(Tag::input);
      Tensor x = Tensor::empty(in, DType::f32, Device::meta);
      y = (*m)(x);
    });
    Shape out = to_shape(g["output_shape"]);
    out[0] = 2;
    EXPECT_EQ(y.shape(), out);
    EXPECT_EQ(macs, 2 * g["conv_linear_macs"].get<int64_t>());
  }
}

TEST(Zoo, OriginalAlexNet) {
  nn::ModelConfig cfg;
  cfg.device = Device::meta;
  auto m = nn::make_model("alexnet", cfg);
  EXPECT_EQ(m->num_parameters(), 62378344);
  std::map<std::string, Shape> conv_out;
  int64_t conv_macs = 0;
  {
    ObserveOps obs([&](const OpRecord& r) {
      if (r.op == "conv2d") {
        conv_out[r.scope] = r.out_shapes[0];
        conv_macs += r.cost.macs;
      }
    });
    (*m)(Tensor::empty({1, 3, 224, 224}, DType::f32, Device::meta));
  }
  EXPECT_EQ(conv_macs, 1076634144);  // ~1.08 G
  EXPECT_EQ(conv_out["features.0"], (Shape{1, 96, 55, 55}));
  EXPECT_EQ(conv_out["features.4"], (Shape{1, 256, 27, 27}));
  EXPECT_EQ(conv_out["features.8"], (Shape{1, 384, 13, 13}));
  EXPECT_EQ(conv_out["features.12"], (Shape{1, 256, 13, 13}));
}

TEST(Zoo, ConfigDefaultsAndErrors) {
  EXPECT_EQ(nn::model_input_shape("alexnet"), (Shape{3, 224, 224}));
  EXPECT_EQ(nn::model_input_shape("lenet5"), (Shape{1, 28, 28}));
  EXPECT_EQ(nn::model_input_shape("resnet18_cifar"), (Shape{3, 32, 32}));
  EXPECT_EQ(nn::model_input_shape("resnet18", {0, 1, Device::cpu}), (Shape{1, 224, 224}));
  EXPECT_EQ(nn::resolve_model_config("alexnet").num_classes, 1000);
  EXPECT_EQ(nn::resolve_model_config("tinycnn").num_classes, 10);
  try {
    nn::make_model("resnet19");
    FAIL() << "no error for an unknown model";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("resnet19"), std::string::npos) << msg;
    for (const auto& n : nn::model_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  EXPECT_THROW(nn::make_model("lenet5", {-1, 0, Device::meta}), Error);
}

// Building on meta allocates nothing but accounts every parameter and buffer under `param`.
TEST(Zoo, MetaModelAccountsParamBytes) {
  auto before = tracker(Device::meta).stats().live_bytes[int(Tag::param)];
  nn::ModelConfig cfg;
  cfg.device = Device::meta;
  auto m = nn::make_model("resnet18", cfg);
  int64_t param_bytes = 0, buffer_bytes = 0;
  for (auto& [n, p] : m->named_parameters()) param_bytes += p.nbytes();
  for (auto& [n, b] : m->named_buffers()) buffer_bytes += b.nbytes();
  EXPECT_EQ(param_bytes, 11689512 * 4);
  EXPECT_EQ(buffer_bytes, 2 * 4 * (64 * 5 + 128 * 5 + 256 * 5 + 512 * 5) + 8 * 20);  // 20 BatchNorm2d
  int64_t expect = param_bytes + buffer_bytes;
  EXPECT_EQ(tracker(Device::meta).stats().live_bytes[int(Tag::param)] - before, expect);
  m.reset();
  EXPECT_EQ(tracker(Device::meta).stats().live_bytes[int(Tag::param)], before);
}

TEST(Zoo, CpuForwardOfSmallModels) {
  manual_seed(3);
  for (std::string name : {"tinycnn", "lenet5", "resnet18_cifar"}) {
    SCOPED_TRACE(name);
    auto m = nn::make_model(name);
    m->eval();
    Shape in = nn::model_input_shape(name);
    in.insert(in.begin(), 2);
    NoGrad ng;
    Tensor y = (*m)(random_tensor(in, 7));
    EXPECT_EQ(y.shape(), (Shape{2, 10}));
    for (double v : y.to_vector()) EXPECT_TRUE(std::isfinite(v));
  }
}

// ---------------------------------------------------------------- Module mechanics

TEST(Module, ScopesFollowTheModuleTree) {
  nn::ModelConfig cfg;
  cfg.device = Device::meta;
  auto m = nn::make_model("resnet18", cfg);
  std::multiset<std::pair<std::string, std::string>> seen;  // (op, scope)
  {
    ObserveOps obs([&](const OpRecord& r) { seen.insert({std::string(r.op), r.scope}); });
    (*m)(Tensor::empty({1, 3, 224, 224}, DType::f32, Device::meta));
  }
  EXPECT_EQ(seen.count({"conv2d", "conv1"}), 1u);
  EXPECT_EQ(seen.count({"conv2d", "layer1.0.conv1"}), 1u);
  EXPECT_EQ(seen.count({"conv2d", "layer2.0.downsample.0"}), 1u);
  EXPECT_EQ(seen.count({"batch_norm2d", "layer4.1.bn2"}), 1u);
  EXPECT_EQ(seen.count({"add", "layer3.1"}), 1u);
  EXPECT_EQ(seen.count({"relu", "layer3.1.relu"}), 2u);
  EXPECT_EQ(seen.count({"linear", "fc"}), 1u);
  EXPECT_EQ(current_scope(), "");
}

TEST(Module, SequentialNamesAndIndexing) {
  auto s = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>()});
  s->push_back(std::make_shared<nn::Linear>(3, 2, false));
  EXPECT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[1]->type_name(), "ReLU");
  EXPECT_THROW((*s)[3], Error);
  std::vector<std::string> names;
  for (auto& [n, p] : s->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight"}));
  EXPECT_EQ(s->num_parameters(), 4 * 3 + 3 + 3 * 2);
  Tensor y = (*s)(random_tensor({5, 4}, 1));
  EXPECT_EQ(y.shape(), (Shape{5, 2}));
  std::vector<std::string> mods;
  for (auto& [n, m] : s->named_modules()) mods.push_back(n);
  EXPECT_EQ(mods, (std::vector<std::string>{"", "0", "1", "2"}));
}

TEST(Module, ParametersAreTaggedAndNamed) {
  auto before = tracker(Device::cpu).stats().live_bytes[int(Tag::param)];
  auto conv = std::make_shared<nn::Conv2d>(3, 8, 3);
  EXPECT_EQ(tracker(Device::cpu).stats().live_bytes[int(Tag::param)] - before, (8 * 3 * 9 + 8) * 4);
  EXPECT_EQ(conv->weight.storage().tag(), Tag::param);
  EXPECT_EQ(conv->weight.name(), "weight");
  nn::Sequential s({conv});
  EXPECT_EQ(conv->weight.name(), "0.weight");
  EXPECT_EQ(conv->name(), "0");
}

TEST(Module, TrainEvalIsRecursive) {
  auto m = nn::make_model("resnet18_cifar", {0, 0, Device::meta});
  for (auto& [n, mod] : m->named_modules()) EXPECT_TRUE(mod->is_training()) << n;
  m->eval();
  for (auto& [n, mod] : m->named_modules()) EXPECT_FALSE(mod->is_training()) << n;
  m->train();
  for (auto& [n, mod] : m->named_modules()) EXPECT_TRUE(mod->is_training()) << n;
}

TEST(Module, BatchNormTrainAndEval) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(bn.running_var.to_vector(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::i64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  Tensor x = random_tensor({4, 3, 5, 5}, 11, 0.0, 2.0);
  Tensor batch_mean = mean(x, {0, 2, 3});
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(bn.running_mean.get(c), 0.1 * batch_mean.get(c), 1e-6);
  bn.eval();
  auto rm = bn.running_mean.to_vector();
  Tensor y = bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  EXPECT_EQ(bn.running_mean.to_vector(), rm);
  // eval: (x - running_mean) / sqrt(running_var + eps)
  double expect = (x.get(0) - rm[0]) / std::sqrt(bn.running_var.get(0) + 1e-5);
  EXPECT_NEAR(y.get(0), expect, 1e-5);
}

TEST(Module, DropoutTrainAndEval) {
  nn::Dropout d(0.5);
  Tensor x = Tensor::ones({1000});
  Tensor y = d(x);
  int zeros = 0;
  for (double v : y.to_vector()) {
    EXPECT_TRUE(v == 0.0 || std::abs(v - 2.0) < 1e-6) << v;
    zeros += v == 0.0;
  }
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  d.eval();
  EXPECT_EQ(d(x).to_vector(), x.to_vector());
}

TEST(Module, StateDictRoundTrip) {
  manual_seed(1);
  auto a = nn::make_model("tinycnn");
  manual_seed(2);
  auto b = nn::make_model("tinycnn");
  // Give a's buffers non-default values so they travel too.
  (*a)(random_tensor({4, 1, 28, 28}, 5));
  nn::StateDict sd = a->state_dict();
  EXPECT_NE(sd.at("features.0.weight").to_vector(), b->state_dict().at("features.0.weight").to_vector());
  nn::LoadResult r = b->load_state_dict(sd);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  nn::StateDict sb = b->state_dict();
  ASSERT_EQ(sb.keys(), sd.keys());
  for (const auto& [k, t] : sd) EXPECT_EQ(sb.at(k).to_vector(), t.to_vector()) << k;
  EXPECT_EQ(sb.at("features.1.num_batches_tracked").item(), 1.0);
  EXPECT_EQ(sb.at("features.1.num_batches_tracked").dtype(), DType::i64);
  // The dict's tensors alias the module's.
  sb.at("classifier.1.bias").set(0, 42.0);
  EXPECT_EQ(b->child("classifier")->child("1")->param("bias").get(0), 42.0);
  EXPECT_FALSE(sb.at("classifier.1.bias").requires_grad());
}

TEST(Module, LoadStateDictErrors) {
  auto m = nn::make_model("lenet5", {0, 0, Device::meta});
  nn::StateDict full = m->state_dict();
  nn::StateDict missing, shape, extra;
  for (const auto& [k, t] : full) {
    if (k != "classifier.5.bias") missing.insert(k, t);
    shape.insert(k, k == "features.0.weight" ? Tensor::empty({6, 3, 5, 5}, DType::f32, Device::meta) : t);
    extra.insert(k, t);
  }
  extra.insert("classifier.9.weight", Tensor::empty({2}, DType::f32, Device::meta));
  auto message = [&](const nn::StateDict& d, bool strict) -> std::string {
    try {
      m->load_state_dict(d, strict);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(missing, true).find("missing key 'classifier.5.bias'"), std::string::npos);
  std::string s = message(shape, false);
  EXPECT_NE(s.find("features.0.weight"), std::string::npos) << s;
  EXPECT_NE(s.find("[6, 3, 5, 5]"), std::string::npos) << s;
  EXPECT_NE(s.find("[6, 1, 5, 5]"), std::string::npos) << s;
  EXPECT_NE(message(extra, true).find("unexpected key 'classifier.9.weight'"), std::string::npos);
  nn::LoadResult r = m->load_state_dict(missing, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"classifier.5.bias"}));
  r = m->load_state_dict(extra, false);
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"classifier.9.weight"}));
}

TEST(Module, ZeroGrad) {
  nn::Linear l(3, 2);
  Tensor y = sum(l(Tensor::ones({4, 3})));
  y.backward();
  ASSERT_TRUE(l.weight.grad().defined());
  l.zero_grad(false);
  EXPECT_EQ(l.weight.grad().to_vector(), std::vector<double>(6, 0.0));
  l.zero_grad();
  EXPECT_FALSE(l.weight.grad().defined());
  EXPECT_FALSE(l.bias.grad().defined());
}

TEST(Module, Repr) {
  auto m = nn::make_model("lenet5", {0, 0, Device::meta});
  std::string s = m->repr();
  EXPECT_NE(s.find("LeNet5(\n  (features): Sequential(\n    (0): Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1), "
                   "padding=(2, 2))"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("(5): Linear(in_features=84, out_features=10, bias=True)"), std::string::npos) << s;
}

// ---------------------------------------------------------------- layer init

TEST(Init, LinearAndConvDefaults) {
  manual_seed(4);
  nn::Linear l(100, 50);
  double bound = 0.1;  // 1 / sqrt(fan_in)
  double lo = 1, hi = -1;
  for (double v : l.weight.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.09);
  EXPECT_GT(hi, 0.09);
  for (double v : l.bias.to_vector()) EXPECT_LE(std::abs(v), bound);
  nn::Conv2d c(4, 8, 3, nn::Conv2dOptions{.groups = 2});
  EXPECT_EQ(c.weight.shape(), (Shape{8, 2, 3, 3}));
  double cb = 1.0 / std::sqrt(18.0);
  for (double v : c.weight.to_vector()) EXPECT_LE(std::abs(v), cb);
  for (double v : c.bias.to_vector()) EXPECT_LE(std::abs(v), cb);
  nn::BatchNorm2d bn(5);
  EXPECT_EQ(bn.weight.to_vector(), std::vector<double>(5, 1.0));
  EXPECT_EQ(bn.bias.to_vector(), std::vector<double>(5, 0.0));
}

TEST(Init, TorchvisionStyle) {
  manual_seed(5);
  auto m = nn::make_model("mobilenet_v2", {10, 0, Device::cpu});
  auto stddev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    auto v = t.to_vector();
    for (double x : v) s += x, s2 += x * x;
    double mu = s / double(v.size());
    return std::sqrt(s2 / double(v.size()) - mu * mu);
  };
  auto sd = m->state_dict();
  EXPECT_NEAR(stddev(sd.at("features.0.0.weight")), std::sqrt(2.0 / (32 * 9)), 0.01);
  EXPECT_NEAR(stddev(sd.at("features.18.0.weight")), std::sqrt(2.0 / 1280), 0.002);
  EXPECT_NEAR(stddev(sd.at("classifier.1.weight")), 0.01, 0.001);
  EXPECT_EQ(sd.at("classifier.1.bias").to_vector(), std::vector<double>(10, 0.0));
}

// ---------------------------------------------------------------- optimizers against PyTorch

// The expected values come from this script (torch 2.15), run with python3:
//   import torch
//   p0 = [0.5, -1.0, 2.0, 0.25]
//   grads = [[0.1, -0.2, 0.3, -0.4], [-0.05, 0.15, 0.2, 0.1]]
//   def run(make):
//       p = torch.nn.Parameter(torch.tensor(p0)); opt = make([p])
//       for g in grads:
//           p.grad = torch.tensor(g); opt.step()
//       return [f"{v:.9g}" for v in p.detach().tolist()]
//   print(run(lambda ps: torch.optim.SGD(ps, lr=0.1)))                                  # sgd
//   print(run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)))  # sgd_momentum_wd
//   print(run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
//                                        weight_decay=0.01)))                           # sgd_nesterov
//   print(run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1)))      # sgd_dampening
//   print(run(lambda ps: torch.optim.Adam(ps, lr=0.01)))                                 # adam
//   print(run(lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1)))               # adam_wd
//   print(run(lambda ps: torch.optim.AdamW(ps, lr=0.01)))                                # adamw
//   print(run(lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
//                                          weight_decay=0.1)))                          # adamw_custom
namespace {
template <class MakeOpt>
std::vector<double> two_steps(MakeOpt make) {
  Tensor p = Tensor::from_vector({0.5, -1.0, 2.0, 0.25}, {4});
  p.set_requires_grad(true);
  auto opt = make(std::vector<Tensor>{p});
  for (const auto& g : {std::vector<double>{0.1, -0.2, 0.3, -0.4}, std::vector<double>{-0.05, 0.15, 0.2, 0.1}}) {
    p.set_grad(Tensor::from_vector(g, {4}));
    opt->step();
  }
  return p.to_vector();
}
void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-7) << "element " << i;
}
}  // namespace

TEST(Optim, SGDMatchesPyTorch) {
  auto sgd = [](optim::SGDOptions o) {
    return [o](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(std::move(ps), o); };
  };
  expect_close(two_steps(sgd({.lr = 0.1})), {0.495000005, -0.995000005, 1.95000005, 0.280000001});
  expect_close(two_steps(sgd({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01})),
               {0.48456049, -0.974120975, 1.91723204, 0.315235257});
  expect_close(two_steps(sgd({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true})),
               {0.480132908, -0.969765782, 1.8715955, 0.33810398});
  expect_close(two_steps(sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1})),
               {0.485500008, -0.975500047, 1.92500007, 0.317000002});
}

TEST(Optim, AdamAndAdamWMatchPyTorch) {
  auto adam = [](optim::AdamOptions o) {
    return [o](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(std::move(ps), o); };
  };
  auto adamw = [](optim::AdamWOptions o) {
    return [o](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(std::move(ps), o); };
  };
  expect_close(two_steps(adam({.lr = 0.01})), {0.487336636, -0.989106774, 1.98029649, 0.264694661});
  expect_close(two_steps(adam({.lr = 0.01, .weight_decay = 0.1})), {0.483349204, -0.984642029, 1.98012078, 0.26398015});
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 0.01);
  expect_close(two_steps(adamw({.lr = 0.01})), {0.487237632, -0.988907754, 1.9798975, 0.264643669});
  expect_close(two_steps(adamw({.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1})),
               {0.486899257, -0.987696648, 1.97641492, 0.263691723});
}

TEST(Optim, SkipsParamsWithoutGradAndZeroGrad) {
  Tensor a = Tensor::ones({2}), b = Tensor::ones({2});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  optim::SGD opt({a, b}, {.lr = 1.0, .momentum = 0.9});
  a.set_grad(Tensor::full({2}, 0.5));
  opt.step();
  EXPECT_EQ(a.to_vector(), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(b.to_vector(), (std::vector<double>{1.0, 1.0}));
  auto keys = opt.state_dict().keys();
  EXPECT_EQ(keys, (std::vector<std::string>{"state.0.momentum_buffer"}));
  opt.zero_grad(false);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0.0, 0.0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt.set_lr(0.25);
  EXPECT_EQ(opt.lr(), 0.25);
}

TEST(Optim, StateDictRoundTrip) {
  auto make = [] {
    Tensor p = Tensor::from_vector({0.5, -1.0, 2.0}, {3});
    p.set_requires_grad(true);
    return p;
  };
  Tensor pa = make(), pb = make();
  optim::AdamW a({pa}), b({pb});
  pa.set_grad(Tensor::from_vector({0.1, 0.2, -0.3}, {3}));
  a.step();
  nn::StateDict sd = a.state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}));
  EXPECT_EQ(sd.at("state.0.step").item(), 1.0);
  EXPECT_EQ(sd.at("state.0.exp_avg").storage().tag(), Tag::optimizer);
  b.load_state_dict(sd);
  copy_(pb, pa);
  for (Tensor* p : {&pa, &pb}) p->set_grad(Tensor::from_vector({-0.2, 0.05, 0.4}, {3}));
  a.step();
  b.step();
  EXPECT_EQ(pa.to_vector(), pb.to_vector());
  nn::StateDict bad;
  bad.insert("state.7.exp_avg", Tensor::zeros({3}));
  EXPECT_THROW(b.load_state_dict(bad), Error);
  nn::StateDict bad_name;
  bad_name.insert("state.0.momentum_buffer", Tensor::zeros({3}));
  EXPECT_THROW(b.load_state_dict(bad_name), Error);
}

// On meta the update does no work but the state is allocated and accounted.
TEST(Optim, MetaStateIsAccounted) {
  auto m = nn::make_model("resnet18", {0, 0, Device::meta});
  for (Tensor& p : m->parameters()) {
    TagGuard tag(Tag::grad);
    p.set_grad(Tensor::zeros(p.shape(), DType::f32, Device::meta));
  }
  auto before = tracker(Device::meta).stats().live_bytes[int(Tag::optimizer)];
  {
    optim::AdamW opt(m->parameters());
    opt.step();
    EXPECT_EQ(tracker(Device::meta).stats().live_bytes[int(Tag::optimizer)] - before, 2 * 4 * 11689512);
    EXPECT_EQ(opt.state_bytes(), 2 * 4 * 11689512);
  }
  EXPECT_EQ(tracker(Device::meta).stats().live_bytes[int(Tag::optimizer)], before);
  optim::SGD sgd(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  sgd.step();
  EXPECT_EQ(sgd.state_bytes(), 4 * 11689512);
}

// ---------------------------------------------------------------- schedules against PyTorch

// Expected values: torch.optim.lr_scheduler with SGD(lr=0.1), printing the group's lr after
// each scheduler.step():
//   StepLR(opt, 3, 0.5); CosineAnnealingLR(opt, 10, 0.001);
//   SequentialLR(opt, [LinearLR(opt, 0.25, 1.0, total_iters=4), CosineAnnealingLR(opt, 10, 0.001)],
//                milestones=[4])
TEST(Schedule, MatchesPyTorch) {
  optim::StepLR step(0.1, 3, 0.5);
  std::vector<double> want_step = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125};
  for (size_t i = 0; i < want_step.size(); ++i) EXPECT_NEAR(step.get_lr(int64_t(i)), want_step[i], 1e-15) << i;

  auto cos = std::make_shared<optim::CosineAnnealingLR>(0.1, 10, 0.001);
  std::vector<double> want_cos = {0.1, 0.09757729755661011, 0.0905463412215599, 0.07959536998847742,
                                  0.0657963412215599, 0.0505, 0.03520365877844011, 0.02140463001152259,
                                  0.010453658778440109, 0.0034227024433899004, 0.001, 0.0034227024433899004,
                                  0.01045365877844014, 0.02140463001152267, 0.035203658778440255};
  for (size_t i = 0; i < want_cos.size(); ++i) EXPECT_NEAR(cos->get_lr(int64_t(i)), want_cos[i], 1e-12) << i;

  optim::LinearWarmup warm(cos, 4, 0.25);
  std::vector<double> want_warm = {0.025, 0.043750000000000004, 0.06250000000000001, 0.08125000000000002, 0.1,
                                   0.09757729755661011, 0.0905463412215599, 0.07959536998847742,
                                   0.0657963412215599, 0.0505, 0.03520365877844011, 0.02140463001152259,
                                   0.010453658778440109, 0.0034227024433899004, 0.001, 0.0034227024433899004,
                                   0.01045365877844014};
  for (size_t i = 0; i < want_warm.size(); ++i) EXPECT_NEAR(warm.get_lr(int64_t(i)), want_warm[i], 1e-12) << i;
  EXPECT_NEAR(optim::LinearWarmup(cos, 4).get_lr(0), 0.025, 1e-15);  // start_factor 1 / warmup_steps

  Tensor p = Tensor::ones({1});
  p.set_requires_grad(true);
  optim::SGD opt({p}, {.lr = 1.0});
  warm.apply(opt, 2);
  EXPECT_NEAR(opt.lr(), 0.0625, 1e-15);
}

// ---------------------------------------------------------------- training runs

TEST(Train, TinyCnnLearnsAFixedBatch) {
  manual_seed(6);
  auto m = nn::make_model("tinycnn");
  Tensor x = random_tensor({8, 1, 28, 28}, 9);
  std::vector<int64_t> target = {0, 1, 2, 3, 4, 5, 6, 7};
  optim::SGD opt(m->parameters(), {.lr = 0.2, .momentum = 0.9});
  double first = 0, last = 0;
  for (int it = 0; it < 30; ++it) {
    opt.zero_grad();
    Tensor loss = mse_to_onehot((*m)(x), target);
    if (it == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

TEST(Train, LeNetLearnsWithAdam) {
  manual_seed(7);
  auto m = nn::make_model("lenet5");
  Tensor x = random_tensor({8, 1, 28, 28}, 10);
  std::vector<int64_t> target = {9, 8, 7, 6, 5, 4, 3, 2};
  optim::Adam opt(m->parameters(), {.lr = 1e-3});
  auto sched = optim::LinearWarmup(std::make_shared<optim::ConstantLR>(1e-3), 5);
  double first = 0, last = 0;
  for (int it = 0; it < 40; ++it) {
    sched.apply(opt, it);
    m->zero_grad();
    Tensor loss = mse_to_onehot((*m)(x), target);
    if (it == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

// The ledger's dry run: a whole training step of resnet18 on meta, every tag accounted.
TEST(Train, MetaTrainingStepOfResNet18) {
  auto m = nn::make_model("resnet18", {0, 0, Device::meta});
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  MemStats before = tracker(Device::meta).stats();
  Tensor x;
  {
    TagGuard tag(Tag::input);
    x = Tensor::empty({2, 3, 224, 224}, DType::f32, Device::meta);
  }
  Tensor y = (*m)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 1000}));
  EXPECT_GT(tracker(Device::meta).stats().live_bytes[int(Tag::activation)], before.live_bytes[int(Tag::activation)]);
  sum(y).backward();
  for (auto& [n, p] : m->named_parameters()) ASSERT_TRUE(p.grad().defined()) << n;
  opt.step();
  MemStats after = tracker(Device::meta).stats();
  EXPECT_EQ(after.live_bytes[int(Tag::grad)] - before.live_bytes[int(Tag::grad)], 4 * 11689512);
  EXPECT_EQ(after.live_bytes[int(Tag::optimizer)] - before.live_bytes[int(Tag::optimizer)], 4 * 11689512);
  EXPECT_EQ(after.live_bytes[int(Tag::activation)], before.live_bytes[int(Tag::activation)]);
  opt.zero_grad();
  EXPECT_EQ(tracker(Device::meta).stats().live_bytes[int(Tag::grad)], before.live_bytes[int(Tag::grad)]);
}

TEST(Module, LoadingMetaIntoCpuIsAnError) {
  auto cpu = nn::make_model("lenet5");
  auto meta = nn::make_model("lenet5", {0, 0, Device::meta});
  EXPECT_THROW(cpu->load_state_dict(meta->state_dict()), Error);
  EXPECT_NO_THROW(meta->load_state_dict(cpu->state_dict()));
}
