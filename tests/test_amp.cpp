// Mixed precision and gradient accumulation: the autocast policy of each op kind (dtypes in and
// out, the weight-cast cache, backward in the forward's dtypes, f32 master gradients), the
// dispatcher's f32 fallback for kernels without a low-precision path, and train::Step's
// accumulation (K micro-batches of B equal one batch of K x B).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/nn/layers.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/matmul.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"
#include "test_util.h"

using namespace reckon;
using reckon::test_util::cosine;
using reckon::test_util::max_rel_diff;
namespace nn = reckon::nn;
namespace optim = reckon::optim;

namespace {

Tensor rand_tensor(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  fill_uniform_(t, lo, hi, g);
  return t;
}

// op name -> (kernel, dtype of the first output) of the ops run while f runs.
struct Seen {
  std::string kernel;
  int count = 0;
};
template <class F>
std::map<std::string, Seen> observe(F&& f) {
  std::map<std::string, Seen> m;
  ObserveOps obs([&](const OpRecord& r) {
    auto& s = m[std::string(r.op)];
    s.kernel = std::string(r.kernel);
    s.count++;
  });
  f();
  return m;
}

}  // namespace

TEST(Autocast, PolicyGivesEachOpItsDtype) {
  // (16 input channels: not a narrow layer, which some cpus keep in f32; the test below)
  Tensor x = rand_tensor({2, 16, 8, 8}, 1);
  Tensor w = rand_tensor({4, 16, 3, 3}, 2).set_requires_grad(true);
  Tensor b = rand_tensor({4}, 3).set_requires_grad(true);
  Tensor bn_w = Tensor::ones({4}), bn_b = Tensor::zeros({4});
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  // (257 x 256 weights: not a small linear layer, which the same cpus keep in f32 under bf16)
  Tensor fc = rand_tensor({257, 4 * 8 * 8}, 4).set_requires_grad(true);
  Tensor y = Tensor::from_vector({1, 3}, {2}, DType::i64);
  for (DType low : {DType::bf16, DType::f16}) {
    Autocast ac(low);
    Tensor c = conv2d(x, w, b, {.padding = {1, 1}});
    EXPECT_EQ(c.dtype(), low) << "conv2d runs in the low precision";
    Tensor n = batch_norm2d(c, bn_w, bn_b, rm, rv, true, 0.1, 1e-5);
    EXPECT_EQ(n.dtype(), low) << "batch norm keeps x's dtype, with f32 parameters";
    Tensor r = relu(n);
    EXPECT_EQ(r.dtype(), low);
    Tensor mixed = add(r, rand_tensor(r.shape(), 5));
    EXPECT_EQ(mixed.dtype(), DType::f32) << "add of low and f32 promotes to f32";
    Tensor logits = linear(flatten(r), fc);
    EXPECT_EQ(logits.dtype(), low);
    Tensor loss = cross_entropy(logits, y);
    EXPECT_EQ(loss.dtype(), DType::f32) << "losses run in f32";
    Tensor s = sum(r);
    EXPECT_EQ(s.dtype(), DType::f32) << "sums run in f32";
  }
  // The exception: an image's first layer of few channels stays f32 (ops/conv.h); with more than
  // 16 outputs it is lowered as torch.autocast lowers every convolution, and with a stride too
  // but where this cpu's bf16 is the slower (then it is a narrow layer, kept f32).
  {
    Autocast ac(DType::bf16);
    Tensor img = rand_tensor({2, 3, 8, 8}, 6), w3 = rand_tensor({16, 3, 5, 5}, 7).set_requires_grad(true);
    EXPECT_EQ(conv2d(img, w3, Tensor(), {.padding = {2, 2}}).dtype(), DType::f32);
    EXPECT_EQ(conv2d(cast(img, DType::bf16), w3, Tensor(), {.padding = {2, 2}}).dtype(), DType::f32)
        << "a low-precision input is widened for it";
    EXPECT_EQ(conv2d(img, w3, Tensor(), {.stride = {2, 2}, .padding = {2, 2}}).dtype(),
              cpu_bf16_slower_than_f32() ? DType::f32 : DType::bf16);
    Tensor w64 = rand_tensor({64, 3, 3, 3}, 8).set_requires_grad(true);
    EXPECT_EQ(conv2d(img, w64, Tensor(), {.padding = {1, 1}}).dtype(), DType::bf16);
  }
  // Off: nothing changes.
  Tensor c = conv2d(x, w, b);
  EXPECT_EQ(c.dtype(), DType::f32);
  {
    Autocast off(DType::f32);
    EXPECT_FALSE(autocast_state().enabled);
    EXPECT_EQ(conv2d(x, w, b).dtype(), DType::f32);
  }
}

