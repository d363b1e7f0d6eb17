// Pool, norm and loss ops: their op-harness cases (registered into op_harness.h's table, so
// tests/test_ops.cpp runs every harness check over them: fast vs reference, declared MACs,
// central differences in double, bad arguments, meta device), then numbers computed
// independently with PyTorch (the script is at the end of this file), in-place running
// statistics, dropout's mask, exact error messages, larger cpu-vs-ref shapes and a timing
// table (RECKON_TIMING=1).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>

#include "op_harness.h"
#include "reckon/ops/functional.h"

using namespace reckon;

namespace reckon::harness {
namespace {
using V = std::vector<Tensor>;

Tensor targets(const std::vector<double>& t) { return Tensor::from_vector(t, {int64_t(t.size())}, DType::i64); }

// Dropout draws from the default generator: the harness runs a case several times and must
// see the same mask, so each run starts from one fixed state and leaves the generator as it was.
V run_dropout(const V& in, DropoutAttrs a) {
  Generator& g = default_generator();
  auto st = g.state();
  g.manual_seed(1234);
  V r = call<Dropout>(in, a);
  g.set_state(st);
  return r;
}

Case max_pool_case(const std::string& label, Shape x, PoolAttrs a) {
  Case c;
  c.op = "max_pool2d";
  c.label = label;
  c.inputs = [x](DType t, Generator& g) { return V{rnd(x, t, g)}; };
  c.run = runner<MaxPool2d>(a);
  c.differentiable = true;
  c.bad = {[] { call<MaxPool2d>({Tensor::zeros({3, 8, 8})}, {}); },
           [] { call<MaxPool2d>({Tensor::zeros({1, 1, 8, 8})}, {{3, 3}, {1, 1}, {2, 2}}); },
           [] { call<MaxPool2d>({Tensor::zeros({1, 1, 2, 2})}, {{3, 3}, {1, 1}, {0, 0}}); },
           [] { call<MaxPool2d>({Tensor::zeros({1, 1, 8, 8}, DType::i32)}, {}); }};
  return c;
}

Case avg_pool_case(const std::string& label, Shape x, PoolAttrs a) {
  Case c;
  c.op = "avg_pool2d";
  c.label = label;
  c.inputs = [x](DType t, Generator& g) { return V{rnd(x, t, g)}; };
  c.run = runner<AvgPool2d>(a);
  c.differentiable = true;
  c.bad = {[] { call<AvgPool2d>({Tensor::zeros({1, 1, 8, 8})}, {{2, 2}, {1, 1}, {0, 0}, {2, 2}}); },
           [] { call<AvgPool2d>({Tensor::zeros({1, 1, 8, 8})}, {{2, 2}, {0, 1}}); }};
  return c;
}

// hw: the spatial size. The cpu kernel takes rows (a sample's values of a channel) of 64 values
// or more one channel at a time, shorter ones by blocks of channels (kernels/cpu/norm.cpp): both.
Case bn_case(const std::string& label, bool training, bool affine, bool running, Shape hw = {3, 5}) {
  Case c;
  c.op = "batch_norm2d";
  c.label = label;
  c.inputs = [=](DType t, Generator& g) {
    return V{rnd({3, 4, hw[0], hw[1]}, t, g, -2, 3), affine ? rnd({4}, t, g, 0.5, 1.5) : Tensor(),
             affine ? rnd({4}, t, g) : Tensor(), running ? rnd({4}, t, g) : Tensor(),
             running ? rnd({4}, t, g, 0.5, 2.0) : Tensor()};
  };
  c.run = runner<BatchNorm2d>({training, 0.1, 1e-5});
  c.differentiable = true;
  c.no_grad_inputs = {3, 4};
  c.bad = {[] { call<BatchNorm2d>({Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({4}), Tensor(), Tensor(), Tensor()}); },
           [] { call<BatchNorm2d>({Tensor::zeros({2, 3, 4, 4}), Tensor(), Tensor(), Tensor(), Tensor()}, {false}); },
           [] { call<BatchNorm2d>({Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor()}); },
           [] {
             call<BatchNorm2d>({Tensor::zeros({2, 3, 4, 4}), Tensor(), Tensor(), Tensor::zeros({3}, DType::f64),
                                Tensor::zeros({3}, DType::f64)});
           }};
  return c;
}

Case bn_backward_case(const std::string& label, bool training, Shape hw = {4, 5}) {
  Case c;
  c.op = "batch_norm2d_backward";
  c.label = label;
  c.inputs = [=](DType t, Generator& g) {
    return V{rnd({2, 3, hw[0], hw[1]}, t, g), rnd({2, 3, hw[0], hw[1]}, t, g, -2, 3), rnd({3}, t, g, 0.5, 1.5), rnd({3}, t, g),
             rnd({3}, t, g, 0.5, 2.0)};
  };
  c.run = runner<BatchNorm2dBackward>({training, 0.1, 1e-5});
  c.bad = {[] {
    call<BatchNorm2dBackward>({Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({2, 3, 4, 5}), Tensor(),
                               Tensor::zeros({3}), Tensor::ones({3})});
  }};
  return c;
}

Case lrn_case(const std::string& label, LrnAttrs a, bool backward) {
  Case c;
  c.op = backward ? "local_response_norm_backward" : "local_response_norm";
  c.label = label;
  if (backward) {
    c.inputs = [](DType t, Generator& g) { return V{rnd({2, 6, 3, 4}, t, g), rnd({2, 6, 3, 4}, t, g, -2, 2)}; };
    c.run = runner<LocalResponseNormBackward>(a);
    c.bad = {[] { call<LocalResponseNormBackward>({Tensor::zeros({2, 6, 3}), Tensor::zeros({2, 6, 4})}); }};
  } else {
    c.inputs = [](DType t, Generator& g) { return V{rnd({2, 6, 3, 4}, t, g, -2, 2)}; };
    c.run = runner<LocalResponseNorm>(a);
    c.differentiable = true;
    c.bad = {[] { call<LocalResponseNorm>({Tensor::zeros({2, 6})}, {}); },
             [] { call<LocalResponseNorm>({Tensor::zeros({2, 6, 3})}, {0}); }};
  }
  return c;
}

template <class Op>
Case softmax_case(const std::string& label, Shape s, int64_t dim) {
  Case c;
  c.op = std::string(Op::kName);
  c.label = label;
  c.inputs = [s](DType t, Generator& g) { return V{rnd(s, t, g, -4, 4)}; };
  c.run = runner<Op>({dim});
  c.differentiable = true;
  c.bad = {[] { call<Op>({Tensor::zeros({2, 3})}, {2}); }, [] { call<Op>({Tensor::zeros({2, 3}, DType::i64)}, {1}); }};
  return c;
}

template <class Op>
Case softmax_backward_case(const std::string& label, Shape s, int64_t dim) {
  Case c;
  c.op = std::string(Op::kName);
  c.label = label;
  c.inputs = [s](DType t, Generator& g) { return V{rnd(s, t, g), rnd(s, t, g, -2, 0)}; };
  c.run = runner<Op>({dim});
  c.bad = {[] { call<Op>({Tensor::zeros({2, 3}), Tensor::zeros({3, 2})}, {1}); }};
  return c;
}

const std::vector<double> kTargets = {3, 0, -100, 9, 5, 9, 1};

Case ce_case(const std::string& label, CrossEntropyArgs a) {
  Case c;
  c.op = "cross_entropy";
  c.label = label;
  c.inputs = [](DType t, Generator& g) { return V{rnd({7, 10}, t, g, -4, 4), targets(kTargets)}; };
  c.run = runner<CrossEntropy>(a);
  c.differentiable = true;
  c.bad = {[] { call<CrossEntropy>({Tensor::zeros({4, 10}), targets({1, 2, 12, 3})}); },
           [] { call<CrossEntropy>({Tensor::zeros({4, 10}), Tensor::zeros({4})}); },
           [] { call<CrossEntropy>({Tensor::zeros({4, 10}), targets({1, 2, 3})}); },
           [] { call<CrossEntropy>({Tensor::zeros({4, 10}), targets({1, 2, 3, 4})}, {Reduction::mean, 1.5}); }};
  return c;
}

Case nll_case(const std::string& label, NllAttrs a) {
  Case c;
  c.op = "nll_loss";
  c.label = label;
  c.inputs = [](DType t, Generator& g) { return V{rnd({7, 10}, t, g, -4, 0), targets(kTargets)}; };
  c.run = runner<NllLoss>(a);
  c.differentiable = true;
  c.bad = {[] { call<NllLoss>({Tensor::zeros({4, 10}), targets({1, -1, 2, 3})}); }};
  return c;
}

Register reg[] = {
    // pooling
    Register(max_pool_case("3x3 s2 p1 ceil", {2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true})),
    Register(max_pool_case("2x2 s1 p1 dilation 2", {1, 2, 7, 6}, {{2, 2}, {1, 1}, {1, 1}, {2, 2}, false})),
    Register(max_pool_case("(3,2) s(2,1) p(1,0) ceil", {2, 1, 6, 7}, {{3, 2}, {2, 1}, {1, 0}, {1, 1}, true})),
    Register(max_pool_case("2x2 s2, every window inside (fast path)", {2, 3, 8, 9}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false})),
    Register(max_pool_case("3x3 s2, every window inside (fast path)", {2, 2, 9, 9}, {{3, 3}, {2, 2}, {0, 0}, {1, 1}, false})),
    Register(max_pool_case("3x3 s2, rows of 27 outputs (vector kernel)", {2, 2, 7, 55}, {{3, 3}, {2, 2}, {0, 0}, {1, 1}, false})),
    Register({"max_pool2d_backward", "3x3 s2 p1 ceil",
              [](DType t, Generator& g) {
                Tensor idx = call<MaxPool2d>({rnd({2, 3, 7, 8}, t, g)}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true})[1];
                return V{rnd(idx.shape(), t, g), idx};
              },
              runner<MaxPool2dBackward>({{2, 3, 7, 8}}), false, {},
              {[] { call<MaxPool2dBackward>({Tensor::zeros({2, 3, 4, 5}), Tensor::zeros({2, 3, 4, 5})}, {{2, 3, 7, 8}}); }}}),
    Register(avg_pool_case("3x3 s2 p1 ceil, pad counted", {2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true})),
    Register(avg_pool_case("3x3 s2 p1 ceil, pad not counted", {2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false})),
    Register(avg_pool_case("(3,2) s2 p1 ceil", {1, 2, 5, 5}, {{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, true})),
    Register({"avg_pool2d_backward", "3x3 s2 p1 ceil, pad not counted",
              [](DType t, Generator& g) { return V{rnd({2, 3, 4, 5}, t, g)}; },
              runner<AvgPool2dBackward>({{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false}, {2, 3, 7, 8}}), false, {},
              {[] { call<AvgPool2dBackward>({Tensor::zeros({2, 3, 4, 4})}, {{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false}, {2, 3, 7, 8}}); }}}),
    Register({"adaptive_avg_pool2d", "7x9 -> 3x4", [](DType t, Generator& g) { return V{rnd({2, 3, 7, 9}, t, g)}; },
              runner<AdaptiveAvgPool2d>({{3, 4}}), true, {},
              {[] { call<AdaptiveAvgPool2d>({Tensor::zeros({2, 3, 7, 9})}, {{0, 4}}); },
               [] { call<AdaptiveAvgPool2d>({Tensor::zeros({3, 7, 9})}, {{1, 1}}); }}}),
    Register({"adaptive_avg_pool2d", "global 5x5 -> 1x1", [](DType t, Generator& g) { return V{rnd({2, 3, 5, 5}, t, g)}; },
              runner<AdaptiveAvgPool2d>({{1, 1}}), true, {}, {}}),
    Register({"adaptive_avg_pool2d", "4x4 -> 6x6 (overlapping)", [](DType t, Generator& g) { return V{rnd({1, 2, 4, 4}, t, g)}; },
              runner<AdaptiveAvgPool2d>({{6, 6}}), true, {}, {}}),
    Register({"adaptive_avg_pool2d", "6x5 -> 6x5 (a copy)", [](DType t, Generator& g) { return V{rnd({2, 3, 6, 5}, t, g)}; },
              runner<AdaptiveAvgPool2d>({{6, 5}}), true, {}, {}}),
    Register({"adaptive_avg_pool2d_backward", "6x5 <- 6x5 (a copy)", [](DType t, Generator& g) { return V{rnd({2, 3, 6, 5}, t, g)}; },
              runner<AdaptiveAvgPool2dBackward>({{2, 3, 6, 5}}), false, {}, {}}),
    Register({"adaptive_avg_pool2d_backward", "7x9 <- 3x4", [](DType t, Generator& g) { return V{rnd({2, 3, 3, 4}, t, g)}; },
              runner<AdaptiveAvgPool2dBackward>({{2, 3, 7, 9}}), false, {},
              {[] { call<AdaptiveAvgPool2dBackward>({Tensor::zeros({2, 3, 3})}, {{2, 3, 7, 9}}); }}}),
    Register({"adaptive_avg_pool2d_backward", "global", [](DType t, Generator& g) { return V{rnd({2, 3, 1, 1}, t, g)}; },
              runner<AdaptiveAvgPool2dBackward>({{2, 3, 5, 6}}), false, {}, {}}),
    // normalisation
    Register(bn_case("training, affine, running stats", true, true, true)),
    Register(bn_case("training, no affine, no running stats", true, false, false)),
    Register(bn_case("eval, affine", false, true, true)),
    Register(bn_backward_case("training", true)),
    Register(bn_backward_case("eval", false)),
    Register(bn_case("training, affine, running stats, rows of 72", true, true, true, {9, 8})),
    Register(bn_case("eval, affine, rows of 72", false, true, true, {9, 8})),
    Register(bn_case("training, 1x1", true, true, true, {1, 1})),
    Register(bn_backward_case("training, rows of 72", true, {9, 8})),
    Register(bn_backward_case("eval, rows of 72", false, {9, 8})),
    Register(bn_backward_case("training, 1x1", true, {1, 1})),
    Register(lrn_case("size 3", {3, 0.5, 0.75, 2.0}, false)),
    Register(lrn_case("size 4 beta 0.6", {4, 0.3, 0.6, 1.0}, false)),
    Register(lrn_case("size 3", {3, 0.5, 0.75, 2.0}, true)),
    Register(lrn_case("size 4 beta 0.6", {4, 0.3, 0.6, 1.0}, true)),
    Register({"dropout", "p 0.3 training", [](DType t, Generator& g) { return V{rnd({4, 5, 6}, t, g)}; },
              [](const V& in) { return run_dropout(in, {0.3, true}); }, true, {},
              {[] { call<Dropout>({Tensor::zeros({3})}, {1.5, true}); }}}),
    Register({"dropout", "eval", [](DType t, Generator& g) { return V{rnd({4, 5}, t, g)}; },
              [](const V& in) { return run_dropout(in, {0.3, false}); }, true, {}, {}}),
    // softmax and losses
    Register(softmax_case<Softmax>("2x3x4 dim 1", {2, 3, 4}, 1)),
    Register(softmax_case<Softmax>("5x7 dim -1", {5, 7}, -1)),
    Register(softmax_case<LogSoftmax>("2x3x4 dim 1", {2, 3, 4}, 1)),
    Register(softmax_case<LogSoftmax>("5x7 dim -1", {5, 7}, -1)),
    Register(softmax_backward_case<SoftmaxBackward>("2x3x4 dim 1", {2, 3, 4}, 1)),
    Register(softmax_backward_case<LogSoftmaxBackward>("2x3x4 dim 1", {2, 3, 4}, 1)),
    Register(softmax_backward_case<LogSoftmaxBackward>("5x7 dim -1", {5, 7}, -1)),
    Register(ce_case("mean, ignore_index", {})),
    Register(ce_case("sum, smoothing 0.2", {Reduction::sum, 0.2})),
    Register(ce_case("none, smoothing 0.3", {Reduction::none, 0.3})),
    Register({"cross_entropy_backward", "mean, smoothing 0.1",
              [](DType t, Generator& g) { return V{rnd({}, t, g), rnd({7, 10}, t, g, -4, 0), targets(kTargets)}; },
              runner<CrossEntropyBackward>({Reduction::mean, 0.1}), false, {},
              {[] { call<CrossEntropyBackward>({Tensor::zeros({7}), Tensor::zeros({7, 10}), targets(kTargets)}); }}}),
    Register({"cross_entropy_backward", "none",
              [](DType t, Generator& g) { return V{rnd({7}, t, g), rnd({7, 10}, t, g, -4, 0), targets(kTargets)}; },
              runner<CrossEntropyBackward>({Reduction::none, 0.0}), false, {}, {}}),
    Register(nll_case("mean", {})),
    Register(nll_case("none", {Reduction::none})),
    Register({"nll_loss_backward", "sum", [](DType t, Generator& g) { return V{rnd({}, t, g), targets(kTargets)}; },
              runner<NllLossBackward>({{Reduction::sum}, 10}), false, {},
              {[] { call<NllLossBackward>({Tensor::zeros({7}), targets(kTargets)}, {{Reduction::sum}, 10}); }}}),
};
}  // namespace
}  // namespace reckon::harness

