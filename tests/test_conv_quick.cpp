#include <gtest/gtest.h>

#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/op_list.h"

#include <omp.h>

#include <map>

using namespace reckon;

static double max_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST(ConvQuick, CpuMatchesRefWithBackward) {
  for (auto [s, p, g] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {2, 0, 1}, {2, 1, 2}, {1, 1, 4}}) {
    Tensor x = Tensor::empty({2, 4, 9, 9});
    Tensor w = Tensor::empty({8, 4 / g, 3, 3});
    Tensor b = Tensor::empty({8});
    fill_uniform_(x, -1, 1);
    fill_uniform_(w, -1, 1);
    fill_uniform_(b, -1, 1);
    Conv2dArgs a{{s, s}, {p, p}, {1, 1}, g};
    Tensor y1 = conv2d(x, w, b, a);
    Tensor y0;
    {
      ForceReference f;
      y0 = conv2d(x, w, b, a);
    }
    EXPECT_LT(max_diff(y0, y1), 1e-4) << s << p << g;
    Tensor dy = Tensor::empty(y0.shape());
    fill_uniform_(dy, -1, 1);
    ConvAttrs ca{{s, s}, {p, p}, {1, 1}, g};
    Tensor dx1 = call1<Conv2dBackwardInput>({dy, w}, {ca, x.shape()});
    auto dw1 = call<Conv2dBackwardWeight>({dy, x}, {ca, w.shape(), true});
    ForceReference f;
    Tensor dx0 = call1<Conv2dBackwardInput>({dy, w}, {ca, x.shape()});
    auto dw0 = call<Conv2dBackwardWeight>({dy, x}, {ca, w.shape(), true});
    EXPECT_LT(max_diff(dx0, dx1), 1e-4);
    EXPECT_LT(max_diff(dw0[0], dw1[0]), 1e-3);
    EXPECT_LT(max_diff(dw0[1], dw1[1]), 1e-3);
  }
}

TEST(ConvQuick, NegativePadRight) {
  Tensor x = Tensor::empty({1, 4, 8, 8});
  Tensor w = Tensor::empty({4, 4, 1, 1});
  fill_uniform_(x, -1, 1);
  fill_uniform_(w, -1, 1);
  std::string kernel;
  ObserveOps obs([&](const OpRecord& r) { kernel = std::string(r.kernel) + " " + r.skipped; });
  Tensor y = conv2d(x, w, Tensor(), {{2, 2}, {0, 0}, {1, 1}, 1});
  EXPECT_EQ(y.shape(), (Shape{1, 4, 4, 4}));
  EXPECT_EQ(kernel, "cpu ");
  ForceReference f;
  Tensor y0 = conv2d(x, w, Tensor(), {{2, 2}, {0, 0}, {1, 1}, 1});
  EXPECT_LT(max_diff(y0, y), 1e-5);
}

TEST(Autograd, LinearReluSum) {
  Tensor x = Tensor::from_vector({1, -2, 3, 4, 5, -6}, {2, 3});
  Tensor w = Tensor::from_vector({0.5, -1, 2, 1, 1, 1}, {2, 3});
  w.set_requires_grad(true);
  Tensor b = Tensor::from_vector({0.1, -0.2}, {2});
  b.set_requires_grad(true);
  Tensor y = sum(relu(linear(x, w, b)));
  y.backward();
  // rows: x0 w0 = .5+2+6 = 8.5+.1; x0 w1 = 2 - .2; x1 w0 = 2 - 5 - 12 -> relu 0; x1 w1 = 3 - .2
  EXPECT_NEAR(y.item(), 8.6 + 1.8 + 2.8, 1e-5);
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{1, -2, 3, 5, 3, -3}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{1, 2}));
}

