// Channels-last activations (core/tensor.h MemoryFormat, ops/op.h kChannelsLast): a 4-D tensor
// stored NHWC keeps its layout through the ops that take it (convolutions, batch norm, the
// elementwise ops, cast), each giving what it gives on NCHW; an op that does not take it gets a
// recorded `contiguous` op (the reorder the ledger counts); and a training step run channels-last
// is the contiguous step up to the kernels' rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "reckon/nn/models/registry.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/norm.h"
#include "reckon/ops/pool.h"
#include "reckon/ops/shape_ops.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"
#include "test_util.h"

using namespace reckon;
using reckon::test_util::cosine;
using reckon::test_util::max_rel_diff;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType t = DType::f32, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor x = Tensor::empty(s);
  fill_uniform_(x, lo, hi, g);
  return t == DType::f32 ? x : cast(x, t);
}

// The ops recorded while f runs, by name; the layouts the `contiguous` ones wrote.
struct Recorded {
  std::map<std::string, int> ops;
  int to_channels_last = 0, to_contiguous = 0;
};
template <class F>
Recorded record(F&& f) {
  Recorded r;
  ObserveOps obs([&](const OpRecord& rec) {
    ++r.ops[std::string(rec.op)];
    if (rec.op == Contiguous::kName) {
      const auto* a = static_cast<const Contiguous::Attrs*>(rec.attrs);
      ++(a->channels_last ? r.to_channels_last : r.to_contiguous);
    }
  });
  f();
  return r;
}

// bf16 rounds each output once (8 bits): the two layouts' kernels sum in different orders.
double tolerance(DType t) { return t == DType::bf16 ? 2e-2 : 2e-5; }

}  // namespace