// ---- numbers from PyTorch ----
namespace {

// x_i = amp * sin(a * i + b): the same values in the generating script.
Tensor seq(const Shape& s, DType t = DType::f64, double a = 0.7, double b = 0.3, double amp = 2.0) {
  std::vector<double> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = amp * std::sin(a * double(i) + b);
  return Tensor::from_vector(v, s, t);
}
// Weighted checksum: sum_i t_i cos(0.1 i + 0.2).
double cs(const Tensor& t) {
  auto v = t.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * std::cos(0.1 * double(i) + 0.2);
  return s;
}
// Loss weights cos(0.3 i): backward of sum(y * wl) gives the checked gradients.
Tensor wl(const Tensor& y) {
  std::vector<double> v(size_t(y.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.3 * double(i));
  return Tensor::from_vector(v, y.shape(), y.dtype());
}
void backward_weighted(const Tensor& y) { sum(mul(y, wl(y))).backward(); }

const std::map<std::string, std::vector<double>>& torch_numbers() {
  static const std::map<std::string, std::vector<double>> m = {
      {"maxpool0", {2.0, 3.0, 4.0, 5.0, -8.212114056515443, -165.4628458369849, 27.775226917341687}},
      {"maxpool1", {1.0, 2.0, 4.0, 4.0, 1.5340887109491166, -315.2852001238676, 0.06693798879405177}},
      {"maxpool2", {1.0, 2.0, 8.0, 7.0, -10.5277387285469, -1153.5819363412352, -10.125796324555536}},
      {"maxpool3", {2.0, 1.0, 4.0, 6.0, -11.054575613654027, -325.6137611864969, -4.414319269295007}},
      {"avgpool0", {2.0, 3.0, 4.0, 5.0, 0.05105331055071599, 18.207722761056765}},
      {"avgpool1", {2.0, 3.0, 4.0, 5.0, -0.6332292099544323, 26.128415601822066}},
      {"avgpool2", {1.0, 2.0, 4.0, 4.0, 1.0526433426414217, 4.171562148716999}},
      {"avgpool3", {1.0, 2.0, 3.0, 3.0, -0.664282615621635, 4.574534212266543}},
      {"avgpool4", {1.0, 1.0, 2.0, 2.0, 0.5757136897897839, 1.9538929369414484}},
      {"adaptive0", {2.0, 3.0, 3.0, 4.0, -0.3338594139587049, -1.8437572964290847}},
      {"adaptive1", {2.0, 3.0, 1.0, 1.0, 0.13587422768733576, -0.06272788835138231}},
      {"adaptive2", {1.0, 2.0, 6.0, 6.0, 9.626612880550091, -2.0815037871204978}},
      {"adaptive3", {1.0, 1.0, 4.0, 3.0, -0.032791360148695076, -2.2619285488894545}},
      {"bn_train", {-2.782025274181401, 0.35801705944353496, 0.8644225253107226, 1.28923310311973, 1.6049162201793783,
                    0.8296657954476705, 1.5152092146081968, 2.064460681225994, 2.3848162444552523, -3.327639394877982,
                    0.529611698015763, 2.4938103683518036, 0.1870255573606356, -2.2616284292511435, 4.2929235965773245,
                    -2.9661443403013736, 1.1121641425557645, 0.9394915273702189}},
      {"bn_eval", {-55.778345803205106, -0.28175887275753375, -1.1277159361809102, 5.238837550197111,
                   -0.940477356982261, -3.1140605089618383, 4.2929235965773245, -2.9661443403013736,
                   1.1121641425557645, 0.9394915273702189}},
      {"lrn0", {1.7244316187605326, 0.4970110097385395}},
      {"lrn1", {3.0733864755235967, 0.5463910518882606}},
      {"lrn2", {4.019318226643523, 1.271945076939538}},
      {"lrn3", {2.0158197774320854, 0.42689612023217194}},
      {"softmax0", {1.0505013871161282, 0.13050695745889823}},
      {"logsoftmax0", {-7.664084139736099, -0.2554750088053802}},
      {"softmax1", {1.0797068513167738, 0.005989795788653898}},
      {"logsoftmax1", {-4.974726353143482, -0.08857184907674798}},
      {"softmax2", {2.535555761163929, -0.4726646983250121}},
      {"logsoftmax2", {-3.0387471294195048, -2.6609832935738496}},
      {"ce0", {5.345033870881697, -0.059795268232457094}},
      {"ce1", {5.4427256485289055, -0.04017680076618266}},
      {"ce2", {33.24250455705668, -0.12334999979945088}},
      {"ce3", {25.614872854167736, -0.2111526034525129}},
      {"ce4", {27.742754444795157, 0.00019025821186419156}},
      {"nll0", {-0.3282542960968397, -0.43930913019948115}},
      {"nll1", {-1.9695257765810383, -2.635854781196887}},
      {"nll2", {-2.451238892418557, -0.7043344046607282}},
      {"mse_mean", {3.9828788247995193, -1.7187562542134793, 1.7187562542134793}},
  };
  return m;
}

// Compares got with PyTorch's want: exact for shapes and indices, relative tolerance per dtype.
void expect_close(const std::vector<double>& got, const std::string& key, DType t) {
  const auto& want = torch_numbers().at(key);
  ASSERT_EQ(got.size(), want.size()) << key;
  const double tol = t == DType::f64 ? 1e-9 : 2e-4;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << key << " value " << i << " (" << dtype_name(t) << ")";
}

const DType kBoth[] = {DType::f64, DType::f32};  // f64 runs the reference, f32 the fast kernels

struct PoolCase {
  Shape x;
  PoolAttrs a;
};

}  // namespace

TEST(OpsExtraTorch, MaxPool) {
  const PoolCase cases[] = {{{2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}},
                            {{1, 2, 9, 9}, {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}},
                            {{1, 2, 10, 9}, {{3, 3}, {1, 1}, {1, 1}, {2, 2}, false}},
                            {{2, 1, 6, 7}, {{3, 2}, {2, 1}, {1, 0}, {1, 1}, true}}};
  for (DType t : kBoth)
    for (size_t i = 0; i < std::size(cases); ++i) {
      Tensor x = seq(cases[i].x, t);
      x.set_requires_grad(true);
      auto r = call<MaxPool2d>({x}, cases[i].a);
      EXPECT_FALSE(r[1].requires_grad());  // i64 output: no grad_fn
      backward_weighted(r[0]);
      const Shape& s = r[0].shape();
      expect_close({double(s[0]), double(s[1]), double(s[2]), double(s[3]), cs(r[0]), cs(r[1]), cs(x.grad())},
                   "maxpool" + std::to_string(i), t);
    }
}

TEST(OpsExtraTorch, AvgPool) {
  const PoolCase cases[] = {{{2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true}},
                            {{2, 3, 7, 8}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false}},
                            {{1, 2, 6, 6}, {{2, 2}, {2, 2}, {1, 1}, {1, 1}, false, true}},
                            {{1, 2, 5, 5}, {{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, true}},
                            {{1, 1, 4, 4}, {{3, 3}, {3, 3}, {1, 1}, {1, 1}, true, false}}};
  for (DType t : kBoth)
    for (size_t i = 0; i < std::size(cases); ++i) {
      Tensor x = seq(cases[i].x, t);
      x.set_requires_grad(true);
      Tensor y = call1<AvgPool2d>({x}, cases[i].a);
      backward_weighted(y);
      const Shape& s = y.shape();
      expect_close({double(s[0]), double(s[1]), double(s[2]), double(s[3]), cs(y), cs(x.grad())},
                   "avgpool" + std::to_string(i), t);
    }
}

TEST(OpsExtraTorch, AdaptiveAvgPool) {
  const std::pair<Shape, Int2> cases[] = {
      {{2, 3, 7, 9}, {3, 4}}, {{2, 3, 5, 5}, {1, 1}}, {{1, 2, 4, 4}, {6, 6}}, {{1, 1, 10, 7}, {4, 3}}};
  for (DType t : kBoth)
    for (size_t i = 0; i < std::size(cases); ++i) {
      Tensor x = seq(cases[i].first, t);
      x.set_requires_grad(true);
      Tensor y = adaptive_avg_pool2d(x, cases[i].second);
      backward_weighted(y);
      const Shape& s = y.shape();
      expect_close({double(s[0]), double(s[1]), double(s[2]), double(s[3]), cs(y), cs(x.grad())},
                   "adaptive" + std::to_string(i), t);
    }
}

TEST(OpsExtraTorch, FunctionalPoolStrideZeroMeansKernel) {
  Tensor x = seq({1, 2, 9, 9}, DType::f32);
  Tensor a = max_pool2d(x, {{2, 2}});
  Tensor b = call<MaxPool2d>({x}, {{2, 2}, {2, 2}})[0];
  EXPECT_EQ(a.shape(), (Shape{1, 2, 4, 4}));
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_EQ(avg_pool2d(x, {{3, 3}, {0, 0}, {1, 1}, true}).shape(), (Shape{1, 2, 4, 4}));
}

TEST(OpsExtraTorch, BatchNormTrainingUpdatesRunningStatsInPlace) {
  for (DType t : kBoth) {
    Tensor x = seq({3, 4, 5, 6}, t), w = seq({4}, t, 1.1, 0.5), b = seq({4}, t, 0.9, 0.1);
    Tensor rm = seq({4}, t, 0.3, 0.2), rv = seq({4}, t, 0.4, 0.1);
    for (int64_t i = 0; i < 4; ++i) rv.set(i, std::abs(rv.get(i)) + 0.5);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor y = batch_norm2d(x, w, b, rm, rv, true, 0.1, 1e-5);
    backward_weighted(y);
    std::vector<double> got = {cs(y)};
    for (auto& v : {rm.to_vector(), rv.to_vector()}) got.insert(got.end(), v.begin(), v.end());
    got.push_back(cs(x.grad()));
    for (auto& v : {w.grad().to_vector(), b.grad().to_vector()}) got.insert(got.end(), v.begin(), v.end());
    expect_close(got, "bn_train", t);
  }
}

TEST(OpsExtraTorch, BatchNormEval) {
  for (DType t : kBoth) {
    Tensor x = seq({3, 4, 5, 6}, t), w = seq({4}, t, 1.1, 0.5), b = seq({4}, t, 0.9, 0.1);
    Tensor rm = seq({4}, t, 0.3, 0.2), rv = seq({4}, t, 0.4, 0.1);
    for (int64_t i = 0; i < 4; ++i) rv.set(i, std::abs(rv.get(i)) + 0.5);
    auto rm0 = rm.to_vector(), rv0 = rv.to_vector();
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    b.set_requires_grad(true);
    auto out = call<BatchNorm2d>({x, w, b, rm, rv}, {false, 0.1, 1e-5});
    EXPECT_EQ(out.size(), 1u);
    backward_weighted(out[0]);
    std::vector<double> got = {cs(out[0]), cs(x.grad())};
    for (auto& v : {w.grad().to_vector(), b.grad().to_vector()}) got.insert(got.end(), v.begin(), v.end());
    expect_close(got, "bn_eval", t);
    EXPECT_EQ(rm.to_vector(), rm0);  // eval leaves the running stats alone
    EXPECT_EQ(rv.to_vector(), rv0);
  }
}

TEST(OpsExtraTorch, LocalResponseNorm) {
  const LrnAttrs cases[] = {{3, 0.5, 0.75, 2.0}, {4, 0.3, 0.6, 1.0}, {5, 1e-4, 0.75, 1.0}, {1, 0.2, 1.0, 1.5}};
  for (DType t : kBoth)
    for (size_t i = 0; i < std::size(cases); ++i) {
      Tensor x = seq({2, 6, 3, 4}, t);
      x.set_requires_grad(true);
      const LrnAttrs& a = cases[i];
      Tensor y = local_response_norm(x, a.size, a.alpha, a.beta, a.k);
      backward_weighted(y);
      expect_close({cs(y), cs(x.grad())}, "lrn" + std::to_string(i), t);
    }
}

TEST(OpsExtraTorch, SoftmaxAndLogSoftmax) {
  const int64_t dims[] = {1, -1, 0};
  for (DType t : kBoth)
    for (size_t i = 0; i < 3; ++i) {
      Tensor x = seq({2, 3, 4}, t);
      x.set_requires_grad(true);
      Tensor y = softmax(x, dims[i]);
      backward_weighted(y);
      expect_close({cs(y), cs(x.grad())}, "softmax" + std::to_string(i), t);
      Tensor x2 = seq({2, 3, 4}, t);
      x2.set_requires_grad(true);
      Tensor y2 = log_softmax(x2, dims[i]);
      backward_weighted(y2);
      expect_close({cs(y2), cs(x2.grad())}, "logsoftmax" + std::to_string(i), t);
    }
}

TEST(OpsExtraTorch, CrossEntropyAndNll) {
  const std::vector<double> tg = {3, 0, -100, 9, 5, 9, 1};
  const std::pair<Reduction, double> ce[] = {
      {Reduction::mean, 0.0}, {Reduction::mean, 0.1}, {Reduction::sum, 0.2}, {Reduction::none, 0.0}, {Reduction::none, 0.3}};
  for (DType t : kBoth) {
    for (size_t i = 0; i < std::size(ce); ++i) {
      Tensor x = seq({7, 10}, t, 0.7, 0.3, 6.0);
      x.set_requires_grad(true);
      Tensor l = cross_entropy(x, Tensor::from_vector(tg, {7}, DType::i64), {ce[i].first, ce[i].second, -100});
      if (ce[i].first == Reduction::none) backward_weighted(l);
      else l.backward();
      expect_close({cs(l), cs(x.grad())}, "ce" + std::to_string(i), t);
    }
    const Reduction nll[] = {Reduction::mean, Reduction::sum, Reduction::none};
    for (size_t i = 0; i < 3; ++i) {
      Tensor x = seq({7, 10}, t);
      x.set_requires_grad(true);
      Tensor l = nll_loss(x, Tensor::from_vector(tg, {7}, DType::i64), nll[i]);
      if (nll[i] == Reduction::none) backward_weighted(l);
      else l.backward();
      expect_close({cs(l), cs(x.grad())}, "nll" + std::to_string(i), t);
    }
    // Every target ignored: the mean is 0 / 0 (NaN, as torch) and the gradient is zero.
    Tensor x = seq({2, 3}, t);
    x.set_requires_grad(true);
    Tensor l = cross_entropy(x, Tensor::from_vector({-100, -100}, {2}, DType::i64));
    EXPECT_TRUE(std::isnan(l.item()));
    l.backward();
    for (double g : x.grad().to_vector()) EXPECT_EQ(g, 0.0);
  }
}

TEST(OpsExtraTorch, MseLoss) {
  for (DType t : kBoth) {
    Tensor a = seq({3, 4}, t), b = seq({3, 4}, t, 0.2, 0.9);
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    Tensor l = mse_loss(a, b);
    l.backward();
    expect_close({l.item(), cs(a.grad()), cs(b.grad())}, "mse_mean", t);
    EXPECT_NEAR(mse_loss(a, b, Reduction::sum).item(), 12 * l.item(), 1e-4);
    EXPECT_EQ(mse_loss(a, b, Reduction::none).shape(), (Shape{3, 4}));
  }
  EXPECT_THROW(mse_loss(Tensor::zeros({3}), Tensor::zeros({3, 1})), Error);
}

// ---- behaviour beyond the numbers ----

TEST(OpsExtra, CrossEntropyNamesTheBadTarget) {
  Tensor x = Tensor::zeros({5, 10});
  Tensor t = Tensor::from_vector({1, 2, 3, 12, 4}, {5}, DType::i64);
  try {
    cross_entropy(x, t);
    FAIL() << "accepted a target out of range";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[cross_entropy] target 12 out of range for 10 classes at index 3");
  }
  // ignore_index is not out of range, and may be any value.
  EXPECT_NO_THROW(cross_entropy(x, Tensor::from_vector({1, 2, 3, 7, -1}, {5}, DType::i64), {Reduction::mean, 0.0, -1}));
}

TEST(OpsExtra, CrossEntropyNaNLogitMakesItsRowNaN) {
  Tensor x = Tensor::from_vector({1, NAN, 2, 3, 0, 0, 0, 0}, {2, 4});
  for (bool ref : {false, true}) {
    ForceReference f(ref);
    auto l = cross_entropy(x, Tensor::from_vector({0, 1}, {2}, DType::i64), {Reduction::none}).to_vector();
    EXPECT_TRUE(std::isnan(l[0]));
    EXPECT_NEAR(l[1], std::log(4.0), 1e-6);  // torch: [nan, 1.3863]
  }
}

TEST(OpsExtra, CrossEntropyKeepsLogProbabilities) {
  Tensor x = seq({4, 5}, DType::f32);
  x.set_requires_grad(true);
  auto r = call<CrossEntropy>({x, Tensor::from_vector({0, 1, 2, 3}, {4}, DType::i64)}, {});
  Tensor lp = log_softmax(x, 1);
  auto a = r[1].to_vector(), b = lp.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(OpsExtra, DropoutMaskAndIdentity) {
  Tensor x = Tensor::ones({200, 500});
  x.set_requires_grad(true);
  EXPECT_TRUE(dropout(x, 0.4, false).same(x));  // eval: x itself, no op
  EXPECT_TRUE(dropout(x, 0.0, true).same(x));
  // The mask comes from the call's seed attribute, which dropout() draws from the generator.
  manual_seed(99);
  DropoutAttrs a{0.4, true, 0};
  Dropout::reseed(a);
  auto r = call<Dropout>({x}, a);
  const Tensor &y = r[0], &mask = r[1];
  int64_t kept = 0;
  auto m = mask.to_vector(), yv = y.to_vector();
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_TRUE(m[i] == 0.0 || std::abs(m[i] - 1.0 / 0.6) < 1e-6);
    EXPECT_EQ(yv[i], m[i]);
    kept += m[i] != 0.0;
  }
  EXPECT_NEAR(double(kept) / double(m.size()), 0.6, 0.01);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), m);  // backward = dy * mask
  // The same seed gives the same mask in the reference and the fast kernel; the next draw another.
  Tensor m1;
  {
    ForceReference f;
    m1 = call<Dropout>({x.detach()}, a)[1];
  }
  EXPECT_EQ(m1.to_vector(), m);
  manual_seed(99);
  EXPECT_EQ(dropout(x.detach(), 0.4, true).to_vector(), m) << "dropout() draws the same seed from the same state";
  Dropout::reseed(a);
  Tensor m2 = call<Dropout>({x.detach()}, a)[1];
  EXPECT_NE(m2.to_vector(), m);
  for (double v : call<Dropout>({x.detach()}, {1.0, true})[0].to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(dropout(x, -0.1, true), Error);
}