TEST(Autocast, WeightCastOncePerForwardAndCacheClearedAtExit) {
  // (257 x 257 weights: not a small linear layer, which some cpus keep in f32 under bf16)
  Tensor x = rand_tensor({2, 257}, 1);
  Tensor w = rand_tensor({257, 257}, 2).set_requires_grad(true);
  std::map<std::string, Seen> seen;
  {
    Autocast ac(DType::bf16);
    seen = observe([&] {
      Tensor h = linear(x, w);
      h = linear(cast(relu(h), DType::f32), w);  // the same weight again
      {
        Autocast nested(DType::bf16);  // nested guards share the outer cache
        linear(x, w);
      }
    });
    EXPECT_EQ(detail::autocast_cache_size(), 1);
  }
  EXPECT_EQ(detail::autocast_cache_size(), 0);
  // x is cast on each use (not a leaf that requires grad), the weight once, the explicit cast once.
  EXPECT_EQ(seen["linear"].count, 3);
  EXPECT_EQ(seen["cast"].count, 1 + 3 + 1);
}

TEST(Autocast, BackwardRunsInForwardDtypesAndMasterGradientsAreF32) {
  manual_seed(3);
  auto model = nn::make_model("tinycnn", {});
  Tensor x = rand_tensor({4, 1, 28, 28}, 7);
  Tensor y = Tensor::from_vector({0, 1, 2, 3}, {4}, DType::i64);
  std::vector<Tensor> g32;
  {
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    for (auto& p : model->parameters()) g32.push_back(p.grad());
    model->zero_grad();
  }
  std::map<std::string, DType> bwd_dtype;
  std::vector<DType> conv_bwd_dtypes;  // conv2d_backward_weight's dy, in the order backward runs them
  ObserveOps obs([&](const OpRecord& r) {
    if (r.backward && !r.in_dtypes.empty()) bwd_dtype.emplace(std::string(r.op), r.in_dtypes[0]);  // the first (deepest)
    if (r.op == "conv2d_backward_weight") conv_bwd_dtypes.push_back(r.in_dtypes[0]);
  });
  Tensor loss;
  {
    Autocast ac(DType::bf16);
    loss = cross_entropy((*model)(x), y);
  }
  loss.backward();
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << params[i].name();
    EXPECT_EQ(params[i].grad().dtype(), DType::f32) << params[i].name() << ": the master gradient is f32";
    // bf16 keeps 8 significant bits; batch norm's backward subtracts nearly equal sums, so an
    // early layer's gradient of a fresh net on 4 samples is off by ~20% of its largest element
    // here, elementwise. Its direction (what SGD follows) stays that of the f32 gradient.
    EXPECT_GT(cosine(params[i].grad(), g32[i]), 0.97) << params[i].name() << ": bf16 gradient far from f32";
  }
  // Backward runs in each forward's dtype: bf16 for the lowered convolutions, f32 for the first
  // one (1 -> 16 channels: autocast keeps it in f32, ops/conv.h).
  ASSERT_EQ(conv_bwd_dtypes.size(), 3u);
  EXPECT_EQ(conv_bwd_dtypes[0], DType::bf16);
  EXPECT_EQ(conv_bwd_dtypes[1], DType::bf16);
  EXPECT_EQ(conv_bwd_dtypes[2], DType::f32) << "the first layer, reached last";
  EXPECT_EQ(bwd_dtype["relu_backward"], DType::bf16);
  EXPECT_EQ(bwd_dtype["cross_entropy_backward"], DType::f32);
}