TEST(ChannelsLast, StridesAndWhatATensorPrefers) {
  Tensor x = Tensor::empty({2, 3, 4, 5}, DType::f32, Device::cpu, MemoryFormat::channels_last);
  EXPECT_EQ(x.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(x.is_channels_last());
  EXPECT_FALSE(x.is_contiguous());
  EXPECT_TRUE(x.prefers_channels_last());
  // At 1x1 (or one channel) both layouts are the same memory: the tensor is both, prefers neither.
  Tensor p = Tensor::empty({2, 8, 1, 1}, DType::f32, Device::cpu, MemoryFormat::channels_last);
  EXPECT_TRUE(p.is_channels_last());
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_FALSE(p.prefers_channels_last());
  EXPECT_FALSE(Tensor::empty({2, 3, 4, 5}).is_channels_last());
  EXPECT_THROW(Tensor::empty({2, 3, 4}, DType::f32, Device::cpu, MemoryFormat::channels_last), Error);
  // On the meta device too: the ledger sees the layout.
  EXPECT_TRUE(Tensor::empty({2, 3, 4, 5}, DType::bf16, Device::meta, MemoryFormat::channels_last).prefers_channels_last());
}

TEST(ChannelsLast, ConversionsKeepEveryValue) {
  for (DType t : {DType::f32, DType::bf16, DType::i64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = t == DType::i64 ? cast(rnd({3, 5, 4, 6}, 1, DType::f32, -50, 50), DType::i64) : rnd({3, 5, 4, 6}, 1, t);
    Tensor cl = to_channels_last(x);
    EXPECT_TRUE(cl.prefers_channels_last());
    EXPECT_EQ(cl.dtype(), t);
    EXPECT_EQ(cl.to_vector(), x.to_vector());
    // In memory it is NHWC: element (n, c, h, w) = (1, 2, 3, 4) at ((n * H + h) * W + w) * C + c.
    if (t == DType::f32)
      EXPECT_EQ(static_cast<const float*>(cl.raw_data())[((1 * 4 + 3) * 6 + 4) * 5 + 2],
                x.data<float>()[((1 * 5 + 2) * 4 + 3) * 6 + 4]);
    Tensor back = contiguous(cl);
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_EQ(back.to_vector(), x.to_vector());
    EXPECT_TRUE(to_channels_last(cl).same(cl)) << "already channels-last: the tensor itself";
  }
  // A strided non-4-D or permuted view densifies as before.
  Tensor v = permute(rnd({4, 6}, 2), {1, 0});
  EXPECT_TRUE(contiguous(v).is_contiguous());
  EXPECT_THROW(to_channels_last(rnd({4, 6}, 2)), Error);
}

TEST(ChannelsLast, ConvolutionsReadAndWriteItWithoutReorders) {
  for (DType t : {DType::f32, DType::bf16}) {
    for (int64_t stride : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} stride {}", dtype_name(t), stride));
      const Shape xs{4, 16, 9, 9}, ws{32, 16, 3, 3};
      Tensor x = rnd(xs, 3, t), w = rnd(ws, 4, t, -0.2, 0.2), b = rnd({32}, 5, t);
      ConvAttrs a;
      a.stride = {stride, stride};
      a.padding = {1, 1};
      Tensor xcl = to_channels_last(x);
      Tensor y, ycl;
      Recorded rec = record([&] { ycl = call1<Conv2d>({xcl, w, b}, a); });
      y = call1<Conv2d>({x, w, b}, a);
      EXPECT_TRUE(ycl.prefers_channels_last());
      EXPECT_TRUE(y.is_contiguous());
      EXPECT_EQ(rec.ops.count("contiguous"), 0u) << "no reorder around a channels-last convolution";
      EXPECT_LT(max_rel_diff(ycl, y), tolerance(t));

      Tensor dy = rnd(y.shape(), 6, t), dycl = to_channels_last(dy);
      Tensor dx, dxcl, dw, dwcl;
      rec = record([&] {
        dxcl = call1<Conv2dBackwardInput>({dycl, w}, {a, xs});
        dwcl = call<Conv2dBackwardWeight>({dycl, xcl}, {a, ws, true})[0];
      });
      EXPECT_EQ(rec.ops.count("contiguous"), 0u);
      dx = call1<Conv2dBackwardInput>({dy, w}, {a, xs});
      dw = call<Conv2dBackwardWeight>({dy, x}, {a, ws, true})[0];
      EXPECT_TRUE(dxcl.prefers_channels_last());
      EXPECT_TRUE(dwcl.is_contiguous()) << "the weight gradient is OIHW, as the weight";
      EXPECT_LT(max_rel_diff(dxcl, dx), tolerance(t));
      EXPECT_LT(max_rel_diff(dwcl, dw), tolerance(t));
      // One activation channels-last and the other not: the other is made so, once.
      rec = record([&] { dwcl = call<Conv2dBackwardWeight>({dycl, x}, {a, ws, true})[0]; });
      EXPECT_EQ(rec.to_channels_last, 1);
      EXPECT_LT(max_rel_diff(dwcl, dw), tolerance(t));
    }
  }
}

TEST(ChannelsLast, SmallKernelsAndF16StayNchw) {
  // A 3 -> 6 layer runs reckon's own NCHW kernel: a channels-last input is reordered for it (a
  // recorded op), and its output is contiguous.
  Tensor x0 = rnd({2, 3, 28, 28}, 7), w = rnd({6, 3, 5, 5}, 8);
  Tensor x = to_channels_last(x0);
  Tensor y;
  Recorded rec = record([&] { y = conv2d(x, w); });
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_EQ(rec.to_contiguous, 1);
  EXPECT_LT(max_rel_diff(y, conv2d(x0, w)), 1e-6);
  // One channel: NHWC and NCHW are the same memory, nothing to reorder.
  Tensor g = rnd({2, 1, 28, 28}, 7);
  EXPECT_TRUE(to_channels_last(g).same(g));
  Tensor x3 = to_channels_last(rnd({2, 3, 8, 8}, 9, DType::f16)), w3 = rnd({16, 3, 3, 3}, 10, DType::f16);
  rec = record([&] { y = conv2d(x3, w3); });
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_EQ(rec.to_contiguous, 1);
}

TEST(ChannelsLast, BatchNormTrainingAndEvalMatchNchw) {
  for (DType t : {DType::f32, DType::bf16}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(fmt::format("{} training {}", dtype_name(t), training));
      for (const Shape& xs : {Shape{6, 24, 7, 9}, Shape{8, 32, 16, 16}}) {  // short rows; threads
      SCOPED_TRACE(shape_str(xs));
      Tensor x = rnd(xs, 11, t, -2, 3), w = rnd({xs[1]}, 12), b = rnd({xs[1]}, 13);
      Tensor rm = rnd({xs[1]}, 14, DType::f32, -0.5, 0.5), rv = rnd({xs[1]}, 15, DType::f32, 0.5, 2);
      Tensor rm2 = contiguous(cast(rm, DType::f64)), rv2 = contiguous(cast(rv, DType::f64));
      rm2 = cast(rm2, DType::f32);
      rv2 = cast(rv2, DType::f32);
      BatchNormAttrs a{.training = training};
      std::vector<Tensor> o, ocl;
      Recorded rec = record([&] { ocl = call<BatchNorm2d>({to_channels_last(x), w, b, rm2, rv2}, a); });
      o = call<BatchNorm2d>({x, w, b, rm, rv}, a);
      EXPECT_EQ(rec.ops.count("contiguous"), 1u) << "only the test's own conversion";
      EXPECT_TRUE(ocl[0].prefers_channels_last());
      EXPECT_LT(max_rel_diff(ocl[0], o[0]), tolerance(t));
      for (size_t i = 1; i < o.size(); ++i) EXPECT_LT(max_rel_diff(ocl[i], o[i]), 1e-5) << "output " << i;
      EXPECT_LT(max_rel_diff(rm2, rm), 1e-5);
      EXPECT_LT(max_rel_diff(rv2, rv), 1e-5);

      Tensor dy = rnd(xs, 16, t);
      Tensor s1 = training ? o[1] : rm, s2 = training ? o[2] : rv;
      auto g = call<BatchNorm2dBackward>({dy, x, w, s1, s2}, a);
      auto gcl = call<BatchNorm2dBackward>({to_channels_last(dy), to_channels_last(x), w, s1, s2}, a);
      EXPECT_TRUE(gcl[0].prefers_channels_last());
      EXPECT_LT(max_rel_diff(gcl[0], g[0]), tolerance(t));
      EXPECT_LT(max_rel_diff(gcl[1], g[1]), 1e-4);
      EXPECT_LT(max_rel_diff(gcl[2], g[2]), 1e-4);
      }
    }
  }
}