TEST(OpsExtra, SoftmaxExtremes) {
  // -inf, huge and tiny logits, a NaN (which makes its whole row NaN, as in torch), over the
  // last dim and a strided one.
  std::vector<double> v = {-INFINITY, 0, 1e4, -1e4, 3, 88, 89, -87, -88, -200, 0.5, 1, -INFINITY, -INFINITY, 2, 2,
                           1, NAN, 2, 3, 0, 0, 0, 0, 1e4, 1e4 - 1, 1e4 - 2, 1e4 + 0.5, 1e4 + 3, 1e4 + 2, 1e4, 1e4 + 1};
  Tensor x = Tensor::from_vector(v, {4, 2, 4});
  for (int64_t dim : {-1, 1, 0})
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::to_string(dim) + (log ? " log" : ""));
      Tensor fast = log ? log_softmax(x, dim) : softmax(x, dim);
      ForceReference f;
      Tensor ref = log ? log_softmax(x, dim) : softmax(x, dim);
      auto a = fast.to_vector(), b = ref.to_vector();
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(b[i])) EXPECT_TRUE(std::isnan(a[i])) << i;
        else if (std::isinf(b[i])) EXPECT_EQ(a[i], b[i]) << i;
        else EXPECT_NEAR(a[i], b[i], 1e-6 * (1 + std::abs(b[i]))) << i;
      }
    }
}

