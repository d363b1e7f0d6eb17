// Recomputation (autograd/checkpoint.h, nn/recompute.h): the blocks each zoo model gets;
// gradients, losses, batch-norm running statistics and the random stream with recomputation
// bit-identical to a run without (the same kernels run on the same data, so exact equality is
// expected at any thread count); on the meta device a lower activation peak and recompute
// records whose MACs are the checkpointed blocks' forward MACs; thread-local state after a
// block throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "reckon/autograd/checkpoint.h"
#include "reckon/nn/layers.h"
#include "reckon/nn/models/registry.h"
#include "reckon/nn/recompute.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

using namespace reckon;
namespace nn = reckon::nn;

namespace {

Tensor randn(const Shape& s, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  fill_normal_(t, 0.0, 1.0, g);
  return t;
}

Tensor labels(int64_t n, int64_t classes) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(double((i * 7 + 3) % classes));
  return Tensor::from_vector(v, {n}, DType::i64);
}

// The paths of the recomputed blocks: marked modules and the children of marked segments.
std::vector<std::string> block_paths(nn::Module& root) {
  std::vector<std::string> r;
  for (auto& [path, m] : root.named_modules()) {
    if (m->recompute()) r.push_back(path);
    if (auto* s = dynamic_cast<nn::Sequential*>(m); s && !s->recompute_segments().empty())
      for (size_t i = 0; i < s->recompute_segments().back(); ++i)
        r.push_back((path.empty() ? "" : path + ".") + s->named_children()[i].first);
  }
  return r;
}

bool in_blocks(const std::string& scope, const std::vector<std::string>& blocks) {
  for (const auto& b : blocks)
    if (scope == b || (scope.size() > b.size() && scope.compare(0, b.size(), b) == 0 && scope[b.size()] == '.'))
      return true;
  return false;
}

struct StepResult {
  std::vector<double> logits;
  double loss = 0;
  std::map<std::string, std::vector<double>> grads, buffers;
  std::array<uint64_t, 4> rng_after{};
};

StepResult step(nn::Module& m, const Tensor& x, const Tensor& y, uint64_t seed) {
  m.zero_grad(true);
  manual_seed(seed);
  StepResult r;
  Tensor logits = m(x);
  Tensor loss = cross_entropy(logits, y);
  r.logits = logits.to_vector();
  r.loss = loss.item();
  logits = Tensor();
  loss.backward();
  r.rng_after = default_generator().state();
  for (auto& [n, p] : m.named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << n;
    if (p.grad().defined()) r.grads[n] = p.grad().to_vector();
  }
  for (auto& [n, b] : m.named_buffers()) r.buffers[n] = b.to_vector();
  return r;
}

void expect_same(const StepResult& a, const StepResult& b) {
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.rng_after, b.rng_after);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (auto& [n, g] : a.grads) EXPECT_EQ(g, b.grads.at(n)) << "gradient of " << n;
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (auto& [n, v] : a.buffers) EXPECT_EQ(v, b.buffers.at(n)) << "buffer " << n;
}

// Two copies of one model, the second with recomputation; one step each from the same state.
void check_same_gradients(const std::function<nn::ModulePtr()>& make, const Shape& x_shape, int64_t classes,
                          int64_t expect_blocks, bool second_step = true) {
  auto plain = make();
  auto rec = make();
  rec->load_state_dict(plain->state_dict());
  EXPECT_EQ(nn::enable_recompute(*rec), expect_blocks);
  Tensor x = randn(x_shape, 11);
  Tensor y = labels(x_shape[0], classes);
  StepResult a = step(*plain, x, y, 5);
  StepResult b = step(*rec, x, y, 5);
  expect_same(a, b);
  // A second step from the updated buffers stays equal too.
  if (second_step) expect_same(step(*plain, x, y, 6), step(*rec, x, y, 6));
}

nn::ModulePtr zoo(const std::string& name, Device d = Device::cpu) {
  nn::ModelConfig c;
  c.device = d;
  return nn::make_model(name, c);
}

// A small net with dropout inside its checkpointed feature segments.
nn::ModulePtr dropout_net() {
  using namespace nn;
  auto features = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(3, 8, 3, Conv2dOptions{.padding = 1}), std::make_shared<ReLU>(),
      std::make_shared<Dropout>(0.3), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(8, 16, 3, Conv2dOptions{.padding = 1}), std::make_shared<BatchNorm2d>(16),
      std::make_shared<ReLU>(), std::make_shared<Dropout>(0.5), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(16, 16, 3, Conv2dOptions{.padding = 1}), std::make_shared<Dropout>(0.2)});
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      features, std::make_shared<Flatten>(), std::make_shared<Dropout>(0.5), std::make_shared<Linear>(16 * 4 * 4, 5)});
}

}  // namespace