TEST(ChannelsLast, ElementwiseFollowsAndMixedInputsJoinIt) {
  Tensor a = rnd({2, 16, 5, 5}, 17), b = rnd({2, 16, 5, 5}, 18);
  Tensor acl = to_channels_last(a);
  Tensor r = relu(acl);
  EXPECT_TRUE(r.prefers_channels_last());
  EXPECT_EQ(r.to_vector(), relu(a).to_vector());
  Tensor s;
  Recorded rec = record([&] { s = add(acl, b); });
  EXPECT_TRUE(s.prefers_channels_last());
  EXPECT_EQ(rec.to_channels_last, 1) << "the contiguous input joins the channels-last one";
  EXPECT_EQ(s.to_vector(), add(a, b).to_vector());
  Tensor c = cast(acl, DType::bf16);
  EXPECT_TRUE(c.prefers_channels_last());
  EXPECT_EQ(c.to_vector(), cast(a, DType::bf16).to_vector());
  // Broadcasting is not the flat loop: both made contiguous, the result too.
  Tensor bias = rnd({1, 16, 1, 1}, 19);
  rec = record([&] { s = add(acl, bias); });
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(rec.to_contiguous, 1);
  EXPECT_EQ(s.to_vector(), add(a, bias).to_vector());
}

TEST(ChannelsLast, F16KeepsItAndStridedLowPrecisionCopiesStayRight) {
  // f16: the elementwise ops and batch norm take it natively.
  Tensor a = rnd({2, 16, 5, 5}, 50, DType::f16);
  Tensor r = relu(to_channels_last(a));
  EXPECT_TRUE(r.prefers_channels_last());
  EXPECT_EQ(r.to_vector(), relu(a).to_vector());
  Tensor w = rnd({16}, 51), b = rnd({16}, 52);
  Tensor bn = batch_norm2d(to_channels_last(a), w, b, Tensor(), Tensor(), true);
  EXPECT_TRUE(bn.prefers_channels_last());
  EXPECT_LT(max_rel_diff(bn, batch_norm2d(a, w, b, Tensor(), Tensor(), true)), 2e-3);
  // A bf16 copy of a transposed matrix: `contiguous` computes it in f32 on widened copies, which
  // must follow the strides (not the flat order).
  Tensor m = rnd({6, 4}, 53, DType::bf16);
  Tensor t = contiguous(permute(m, {1, 0}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) ASSERT_EQ(t.get(i * 6 + j), m.get(j * 4 + i)) << i << "," << j;
}

TEST(ChannelsLast, OpsWithoutItGetOneRecordedReorder) {
  Tensor x = rnd({2, 16, 8, 8}, 20);
  Tensor y;
  Pool2dArgs p;
  p.kernel = {2, 2};
  Recorded rec = record([&] { y = avg_pool2d(to_channels_last(x), p); });
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_EQ(rec.to_channels_last, 1);
  EXPECT_EQ(rec.to_contiguous, 1) << "average pooling reads NCHW";
  EXPECT_EQ(y.to_vector(), avg_pool2d(x, p).to_vector());
}

TEST(ChannelsLast, MaxPoolingGivesTheSameValuesAndIndices) {
  struct Case {
    Shape x;
    PoolAttrs a;
  };
  std::vector<Case> cases = {
      {{2, 16, 8, 8}, {}},                                                       // 2x2/2
      {{2, 24, 13, 13}, {.kernel = {3, 3}, .stride = {2, 2}}},                   // AlexNet's 3x3/2
      {{3, 8, 9, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}},
      {{2, 5, 10, 10}, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}}},
  };
  for (DType t : {DType::f32, DType::bf16})
    for (const auto& c : cases) {
      SCOPED_TRACE(fmt::format("{} {} kernel {}x{}", dtype_name(t), shape_str(c.x), c.a.kernel[0], c.a.kernel[1]));
      Tensor x = rnd(c.x, 40, t);
      x.set(3, std::nan(""));  // a NaN takes its window, in both layouts
      Tensor xcl = to_channels_last(x);
      std::vector<Tensor> o, ocl;
      Recorded rec = record([&] { ocl = call<MaxPool2d>({xcl}, c.a); });
      o = call<MaxPool2d>({x}, c.a);
      EXPECT_EQ(rec.ops.count("contiguous"), 0u);
      EXPECT_TRUE(ocl[0].is_channels_last());
      EXPECT_TRUE(ocl[1].is_channels_last());
      auto v = o[0].to_vector(), vcl = ocl[0].to_vector();
      for (size_t i = 0; i < v.size(); ++i)
        if (!(std::isnan(v[i]) && std::isnan(vcl[i]))) ASSERT_EQ(vcl[i], v[i]) << i;
      EXPECT_EQ(ocl[1].to_vector(), o[1].to_vector()) << "the indices";
      Tensor dy = rnd(o[0].shape(), 41, t);
      Tensor dx, dxcl;
      rec = record([&] { dxcl = call1<MaxPool2dBackward>({to_channels_last(dy), ocl[1]}, {c.x}); });
      dx = call1<MaxPool2dBackward>({dy, o[1]}, {c.x});
      EXPECT_EQ(rec.ops.count("contiguous"), 1u) << "only the test's own conversion of dy";
      EXPECT_TRUE(dxcl.prefers_channels_last());
      EXPECT_EQ(dxcl.to_vector(), dx.to_vector());
    }
}