TEST(OpsExtra, MaxPoolTiesAndNaN) {
  // Ties keep the first tap in (kh, kw) order; a NaN wins its window, as in torch.
  Tensor x = Tensor::from_vector({1, 1, 1, 1, 0, 2, NAN, 2, 3, 3, 3, 3, 0, 0, 0, 0}, {1, 1, 4, 4});
  for (bool ref : {false, true}) {
    ForceReference f(ref);
    auto r = call<MaxPool2d>({x}, {{2, 2}, {2, 2}});
    auto y = r[0].to_vector();
    EXPECT_EQ(y[0], 2);
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_EQ(r[1].to_vector(), (std::vector<double>{5, 6, 8, 10}));
  }
}

TEST(OpsExtra, MaxPoolInsideWindowsMatchTheReferenceExactly) {
  // Pools whose windows all lie inside the input (AlexNet's 3x3/2) run a vector kernel of 16
  // outputs at a time: stride 1 (plain loads), 2 (a permute) and 3 (a gather), square and
  // rectangular windows, rows of one partial chunk and of full chunks plus a partial, ties and
  // NaNs (a NaN at a window's first tap too), in f32, and bf16 and f16 (rows widened).
  struct Pool {
    Shape x;
    PoolAttrs a;
  };
  const std::vector<Pool> pools = {
      {{2, 3, 11, 55}, {{3, 3}, {2, 2}}},  // 27 outputs a row
      {{1, 2, 13, 13}, {{3, 3}, {2, 2}}},
      {{2, 2, 7, 40}, {{3, 3}, {1, 1}}},   // 38
      {{1, 3, 10, 61}, {{3, 3}, {3, 3}}},  // 20, gathered
      {{2, 2, 9, 37}, {{2, 3}, {1, 2}}},   // 18
      {{1, 1, 5, 5}, {{5, 5}, {1, 1}}},    // one window
      {{4, 8, 33, 41}, {{3, 3}, {2, 2}}},  // over the threshold for two threads: each its own row buffers
  };
  Generator g(5);
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Pool& pool : pools) {
      Tensor x = Tensor::empty(pool.x);
      fill_uniform_(x, -2, 2, g);
      float* p = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (i % 5 == 0) p[i] = std::round(p[i]);  // ties
        if (i % 31 == 4 || i == 0) p[i] = NAN;
      }
      if (t != DType::f32) x = cast(x, t);
      std::vector<Tensor> fast = call<MaxPool2d>({x}, pool.a);
      ForceReference f;
      std::vector<Tensor> ref = call<MaxPool2d>({x}, pool.a);
      const std::string what = shape_str(pool.x) + " " + std::string(dtype_name(t));
      auto y = fast[0].to_vector(), yr = ref[0].to_vector();
      ASSERT_EQ(y.size(), yr.size()) << what;
      for (size_t i = 0; i < y.size(); ++i) {
        if (std::isnan(yr[i])) EXPECT_TRUE(std::isnan(y[i])) << what << " " << i;
        else EXPECT_EQ(y[i], yr[i]) << what << " " << i;
      }
      EXPECT_EQ(fast[1].to_vector(), ref[1].to_vector()) << what;
    }
}