// ---- the policy ----

TEST(Recompute, BlocksPerZooModel) {
  const std::map<std::string, int64_t> expect = {
      {"lenet5", 2},   {"tinycnn", 3},   {"alexnet", 3},   {"alexnet_tv", 3},        {"vgg11", 5},
      {"vgg16", 5},    {"resnet18", 8},  {"resnet34", 16}, {"resnet50", 16},         {"resnet18_cifar", 8},
      {"mobilenet_v2", 17}};
  for (const auto& name : nn::model_names()) {
    SCOPED_TRACE(name);
    auto m = zoo(name, Device::meta);
    auto keys = m->state_dict().keys();
    std::vector<std::string> params;
    for (auto& [n, p] : m->named_parameters()) params.push_back(n + "/" + p.name());
    int64_t n = nn::enable_recompute(*m);
    ASSERT_TRUE(expect.count(name)) << "a new zoo model: add its expected block count";
    EXPECT_EQ(n, expect.at(name));
    EXPECT_EQ(m->state_dict().keys(), keys);
    std::vector<std::string> after;
    for (auto& [n2, p] : m->named_parameters()) after.push_back(n2 + "/" + p.name());
    EXPECT_EQ(after, params);
    nn::disable_recompute(*m);
    EXPECT_TRUE(block_paths(*m).empty());
  }
  // Which modules: residual blocks, and the feature stack cut after each pool.
  auto r = zoo("resnet18_cifar", Device::meta);
  nn::enable_recompute(*r);
  EXPECT_EQ(block_paths(*r), (std::vector<std::string>{"layer1.0", "layer1.1", "layer2.0", "layer2.1", "layer3.0",
                                                       "layer3.1", "layer4.0", "layer4.1"}));
  auto t = zoo("tinycnn", Device::meta);
  nn::enable_recompute(*t);
  auto& f = dynamic_cast<nn::Sequential&>(*t->child("features"));
  EXPECT_EQ(f.recompute_segments(), (std::vector<size_t>{4, 8, 12}));
  EXPECT_TRUE(dynamic_cast<nn::Sequential&>(*t->child("classifier")).recompute_segments().empty());
  EXPECT_THROW(f.set_recompute_segments({4, 4}), Error);
  EXPECT_THROW(f.set_recompute_segments({13}), Error);
}

// ---- the same numbers with and without ----

TEST(Recompute, Lenet5GradientsBitIdentical) {
  check_same_gradients([] { return zoo("lenet5"); }, {3, 1, 28, 28}, 10, 2);
}

TEST(Recompute, TinycnnGradientsAndRunningStatsBitIdentical) {
  check_same_gradients([] { return zoo("tinycnn"); }, {4, 1, 28, 28}, 10, 3);
}

TEST(Recompute, Resnet18CifarGradientsAndRunningStatsBitIdentical) {
  check_same_gradients([] { return zoo("resnet18_cifar"); }, {2, 3, 32, 32}, 10, 8, false);
}

TEST(Recompute, DropoutDrawsTheSameMask) {
  check_same_gradients(dropout_net, {2, 3, 16, 16}, 5, 3);
}

TEST(Recompute, BlockRerunsInTheTrainingModeOfItsForward) {
  auto plain = zoo("tinycnn");
  auto rec = zoo("tinycnn");
  rec->load_state_dict(plain->state_dict());
  nn::enable_recompute(*rec);
  Tensor x = randn({4, 1, 28, 28}, 3);
  Tensor y = labels(4, 10);
  auto run = [&](nn::Module& m) {
    m.train();
    Tensor loss = cross_entropy(m(x), y);
    m.eval();  // between forward and backward: the rerun must still use batch statistics
    loss.backward();
    EXPECT_FALSE(m.is_training());
    std::vector<std::vector<double>> r;
    for (auto& p : m.parameters()) r.push_back(p.grad().to_vector());
    for (auto& [n, b] : m.named_buffers()) r.push_back(b.to_vector());
    return r;
  };
  EXPECT_EQ(run(*plain), run(*rec));
  for (auto& [n, m] : rec->named_modules()) EXPECT_FALSE(m->is_training()) << n;
}