namespace {
// One SGD step of resnet18_cifar at batch 4: the loss, each parameter's update (after - before),
// and the ops recorded.
struct StepRun {
  double loss = 0;
  std::vector<Tensor> updates;
  Recorded rec;
};
StepRun resnet_step(DType precision, train::ActivationLayout layout) {
  manual_seed(21);
  auto model = nn::make_model("resnet18_cifar", {});
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  std::vector<Tensor> before;
  for (auto& p : model->parameters()) before.push_back(cast(cast(p, DType::f64), DType::f32));
  Tensor x = rnd({4, 3, 32, 32}, 22);
  Tensor y = Tensor::from_vector({1, 3, 5, 7}, {4}, DType::i64);
  train::Step step(*model, opt, nullptr, {.precision = precision, .layout = layout});
  StepRun r;
  r.rec = record([&] {
    step.begin(4);
    r.loss = step.micro(x, y).loss;
    EXPECT_TRUE(step.finish());
  });
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) r.updates.push_back(sub(params[i], before[i]));
  return r;
}
}  // namespace

TEST(ChannelsLast, TrainingStepMatchesTheContiguousOne) {
  // In f32 the two layouts' steps agree to the kernels' rounding: the loss and every parameter's
  // update. (f32 channels-last runs direct convolutions where contiguous runs Winograd.)
  const StepRun f_cl = resnet_step(DType::f32, train::ActivationLayout::channels_last);
  const StepRun f_nc = resnet_step(DType::f32, train::ActivationLayout::contiguous);
  EXPECT_NEAR(f_cl.loss, f_nc.loss, 1e-4 * std::abs(f_nc.loss));
  ASSERT_EQ(f_cl.updates.size(), f_nc.updates.size());
  // Per parameter the updates point the same way: at batch 4 a channel whose batch variance is
  // tiny amplifies the kernels' rounding (seen: one of layer3's 256 channels, whose difference
  // then reaches the layers before it), so the check is the direction, not each value.
  for (size_t i = 0; i < f_cl.updates.size(); ++i)
    EXPECT_GT(cosine(f_cl.updates[i], f_nc.updates[i]), 0.9999) << "parameter " << i;
  // The channels-last step's convolutions, batch norms, relus and adds take NHWC: its reorders are
  // the input's and those around the pooling at the end, not one per layer.
  EXPECT_EQ(f_nc.rec.to_channels_last, 0);
  EXPECT_GE(f_cl.rec.to_channels_last, 1);
  EXPECT_LE(f_cl.rec.to_channels_last + f_cl.rec.to_contiguous, 4);
  EXPECT_EQ(f_cl.rec.ops.at("conv2d"), f_nc.rec.ops.at("conv2d"));

  // bf16 (what `auto` runs channels-last): each layout is as close to the f32 step as the other.
  const StepRun b_cl = resnet_step(DType::bf16, train::ActivationLayout::automatic);
  const StepRun b_nc = resnet_step(DType::bf16, train::ActivationLayout::contiguous);
  EXPECT_GE(b_cl.rec.to_channels_last, 1);
  EXPECT_LE(b_cl.rec.to_channels_last + b_cl.rec.to_contiguous, 4);
  EXPECT_EQ(b_nc.rec.to_channels_last, 0);
  EXPECT_NEAR(b_cl.loss, f_nc.loss, 0.02 * std::abs(f_nc.loss));
  EXPECT_NEAR(b_nc.loss, f_nc.loss, 0.02 * std::abs(f_nc.loss));
  // Against the f32 step: the median parameter's update direction, and the worst one, no further
  // for channels-last than for contiguous (the ill-conditioned channel moves both).
  std::vector<double> cos_cl, cos_nc;
  for (size_t i = 0; i < f_nc.updates.size(); ++i) {
    cos_cl.push_back(cosine(b_cl.updates[i], f_nc.updates[i]));
    cos_nc.push_back(cosine(b_nc.updates[i], f_nc.updates[i]));
  }
  std::sort(cos_cl.begin(), cos_cl.end());
  std::sort(cos_nc.begin(), cos_nc.end());
  EXPECT_GT(cos_cl[cos_cl.size() / 2], 0.9);  // measured 0.946 (contiguous bf16: 0.948)
  EXPECT_GT(cos_cl[cos_cl.size() / 2], cos_nc[cos_nc.size() / 2] - 0.005);
  EXPECT_GT(cos_cl[0], cos_nc[0] - 0.02);
  std::printf("bf16 updates against f32, cosine median / worst: channels-last %.4f / %.4f, contiguous %.4f / %.4f\n",
              cos_cl[cos_cl.size() / 2], cos_cl[0], cos_nc[cos_nc.size() / 2], cos_nc[0]);
}