TEST(OpsExtra, MaxPool2x2RowsOfAnyWidthMatchTheReferenceExactly) {
  // The f32 2x2/2 kernel works on 16 outputs at a time: rows of 5, 14, 16 and 20 outputs (one
  // partial chunk, one full, one full and a partial), odd input widths, ties and NaNs.
  Generator g(3);
  for (Shape s : std::vector<Shape>{{3, 2, 10, 10}, {2, 3, 28, 28}, {1, 2, 6, 33}, {2, 1, 9, 41}}) {
    Tensor x = Tensor::empty(s);
    fill_uniform_(x, -2, 2, g);
    float* p = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (i % 7 == 0) p[i] = std::round(p[i]);  // ties
      if (i % 29 == 3) p[i] = NAN;
    }
    std::vector<Tensor> fast = call<MaxPool2d>({x}, {{2, 2}, {2, 2}});
    ForceReference f;
    std::vector<Tensor> ref = call<MaxPool2d>({x}, {{2, 2}, {2, 2}});
    auto y = fast[0].to_vector(), yr = ref[0].to_vector();
    for (size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(yr[i])) EXPECT_TRUE(std::isnan(y[i])) << shape_str(s) << " " << i;
      else EXPECT_EQ(y[i], yr[i]) << shape_str(s) << " " << i;
    }
    EXPECT_EQ(fast[1].to_vector(), ref[1].to_vector()) << shape_str(s);
  }
}