// The default algorithm lets oneDNN choose; on AVX-512 it picks Winograd F(4x4, 3x3) for a
// 3x3 stride-1 convolution at batch 16. Forward and both backward ops must still match the
// direct sum computed in double precision by the reference kernel. Winograd's transforms round
// differently; measured here, as a share of the largest output: forward 9.8e-7 (direct 3.8e-7),
// backward data 1.1e-6 (direct 4.8e-7); backward weights 2.7e-6 (direct, in both).
TEST(ConvAlgorithm, AutoPicksWinogradAndMatchesTheDirectSumInDouble) {
  Generator g(7);
  Tensor x = Tensor::empty({16, 16, 32, 32}), w = Tensor::empty({16, 16, 3, 3}), b = Tensor::empty({16});
  fill_uniform_(x, -1, 1, g);
  fill_uniform_(w, -0.2, 0.2, g);
  fill_uniform_(b, -1, 1, g);
  Tensor dy = Tensor::empty({16, 16, 32, 32});
  fill_uniform_(dy, -1, 1, g);
  ConvAttrs ca{{1, 1}, {1, 1}, {1, 1}, 1};
  auto run = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb, const Tensor& dyy) {
    std::vector<Tensor> r = call<Conv2d>({xx, ww, bb}, ca);
    r.push_back(call1<Conv2dBackwardInput>({dyy, ww}, {ca, xx.shape()}));
    for (Tensor& t : call<Conv2dBackwardWeight>({dyy, xx}, {ca, ww.shape(), true})) r.push_back(t);
    return r;  // y, dx, dw, db
  };
  std::vector<Tensor> want;
  {
    ForceReference f;
    want = run(cast(x, DType::f64), cast(w, DType::f64), cast(b, DType::f64), cast(dy, DType::f64));
  }
  auto rel_err = [](const Tensor& got, const Tensor& ref) {
    auto a = got.to_vector(), r = ref.to_vector();
    double m = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      m = std::max(m, std::abs(a[i] - r[i]));
      scale = std::max(scale, std::abs(r[i]));
    }
    return m / scale;
  };
  const char* names[] = {"forward", "backward data", "backward weights", "backward bias"};
  std::map<ConvAlgorithm, std::vector<std::pair<std::string, int64_t>>> used;
  const ConvAlgorithm before = conv_algorithm();
  for (ConvAlgorithm algo : {ConvAlgorithm::direct, ConvAlgorithm::automatic}) {
    set_conv_algorithm(algo);
    ca.algo = algo;  // call<Conv2d> takes the attributes as given (conv2d() would read the setting)
    reset_conv_kernels_used();
    std::vector<Tensor> got = run(x, w, b, dy);
    used[algo] = conv_kernels_used();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(rel_err(got[i], want[i]), 1e-5) << names[i] << " with " << conv_algorithm_name(algo);
  }
  set_conv_algorithm(before);
  auto names_of = [](const std::vector<std::pair<std::string, int64_t>>& u) {
    std::string s;
    for (auto& [k, n] : u) s += k + "; ";
    return s;
  };
  ASSERT_EQ(used[ConvAlgorithm::direct].size(), 3u) << names_of(used[ConvAlgorithm::direct]);
  for (auto& [k, n] : used[ConvAlgorithm::direct]) EXPECT_EQ(k.find("wino"), std::string::npos) << k;
  // A cpu with AVX-512 (the direct kernels say so) gets a Winograd forward under auto (whether
  // the backward ops take it too is oneDNN's call per shape and thread count).
  if (names_of(used[ConvAlgorithm::direct]).find("avx512_core") != std::string::npos)
    EXPECT_NE(names_of(used[ConvAlgorithm::automatic]).find("wino_4x3:avx512_core fwd"), std::string::npos)
        << names_of(used[ConvAlgorithm::automatic]);
}

TEST(ConvAlgorithm, NamesParseAndABadOneIsAnError) {
  EXPECT_EQ(parse_conv_algorithm("auto"), ConvAlgorithm::automatic);
  EXPECT_EQ(parse_conv_algorithm("direct"), ConvAlgorithm::direct);
  EXPECT_EQ(conv_algorithm_name(ConvAlgorithm::direct), "direct");
  try {
    parse_conv_algorithm("fastest");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fastest'"), std::string::npos) << e.what();
  }
}