TEST(Recompute, FunctionalCheckpointGivesInputAndWeightGradients) {
  Tensor w = randn({4, 3, 3, 3}, 1).set_requires_grad(true);
  Tensor x0 = randn({2, 3, 8, 8}, 2).set_requires_grad(true);
  auto block = [&](const Tensor& in) { return relu(conv2d(in, w, Tensor(), {.padding = {1, 1}})); };
  auto grads = [&](bool rec) {
    w.set_grad(Tensor());
    x0.set_grad(Tensor());
    Tensor x = scale(x0, 2.0);  // a non-leaf input
    Tensor y = rec ? checkpoint(block, x, {w}) : block(x);
    EXPECT_TRUE(y.requires_grad());
    EXPECT_EQ(y.grad_fn()->name() == "checkpoint", rec);
    sum(y).backward();
    return std::make_pair(w.grad().to_vector(), x0.grad().to_vector());
  };
  EXPECT_EQ(grads(false), grads(true));
  // The identity block: the result is a new handle, x keeps its own graph.
  Tensor x = scale(x0, 3.0);
  Tensor y = checkpoint([](const Tensor& in) { return in; }, x);
  EXPECT_FALSE(y.same(x));
  EXPECT_NE(x.grad_fn()->name(), "checkpoint");
  x0.set_grad(Tensor());
  sum(y).backward();
  for (double v : x0.grad().to_vector()) EXPECT_EQ(v, 3.0);
  // Neither x nor params require grad, or grad is off: fn runs plainly (here w, captured but
  // not listed, still records its own graph).
  Tensor c = randn({2, 3, 8, 8}, 4);
  EXPECT_NE(checkpoint(block, c).grad_fn()->name(), "checkpoint");
  {
    NoGrad ng;
    EXPECT_FALSE(checkpoint(block, c, {w}).requires_grad());
  }
  // Parameters only (the first block of a model): a node, and w gets its gradient.
  w.set_grad(Tensor());
  Tensor yc = checkpoint(block, c, {w});
  EXPECT_TRUE(yc.requires_grad());
  sum(yc).backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

TEST(Recompute, AutocastStateIsReplayed) {
  auto plain = zoo("tinycnn");
  auto rec = zoo("tinycnn");
  rec->load_state_dict(plain->state_dict());
  nn::enable_recompute(*rec);
  Tensor x = randn({2, 1, 28, 28}, 9);
  Tensor y = labels(2, 10);
  auto run = [&](nn::Module& m, bool) {
    m.zero_grad(true);
    Tensor loss;
    {
      Autocast ac(DType::bf16);
      loss = cross_entropy(m(x), y);
    }
    loss.backward();
    EXPECT_FALSE(autocast_state().enabled);
    std::vector<std::vector<double>> r;
    for (auto& [n, p] : m.named_parameters()) {
      EXPECT_TRUE(p.grad().defined()) << n;
      if (p.grad().defined()) r.push_back(p.grad().to_vector());
    }
    return r;
  };
  EXPECT_EQ(run(*plain, false), run(*rec, false));
}

// Backward called while the forward's Autocast guard still lives: the rerun is inside the same
// outermost guard. The no-grad forward of a checkpointed block must not leave graph-less weight
// casts in the cache for the rerun (autocast caches only casts made with grad on), or the
// weights would get no gradient.
TEST(Recompute, AutocastBackwardInsideTheGuard) {
  auto plain = zoo("tinycnn");
  auto rec = zoo("tinycnn");
  rec->load_state_dict(plain->state_dict());
  nn::enable_recompute(*rec);
  Tensor x = randn({2, 1, 28, 28}, 9);
  Tensor y = labels(2, 10);
  auto run = [&](nn::Module& m) {
    m.zero_grad(true);
    Autocast ac(DType::bf16);
    cross_entropy(m(x), y).backward();
    std::vector<std::vector<double>> r;
    for (auto& [n, p] : m.named_parameters()) {
      EXPECT_TRUE(p.grad().defined()) << n;
      if (p.grad().defined()) r.push_back(p.grad().to_vector());
    }
    return r;
  };
  EXPECT_EQ(run(*plain), run(*rec));
}

// ---- what the ledger reads: records and the meta tracker ----

namespace {

struct MetaStep {
  int64_t activation_peak_bytes = 0;  // the `activation` tag's own peak, above what was live before
  int64_t peak_total_bytes = 0;
  int64_t fwd_macs = 0, bwd_macs = 0, recompute_macs = 0;
  int64_t block_fwd_macs = 0;  // forward MACs of the ops inside recomputed blocks
  std::multiset<std::tuple<std::string, std::string, int64_t>> block_fwd, recomputed;  // (scope, op, macs)
  int64_t saved_bytes = 0;
};

MetaStep meta_step(const std::string& name, int64_t batch, bool recompute) {
  auto m = zoo(name, Device::meta);
  if (recompute) EXPECT_GT(nn::enable_recompute(*m), 0);
  const std::vector<std::string> blocks = block_paths(*m);
  Shape in = nn::model_input_shape(name);
  in.insert(in.begin(), batch);
  Tensor x, y;
  {
    TagGuard tag(Tag::input);
    x = Tensor::empty(in, DType::f32, Device::meta);
    y = Tensor::empty({batch}, DType::i64, Device::meta);
  }
  auto& tr = tracker(Device::meta);
  tr.reset_peak();
  const MemStats before = tr.stats();
  MetaStep r;
  {
    ObserveOps obs([&](const OpRecord& rec) {
      if (rec.recompute) {
        EXPECT_FALSE(rec.backward) << rec.op << " " << rec.scope;
        EXPECT_TRUE(in_blocks(rec.scope, blocks)) << rec.scope;
        r.recompute_macs += rec.cost.macs;
        r.recomputed.emplace(rec.scope, std::string(rec.op), rec.cost.macs);
      } else if (rec.backward) {
        r.bwd_macs += rec.cost.macs;
      } else {
        r.fwd_macs += rec.cost.macs;
        r.saved_bytes += rec.saved_bytes;
        // Batch norm's batch counter (add_scalar_, a write) counts the forward once: the rerun
        // updates no running state.
        if (in_blocks(rec.scope, blocks) && rec.op != "add_scalar_") {
          r.block_fwd_macs += rec.cost.macs;
          r.block_fwd.emplace(rec.scope, std::string(rec.op), rec.cost.macs);
        }
      }
    });
    Tensor loss = cross_entropy((*m)(x), y);
    loss.backward();
  }
  const MemStats s = tr.stats();
  r.activation_peak_bytes = s.peak_bytes[int(Tag::activation)] - before.live_bytes[int(Tag::activation)];
  r.peak_total_bytes = s.peak_total_bytes - before.live_total_bytes;
  EXPECT_EQ(s.live_bytes[int(Tag::activation)], before.live_bytes[int(Tag::activation)]) << "activations left";
  return r;
}

// lower_total: the step's peak falls too. Not so where it is the first block's own backward
// (lenet5: the first segment is rebuilt whole, and the nested backward holds the block's output
// and its gradient a little longer than a plain backward would) or parameters and gradients
// (alexnet's classifier).
void check_meta(const std::string& name, int64_t batch, bool lower_total) {
  SCOPED_TRACE(name);
  MetaStep a = meta_step(name, batch, false), b = meta_step(name, batch, true);
  EXPECT_LT(b.activation_peak_bytes, a.activation_peak_bytes);
  if (lower_total) EXPECT_LT(b.peak_total_bytes, a.peak_total_bytes);
  EXPECT_EQ(a.recompute_macs, 0);
  EXPECT_GT(b.recompute_macs, 0);
  // The rerun is the blocks' forward once more, op for op.
  EXPECT_EQ(b.recomputed, b.block_fwd);
  EXPECT_EQ(b.recompute_macs, b.block_fwd_macs);
  // Forward and backward themselves are unchanged.
  EXPECT_EQ(a.fwd_macs, b.fwd_macs);
  EXPECT_EQ(a.bwd_macs, b.bwd_macs);
  // The first forward saves only what lies outside the blocks.
  EXPECT_LT(b.saved_bytes, a.saved_bytes);
  std::printf("[ recompute ] %s batch %lld: activation peak %.2f MiB -> %.2f MiB, step peak %.2f MiB -> %.2f MiB, "
              "recompute %.3f GMACs (forward %.3f, backward %.3f)\n",
              name.c_str(), (long long)batch, a.activation_peak_bytes / 1048576.0, b.activation_peak_bytes / 1048576.0,
              a.peak_total_bytes / 1048576.0, b.peak_total_bytes / 1048576.0, b.recompute_macs / 1e9,
              b.fwd_macs / 1e9, b.bwd_macs / 1e9);
}

}  // namespace

TEST(Recompute, MetaResnet18CifarSavesActivationsAndPaysForwardMacs) { check_meta("resnet18_cifar", 32, true); }

TEST(Recompute, MetaPlainStacksMobilenetResnet50) {
  check_meta("lenet5", 64, false);
  check_meta("tinycnn", 64, true);
  check_meta("alexnet", 8, false);  // the peak is the classifier's weights and gradients
  check_meta("vgg11", 8, true);
  check_meta("mobilenet_v2", 8, true);
  check_meta("resnet50", 8, true);
}

TEST(Recompute, RecordsCarryTheForwardScopes) {
  auto m = zoo("resnet18_cifar", Device::meta);
  nn::enable_recompute(*m);
  Tensor x = Tensor::empty({2, 3, 32, 32}, DType::f32, Device::meta);
  std::vector<OpRecord> recs;
  {
    ObserveOps obs([&](const OpRecord& r) { recs.push_back(r); });
    sum((*m)(x)).backward();
  }
  std::set<std::string> rerun_scopes, bwd_scopes;
  for (const auto& r : recs) {
    if (r.recompute) rerun_scopes.insert(r.scope);
    if (r.backward && !r.recompute) bwd_scopes.insert(r.scope);
  }
  EXPECT_TRUE(rerun_scopes.count("layer1.0.conv1"));
  EXPECT_TRUE(rerun_scopes.count("layer2.0.downsample.0"));
  EXPECT_TRUE(rerun_scopes.count("layer4.1"));  // the residual add of the block itself
  EXPECT_TRUE(bwd_scopes.count("layer3.1.bn2"));  // the nested backward's ops are backward ops
  EXPECT_FALSE(rerun_scopes.count("conv1"));      // the stem is not recomputed
  EXPECT_EQ(current_scope(), "");
  EXPECT_FALSE(recomputing());
  EXPECT_FALSE(in_backward());
}

// ---- thread-local state after a block throws ----

namespace {
class Thrower : public nn::Module {
 public:
  Thrower() : Module("Thrower") { conv = register_module("conv", std::make_shared<nn::Conv2d>(2, 2, 3)); }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*conv)(x);
    if ((throw_in_forward && !recomputing()) || (throw_in_rerun && recomputing())) throw Error("[thrower] boom");
    return y;
  }
  std::shared_ptr<nn::Conv2d> conv;
  bool throw_in_forward = false, throw_in_rerun = false;
};
class Holder : public nn::Module {
 public:
  Holder() : Module("Holder") { blk = register_module("blk", std::make_shared<Thrower>()); }
  Tensor forward(const Tensor& x) override { return (*blk)(x); }
  std::shared_ptr<Thrower> blk;
};