TEST(OpsExtra, BatchNormWithoutRunningStatsAndMetaDevice) {
  // The meta device runs no kernel: it neither needs nor touches data.
  Tensor xm = Tensor::empty({8, 16, 10, 10}, DType::f32, Device::meta);
  Tensor cm = Tensor::empty({16}, DType::f32, Device::meta);
  auto out = call<BatchNorm2d>({xm, cm, cm, cm, cm}, {true});
  ASSERT_EQ(out.size(), 5u);  // y, save_mean, save_invstd, and the running stats written in place
  EXPECT_EQ(out[1].shape(), (Shape{16}));
  EXPECT_TRUE(out[3].same(cm) && out[4].same(cm));
  // Without running stats, training makes three outputs.
  EXPECT_EQ(call<BatchNorm2d>({xm, cm, cm, Tensor(), Tensor()}, {true}).size(), 3u);
  // The creation ops make meta tensors when asked to (their device is an attribute).
  Tensor f = full({2, 3}, 1.0, DType::f32, Device::meta);
  EXPECT_TRUE(f.is_meta());
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_TRUE(empty({4}, DType::bf16, Device::meta).is_meta());
  Tensor lm = Tensor::empty({8, 10}, DType::f32, Device::meta);
  Tensor tm = Tensor::empty({8}, DType::i64, Device::meta);
  EXPECT_EQ(cross_entropy(lm, tm).shape(), Shape{});
}