// Small layers (few channels, stride 1: LeNet-5's) run reckon's own direct NCHW kernels on
// AVX-512 instead of oneDNN's channel-blocked ones. Rows of 10, 28, 33 and 50 outputs (one to
// four vectors, partial last vectors), 12-16 outputs (channels in the lanes), paddings 0-2,
// with and without bias, against the double reference for forward and both backward ops.
TEST(ConvSmallDirect, MatchesTheDirectSumInDoubleOnRowsOfOneToFourVectors) {
  struct Case {
    Shape x, w;
    int64_t pad;
    bool bias;
  };
  const std::vector<Case> cases = {{{4, 6, 14, 14}, {16, 6, 5, 5}, 0, true},   // LeNet-5 conv2
                                   {{3, 1, 28, 28}, {6, 1, 5, 5}, 2, true},    // LeNet-5 conv1
                                   {{2, 3, 33, 31}, {5, 3, 3, 3}, 1, false},
                                   {{2, 2, 9, 50}, {7, 2, 3, 2}, 1, true},
                                   // two rows, padding 3: most kernel rows of every output row fall in the padding
                                   {{2, 3, 2, 20}, {6, 3, 4, 4}, 3, true},
                                   // 8 taps a kernel row: weight gradients 3 output channels at a time, then 2
                                   {{2, 2, 9, 40}, {5, 2, 3, 8}, 1, true},
                                   // 12-16 outputs: output channels in the lanes, 13 of 16 used
                                   {{2, 2, 28, 28}, {13, 2, 3, 3}, 1, true},   // rows of 12 + 12 + 4 pixels
                                   {{3, 4, 9, 9}, {16, 4, 3, 3}, 0, false}};
  Generator g(11);
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    ConvAttrs ca{{1, 1}, {c.pad, c.pad}, {1, 1}, 1};
    Tensor x = Tensor::empty(c.x), w = Tensor::empty(c.w), b = c.bias ? Tensor::empty({c.w[0]}) : Tensor();
    fill_uniform_(x, -1, 1, g);
    fill_uniform_(w, -0.3, 0.3, g);
    if (c.bias) fill_uniform_(b, -1, 1, g);
    auto run = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb, const Tensor* dyy) {
      std::vector<Tensor> r = call<Conv2d>({xx, ww, bb}, ca);
      if (dyy == nullptr) return r;
      r.push_back(call1<Conv2dBackwardInput>({*dyy, ww}, {ca, xx.shape()}));
      for (Tensor& t : call<Conv2dBackwardWeight>({*dyy, xx}, {ca, ww.shape(), c.bias})) r.push_back(t);
      return r;  // y, dx, dw[, db]
    };
    Tensor dy = Tensor::empty(run(x, w, b, nullptr)[0].shape());
    fill_uniform_(dy, -1, 1, g);
    reset_conv_kernels_used();
    std::vector<Tensor> got = run(x, w, b, &dy);
    std::string used;
    for (auto& [k, n] : conv_kernels_used()) used += k + "; ";
    std::vector<Tensor> want;
    {
      ForceReference f;
      Tensor dy64 = cast(dy, DType::f64);
      want = run(cast(x, DType::f64), cast(w, DType::f64), c.bias ? cast(b, DType::f64) : Tensor(), &dy64);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      auto a = got[i].to_vector(), r = want[i].to_vector();
      double err = 0, scale = 0;
      for (size_t j = 0; j < a.size(); ++j) {
        err = std::max(err, std::abs(a[j] - r[j]));
        scale = std::max(scale, std::abs(r[j]));
      }
      EXPECT_LT(err / scale, 1e-5) << "output " << i;
    }
    // On AVX-512 (this project's machines) all three run the small kernels; with 12 to 16 outputs
    // forward and backward-weight the variant with the output channels in the lanes, named so.
    if (conv_small_direct_available())
      EXPECT_EQ(used, c.w[0] >= 12 ? "reckon small_direct bwd_data; reckon small_direct o_lanes bwd_weights; "
                                     "reckon small_direct o_lanes fwd; "
                                   : "reckon small_direct bwd_data; reckon small_direct bwd_weights; "
                                     "reckon small_direct fwd; ");
  }
}

