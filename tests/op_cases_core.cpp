// Harness cases for the shape, elementwise, matmul and conv ops.
#include "op_harness.h"
#include "reckon/ops/functional.h"

namespace reckon::harness {

std::vector<Case>& cases() {
  static std::vector<Case> c;
  return c;
}

namespace {
using V = std::vector<Tensor>;

template <class Op>
Case unary_case(double lo = -3.0, double hi = 3.0, UnaryAttrs a = {}) {
  Case c;
  c.op = std::string(Op::kName);
  c.label = "2x3x5";
  c.inputs = [lo, hi](DType t, Generator& g) { return V{rnd({2, 3, 5}, t, g, lo, hi)}; };
  c.run = runner<Op>(a);
  c.differentiable = true;
  c.bad = {[] { call<Op>({Tensor::zeros({2}, DType::i64)}); }};
  return c;
}

template <class F>
Case unary_backward_case(double lo = -3.0, double hi = 3.0, UnaryAttrs a = {}) {
  Case c;
  c.op = std::string(F::kGradName);
  c.label = "2x3x5";
  c.inputs = [lo, hi](DType t, Generator& g) { return V{rnd({2, 3, 5}, t, g), rnd({2, 3, 5}, t, g, lo, hi)}; };
  c.run = runner<UnaryBackward<F>>(a);
  c.bad = {[] { call<UnaryBackward<F>>({Tensor::zeros({2}), Tensor::zeros({3})}); }};
  return c;
}

template <class Op>
Case binary_case(const Shape& a, const Shape& b, double lo = -2.0, double hi = 2.0) {
  Case c;
  c.op = std::string(Op::kName);
  c.label = shape_str(a) + " with " + shape_str(b);
  c.inputs = [a, b, lo, hi](DType t, Generator& g) { return V{rnd(a, t, g, lo, hi), rnd(b, t, g, lo, hi)}; };
  c.run = runner<Op>();
  c.differentiable = true;
  c.bad = {[] { call<Op>({Tensor::zeros({2, 3}), Tensor::zeros({4})}); },
           [] { call<Op>({Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)}); }};
  return c;
}

Case conv_case(const std::string& label, Shape x, Shape w, ConvAttrs a, bool bias) {
  Case c;
  c.op = "conv2d";
  c.label = label;
  c.inputs = [=](DType t, Generator& g) {
    return V{rnd(x, t, g), rnd(w, t, g), bias ? rnd({w[0]}, t, g) : Tensor()};
  };
  c.run = runner<Conv2d>(a);
  c.differentiable = true;
  c.bad = {[] { call<Conv2d>({Tensor::zeros({1, 4, 8, 8}), Tensor::zeros({2, 3, 3, 3}), Tensor()}); },
           [] { call<Conv2d>({Tensor::zeros({1, 3, 2, 2}), Tensor::zeros({2, 3, 3, 3}), Tensor()}); },
           [] { call<Conv2d>({Tensor::zeros({3, 8, 8}), Tensor::zeros({2, 3, 3, 3}), Tensor()}); }};
  return c;
}

Register reg[] = {
    // shape ops
    Register({"reshape", "2x3x4 -> 4x-1", [](DType t, Generator& g) { return V{rnd({2, 3, 4}, t, g)}; },
              runner<Reshape>({{4, -1}}), true, {},
              {[] { call<Reshape>({Tensor::zeros({2, 3})}, {{4, 2}}); }}}),
    Register({"permute", "2x3x4 (2,0,1)", [](DType t, Generator& g) { return V{rnd({2, 3, 4}, t, g)}; },
              runner<Permute>({{2, 0, 1}}), true, {},
              {[] { call<Permute>({Tensor::zeros({2, 3})}, {{0, 0}}); }}}),
    Register({"expand", "3x1 -> 2x3x4", [](DType t, Generator& g) { return V{rnd({3, 1}, t, g)}; },
              runner<Expand>({{2, 3, 4}}), true, {},
              {[] { call<Expand>({Tensor::zeros({3, 2})}, {{3, 4}}); }}}),
    Register({"narrow", "dim 1 [1, 3)", [](DType t, Generator& g) { return V{rnd({2, 4, 3}, t, g)}; },
              runner<Narrow>({1, 1, 2}), true, {},
              {[] { call<Narrow>({Tensor::zeros({2, 3})}, {1, 2, 2}); }}}),
    Register({"narrow_backward", "into 2x4x3", [](DType t, Generator& g) { return V{rnd({2, 2, 3}, t, g)}; },
              runner<PadNarrow>({{2, 4, 3}, 1, 1}), false, {}, {}}),
    Register({"contiguous", "transposed 3x4",
              [](DType t, Generator& g) { return V{transpose(rnd({4, 3}, t, g), 0, 1)}; }, runner<Contiguous>(),
              true, {}, {}}),
    Register({"concat", "dim 1", [](DType t, Generator& g) { return V{rnd({2, 2, 3}, t, g), rnd({2, 1, 3}, t, g)}; },
              runner<Concat>({1}), true, {},
              {[] { call<Concat>({Tensor::zeros({2, 2}), Tensor::zeros({3, 3})}, {1}); },
               [] { call<Concat>({Tensor::zeros({}), Tensor::zeros({})}, {0}); }}}),
    Register({"cast", "to f64", [](DType t, Generator& g) { return V{rnd({2, 3}, t, g)}; },
              [](const V& in) { return call<Cast>(in, {DType::f64}); },
              true, {}, {}}),
    Register({"sum", "dims (0, 2) of 3x4x5", [](DType t, Generator& g) { return V{rnd({3, 4, 5}, t, g)}; },
              runner<Sum>({{0, 2}, false}), true, {},
              {[] { call<Sum>({Tensor::zeros({2, 3})}, {{2}, false}); }}}),
    Register({"sum", "all, keepdim", [](DType t, Generator& g) { return V{rnd({3, 4, 5}, t, g)}; },
              runner<Sum>({{}, true}), true, {}, {}}),
    Register({"sum", "dims (0, 2, 3) of 2x3x4x5", [](DType t, Generator& g) { return V{rnd({2, 3, 4, 5}, t, g)}; },
              runner<Sum>({{0, 2, 3}, false}), true, {}, {}}),
    // elementwise
    Register(binary_case<Add>({2, 3, 4}, {2, 3, 4})),
    Register(binary_case<Add>({2, 3, 4}, {3, 1})),
    Register(binary_case<Sub>({2, 1, 4}, {3, 1})),
    Register(binary_case<Mul>({2, 3, 4}, {4})),
    Register(binary_case<Div>({2, 3, 4}, {2, 1, 4}, 0.5, 2.0)),
    Register({"affine", "2x - 1", [](DType t, Generator& g) { return V{rnd({3, 4}, t, g)}; },
              runner<Affine>({2.0, -1.0}), true, {}, {[] { call<Affine>({Tensor::zeros({2}, DType::i32)}); }}}),
    Register(unary_case<Relu>()),
    Register(unary_case<Relu6>(-3.0, 9.0)),
    Register(unary_case<LeakyRelu>(-3.0, 3.0, {0.1})),
    Register(unary_case<Clamp>(-3.0, 3.0, {-1.0, 2.0})),
    Register(unary_case<Gelu>()),
    Register(unary_case<Silu>()),
    Register(unary_case<Sigmoid>()),
    Register(unary_case<Tanh>()),
    Register(unary_case<Exp>()),
    Register(unary_case<Log>(0.2, 3.0)),
    Register(unary_case<Square>()),
    Register(unary_backward_case<ReluF>()),
    Register(unary_backward_case<Relu6F>(-3.0, 9.0)),
    Register(unary_backward_case<LeakyReluF>(-3.0, 3.0, {0.1})),
    Register(unary_backward_case<ClampF>(-3.0, 3.0, {-1.0, 2.0})),
    Register(unary_backward_case<GeluF>()),
    Register(unary_backward_case<SiluF>()),
    Register(unary_backward_case<SigmoidF>(0.0, 1.0)),
    Register(unary_backward_case<TanhF>(-1.0, 1.0)),
    Register(unary_backward_case<ExpF>()),
    Register(unary_backward_case<LogF>(0.2, 3.0)),
    Register(unary_backward_case<SquareF>()),
    // matrix products
    Register({"matmul", "5x7 @ 7x3", [](DType t, Generator& g) { return V{rnd({5, 7}, t, g), rnd({7, 3}, t, g)}; },
              runner<Matmul>(), true, {},
              {[] { call<Matmul>({Tensor::zeros({5, 7}), Tensor::zeros({6, 3})}); }}}),
    Register({"matmul", "5x7^T @ 3x5^T", [](DType t, Generator& g) { return V{rnd({7, 5}, t, g), rnd({3, 7}, t, g)}; },
              runner<Matmul>({true, true}), true, {}, {}}),
    Register({"matmul", "batched 2x4x6 @ 2x6x3", [](DType t, Generator& g) { return V{rnd({2, 4, 6}, t, g), rnd({2, 6, 3}, t, g)}; },
              runner<Matmul>(), true, {}, {}}),
    Register({"matmul", "batched 2x4x6 @ shared 3x6^T", [](DType t, Generator& g) { return V{rnd({2, 4, 6}, t, g), rnd({3, 6}, t, g)}; },
              runner<Matmul>({false, true}), true, {}, {}}),
    Register({"linear", "4x6 -> 4x3 with bias",
              [](DType t, Generator& g) { return V{rnd({4, 6}, t, g), rnd({3, 6}, t, g), rnd({3}, t, g)}; },
              runner<Linear>(), true, {},
              {[] { call<Linear>({Tensor::zeros({4, 6}), Tensor::zeros({3, 5}), Tensor()}); },
               [] { call<Linear>({Tensor::zeros({4, 6}), Tensor::zeros({3, 6}), Tensor::zeros({4})}); }}}),
    Register({"linear", "4x6 -> 4x3 no bias",
              [](DType t, Generator& g) { return V{rnd({4, 6}, t, g), rnd({3, 6}, t, g), Tensor()}; },
              runner<Linear>(), true, {}, {}}),
    // convolution
    Register(conv_case("3x3 s1 p1 bias", {2, 3, 7, 7}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true)),
    Register(conv_case("5x3 s2 p(2,1) no bias", {1, 2, 9, 8}, {3, 2, 5, 3}, {{2, 2}, {2, 1}, {1, 1}, 1}, false)),
    Register(conv_case("3x3 dilation 2", {1, 2, 9, 9}, {2, 2, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}, true)),
    Register(conv_case("groups 2", {2, 4, 6, 6}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true)),
    Register(conv_case("depthwise s2", {1, 4, 7, 7}, {4, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 4}, false)),
    Register(conv_case("1x1 s2 odd size", {2, 3, 7, 7}, {5, 3, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, false)),
    Register({"conv2d_backward_input", "3x3 s2 p1",
              [](DType t, Generator& g) { return V{rnd({2, 4, 4, 4}, t, g), rnd({4, 3, 3, 3}, t, g)}; },
              runner<Conv2dBackwardInput>({{{2, 2}, {1, 1}, {1, 1}, 1}, {2, 3, 7, 7}}), false, {},
              {[] { call<Conv2dBackwardInput>({Tensor::zeros({2, 4, 5, 5}), Tensor::zeros({4, 3, 3, 3})},
                                              {{{2, 2}, {1, 1}, {1, 1}, 1}, {2, 3, 7, 7}}); }}}),
    Register({"conv2d_backward_weight", "3x3 s2 p1 with bias",
              [](DType t, Generator& g) { return V{rnd({2, 4, 4, 4}, t, g), rnd({2, 3, 7, 7}, t, g)}; },
              runner<Conv2dBackwardWeight>({{{2, 2}, {1, 1}, {1, 1}, 1}, {4, 3, 3, 3}, true}), false, {}, {}}),
    // Depthwise weight gradients where oneDNN's jit_dw declines (a spatial size below the filter's):
    // reckon's direct sums (kernels/cpu/conv.cpp), with and without bias, strided.
    Register({"conv2d_backward_weight", "depthwise 1x1 p1 with bias",
              [](DType t, Generator& g) { return V{rnd({2, 32, 1, 1}, t, g), rnd({2, 32, 1, 1}, t, g)}; },
              runner<Conv2dBackwardWeight>({{{1, 1}, {1, 1}, {1, 1}, 32}, {32, 1, 3, 3}, true}), false, {}, {}}),
    Register({"conv2d_backward_weight", "depthwise 2x2 p1",
              [](DType t, Generator& g) { return V{rnd({3, 16, 2, 2}, t, g), rnd({3, 16, 2, 2}, t, g)}; },
              runner<Conv2dBackwardWeight>({{{1, 1}, {1, 1}, {1, 1}, 16}, {16, 1, 3, 3}, false}), false, {}, {}}),
    Register({"conv2d_backward_weight", "depthwise 3x3 s2 p1 -> 2x2",
              [](DType t, Generator& g) { return V{rnd({2, 16, 2, 2}, t, g), rnd({2, 16, 3, 3}, t, g)}; },
              runner<Conv2dBackwardWeight>({{{2, 2}, {1, 1}, {1, 1}, 16}, {16, 1, 3, 3}, true}), false, {}, {}}),
    // fused ops (the inference engine's passes make them)
    Register({"conv2d_fused", "3x3 s1 p1 bias+relu6+sum+relu",
              [](DType t, Generator& g) {
                return V{rnd({2, 3, 7, 7}, t, g), rnd({4, 3, 3, 3}, t, g), rnd({4}, t, g), rnd({2, 4, 7, 7}, t, g)};
              },
              runner<FusedConv2d>({{{1, 1}, {1, 1}, {1, 1}, 1}, {{"clamp", 0, 6}, {"sum"}, {"relu"}}}), false, {},
              {[] { call<FusedConv2d>({Tensor::zeros({1, 3, 7, 7}), Tensor::zeros({4, 3, 3, 3}), Tensor()},
                                      {{}, {{"sum"}}}); },
               [] { call<FusedConv2d>({Tensor::zeros({1, 3, 7, 7}), Tensor::zeros({4, 3, 3, 3}), Tensor(),
                                       Tensor::zeros({1, 4, 5, 4})}, {{}, {{"sum"}}}); },
               [] { call<FusedConv2d>({Tensor::zeros({1, 3, 7, 7}), Tensor::zeros({4, 3, 3, 3})}, {{}, {{"swish"}}}); }}}),
    Register({"conv2d_fused", "depthwise s2 hardswish, no bias",
              [](DType t, Generator& g) { return V{rnd({1, 4, 7, 7}, t, g), rnd({4, 1, 3, 3}, t, g), Tensor()}; },
              runner<FusedConv2d>({{{2, 2}, {1, 1}, {1, 1}, 4}, {{"hardswish", 1.0 / 6, 0.5}}}), false, {}, {}}),
    Register({"linear_fused", "4x6 -> 4x3 bias+silu+sum",
              [](DType t, Generator& g) {
                return V{rnd({4, 6}, t, g), rnd({3, 6}, t, g), rnd({3}, t, g), rnd({4, 3}, t, g)};
              },
              runner<FusedLinear>({{{"silu"}, {"sum"}}}), false, {},
              {[] { call<FusedLinear>({Tensor::zeros({4, 6}), Tensor::zeros({3, 6}), Tensor()}, {{{"sum"}, {"sum"}}}); }}}),
    Register({"elementwise_fused", "affine+clamp+sigmoid+tanh+gelu+exp+log+square",
              [](DType t, Generator& g) { return V{rnd({2, 3, 5}, t, g, -2.0, 2.0)}; },
              runner<FusedElementwise>({{{"affine", 0.5, 3.0}, {"clamp", 2.0, 3.5}, {"sigmoid"}, {"tanh"}, {"gelu"},
                                         {"exp"}, {"log"}, {"square"}, {"relu", 0.1}}}),
              false, {},
              {[] { call<FusedElementwise>({Tensor::zeros({2})}, {{{"sum"}}}); },
               [] { call<FusedElementwise>({Tensor::zeros({2})}, {}); },
               [] { call<FusedElementwise>({Tensor::zeros({2}, DType::i64)}, {{{"relu"}}}); }}}),
};
}  // namespace
}  // namespace reckon::harness