TEST(Autocast, Bf16ConvRunsOnTheFastKernelAndMatchesF32) {
  Tensor x = rand_tensor({2, 16, 12, 12}, 11);
  Tensor w = rand_tensor({32, 16, 3, 3}, 12, -0.2, 0.2).set_requires_grad(true);
  Tensor ref = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  std::map<std::string, Seen> seen;
  Tensor out;
  {
    Autocast ac(DType::bf16);
    seen = observe([&] { out = conv2d(x, w, Tensor(), {.padding = {1, 1}}); });
  }
  // Where oneDNN has bf16 kernels (AVX-512) its bf16 convolution takes the call; on a cpu
  // without them (AVX2) the dispatcher computes in f32 on widened copies.
  EXPECT_EQ(seen["conv2d"].kernel, dnnl_util::bf16_kernels_available() ? "cpu" : "cpu-f32")
      << "isa: " << dnnl_util::cpu_isa_name();
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_LT(max_rel_diff(cast(out, DType::f32), ref), 0.02);
}

// Autocast's second exception (ops/conv.h): a narrow convolution stays f32 on a cpu whose bf16 dot
// products are slower than its f32 FMAs. Which cpus those are, read here from /proc/cpuinfo and
// oneDNN's ISA (the rule reads cpuid and the ISA): AMX that oneDNN uses, or AVX512_BF16 on AMD,
// make bf16 the faster; anything else not.
TEST(Autocast, NarrowConvStaysF32WhereThisCpusBf16IsSlower) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor, flags;
  while (std::getline(in, line) && (vendor.empty() || flags.empty())) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 1);
    if (line.rfind("flags", 0) == 0) flags = line.substr(line.find(':') + 1) + " ";
  }
  if (!flags.empty()) {
    const bool amx = dnnl_util::cpu_isa_name() == "AVX-512 with AMX";
    const bool bf16 = flags.find(" avx512_bf16 ") != std::string::npos;
    EXPECT_EQ(cpu_bf16_slower_than_f32(), !(amx || (bf16 && vendor.find("AuthenticAMD") != std::string::npos)))
        << vendor << ":" << flags;
  }
  const bool slower = cpu_bf16_slower_than_f32();
  auto out_dtype = [](const Shape& xs, const Shape& ws, Conv2dArgs a) {
    Tensor x = rand_tensor(xs, 31), w = rand_tensor(ws, 32, -0.2, 0.2);
    Autocast ac(DType::bf16);
    return conv2d(x, w, Tensor(), a).dtype();
  };
  // LeNet-5's 6 -> 16 (5x5), a strided 8 -> 12, and the edges of "narrow": 15 inputs, 16 outputs.
  EXPECT_EQ(out_dtype({2, 6, 14, 14}, {16, 6, 5, 5}, {}), slower ? DType::f32 : DType::bf16);
  EXPECT_EQ(out_dtype({2, 8, 15, 15}, {12, 8, 3, 3}, {.stride = {2, 2}}), slower ? DType::f32 : DType::bf16);
  EXPECT_EQ(out_dtype({2, 15, 8, 8}, {16, 15, 3, 3}, {}), slower ? DType::f32 : DType::bf16);
  // Not narrow: 16 inputs, 17 outputs, or grouped: bf16 on every cpu.
  EXPECT_EQ(out_dtype({2, 16, 8, 8}, {16, 16, 3, 3}, {}), DType::bf16);
  EXPECT_EQ(out_dtype({2, 6, 8, 8}, {17, 6, 3, 3}, {}), DType::bf16);
  EXPECT_EQ(out_dtype({2, 8, 8, 8}, {8, 4, 3, 3}, {.groups = 2}), DType::bf16);
  EXPECT_EQ(narrow_conv_keeps_f32({16, 6, 5, 5}, ConvAttrs{}), slower);
  // Linear layers of at most kSmallLinearWeights weights likewise (LeNet-5's 400 -> 120), forward
  // and backward; a larger one runs bf16 everywhere.
  auto linear_dtypes = [](int64_t in, int64_t out) {
    Tensor x = rand_tensor({4, in}, 33), w = rand_tensor({out, in}, 34, -0.2, 0.2).set_requires_grad(true);
    Tensor y;
    {
      Autocast ac(DType::bf16);
      y = linear(x, w, Tensor());
    }
    sum(cast(y, DType::f32)).backward();
    return std::pair{y.dtype(), w.grad().dtype()};
  };
  EXPECT_EQ(linear_dtypes(400, 120).first, slower ? DType::f32 : DType::bf16);
  EXPECT_EQ(linear_dtypes(400, 120).second, DType::f32);  // the master copy's dtype either way
  EXPECT_EQ(linear_dtypes(512, 129).first, DType::bf16);  // 66,048 weights
  EXPECT_EQ(small_linear_keeps_f32({120, 400}), slower);
  EXPECT_EQ(small_linear_keeps_f32({256, 256}), slower);  // 65,536: the bound is kept
  EXPECT_FALSE(small_linear_keeps_f32({129, 512}));
  {  // fp16 (computed in f32 on the cpu anyway) is not this rule's: the layer stores f16
    Autocast ac(DType::f16);
    EXPECT_EQ(linear(rand_tensor({4, 400}, 35), rand_tensor({120, 400}, 36)).dtype(), DType::f16);
  }
}