// Backward data of a small layer with 16 images in the vector lanes, once every thread has a group
// of 16: LeNet-5's conv2, a padded 5x5 and a 3x3 layer of 9 channels (blocks of 8 and 1), each at
// a batch that leaves a last group partly empty, against the double reference; named n_lanes, and
// the lanes it fills are the batch's share of its groups.
TEST(ConvSmallDirect, BackwardDataWithImagesInTheLanesMatchesTheDirectSum) {
  if (!conv_small_direct_available()) GTEST_SKIP() << "no AVX-512: oneDNN's kernels run (tested above)";
  const int64_t n = 16 * omp_get_max_threads() + 5;
  struct Case {
    Shape x, w;
    int64_t pad;
  };
  Generator g(12);
  for (const Case& c : {Case{{n, 6, 14, 14}, {16, 6, 5, 5}, 0}, Case{{n, 3, 12, 11}, {7, 3, 5, 5}, 2},
                        Case{{n, 9, 8, 8}, {10, 9, 3, 3}, 1}}) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    ConvAttrs ca{{1, 1}, {c.pad, c.pad}, {1, 1}, 1};
    Tensor w = Tensor::empty(c.w);
    fill_uniform_(w, -0.3, 0.3, g);
    const Shape ys{n, c.w[0], c.x[2] + 2 * c.pad - c.w[2] + 1, c.x[3] + 2 * c.pad - c.w[3] + 1};
    Tensor dy = Tensor::empty(ys);
    fill_uniform_(dy, -1, 1, g);
    reset_conv_kernels_used();
    double lanes = 0;
    Tensor got;
    {
      ObserveOps obs([&](const OpRecord& r) { lanes = r.lane_use; });
      got = call1<Conv2dBackwardInput>({dy, w}, {ca, c.x});
    }
    std::string used;
    for (auto& [k, cnt] : conv_kernels_used()) used += k + "; ";
    EXPECT_EQ(used, "reckon small_direct n_lanes bwd_data; ");
    EXPECT_DOUBLE_EQ(lanes, double(n) / double(16 * ((n + 15) / 16)));
    Tensor want;
    {
      ForceReference f;
      want = call1<Conv2dBackwardInput>({cast(dy, DType::f64), cast(w, DType::f64)}, {ca, c.x});
    }
    auto a = got.to_vector(), r = want.to_vector();
    ASSERT_EQ(a.size(), r.size());
    double err = 0, scale = 0;
    for (size_t j = 0; j < a.size(); ++j) {
      err = std::max(err, std::abs(a[j] - r[j]));
      scale = std::max(scale, std::abs(r[j]));
    }
    EXPECT_LT(err / scale, 1e-5);
  }
}

// The small kernels say what share of their vector lanes they fill, which the ledger's roofline
// divides the FLOPs by (KernelCtx::lane_use): LeNet-5's conv2 (10-wide output rows, 16 outputs)
// fills every lane forward and in the weight gradient (the output channels in the lanes) and 10
// of 16 in backward data (rows of 14 in one vector, 10 taps' worth of work); conv1 (rows of 28 in
// two vectors) 28 of 32. oneDNN's kernels (all of them without AVX-512) report 1.
TEST(ConvSmallDirect, RecordsTheShareOfTheLanesItFills) {
  const bool small = conv_small_direct_available();
  struct Case {
    Shape x, w;
    int64_t pad;
    double fwd, bwd_data, bwd_weight;
  };
  for (const Case& c : {Case{{2, 6, 14, 14}, {16, 6, 5, 5}, 0, 1.0, 10.0 / 16, 1.0},
                        Case{{2, 1, 28, 28}, {6, 1, 5, 5}, 2, 28.0 / 32, 28.0 / 32, 28.0 / 32},
                        Case{{2, 32, 14, 14}, {32, 32, 3, 3}, 1, 1.0, 1.0, 1.0}}) {  // oneDNN
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    ConvAttrs ca{{1, 1}, {c.pad, c.pad}, {1, 1}, 1};
    Tensor x = Tensor::empty(c.x), w = Tensor::empty(c.w);
    fill_uniform_(x, -1, 1);
    fill_uniform_(w, -1, 1);
    std::map<std::string, double> use;
    ObserveOps obs([&](const OpRecord& r) { use[std::string(r.op)] = r.lane_use; });
    Tensor y = call1<Conv2d>({x, w, Tensor()}, ca);
    call1<Conv2dBackwardInput>({y, w}, {ca, x.shape()});
    call<Conv2dBackwardWeight>({y, x}, {ca, w.shape(), false});
    EXPECT_DOUBLE_EQ(use.at("conv2d"), small ? c.fwd : 1.0);
    EXPECT_DOUBLE_EQ(use.at("conv2d_backward_input"), small ? c.bwd_data : 1.0);
    EXPECT_DOUBLE_EQ(use.at("conv2d_backward_weight"), small ? c.bwd_weight : 1.0);
  }
}