// ---- the fast kernels against the reference on network-sized shapes, and their speed ----
namespace {
// Max |a - b| / (atol + 1e-4 |b|) over elements; < 1 passes.
double err_ratio(const Tensor& a, const Tensor& b, double atol) {
  auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]) / (atol + 1e-4 * std::abs(y[i])));
  return m;
}
Tensor uniform(const Shape& s, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(s);
  fill_uniform_(t, lo, hi);
  return t;
}
struct Timed {
  std::string name;
  std::function<std::vector<Tensor>()> run;
  double atol = 1e-5;
};
double ms_of(const std::function<std::vector<Tensor>()>& f, int reps) {
  f();  // warm (plans, pages)
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}
}  // namespace

TEST(OpsExtra, FastMatchesReferenceOnLargerShapesAndTiming) {
  const bool timing = std::getenv("RECKON_TIMING") != nullptr;
  const int64_t n = timing ? 32 : 2;  // batch
  Tensor x = uniform({n, 64, 56, 56}), dy = uniform({n, 64, 28, 28}), w = uniform({64}, 0.5, 1.5), b = uniform({64});
  Tensor xl = uniform({n, 96, 55, 55}, -3, 3), dyl = uniform({n, 96, 55, 55});
  Tensor logits = uniform({8 * n, 1000}, -5, 5), tg = Tensor::empty({8 * n}, DType::i64);
  for (int64_t i = 0; i < 8 * n; ++i) tg.set(i, double((i * 37) % 1000));
  Tensor idx = call<MaxPool2d>({x}, {{3, 3}, {2, 2}, {1, 1}})[1];
  Tensor mean = Tensor::zeros({64}), invstd = Tensor::ones({64});
  Tensor ysm = softmax(logits, 1), dys = uniform({8 * n, 1000});
  std::vector<Timed> ops = {
      {"max_pool2d 3x3 s2 p1", [&] { return call<MaxPool2d>({x}, {{3, 3}, {2, 2}, {1, 1}}); }},
      {"max_pool2d_backward", [&] { return call<MaxPool2dBackward>({dy, idx}, {x.shape()}); }},
      {"avg_pool2d 3x3 s2 p1", [&] { return call<AvgPool2d>({x}, {{3, 3}, {2, 2}, {1, 1}}); }},
      {"avg_pool2d_backward", [&] { return call<AvgPool2dBackward>({dy}, {{{3, 3}, {2, 2}, {1, 1}}, x.shape()}); }},
      {"adaptive_avg_pool2d 1x1", [&] { return call<AdaptiveAvgPool2d>({x}, {{1, 1}}); }},
      {"adaptive_avg_pool2d 7x7", [&] { return call<AdaptiveAvgPool2d>({x}, {{7, 7}}); }},
      {"batch_norm2d train (no running)", [&] { return call<BatchNorm2d>({x, w, b, Tensor(), Tensor()}, {true}); }, 1e-4},
      {"batch_norm2d_backward", [&] { return call<BatchNorm2dBackward>({x, x, w, mean, invstd}, {true}); }, 1e-4},
      {"local_response_norm 5", [&] { return call<LocalResponseNorm>({xl}, {5, 1e-3, 0.75, 2.0}); }},
      {"local_response_norm_backward 5", [&] { return call<LocalResponseNormBackward>({dyl, xl}, {5, 1e-3, 0.75, 2.0}); }},
      {"dropout 0.5",
       [&] {
         manual_seed(5);
         return call<Dropout>({x}, {0.5, true});
       }},
      {"softmax 1000", [&] { return call<Softmax>({logits}, {1}); }},
      {"softmax dim 1 of NCHW", [&] { return call<Softmax>({x}, {1}); }},
      {"log_softmax 1000", [&] { return call<LogSoftmax>({logits}, {1}); }},
      {"log_softmax dim 1 of NCHW", [&] { return call<LogSoftmax>({x}, {1}); }},
      {"log_softmax_backward dim 1 of NCHW", [&] { return call<LogSoftmaxBackward>({x, x}, {1}); }},
      {"softmax_backward 1000", [&] { return call<SoftmaxBackward>({dys, ysm}, {1}); }},
      {"log_softmax_backward 1000", [&] { return call<LogSoftmaxBackward>({dys, ysm}, {1}); }},
      {"softmax 16-wide rows", [&] { return call<Softmax>({reshape(x, {-1, 16})}, {1}); }},
      {"log_softmax 100k", [&] { return call<LogSoftmax>({reshape(x, {-1, 100352})}, {1}); }},
      {"cross_entropy 1000 smoothing", [&] { return call<CrossEntropy>({logits, tg}, {Reduction::mean, 0.1}); }},
      {"cross_entropy_backward 1000",
       [&] { return call<CrossEntropyBackward>({Tensor::ones({}), ysm, tg}, {Reduction::mean, 0.1}); }},
  };
  if (timing) std::printf("%-34s %10s %10s %8s\n", "op", "cpu ms", "ref ms", "speedup");
  for (auto& op : ops) {
    SCOPED_TRACE(op.name);
    std::string kernel;
    std::vector<Tensor> fast;
    {
      ObserveOps obs([&](const OpRecord& r) { kernel = std::string(r.kernel) + r.skipped; });
      fast = op.run();
    }
    EXPECT_EQ(kernel, "cpu");
    std::vector<Tensor> ref;
    {
      ForceReference f;
      ref = op.run();
    }
    for (size_t i = 0; i < fast.size(); ++i) EXPECT_LT(err_ratio(fast[i], ref[i], op.atol), 1.0) << "output " << i;
    if (timing) {
      double cpu_ms = ms_of(op.run, 5);
      ForceReference f;
      double ref_ms = ms_of(op.run, 1);
      std::printf("%-34s %10.3f %10.3f %7.1fx\n", op.name.c_str(), cpu_ms, ref_ms, ref_ms / cpu_ms);
    }
  }
}