TEST(ChannelsLast, TheLayoutRule) {
  EXPECT_TRUE(train::channels_last_for(train::ActivationLayout::automatic, DType::bf16));
  EXPECT_FALSE(train::channels_last_for(train::ActivationLayout::automatic, DType::f32));
  EXPECT_FALSE(train::channels_last_for(train::ActivationLayout::contiguous, DType::bf16));
  EXPECT_TRUE(train::channels_last_for(train::ActivationLayout::channels_last, DType::f32));
  EXPECT_EQ(train::parse_activation_layout("channels_last"), train::ActivationLayout::channels_last);
  EXPECT_THROW(train::parse_activation_layout("nhwc"), Error);
}

TEST(ChannelsLast, ResidualBlockGradientsMatchNchw) {
  // conv, batch norm, relu, the residual add, a second conv and batch norm, a strided conv with a
  // 1x1 strided shortcut, pooling: the input's and the first weight's gradients, each layout
  // against the other, built up one layer at a time.
  for (int variant = 0; variant < 10; ++variant) {
    Tensor x0 = rnd({4, 16, 8, 8}, 30), w1 = rnd({16, 16, 3, 3}, 31, DType::f32, -0.3, 0.3), w2 = rnd({16, 16, 3, 3}, 32, DType::f32, -0.3, 0.3);
    Tensor g = rnd({4, 16, 8, 8}, 33), bw = rnd({16}, 34, DType::f32, 0.5, 1.5), bb = rnd({16}, 35);
    auto run = [&](bool cl, Tensor* gx, Tensor* gw) {
      Tensor x = cast(cast(x0, DType::f64), DType::f32);
      Tensor w = cast(cast(w1, DType::f64), DType::f32);
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      Tensor xi = cl ? to_channels_last(x) : x;
      Tensor h = conv2d(xi, w, Tensor(), {.padding = {1, 1}});
      if (variant >= 1) h = batch_norm2d(h, bw, bb, Tensor(), Tensor(), true);
      if (variant >= 2) h = relu(h);
      if (variant >= 3) h = add(h, xi);
      if (variant >= 4) h = conv2d(h, w2, Tensor(), {.padding = {1, 1}});
      if (variant >= 5) h = batch_norm2d(h, bw, bb, Tensor(), Tensor(), true);
      Tensor gg = g;
      if (variant >= 6) {
        Tensor w3 = rnd({32, 16, 3, 3}, 36, DType::f32, -0.3, 0.3), w4 = rnd({32, 16, 1, 1}, 37, DType::f32, -0.3, 0.3);
        Tensor hh = conv2d(h, w3, Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
        if (variant >= 7) hh = add(hh, conv2d(h, w4, Tensor(), {.stride = {2, 2}}));
        h = hh;
        gg = rnd(h.shape(), 38);
      }
      if (variant >= 8) { h = adaptive_avg_pool2d(h, {1, 1}); gg = rnd(h.shape(), 39); }
      if (variant >= 9) { h = relu(h); }
      Tensor loss = sum(mul(h, gg));
      loss.backward();
      *gx = x.grad();
      *gw = w.grad();
    };
    Tensor a, b, c, d;
    run(false, &a, &b);
    run(true, &c, &d);
    EXPECT_LT(max_rel_diff(c, a), 2e-6) << "layers " << variant;
    EXPECT_LT(max_rel_diff(d, b), 2e-6) << "layers " << variant;
  }
}