TEST(Autocast, F16ComputesInF32AndStoresF16) {
  Tensor x = rand_tensor({2, 8, 10, 10}, 21);
  Tensor w = rand_tensor({8, 8, 3, 3}, 22, -0.3, 0.3).set_requires_grad(true);
  Tensor out;
  std::map<std::string, Seen> seen;
  {
    Autocast ac(DType::f16);
    seen = observe([&] { out = conv2d(x, w); });
  }
  EXPECT_EQ(out.dtype(), DType::f16);
  // No f16 arithmetic on this cpu: oneDNN's reorders convert f16 to f32 and back around an f32
  // convolution (the "cpu" kernel itself, so the meta device plans the conversion buffers).
  EXPECT_EQ(seen["conv2d"].kernel, "cpu");
  // The same f32 kernel on the f16-rounded inputs, rounded once to f16: bit for bit.
  Tensor want = cast(conv2d(cast(cast(x, DType::f16), DType::f32), cast(cast(w.detach(), DType::f16), DType::f32)),
                     DType::f16);
  auto a = out.to_vector(), r = want.to_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], r[i]) << i;
}

TEST(Autocast, FallbackWidensToF32AndRoundsOnce) {
  // The reference kernels know f32 and f64 only; forced to them, a bf16 call must go through
  // the dispatcher's widening and give the f32 result rounded to bf16.
  Tensor x = rand_tensor({3, 5, 7}, 31, -3, 3);
  Tensor xb = cast(x, DType::bf16);
  Tensor want = cast(gelu(cast(xb, DType::f32)), DType::bf16);
  ForceReference ref;
  std::map<std::string, Seen> seen;
  Tensor got;
  seen = observe([&] { got = gelu(xb); });
  EXPECT_EQ(seen["gelu"].kernel, "ref-f32");
  ASSERT_EQ(got.dtype(), DType::bf16);
  auto g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << i;
}

