// Harness cases for the quantized ops (ops/quant.h). Their integer inputs keep their own dtypes
// whatever dtype the harness asks for; the fast kernels match the reference exactly here (the
// harness's tolerance is below one step of an 8-bit output), and tests/test_quant.cpp checks
// every byte on ragged shapes.
#include "op_harness.h"
#include "reckon/ops/functional.h"

namespace reckon::harness {

// Uniform integers in [lo, hi] of dtype t (u8, i8 or i32).
Tensor rnd_int(const Shape& s, DType t, Generator& g, int64_t lo, int64_t hi) {
  Tensor x = Tensor::empty(s, t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t v = lo + int64_t(g.uniform() * double(hi - lo + 1));
    if (t == DType::u8) x.data<uint8_t>()[i] = uint8_t(v);
    else if (t == DType::i8) x.data<int8_t>()[i] = int8_t(v);
    else x.data<int32_t>()[i] = int32_t(v);
  }
  return x;
}

namespace {
using V = std::vector<Tensor>;

QuantConvAttrs qconv(ConvAttrs c, QuantLinearAttrs q) { return {c, std::move(q)}; }

Register reg[] = {
    Register({"quantize_linear", "u8 per tensor, zero point 128, saturating",
              [](DType, Generator& g) { return V{rnd({2, 3, 5, 4}, DType::f32, g, -4.0, 4.0)}; },
              runner<QuantizeLinear>({{0.02}, {128}, 1, "u8"}), false, {},
              {[] { call<QuantizeLinear>({Tensor::zeros({2, 3})}, {{0.0}, {0}, 1, "u8"}); },
               [] { call<QuantizeLinear>({Tensor::zeros({2, 3})}, {{NAN}, {0}, 1, "u8"}); },
               [] { call<QuantizeLinear>({Tensor::zeros({2, 3})}, {{1.0}, {300}, 1, "u8"}); },
               [] { call<QuantizeLinear>({Tensor::zeros({2, 3})}, {{1.0, 2.0}, {0, 0}, 1, "s8"}); },
               [] { call<QuantizeLinear>({Tensor::zeros({2, 3})}, {{1.0}, {0}, 1, "u4"}); }}}),
    Register({"quantize_linear", "s8 per channel (axis 1)",
              [](DType, Generator& g) { return V{rnd({2, 3, 5}, DType::f32, g, -2.0, 2.0)}; },
              runner<QuantizeLinear>({{0.01, 0.02, 0.005}, {0, -3, 5}, 1, "s8"}), false, {}, {}}),
    // Its gradient is the straight-through estimator, not the derivative of a step function, so
    // the finite-difference check does not apply: tests/test_quant.cpp checks the mask.
    Register({"fake_quantize", "u8 per tensor, zero point 10, saturating both sides",
              [](DType, Generator& g) { return V{rnd({2, 3, 5, 4}, DType::f32, g, -1.0, 6.0)}; },
              runner<FakeQuantize>({{0.02}, {10}, 1, "u8"}), false, {},
              {[] { call<FakeQuantize>({Tensor::zeros({2, 3})}, {{0.0}, {0}, 1, "u8"}); },
               [] { call<FakeQuantize>({Tensor::zeros({2, 3}, DType::i32)}, {{1.0}, {0}, 1, "u8"}); },
               [] { call<FakeQuantize>({Tensor::zeros({2, 3})}, {{1.0, 2.0}, {0, 0}, 1, "s8"}); }}}),
    Register({"fake_quantize", "s8 per channel (axis 0), as weights",
              [](DType, Generator& g) { return V{rnd({4, 3, 3, 3}, DType::f32, g, -1.0, 1.0)}; },
              runner<FakeQuantize>({{0.004, 0.008, 0.002, 0.01}, {0, 0, 0, 0}, 0, "s8"}), false, {}, {}}),
    Register({"fake_quantize_backward", "u8 per tensor: dy where x is in range",
              [](DType, Generator& g) { return V{rnd({3, 4, 5}, DType::f32, g), rnd({3, 4, 5}, DType::f32, g, -1.0, 6.0)}; },
              runner<FakeQuantizeBackward>({{0.02}, {10}, 1, "u8"}), false, {},
              {[] { call<FakeQuantizeBackward>({Tensor::zeros({2, 3}), Tensor::zeros({3, 2})}, {{0.1}, {0}, 1, "u8"}); }}}),
    Register({"dequantize_linear", "u8 per tensor",
              [](DType, Generator& g) { return V{rnd_int({2, 3, 4}, DType::u8, g, 0, 255)}; },
              runner<DequantizeLinear>({{0.05}, {100}, 1}), false, {},
              {[] { call<DequantizeLinear>({Tensor::zeros({2, 3})}, {{0.1}, {0}, 1}); }}}),
    Register({"dequantize_linear", "i32 per channel (axis 0)",
              [](DType, Generator& g) { return V{rnd_int({4}, DType::i32, g, -100000, 100000)}; },
              runner<DequantizeLinear>({{0.01, 0.02, 0.03, 0.04}, {0, 0, 0, 0}, 0}), false, {}, {}}),
    Register({"conv2d_int8", "3x3 s1 p1 u8 bias+relu -> u8, per channel",
              [](DType, Generator& g) {
                return V{rnd_int({2, 5, 7, 6}, DType::u8, g, 0, 255), rnd_int({4, 5, 3, 3}, DType::i8, g, -127, 127),
                         rnd_int({4}, DType::i32, g, -3000, 3000)};
              },
              runner<Conv2dInt8>(qconv({{1, 1}, {1, 1}, {1, 1}, 1},
                                       {0.02, 0, {0.01, 0.012, 0.008, 0.011}, 2.0, 0, "u8", 1.0, "", {{"relu"}}})),
              false, {},
              {[] { call<Conv2dInt8>({Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({4, 3, 3, 3}, DType::i8)}, {}); },
               [] { call<Conv2dInt8>({Tensor::zeros({1, 3, 5, 5}, DType::u8), Tensor::zeros({4, 3, 3, 3}, DType::i8)},
                                     qconv({}, {1.0, 0, {1.0, 1.0}, 1.0, 0, "u8", 1.0, "", {}})); },
               [] { call<Conv2dInt8>({Tensor::zeros({1, 3, 5, 5}, DType::u8), Tensor::zeros({4, 3, 3, 3}, DType::i8)},
                                     qconv({}, {1.0, 0, {1.0}, 1.0, 0, "u8", 1.0, "", {{"gelu"}}})); },
               [] { call<Conv2dInt8>({Tensor::zeros({1, 3, 5, 5}, DType::u8), Tensor::zeros({4, 3, 3, 3}, DType::i8)},
                                     qconv({}, {1.0, 0, {1.0}, 1.0, 0, "f32", 1.0, "", {{"sum"}}})); }}}),
    Register({"conv2d_int8", "s8 in, s2 p1, sum+relu -> s8",
              [](DType, Generator& g) {
                return V{rnd_int({1, 8, 9, 9}, DType::i8, g, -128, 127), rnd_int({6, 8, 3, 3}, DType::i8, g, -127, 127),
                         rnd_int({6}, DType::i32, g, -3000, 3000), rnd_int({1, 6, 5, 5}, DType::i8, g, -128, 127)};
              },
              runner<Conv2dInt8>(qconv({{2, 2}, {1, 1}, {1, 1}, 1}, {0.03, 0, {0.004}, 1.5, 0, "s8", 0.2, "", {{"sum"}, {"relu"}}})),
              false, {}, {}}),
    Register({"conv2d_int8", "depthwise 3x3 u8 clamp[0,6] -> u8, no bias",
              [](DType, Generator& g) {
                return V{rnd_int({2, 8, 6, 6}, DType::u8, g, 0, 255), rnd_int({8, 1, 3, 3}, DType::i8, g, -127, 127),
                         Tensor()};
              },
              runner<Conv2dInt8>(qconv({{1, 1}, {1, 1}, {1, 1}, 8}, {0.05, 0, {0.01}, 0.03, 0, "u8", 1.0, "", {{"clamp", 0, 6}}})),
              false, {}, {}}),
    Register({"conv2d_int8", "1x1 u8 -> f32 (dequantized output)",
              [](DType, Generator& g) {
                return V{rnd_int({2, 16, 4, 4}, DType::u8, g, 0, 255), rnd_int({3, 16, 1, 1}, DType::i8, g, -127, 127),
                         rnd_int({3}, DType::i32, g, -1000, 1000)};
              },
              runner<Conv2dInt8>(qconv({{1, 1}, {0, 0}, {1, 1}, 1}, {0.01, 0, {0.02, 0.01, 0.03}, 1.0, 0, "f32", 1.0, "", {}})),
              false, {}, {}}),
    Register({"conv2d_int8", "u8 with zero points in and out",
              [](DType, Generator& g) {
                return V{rnd_int({1, 4, 6, 6}, DType::u8, g, 0, 255), rnd_int({5, 4, 3, 3}, DType::i8, g, -127, 127),
                         rnd_int({5}, DType::i32, g, -500, 500)};
              },
              runner<Conv2dInt8>(qconv({{1, 1}, {1, 1}, {1, 1}, 1}, {0.02, 120, {0.01}, 0.5, 20, "u8", 1.0, "", {}})), false,
              {}, {}}),
    Register({"linear_int8", "u8 (5, 40) -> f32 (5, 7) bias, per channel",
              [](DType, Generator& g) {
                return V{rnd_int({5, 40}, DType::u8, g, 0, 255), rnd_int({7, 40}, DType::i8, g, -127, 127),
                         rnd_int({7}, DType::i32, g, -2000, 2000)};
              },
              runner<LinearInt8>({0.02, 0, {0.01, 0.02, 0.03, 0.01, 0.02, 0.03, 0.01}, 1.0, 0, "f32", 1.0, "", {}}), false, {},
              {[] { call<LinearInt8>({Tensor::zeros({2, 4}, DType::u8), Tensor::zeros({3, 5}, DType::i8)}, {}); }}}),
    Register({"linear_int8", "s8 (3, 17) -> u8 (3, 9) sum+relu",
              [](DType, Generator& g) {
                return V{rnd_int({3, 17}, DType::i8, g, -128, 127), rnd_int({9, 17}, DType::i8, g, -127, 127),
                         rnd_int({9}, DType::i32, g, -2000, 2000), rnd_int({3, 9}, DType::u8, g, 0, 255)};
              },
              runner<LinearInt8>({0.05, 0, {0.01}, 0.4, 0, "u8", 0.3, "", {{"sum"}, {"relu"}}}), false, {}, {}}),
    Register({"pool2d_int8", "max 3x3 s2 p1 u8",
              [](DType, Generator& g) { return V{rnd_int({2, 3, 7, 7}, DType::u8, g, 0, 255)}; },
              runner<Pool2dInt8>({{{3, 3}, {2, 2}, {1, 1}, {1, 1}}, "max"}), false, {},
              {[] { call<Pool2dInt8>({Tensor::zeros({1, 2, 4, 4})}, {}); },
               [] { call<Pool2dInt8>({Tensor::zeros({1, 2, 4, 4}, DType::u8)}, {{}, "min"}); }}}),
    // the cpu kernel's 2x2/2 max (LeNet-5's pools in NCHW); odd sizes drop the last row and column
    Register({"pool2d_int8", "max 2x2 s2 s8, odd sizes",
              [](DType, Generator& g) { return V{rnd_int({2, 5, 13, 41}, DType::i8, g, -128, 127)}; },
              runner<Pool2dInt8>({{{2, 2}, {2, 2}, {0, 0}, {1, 1}}, "max"}), false, {}, {}}),
    // rows of 75 outputs: two full steps of the AVX-512 loop (32 a step) and a tail of 11
    Register({"pool2d_int8", "max 2x2 s2 u8, rows of 75",
              [](DType, Generator& g) { return V{rnd_int({2, 3, 6, 151}, DType::u8, g, 0, 255)}; },
              runner<Pool2dInt8>({{{2, 2}, {2, 2}, {0, 0}, {1, 1}}, "max"}), false, {}, {}}),
    Register({"pool2d_int8", "avg 2x2 s2 s8, ties rounded to even",
              [](DType, Generator& g) { return V{rnd_int({1, 4, 6, 6}, DType::i8, g, -128, 127)}; },
              runner<Pool2dInt8>({{{2, 2}, {2, 2}, {0, 0}, {1, 1}}, "avg"}), false, {}, {}}),
    Register({"add_int8", "u8 + s8 -> u8 relu",
              [](DType, Generator& g) {
                return V{rnd_int({2, 3, 4, 4}, DType::u8, g, 0, 255), rnd_int({2, 3, 4, 4}, DType::i8, g, -128, 127)};
              },
              runner<AddInt8>({0.02, 0.03, 0.04, 3, 0, 0, "u8", true}), false, {},
              {[] { call<AddInt8>({Tensor::zeros({2}, DType::u8), Tensor::zeros({3}, DType::u8)}, {}); }}}),
    // ONNX Runtime's residual add: asymmetric u8 on every side, and ragged (not a multiple of a vector)
    Register({"add_int8", "u8 + u8 -> u8, three zero points, saturating",
              [](DType, Generator& g) {
                return V{rnd_int({3, 5, 7, 3}, DType::u8, g, 0, 255), rnd_int({3, 5, 7, 3}, DType::u8, g, 0, 255)};
              },
              runner<AddInt8>({0.011, 0.017, 0.019, 121, 133, 119, "u8", false}), false, {}, {}}),
    Register({"add_int8", "s8 + s8 -> s8",
              [](DType, Generator& g) {
                return V{rnd_int({2, 40000}, DType::i8, g, -128, 127), rnd_int({2, 40000}, DType::i8, g, -128, 127)};
              },
              runner<AddInt8>({0.05, 0.02, 0.06, -3, 5, 2, "s8", false}), false, {}, {}}),
};
}  // namespace
}  // namespace reckon::harness