void expect_clean_state(const AutocastState& ac) {
  EXPECT_EQ(current_scope(), "");
  EXPECT_FALSE(recomputing());
  EXPECT_FALSE(in_backward());
  EXPECT_TRUE(grad_enabled());
  EXPECT_EQ(autocast_state().enabled, ac.enabled);
}
}  // namespace

TEST(Recompute, ExceptionInTheBlockLeavesStateClean) {
  Holder h;
  h.blk->set_recompute(true);
  Tensor x = randn({1, 2, 5, 5}, 1);
  const AutocastState ac = autocast_state();

  h.blk->throw_in_forward = true;
  EXPECT_THROW(h(x), Error);
  expect_clean_state(ac);
  h.blk->throw_in_forward = false;

  h.blk->throw_in_rerun = true;
  Tensor loss = sum(h(x));
  const auto rng = default_generator().state();
  EXPECT_THROW(loss.backward(), Error);
  expect_clean_state(ac);
  EXPECT_EQ(default_generator().state(), rng);
  h.blk->throw_in_rerun = false;

  // Everything still works: a fresh step gives gradients, the rerun under the block's scope.
  h.zero_grad(true);
  std::set<std::string> rerun_scopes;
  {
    ObserveOps obs([&](const OpRecord& r) {
      if (r.recompute) rerun_scopes.insert(r.scope);
    });
    sum(h(x)).backward();
  }
  EXPECT_EQ(rerun_scopes, (std::set<std::string>{"blk.conv"}));
  EXPECT_TRUE(h.blk->conv->weight.grad().defined());
  expect_clean_state(ac);
}