// The script that produced torch_numbers() (torch 2.x, float64):
//   seq(shape, a=.7, b=.3) = 2 sin(a i + b) (CE logits: 6 sin); cs(t) = sum t_i cos(.1 i + .2);
//   losses are sum(y * cos(.3 i)) (or the scalar loss itself) and gradients come from backward.
//   maxpool: F.max_pool2d(x, k, s, p, d, ceil_mode, return_indices=True) -> shape, cs(y), cs(idx), cs(dx)
//     ((2,3,7,8),3,2,1,1,True) ((1,2,9,9),2,2,0,1,False) ((1,2,10,9),3,1,1,2,False) ((2,1,6,7),(3,2),(2,1),(1,0),1,True)
//   avgpool: F.avg_pool2d(x, k, s, p, ceil_mode, count_include_pad) -> shape, cs(y), cs(dx)
//     ((2,3,7,8),3,2,1,T,T) ((2,3,7,8),3,2,1,T,F) ((1,2,6,6),2,2,1,F,T) ((1,2,5,5),(3,2),(2,2),(1,1),T,T) ((1,1,4,4),3,3,1,T,F)
//   adaptive: F.adaptive_avg_pool2d: ((2,3,7,9),(3,4)) ((2,3,5,5),(1,1)) ((1,2,4,4),(6,6)) ((1,1,10,7),(4,3))
//   bn: x seq(3,4,5,6), w seq(4;1.1,.5), b seq(4;.9,.1), rm seq(4;.3,.2), rv |seq(4;.4,.1)| + .5,
//     F.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5) -> cs(y), [rm, rv after,] cs(dx), dw, db
//   lrn: x seq(2,6,3,4), F.local_response_norm(x, size, alpha, beta, k) for (3,.5,.75,2) (4,.3,.6,1)
//     (5,1e-4,.75,1) (1,.2,1,1.5) -> cs(y), cs(dx)
//   softmax/log_softmax: x seq(2,3,4), dims 1, -1, 0 -> cs(y), cs(dx)
//   ce: x 6 sin(.7 i + .3) (7,10), targets [3,0,-100,9,5,9,1]: (mean,0) (mean,.1) (sum,.2) (none,0)
//     (none,.3) -> cs(loss), cs(dx); nll: x seq(7,10), mean/sum/none; mse: a seq(3,4), b seq(3,4;.2,.9)