// A convolution's backward reorders dy into oneDNN's blocked layout once for both passes
// (ShareConversions, ops/op.h): backward-weights asks for less workspace when backward-data ran
// first in the same backward, and the gradients are the same as when each pass runs alone.
TEST(ConvQuick, BackwardReordersDyOnceForBothPasses) {
  Tensor x0 = Tensor::empty({8, 32, 14, 14}), w0 = Tensor::empty({32, 32, 3, 3}), dy = Tensor::empty({8, 32, 14, 14});
  fill_uniform_(x0, -1, 1);
  fill_uniform_(w0, -1, 1);
  fill_uniform_(dy, -1, 1);
  auto run = [&](bool x_grad) {
    Tensor x = x0.detach(), w = w0.detach();  // fresh leaves on the same data
    x.set_requires_grad(x_grad);
    w.set_requires_grad(true);
    std::map<std::string, int64_t> ws;
    Tensor y = conv2d(x, w, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 1});
    {
      ObserveOps obs([&](const OpRecord& r) { ws[std::string(r.op)] = r.workspace_bytes; });
      sum(mul(y, dy)).backward();
    }
    return std::tuple{ws, w.grad()};
  };
  auto [both, dw_both] = run(true);
  auto [alone, dw_alone] = run(false);
  ASSERT_TRUE(both.count("conv2d_backward_input") && both.count("conv2d_backward_weight"));
  ASSERT_FALSE(alone.count("conv2d_backward_input"));
  // (Where oneDNN takes dy in its plain layout there is nothing to reorder: 0 both ways.)
  EXPECT_LE(both.at("conv2d_backward_weight"), alone.at("conv2d_backward_weight"));
  if (alone.at("conv2d_backward_weight") > 0) {
    EXPECT_LT(both.at("conv2d_backward_weight"), alone.at("conv2d_backward_weight"));
  }
  EXPECT_EQ(max_diff(dw_both, dw_alone), 0.0);
}

// A depthwise convolution's weight gradient at a spatial size below its filter's (mobilenet_v2's
// last blocks at 1x1 and 2x2 from a 32x32 image): oneDNN 2.6's jit_dw declines it and falls back
// to a gemm per group, 4 ms for 960 channels at batch 32; reckon's direct sums run it instead, in
// f32 and bf16, and agree with the double reference (the op cases check more shapes).
TEST(ConvDepthwise, TinySpatialWeightGradientRunsReckonsDirectSums) {
  Generator g(5);
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor x = Tensor::empty({32, 96, 2, 2}), dy = Tensor::empty({32, 96, 2, 2});
    fill_uniform_(x, -1, 1, g);
    fill_uniform_(dy, -1, 1, g);
    const ConvAttrs ca{{1, 1}, {1, 1}, {1, 1}, 96};
    reset_conv_kernels_used();
    auto got = call<Conv2dBackwardWeight>({cast(dy, t), cast(x, t)}, {ca, {96, 1, 3, 3}, true});
    const auto used = conv_kernels_used();
    ASSERT_EQ(used.size(), 1u);
    EXPECT_EQ(used[0].first, "reckon depthwise_direct bwd_weights");
    auto want = call<Conv2dBackwardWeight>({cast(cast(dy, t), DType::f64), cast(cast(x, t), DType::f64)},
                                           {ca, {96, 1, 3, 3}, true});
    for (size_t i = 0; i < 2; ++i) {
      auto a = got[i].to_vector(), r = want[i].to_vector();
      ASSERT_EQ(a.size(), r.size());
      const double tol = t == DType::f32 ? 1e-5 : 1e-2;  // bf16: the output rounded once
      for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], r[k], tol * (1 + std::abs(r[k]))) << i << ":" << k;
    }
  }
}