TEST(Autocast, InBackwardNoPolicyApplies) {
  // A leaf in f32 used by a conv under autocast: its gradient comes back f32 through cast's
  // backward, while the conv's backward ops ran in bf16.
  Tensor x = rand_tensor({1, 2, 5, 5}, 41).set_requires_grad(true);
  Tensor w = rand_tensor({3, 2, 3, 3}, 42).set_requires_grad(true);
  Tensor out;
  {
    Autocast ac(DType::bf16);
    out = conv2d(x, w);
  }
  std::vector<std::string> bwd_kernels;
  ObserveOps obs([&](const OpRecord& r) {
    if (r.op == "conv2d_backward_input") bwd_kernels.emplace_back(r.kernel);
  });
  sum(cast(out, DType::f32)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  ASSERT_EQ(bwd_kernels.size(), 1u);
  EXPECT_EQ(bwd_kernels[0], dnnl_util::bf16_kernels_available() ? "cpu" : "cpu-f32")
      << "the bf16 backward-data convolution ran on oneDNN's bf16 kernel where this cpu ("
      << dnnl_util::cpu_isa_name() << ") has one";
}

TEST(Autocast, BadPrecisionNamesTheFlag) {
  EXPECT_EQ(precision_dtype("bf16"), DType::bf16);
  EXPECT_EQ(precision_dtype("fp16"), DType::f16);
  EXPECT_EQ(precision_dtype("fp32"), DType::f32);
  try {
    precision_dtype("fp8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Autocast(AutocastState{true, DType::i8}), Error);
}

// ---- gradient accumulation ----

namespace {
// The parameters of `model_name` after one SGD step over `sizes` micro-batches of one batch.
std::vector<Tensor> params_after_step(const std::string& model_name, const std::vector<int64_t>& sizes,
                                      DType precision = DType::f32, optim::GradScaler* scaler = nullptr) {
  manual_seed(5);
  auto model = nn::make_model(model_name, {});
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  int64_t total = 0;
  for (auto s : sizes) total += s;
  Tensor x = rand_tensor({total, 1, 28, 28}, 99);
  std::vector<double> labels;
  for (int64_t i = 0; i < total; ++i) labels.push_back(double(i % 10));
  Tensor y = Tensor::from_vector(labels, {total}, DType::i64);
  train::Step step(*model, opt, scaler, {.precision = precision});
  step.begin(total);
  int64_t at = 0;
  for (auto s : sizes) {
    step.micro(contiguous(narrow(x, 0, at, s)), contiguous(narrow(y, 0, at, s)));
    at += s;
  }
  EXPECT_TRUE(step.finish());
  std::vector<Tensor> r;
  for (auto& p : model->parameters()) r.push_back(p);
  return r;
}
}  // namespace

TEST(Accumulation, MicroBatchesEqualOneBatch) {
  // lenet5 has no batch norm, so K micro-batches of B and one batch of K x B are the same step.
  auto one = params_after_step("lenet5", {32});
  auto four = params_after_step("lenet5", {8, 8, 8, 8});
  auto ragged = params_after_step("lenet5", {8, 8, 8, 5, 3});  // a short last micro-batch
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_LT(max_rel_diff(four[i], one[i]), 1e-5) << one[i].name();
    EXPECT_LT(max_rel_diff(ragged[i], one[i]), 1e-5) << one[i].name();
  }
  // and the step did something
  manual_seed(5);
  auto fresh = nn::make_model("lenet5", {});
  EXPECT_GT(max_rel_diff(fresh->parameters()[0], one[0]), 1e-4);
}

TEST(Accumulation, WindowMisuseIsAnError) {
  auto model = nn::make_model("lenet5", {});
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  train::Step step(*model, opt, nullptr, {});
  Tensor x = rand_tensor({4, 1, 28, 28}, 1);
  Tensor y = Tensor::from_vector({0, 1, 2, 3}, {4}, DType::i64);
  step.begin(6);
  step.micro(x, y);
  EXPECT_THROW(step.micro(x, y), Error) << "8 samples in a window of 6";
  EXPECT_THROW(step.finish(), Error) << "the window is not complete";
}

TEST(Accumulation, WithTheScalerToo) {
  auto one = params_after_step("lenet5", {24});
  optim::GradScaler scaler;  // 65536: exact powers of two, so the unscaled gradients are the same
  auto three = params_after_step("lenet5", {8, 8, 8}, DType::f32, &scaler);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_LT(max_rel_diff(three[i], one[i]), 1e-5) << one[i].name();
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.scale_history().size(), 1u) << "the scaler steps once per window, not per micro-batch";
}

TEST(Accumulation, Fp16WithScalerTrainsCloseToF32) {
  auto one = params_after_step("lenet5", {16});
  optim::GradScaler scaler;
  auto half = params_after_step("lenet5", {8, 8}, DType::f16, &scaler);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_LT(max_rel_diff(half[i], one[i]), 0.02) << one[i].name();
}
