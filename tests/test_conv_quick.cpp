#include <gtest/gtest.h>

#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"

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
