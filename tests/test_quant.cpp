// int8: the fast kernels reproduce the reference arithmetic bit for bit on ragged shapes, the
// reference rounds half to even and saturates, the calibration methods find the thresholds they
// are defined by, and a quantized program runs on the engine exactly as it runs eagerly and close
// to its fp32 program; fake quantization is quantize-then-dequantize with a clipping gradient and a
// frozen QAT forward is what the int8 program computes; `reckon quantize` on a trained lenet5 keeps
// its accuracy (and --keep-fp32 auto reaches --max-drop), and `train --qat` gives an int8 file as
// accurate as its fake-quantized model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "reckon/engine/engine.h"
#include "reckon/engine/quantize.h"
#include "reckon/io/npy.h"
#include "reckon/kernels/cpu/int8_exact.h"
#include "reckon/nn/layers.h"
#include "reckon/nn/models/registry.h"
#include "reckon/nn/models/resnet.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"
#include "reckon/ops/quant.h"
#include "reckon/train/qat.h"
#include "test_util.h"

using namespace reckon;
namespace en = reckon::engine;
namespace fs = std::filesystem;

namespace reckon::harness {
Tensor rnd_int(const Shape& s, DType t, Generator& g, int64_t lo, int64_t hi);
}
using reckon::harness::rnd_int;

namespace {

// Every byte equal (an f32 output: every value, so +0 and -0 count as equal).
bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (a.dtype() == DType::f32) {
    const float *x = a.data<float>(), *y = b.data<float>();
    for (int64_t i = 0; i < a.numel(); ++i)
      if (!(x[i] == y[i])) return false;
    return true;
  }
  return std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}
int64_t count_differences(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  int64_t d = 0;
  for (size_t i = 0; i < x.size(); ++i) d += x[i] != y[i];
  return d;
}

template <class Op>
void expect_fast_equals_ref(const std::vector<Tensor>& in, const typename Op::Attrs& a, const std::string& what) {
  std::vector<Tensor> fast, ref;
  std::string kernel;
  {
    ObserveOps watch([&](const OpRecord& r) { kernel = std::string(r.kernel); });
    fast = call<Op>(in, a);
  }
  EXPECT_EQ(kernel, "cpu") << what << ": the fast kernel declined";
  {
    ForceReference f;
    ref = call<Op>(in, a);
  }
  EXPECT_TRUE(same_bytes(fast[0], ref[0])) << what << ": " << count_differences(fast[0], ref[0]) << " of "
                                           << ref[0].numel() << " elements differ";
}

Tensor random_f32(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  Tensor x = Tensor::empty(s, DType::f32);
  fill_uniform_(x, lo, hi, g);
  return x;
}

}  // namespace

// ---- kernels ----
TEST(QuantKernels, ConvolutionMatchesTheReferenceBitForBitOnRaggedShapes) {
  struct C {
    Shape x, w;
    ConvAttrs conv;
    DType xt;
    std::string yt;
    std::vector<PostOp> post;
    bool per_channel, bias;
    int64_t x_zp, y_zp;
  };
  const std::vector<C> cases = {
      {{3, 7, 11, 13}, {5, 7, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, DType::u8, "u8", {{"relu"}}, true, true, 0, 0},
      {{2, 17, 9, 10}, {19, 17, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, DType::i8, "s8", {}, true, true, 0, 0},
      {{1, 33, 8, 9}, {31, 33, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}, DType::u8, "u8", {{"sum"}, {"relu"}}, true, true, 0, 0},
      {{2, 24, 7, 7}, {24, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 24}, DType::u8, "u8", {{"clamp", 0, 6}}, true, true, 0, 0},
      {{1, 12, 10, 10}, {18, 4, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 3}, DType::i8, "s8", {{"sum"}}, false, false, 0, 0},
      {{2, 3, 15, 14}, {8, 3, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 1}, DType::i8, "u8", {{"relu"}}, true, true, 0, 0},
      {{2, 9, 6, 5}, {7, 9, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, DType::u8, "f32", {{"relu"}}, true, true, 0, 0},
      {{1, 6, 7, 7}, {5, 6, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, DType::u8, "u8", {}, true, true, 117, 9},
      // first layers (few input channels): reckon's direct loops (conv_small::forward_int8), rows
      // of outputs and, from 12 outputs, output channels in the lanes; zero points on both sides
      {{3, 1, 28, 28}, {6, 1, 5, 5}, {{1, 1}, {2, 2}, {1, 1}, 1}, DType::u8, "u8", {{"relu"}, {"clamp", 0, 6}}, true, true, 121, 7},
      {{2, 2, 9, 11}, {13, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, DType::i8, "s8", {{"sum"}}, true, true, 0, -3},
      {{2, 3, 17, 5}, {16, 3, 3, 3}, {{1, 1}, {0, 0}, {1, 1}, 1}, DType::u8, "f32", {{"relu"}}, false, true, 3, 0},
  };
  Generator g(5);
  int i = 0;
  for (const auto& c : cases) {
    QuantConvAttrs a;
    a.conv = c.conv;
    a.q.x_scale = 0.021;
    a.q.x_zero_point = c.x_zp;
    const int64_t O = c.w[0];
    a.q.w_scale.clear();
    for (int64_t o = 0; o < (c.per_channel ? O : 1); ++o) a.q.w_scale.push_back(0.003 + 0.0007 * double(o % 5));
    a.q.y_scale = 0.37;
    a.q.y_zero_point = c.y_zp;
    a.q.y_dtype = c.yt;
    a.q.r_scale = 0.29;
    a.q.post = c.post;
    std::vector<Tensor> in{rnd_int(c.x, c.xt, g, quant_min(c.xt), quant_max(c.xt)), rnd_int(c.w, DType::i8, g, -127, 127),
                           c.bias ? rnd_int({O}, DType::i32, g, -20000, 20000) : Tensor()};
    if (has_sum(c.post)) {
      std::vector<Tensor> m{Tensor::empty(c.x, DType::f32, Device::meta), Tensor::empty(c.w, DType::f32, Device::meta)};
      const Shape ys = Conv2d::infer(m, c.conv)[0].shape;
      // an s8 residual into a u8 output (a shortcut without relu into a block that ends in one)
      const DType rt = c.yt == "u8" ? DType::i8 : quant_dtype("test", c.yt);
      a.q.r_dtype = quant_dtype_name(rt);
      in.push_back(rnd_int(ys, rt, g, quant_min(rt), quant_max(rt)));
    }
    expect_fast_equals_ref<Conv2dInt8>(in, a, "case " + std::to_string(i++));
  }
}

TEST(QuantKernels, LinearMatchesTheReferenceBitForBit) {
  Generator g(9);
  for (auto [n, k, o] : std::vector<std::array<int64_t, 3>>{{1, 7, 3}, {13, 65, 17}, {64, 400, 120}, {3, 1024, 10}}) {
    for (const char* yt : {"u8", "s8", "f32"}) {
      QuantLinearAttrs a;
      a.x_scale = 0.013;
      a.w_scale.clear();
      for (int64_t i = 0; i < o; ++i) a.w_scale.push_back(0.002 + 0.0003 * double(i % 7));
      a.y_scale = 0.81;
      a.y_dtype = yt;
      if (std::string(yt) != "f32") a.post = {{"relu"}};
      // an output zero point (ONNX Runtime's asymmetric u8 logits): added before the rounding
      if (std::string(yt) == "u8" && o > 5) a.y_zero_point = 131, a.post.clear();
      std::vector<Tensor> in{rnd_int({n, k}, DType::u8, g, 0, 255), rnd_int({o, k}, DType::i8, g, -127, 127),
                             rnd_int({o}, DType::i32, g, -50000, 50000)};
      expect_fast_equals_ref<LinearInt8>(in, a, fmt::format("{}x{}x{} -> {}", n, k, o, yt));
    }
  }
}

TEST(QuantKernels, QuantizeRoundsHalfToEvenAndSaturates) {
  Tensor x = Tensor::from_vector({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 126.5f, 127.5f, 1000.f, -1000.f, NAN, -128.5f, 3.49f},
                                 {12});
  for (bool fast : {true, false}) {
    std::unique_ptr<ForceReference> f;
    if (!fast) f = std::make_unique<ForceReference>();
    Tensor q = call1<QuantizeLinear>({x}, {{1.0}, {0}, 1, "s8"});
    const int8_t* p = q.data<int8_t>();
    const std::vector<int> want = {0, 2, 2, 0, -2, 126, 127, 127, -128, 0, -128, 3};
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(int(p[i]), want[i]) << "element " << i << (fast ? " fast" : " ref");
    Tensor u = call1<QuantizeLinear>({x}, {{0.5}, {100}, 1, "u8"});
    const uint8_t* pu = u.data<uint8_t>();
    const std::vector<int> want_u = {101, 103, 105, 99, 97, 255, 255, 255, 0, 100, 0, 107};
    for (size_t i = 0; i < want_u.size(); ++i) EXPECT_EQ(int(pu[i]), want_u[i]) << "u8 element " << i;
  }
  // int8 products saturate rather than wrap, and round their ties to even.
  QuantLinearAttrs a;
  a.x_scale = 1.0;
  a.w_scale = {1.0};
  a.y_scale = 2.0;
  a.y_dtype = "s8";
  Tensor xi = Tensor::empty({1, 2}, DType::u8), wi = Tensor::empty({4, 2}, DType::i8);
  xi.data<uint8_t>()[0] = 255;
  xi.data<uint8_t>()[1] = 1;
  const int8_t w[8] = {127, 127, -127, -127, 0, 1, 0, 5};  // 32512, -32512, 1 (0.5 -> 0), 5 (2.5 -> 2)
  std::memcpy(wi.data<int8_t>(), w, 8);
  for (bool fast : {true, false}) {
    std::unique_ptr<ForceReference> f;
    if (!fast) f = std::make_unique<ForceReference>();
    Tensor y = call1<LinearInt8>({xi, wi, Tensor()}, a);
    const int8_t* p = y.data<int8_t>();
    EXPECT_EQ(int(p[0]), 127);
    EXPECT_EQ(int(p[1]), -128);
    EXPECT_EQ(int(p[2]), 0);
    EXPECT_EQ(int(p[3]), 2);
  }
}

TEST(QuantKernels, BadScalesAndZeroPointsAreRefusedNamingThem) {
  Tensor x = Tensor::zeros({2, 3});
  for (double s : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    try {
      call1<QuantizeLinear>({x}, {{s}, {0}, 1, "u8"});
      ADD_FAILURE() << "scale " << s << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("scale must be a finite positive number"), std::string::npos) << e.what();
    }
  }
  try {
    call1<Conv2dInt8>({Tensor::zeros({1, 2, 4, 4}, DType::u8), Tensor::zeros({3, 2, 3, 3}, DType::i8)},
                      {{}, {NAN, 0, {1.0}, 1.0, 0, "u8", 1.0, "", {}}});
    ADD_FAILURE() << "NaN x_scale accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[conv2d_int8] x_scale"), std::string::npos) << e.what();
  }
}

// ---- calibration ----
TEST(QuantCalibration, MethodsFindTheThresholdsTheyAreDefinedBy) {
  // One value: |x| with a Laplace-like density (counts e^{-i/40} over 2048 bins of [0, 20]) and
  // three outliers at 20, the long-tailed case a clipping method is for.
  en::Observation ob;
  ob.min = -20;
  ob.max = 20;
  ob.batches = 1;
  ob.hist_range = 20;
  ob.hist.assign(2048, 0);
  const double w = 20.0 / 2048;
  double total = 0;
  for (size_t i = 0; i < 2048; ++i) total += ob.hist[i] = std::floor(1e6 * std::exp(-double(i) / 40));
  ob.hist[2047] += 3;
  total += 3;
  en::QuantOptions o;
  o.method = "minmax";
  EXPECT_DOUBLE_EQ(en::threshold(ob, o, 127), 20.0);
  o.method = "percentile";
  o.percentile_p = 99.0;
  // the 99th percentile of e^{-i/40}: i = 40 ln 100 = 184 bins
  EXPECT_NEAR(en::threshold(ob, o, 127), 40 * std::log(100.0) * w, 2 * w);
  for (const char* m : {"mse", "entropy"}) {
    o.method = m;
    const double t = en::threshold(ob, o, 127);
    EXPECT_GT(t, 1.0) << m;   // keeps the bulk (e^{-i/40} is 1% at 1.8)
    EXPECT_LT(t, 10.0) << m;  // and clips the outliers
  }
  // parse_method
  en::QuantOptions p;
  en::parse_method("percentile=99.9", p);
  EXPECT_EQ(p.method, "percentile");
  EXPECT_DOUBLE_EQ(p.percentile_p, 99.9);
  EXPECT_THROW(en::parse_method("kl", p), Error);
  EXPECT_THROW(en::parse_method("percentile=abc", p), Error);
}

// ---- programs ----
namespace {
struct Quantized {
  en::Program fp32;
  en::QuantizedProgram q;
};
Quantized quantize_zoo(const std::string& name, const Shape& in, en::QuantOptions o = {}) {
  auto m = nn::make_model(name);
  // BN statistics away from 0/1, so the folded weights are not the init's.
  Generator g(3);
  for (auto& [k, t] : m->state_dict())
    if (k.size() > 11 && k.compare(k.size() - 11, 11, "running_var") == 0) fill_uniform_(t, 0.5, 2.0, g);
  Quantized r;
  r.fp32 = en::make_program(*m, in);
  en::run_passes(r.fp32);
  en::Calibrator cal(r.fp32);
  for (uint64_t s = 0; s < 3; ++s) cal.observe(random_f32(in, 100 + s, -2, 2));
  r.q = en::quantize_program(r.fp32, cal, o);
  return r;
}
}  // namespace

TEST(QuantPrograms, EngineRunsTheInt8ProgramExactlyAsItsOwnKernelsDoAndCloseToFp32) {
  for (const std::string name : {"lenet5", "resnet18_cifar", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    Shape in = onnx::model_input_shape(name);
    if (name == "mobilenet_v2") in = {3, 64, 64};
    in.insert(in.begin(), 3);
    Quantized z = quantize_zoo(name, in);
    ASSERT_FALSE(z.q.layers.empty());
    int convs = 0;
    for (const auto& n : z.q.program.graph.nodes) convs += n.op == op_id<Conv2dInt8>;
    EXPECT_GT(convs, 0);
    const Tensor x = random_f32(in, 7, -2, 2);
    const Tensor eager = en::run_program(z.q.program, x);
    en::Engine e(z.q.program, {.passes = {}});
    const Tensor y = e.run(x);
    EXPECT_EQ(count_differences(y, eager), 0) << "engine against the int8 ops' own kernels";
    int onednn_int8 = 0;
    for (const auto& s : e.steps()) onednn_int8 += s.kind == "onednn" && s.op.find("int8") != std::string::npos;
    EXPECT_GT(onednn_int8, 0);
    const Tensor ref = en::run_program(z.fp32, x);
    EXPECT_GT(en::sqnr_db(ref, y), 15.0) << "int8 against fp32 logits";
  }
}

namespace {
// A program of one node: x (f32) -> quantize_linear (xt) -> node(op, attrs, constants) ->
// dequantize_linear (the node's output type, y_scale and y_zero_point) -> the output.
en::Program one_int8_node(const Shape& xs, DType xt, double x_scale, int64_t x_zp, int op, std::shared_ptr<void> attrs,
                          const std::vector<Tensor>& constants, double y_scale, int64_t y_zp) {
  en::Program p;
  auto node = [&](int id, std::shared_ptr<void> at, std::vector<int> ins) {
    graph::Node n;
    n.op = id;
    n.attrs = std::move(at);
    n.inputs = std::move(ins);
    std::vector<Tensor> meta;
    for (int v : n.inputs)
      meta.push_back(v < 0 ? Tensor() : Tensor::empty(p.graph.value(v).spec.shape, p.graph.value(v).spec.dtype, Device::meta));
    NoGrad no_grad;
    const auto res = op_info(id).call(meta, n.attrs.get());
    graph::Value v;
    v.spec = res[0].spec();
    v.producer = int(p.graph.nodes.size());
    n.outputs.push_back(p.graph.add_value(std::move(v)));
    n.kernel = "none";
    p.graph.nodes.push_back(std::move(n));
    return p.graph.nodes.back().outputs[0];
  };
  graph::Value in;
  in.spec.shape = xs;
  in.kind = graph::ValueKind::input;
  in.name = "x";
  p.input = p.graph.add_value(std::move(in));
  const int q = node(op_id<QuantizeLinear>, en::make_attrs(QuantizeAttrs{{x_scale}, {x_zp}, 1, quant_dtype_name(xt)}),
                     {p.input});
  std::vector<int> ins{q};
  for (size_t i = 0; i < constants.size(); ++i)
    ins.push_back(constants[i].defined() ? en::add_constant(p, constants[i], "c" + std::to_string(i)) : -1);
  const int y = node(op, std::move(attrs), ins);
  const std::string yt = quant_dtype_name(p.graph.value(y).spec.dtype);
  p.graph.outputs = {node(op_id<DequantizeLinear>, en::make_attrs(QuantizeAttrs{{y_scale}, {y_zp}, 1, yt}), {y})};
  return p;
}
}  // namespace

// The engine's depthwise int8 kernel (kernels/cpu/dw_int8.h, on a cpu with AVX-512 VNNI) against
// the reference: channels that fill no vector, one and a ragged tail of blocks of 64; kernels of
// 1 to 4 rows and 1 to 3 columns; strides 1 and 2 across, 1 to 3 down; padding 0 to 2 (rows of
// padding only); 16 and 32 channels at stride 1 (several pixels in a vector); u8 and s8 in and out
// with zero points; relu and clamp; no bias, and biases past 2^24 (added in float, as the
// reference adds them); outputs past int16 before the saturation, and past 2^30.
TEST(QuantPrograms, DepthwiseKernelMatchesTheReferenceBitForBit) {
  struct C {
    int64_t n, c, h, w, kh, kw, stride, pad;
    DType xt;
    std::string yt;
    std::vector<PostOp> post;
    int64_t x_zp, y_zp;
    int32_t bias;  // the biases' range (0: no bias)
    double y_scale = 0.17;
    int64_t stride_h = 0;  // (0: the stride across)
  };
  const std::vector<C> cases = {
      {1, 32, 11, 13, 3, 3, 1, 1, DType::u8, "u8", {{"clamp", 0, 6}}, 0, 0, 20000},
      {2, 144, 9, 10, 3, 3, 2, 1, DType::u8, "u8", {{"relu"}}, 3, 0, 20000},
      {1, 17, 7, 6, 3, 3, 1, 0, DType::i8, "s8", {}, -5, 4, 20000},
      {3, 64, 5, 9, 4, 3, 2, 2, DType::i8, "u8", {{"relu"}, {"clamp", 0, 6}}, 0, 11, 20000},
      {1, 80, 8, 8, 1, 1, 1, 0, DType::u8, "s8", {}, 128, -7, 20000},
      {1, 130, 6, 7, 2, 3, 1, 1, DType::u8, "u8", {{"clamp", -1, 2}}, 250, 128, 20000},
      {2, 96, 13, 4, 3, 2, 2, 1, DType::u8, "s8", {}, 7, 0, 1 << 26, 40.0},  // outputs of the bias alone
      {1, 960, 7, 7, 3, 3, 1, 1, DType::u8, "u8", {{"clamp", 0, 6}}, 0, 0, 20000},
      // 32 and 16 channels at stride 1: two and four pixels in a vector, rows of odd widths
      {2, 32, 9, 11, 3, 3, 1, 1, DType::u8, "u8", {{"clamp", 0, 6}}, 5, 0, 20000},
      {1, 16, 6, 13, 3, 3, 1, 2, DType::i8, "s8", {{"relu"}}, -9, 3, 20000},
      {1, 16, 5, 6, 2, 2, 1, 0, DType::u8, "u8", {}, 0, 0, 1 << 26, 40.0},
      {1, 32, 7, 7, 3, 3, 2, 1, DType::u8, "u8", {{"relu"}}, 0, 0, 20000},
      // two pixels in a vector going down two rows at a time; three rows at a time; no bias
      {1, 32, 9, 8, 3, 3, 1, 1, DType::u8, "u8", {{"clamp", 0, 6}}, 0, 0, 20000, 0.17, 2},
      {2, 70, 10, 9, 3, 3, 2, 1, DType::u8, "s8", {}, 0, 0, 0, 0.17, 3},
      // padding past the kernel's height (rows of padding only); outputs past int16 before the
      // saturation; an output that could pass 2^30 (the float steps) with an s8 input
      {1, 64, 4, 5, 2, 3, 1, 2, DType::u8, "u8", {{"relu"}}, 9, 0, 20000},
      {1, 80, 6, 6, 3, 3, 1, 1, DType::u8, "s8", {}, 0, 0, 20000, 0.00005},
      {1, 48, 5, 5, 3, 3, 2, 1, DType::i8, "u8", {{"relu"}}, 2, 100, 20000, 1e-8},
  };
  Generator g(11);
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE("case " + std::to_string(i++));
    QuantConvAttrs a;
    a.conv = {{c.stride_h ? c.stride_h : c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, c.c};
    a.q.x_scale = 0.021;
    a.q.x_zero_point = c.x_zp;
    for (int64_t o = 0; o < c.c; ++o) a.q.w_scale.push_back(0.003 + 0.0007 * double(o % 5));
    a.q.w_scale.erase(a.q.w_scale.begin());  // (the default's one element)
    a.q.y_scale = c.y_scale;
    a.q.y_zero_point = c.y_zp;
    a.q.y_dtype = c.yt;
    a.q.post = c.post;
    const std::vector<Tensor> k{rnd_int({c.c, 1, c.kh, c.kw}, DType::i8, g, -128, 127),
                                c.bias ? rnd_int({c.c}, DType::i32, g, -c.bias, c.bias) : Tensor()};
    const en::Program p = one_int8_node({c.n, c.c, c.h, c.w}, c.xt, a.q.x_scale, c.x_zp, op_id<Conv2dInt8>,
                                        en::make_attrs(a), k, a.q.y_scale, c.y_zp);
    // inputs over the whole 8-bit range
    const Tensor x = random_f32({c.n, c.c, c.h, c.w}, uint64_t(i), -300 * a.q.x_scale, 300 * a.q.x_scale);
    Tensor want;
    {
      ForceReference f;
      want = en::run_program(p, x);
    }
    en::Engine e(p);
    const Tensor y = e.run(x);
    EXPECT_EQ(count_differences(y, want), 0) << "of " << want.numel();
    bool ours = false;
    for (const auto& s : e.steps()) ours |= s.impl.find("reckon int8 depthwise") != std::string::npos;
    EXPECT_EQ(ours, int8_exact::dnnl_is_exact() && __builtin_cpu_supports("avx512vnni"))
        << "the engine's choice of kernel";
  }
}

TEST(QuantPrograms, WeightsAreAQuarterAndPerTensorIsAnOption) {
  Quantized pc = quantize_zoo("lenet5", {2, 1, 28, 28});
  en::QuantOptions o;
  o.per_channel = false;
  Quantized pt = quantize_zoo("lenet5", {2, 1, 28, 28}, o);
  int64_t fp32_w = 0, fp32_b = 0, int8_bytes = 0;
  for (const auto& [id, t] : pc.fp32.constants) (t.dim() > 1 ? fp32_w : fp32_b) += t.nbytes();
  for (const auto& [id, t] : pc.q.program.constants) int8_bytes += t.nbytes();
  // s8 weights (a quarter of their f32 bytes) and i32 biases (as many bytes as f32), exactly:
  // lenet5 has no other constant.
  EXPECT_EQ(int8_bytes, fp32_w / 4 + fp32_b);
  for (const auto& L : pc.q.layers) EXPECT_LE(L.w_scale_min, L.w_scale_max);
  for (const auto& L : pt.q.layers) EXPECT_DOUBLE_EQ(L.w_scale_min, L.w_scale_max) << L.name;
}

// ---- quantization-aware training ----
TEST(QuantQat, FakeQuantizeIsQuantizeThenDequantizeAndPassesTheGradientInsideTheRange) {
  for (const QuantizeAttrs& a : {QuantizeAttrs{{0.03}, {100}, 1, "u8"}, QuantizeAttrs{{0.01, 0.02, 0.05}, {0, 0, 0}, 1, "s8"}}) {
    SCOPED_TRACE(a.dtype);
    Tensor x = random_f32({2, 3, 5, 7}, 11, -4, 4);
    const Tensor want = call1<DequantizeLinear>({call1<QuantizeLinear>({x}, a)}, a);
    x.set_requires_grad(true);
    const Tensor y = fake_quantize(x, a);
    EXPECT_TRUE(same_bytes(contiguous(y.detach()), want));
    sum(y).backward();
    const auto g = x.grad().to_vector(), xv = x.detach().to_vector();
    int64_t passed = 0, clipped = 0;
    const int64_t inner = 5 * 7;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = a.scale.size() > 1 ? (i / size_t(inner)) % 3 : 0;
      const double q = std::nearbyint(xv[i] / float(a.scale[c])) + double(a.zero_point[c]);
      const bool inside = q >= double(quant_min(quant_dtype("t", a.dtype))) && q <= double(quant_max(quant_dtype("t", a.dtype)));
      EXPECT_EQ(g[i], inside ? 1.0 : 0.0) << i;
      (inside ? passed : clipped) += 1;
    }
    EXPECT_GT(passed, 0);
    EXPECT_GT(clipped, 0);  // the range is narrower than the data: both sides of the mask are seen
  }
}

// Frozen, a QAT model's forward is the int8 program's arithmetic: given the ranges it learnt, the
// int8 engine reproduces its logits far more closely than it reproduces the float model's. On
// lenet5; tinycnn (batch norm folded, an average pool); and a residual net of an identity block
// and a strided downsample block (resnet's BasicBlock: the identity read quantized, the main path
// quantized beside its downsample). What QAT does not model is the int32 rounding of the folded
// bias and the order of f32 sums: a step here and there, which random weights in a deep net
// amplify (on resnet18_cifar with random weights both are about 20 dB off), so the deep zoo
// networks are not in this test.
std::shared_ptr<nn::Module> small_resnet() {
  using namespace nn;
  auto ds = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<nn::Conv2d>(8, 16, Size2(1), Conv2dOptions{.stride = 2, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(16)});
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 8, Size2(3), Conv2dOptions{.padding = 1, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<BasicBlock>(8, 8, 1, nullptr, Device::cpu), std::make_shared<BasicBlock>(8, 16, 2, ds, Device::cpu),
      std::make_shared<nn::AdaptiveAvgPool2d>(Size2(1)), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16, 10)});
}

TEST(QuantQat, FrozenQatForwardIsWhatTheInt8ProgramComputes) {
  for (const std::string name : {"lenet5", "tinycnn", "small_resnet"}) {
    SCOPED_TRACE(name);
    const bool custom = name == "small_resnet";
    Shape chw = custom ? Shape{3, 16, 16} : onnx::model_input_shape(name);
    auto m = custom ? small_resnet() : nn::make_model(name);
    Generator g(5);
    for (auto& [k, t] : m->state_dict())
      if (k.size() > 11 && k.compare(k.size() - 11, 11, "running_var") == 0) fill_uniform_(t, 0.5, 2.0, g);
    Shape in = chw;
    in.insert(in.begin(), 16);
    train::Qat qat(*m, chw);
    EXPECT_EQ(qat.folded().size(), name == "lenet5" ? 0u : name == "tinycnn" ? 3u : 6u);
    m->train();
    {
      NoGrad no_grad;
      for (uint64_t s = 0; s < 3; ++s) (*m)(random_f32(in, 200 + s, -2, 2));  // observers and BN statistics move
    }
    qat.freeze();
    m->eval();
    const Tensor x = random_f32(in, 300, -2, 2);
    Tensor y_qat;
    {
      NoGrad no_grad;
      y_qat = (*m)(x);
    }
    qat.enable(false);
    en::Program p = en::make_program(*m, in);
    en::run_passes(p);
    en::Calibrator cal(p);
    cal.observe(x);
    EXPECT_EQ(en::fix_input_ranges(p, cal, qat.input_ranges()), int64_t(qat.input_ranges().size()));
    const en::QuantizedProgram q = en::quantize_program(p, cal, {});
    en::Engine e(q.program, {.passes = {}});
    const Tensor y_int8 = e.run(x), y_fp32 = en::run_program(p, x);
    const double to_qat = en::sqnr_db(y_qat, y_int8), to_fp32 = en::sqnr_db(y_fp32, y_int8);
    EXPECT_GT(to_qat, to_fp32 + 6.0) << "int8 against QAT " << to_qat << " dB, against fp32 " << to_fp32 << " dB";
  }
}

// ---- the deployment ledger at int8 ----
// Planned on the meta device (placeholder scales), the int8 program's arena is the one the int8
// engine built with data allocates, to the byte; its weights are about a quarter of fp32's.
TEST(QuantLedger, Int8ArenaAndWeightsArePredictedBeforeQuantizing) {
  const fs::path d = test_util::fresh_dir("quant", "ledger");
  for (const auto& [model, layers] : std::vector<std::pair<std::string, int>>{{"lenet5", 5}, {"resnet18_cifar", 21}}) {
    SCOPED_TRACE(model);
    auto r = test_util::run_cli({"ledger", model, "--batch", "2", "--inference", "--precision", "int8", "--measure", "--json"}, d);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["precision"], "int8");
    EXPECT_EQ(j["int8_layers"].get<int>(), layers);
    const auto& t = j["totals"];
    EXPECT_EQ(j["measured"]["arena_bytes"].get<int64_t>(), t["arena_bytes"].get<int64_t>());
    // Without VNNI the int8 products are kernel steps of the exact kernel (int8_exact.h), whose
    // packing scratch is still allocated per call (a known gap: it belongs in the arena).
    const bool dnnl_int8 = int8_exact::dnnl_is_exact();
    if (dnnl_int8) EXPECT_EQ(j["measured"]["run_allocations"].get<int64_t>(), 0);
    int int8_steps = 0;
    for (const auto& s : j["steps"]) {
      const std::string op = s["op"].get<std::string>();
      int8_steps += dnnl_int8 ? op.rfind("conv2d int8", 0) == 0 || op.rfind("linear int8", 0) == 0
                              : op == "conv2d_int8" || op == "linear_int8";
    }
    EXPECT_EQ(int8_steps, layers);
    auto f = test_util::run_cli({"ledger", model, "--batch", "2", "--inference", "--json"}, d);
    ASSERT_EQ(f.exit_code, 0) << f.err;
    auto jf = nlohmann::json::parse(f.out);
    EXPECT_LT(t["weight_bytes"].get<int64_t>(), jf["totals"]["weight_bytes"].get<int64_t>() / 3);
    EXPECT_EQ(t["macs"].get<int64_t>(), jf["totals"]["macs"].get<int64_t>());
  }
  // The int8 file: a quarter of the fp32 file, plus the scales, zero points and int32 biases, within 2%
  // (resnet18_cifar's file is weights; lenet5's 62K weights leave its names and scales a sixth of it).
  {
    const std::string fp32 = (d / "resnet18_cifar.onnx").string();
    auto e = test_util::run_cli({"export", "resnet18_cifar", "--out", fp32, "--batch", "dynamic"}, d);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    auto q = test_util::run_cli({"ledger", "resnet18_cifar", "--batch", "2", "--inference", "--precision", "int8", "--json"}, d);
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const double quarter = double(fs::file_size(fp32)) / 4.0;
    const double int8_file = double(nlohmann::json::parse(q.out)["totals"]["file_bytes"]["int8_qdq"].get<int64_t>());
    EXPECT_GE(int8_file, quarter);
    EXPECT_LE(int8_file, 1.02 * quarter);
  }
  auto r = test_util::run_cli({"ledger", "lenet5", "--batch", "2", "--inference", "--precision", "bf16"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--precision bf16"), std::string::npos) << r.err;
  fs::remove_all(d);
}

// ---- QDQ files: reckon's own export, imported, runs the int8 kernels it was written from ----
// `reckon quantize --out` writes the int8 program as QuantizeLinear/DequantizeLinear around float
// Conv, Gemm, Add, Relu, MaxPool and Flatten; the importer reads it back, and the engine's fuse_qdq
// pass turns each pattern into the int8 op it came from. The engine on the imported file then
// computes what the int8 program computes, bit for bit, with no float product left.
TEST(QuantQdq, ReckonsOwnQdqFileRunsAsTheInt8ProgramItCameFrom) {
  const fs::path d = test_util::fresh_dir("quant", "qdq");
  for (const std::string name : {"lenet5", "small_resnet", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    Shape in = name == "small_resnet" ? Shape{3, 16, 16} : name == "mobilenet_v2" ? Shape{3, 32, 32}
                                                                                    : onnx::model_input_shape(name);
    in.insert(in.begin(), 2);
    auto m = name == "small_resnet" ? small_resnet() : nn::make_model(name);
    Generator g(3);
    for (auto& [k, t] : m->state_dict())
      if (k.size() > 11 && k.compare(k.size() - 11, 11, "running_var") == 0) fill_uniform_(t, 0.5, 2.0, g);
    en::Program fp32 = en::make_program(*m, in);
    en::run_passes(fp32);
    en::Calibrator cal(fp32);
    for (uint64_t s = 0; s < 2; ++s) cal.observe(random_f32(in, 100 + s, -2, 2));
    const en::QuantizedProgram q = en::quantize_program(fp32, cal, {});
    const std::string path = (d / (name + ".int8.onnx")).string();
    onnx::write_file_atomic(path, onnx::export_graph(q.program.graph, [&](const graph::Value& v) {
      return q.program.constants.at(v.id);
    }));
    auto imported = onnx::make_model(path);
    en::Engine e(en::make_program(*imported, in));
    en::Engine direct(q.program, {.passes = {}});
    const Tensor x = random_f32(in, 7, -2, 2);
    EXPECT_EQ(count_differences(e.run(x), direct.run(x)), 0) << "the imported file against the int8 program";
    auto count = [](const graph::Graph& gr, int op) {
      int n = 0;
      for (const auto& node : gr.nodes) n += node.op == op;
      return n;
    };
    const graph::Graph& fused = e.program().graph;
    EXPECT_EQ(count(fused, op_id<Conv2dInt8>), count(q.program.graph, op_id<Conv2dInt8>));
    EXPECT_EQ(count(fused, op_id<LinearInt8>), count(q.program.graph, op_id<LinearInt8>));
    EXPECT_EQ(count(fused, op_id<Pool2dInt8>), count(q.program.graph, op_id<Pool2dInt8>));
    for (int op : {op_id<Conv2d>, op_id<FusedConv2d>, op_id<Linear>, op_id<FusedLinear>, op_id<DequantizeLinear>})
      EXPECT_EQ(count(fused, op), 0) << op_info(op).name << " left in float";
    EXPECT_EQ(e.weight_bytes(), direct.weight_bytes());
    // The deployment ledger plans the file on the meta device: the arena it predicts is the one
    // the engine allocates.
    auto r = test_util::run_cli({"ledger", path, "--batch", "2", "--inference", "--json"}, d);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["totals"]["arena_bytes"].get<int64_t>(), e.arena_bytes());
  }
  fs::remove_all(d);
}

// ---- the command, on a trained lenet5 and real data ----
TEST(QuantCli, TrainedLenet5KeepsItsAccuracyInInt8) {
  const fs::path d = test_util::fresh_dir("quant", "cli");
  auto r = test_util::run_cli({"train", "lenet5", "--data", "fashion-mnist", "--epochs", "1", "--out", (d / "run").string()}, d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ck = (d / "run" / "last.safetensors").string();
  const std::string qdq = (d / "lenet5.int8.onnx").string(), logits = (d / "int8.npy").string();
  r = test_util::run_cli({"quantize", "lenet5", "--checkpoint", ck, "--data", "fashion-mnist", "--method",
                          "minmax,percentile=99.99,entropy", "--out", qdq, "--dump-outputs", logits, "--json"},
                         d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["out"].get<std::string>(), qdq);
  // The deployment ledger said, before anything was quantized, how many bytes this file would take.
  {
    auto l = test_util::run_cli({"ledger", "lenet5", "--batch", "2", "--inference", "--precision", "int8", "--json"}, d);
    ASSERT_EQ(l.exit_code, 0) << l.err;
    EXPECT_EQ(nlohmann::json::parse(l.out)["totals"]["file_bytes"]["int8_qdq"].get<int64_t>(), int64_t(fs::file_size(qdq)));
  }
  std::string mean, stdev;
  for (double v : j["normalize"]["mean"]) mean += (mean.empty() ? "" : ",") + fmt::format("{:.9g}", v);
  for (double v : j["normalize"]["std"]) stdev += (stdev.empty() ? "" : ",") + fmt::format("{:.9g}", v);
  const std::string script = test_util::python() + " " RECKON_SOURCE_DIR "/scripts/ort_qdq_agreement.py";
  // ONNX Runtime is an exact oracle only where its u8 x s8 products are: without VNNI its MLAS
  // kernels use vpmaddubsw, which saturates pairs of products in int16, as oneDNN's would (that
  // is why reckon computes exactly there, int8_exact.h). On such a cpu (a Zen 3: ORT 86.4%,
  // reckon 87.1% on Fashion-MNIST, 95.5% agreement) the bounds below are those of two
  // quantized models that differ in rounding, and reckon must not be the less accurate.
  const bool ort_exact = int8_exact::dnnl_is_exact();
  const double agree_min = ort_exact ? 0.995 : 0.9;
  // The QDQ file in ONNX Runtime: the same predictions, run by its int8 kernels.
  {
    const fs::path o = d / "agree.json";
    ASSERT_EQ(test_util::run_shell(script + " " + qdq + " " + logits + " " + mean + " " + stdev + " >" + o.string() +
                                   " 2>/dev/null"),
              0);
    auto a = nlohmann::json::parse(test_util::read_file(o));
    EXPECT_GE(a["agreement"].get<double>(), agree_min) << a.dump();
    EXPECT_GE(a["reckon_accuracy"].get<double>(), a["ort_accuracy"].get<double>() - 0.005) << a.dump();
    EXPECT_EQ(a["ort_ops"].value("QLinearConv", 0), 2) << a.dump();  // its int8 convolution, not DQ + Conv
    EXPECT_EQ(a["ort_ops"].value("QGemm", 0), 3) << a.dump();
  }
  // ONNX Runtime's own int8 model of reckon's fp32 export, run by reckon: within one step of its
  // output's quantization.
  {
    const std::string fp32 = (d / "lenet5.onnx").string(), ortq = (d / "lenet5.ort.int8.onnx").string();
    const std::string ort_out = (d / "ort.npy").string(), rk_out = (d / "reckon.npy").string();
    auto e = test_util::run_cli({"export", "lenet5", "--checkpoint", ck, "--out", fp32, "--batch", "dynamic"}, d);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const fs::path o = d / "ortq.json";
    ASSERT_EQ(test_util::run_shell(script + " --quantize " + fp32 + " " + ortq + " " + ort_out + " " + mean + " " + stdev +
                                   " >" + o.string() + " 2>/dev/null"),
              0);
    const double step = nlohmann::json::parse(test_util::read_file(o))["output_step"].get<double>();
    ASSERT_GT(step, 0);
    e = test_util::run_cli({"eval", ortq, "--data", "fashion-mnist", "--dump-outputs", rk_out}, d);
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const Tensor a = io::read_npy(ort_out), b = io::read_npy(rk_out);
    ASSERT_EQ(a.shape(), b.shape());
    const int64_t n = a.size(0), K = a.size(1);
    const float *pa = a.data<float>(), *pb = b.data<float>();
    int64_t same = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      same += std::max_element(pa + i * K, pa + (i + 1) * K) - pa == std::max_element(pb + i * K, pb + (i + 1) * K) - pb;
      for (int64_t k = 0; k < K; ++k) worst = std::max(worst, double(std::abs(pa[i * K + k] - pb[i * K + k])));
    }
    EXPECT_GE(double(same) / double(n), agree_min);
    if (ort_exact) EXPECT_LE(worst, step * 1.001);
    // A scale of 0, NaN or inf in a file is refused, naming the node.
    for (const char* bad : {"0.0", "float('nan')", "float('inf')"}) {
      const std::string broken = (d / "broken.onnx").string();
      const std::string py = fmt::format(
          "import onnx, numpy as np; m = onnx.load('{}'); n = [x for x in m.graph.node if x.op_type == 'QuantizeLinear'][0]; "
          "t = [i for i in m.graph.initializer if i.name == n.input[1]][0]; "
          "t.CopyFrom(onnx.numpy_helper.from_array(np.array({}, np.float32), t.name)); onnx.save(m, '{}')",
          ortq, bad, broken);
      ASSERT_EQ(test_util::run_shell(test_util::python() + " -c " + test_util::shell_quote(py)), 0);
      e = test_util::run_cli({"eval", broken, "--data", "fashion-mnist"}, d);
      EXPECT_EQ(e.exit_code, 1) << bad;
      EXPECT_NE(e.err.find("QuantizeLinear's scale"), std::string::npos) << e.err;
      EXPECT_NE(e.err.find("is not a finite positive number"), std::string::npos) << e.err;
    }
  }
  EXPECT_EQ(j["test_images"].get<int64_t>(), 10000);
  const double fp32 = j["fp32"]["accuracy"].get<double>();
  EXPECT_GT(fp32, 0.80);
  ASSERT_EQ(j["methods"].size(), 3u);
  for (const auto& m : j["methods"]) {
    if (m["method"] == "entropy") continue;  // reported, not held to the target: see the README
    EXPECT_LE(fp32 - m["accuracy"].get<double>(), 0.005) << m["method"];  // within half a point
    EXPECT_GT(m["agreement"].get<double>(), 0.98) << m["method"];
    EXPECT_EQ(m["layers"].size(), 5u) << m["method"];  // lenet5's 2 convolutions and 3 linear layers
    for (const auto& l : m["layers"]) EXPECT_GT(l["sqnr_db"].get<double>(), 15.0) << l["name"];
    EXPECT_LT(m["weight_bytes"].get<int64_t>(), j["fp32"]["weight_bytes"].get<int64_t>() / 3);
  }
  // Bad input: one line naming the argument.
  r = test_util::run_cli({"quantize", "lenet5", "--checkpoint", ck, "--method", "kl"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--method kl: unknown"), std::string::npos) << r.err;
  r = test_util::run_cli({"quantize", "lenet5", "--checkpoint", ck, "--calib-batches", "0"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--calib-batches"), std::string::npos) << r.err;
  r = test_util::run_cli({"quantize", "lenet5", "--checkpoint", ck, "--keep-fp32", "conv9"}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--keep-fp32 conv9: no such int8 layer"), std::string::npos) << r.err;

  // --keep-fp32 auto with no drop allowed: layers go back to fp32, most sensitive first, until
  // the int8 program is as accurate as fp32 on the images evaluated.
  r = test_util::run_cli({"quantize", "lenet5", "--checkpoint", ck, "--method", "entropy", "--keep-fp32", "auto",
                          "--max-drop", "0", "--limit", "2000", "--json"},
                         d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    auto ja = nlohmann::json::parse(r.out);
    const auto& m = ja["methods"][0];
    const double fp = ja["fp32"]["accuracy"].get<double>();
    ASSERT_TRUE(m["auto_met"].get<bool>());
    EXPECT_LE(fp - m["accuracy"].get<double>(), 1e-12);
    if (fp - m["full_int8_accuracy"].get<double>() > 0) ASSERT_FALSE(m["auto_steps"].empty());
    std::set<std::string> kept;
    double last = m["full_int8_accuracy"].get<double>();
    for (const auto& st : m["auto_steps"]) {
      EXPECT_TRUE(kept.insert(st["layer"].get<std::string>()).second) << "a layer kept twice";
      last = st["accuracy"].get<double>();
    }
    EXPECT_DOUBLE_EQ(last, m["accuracy"].get<double>());
    EXPECT_EQ(m["layers"].size() + kept.size(), 5u);  // kept layers leave the int8 table
  }

  // QAT: one epoch of fine-tuning from the trained weights, then the int8 program with the ranges
  // it learnt, whose accuracy is the fake-quantized model's (what QAT trained is what runs).
  r = test_util::run_cli({"train", "lenet5", "--qat", "--data", "fashion-mnist", "--epochs", "1", "--lr", "0.005",
                          "--checkpoint", ck, "--out", (d / "qat").string()},
                         d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("QAT: 5 conv/linear layers fake-quantized"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(d / "qat" / "model.int8.onnx"));
  {
    const auto at = r.out.find("QAT int8: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    double int8 = 0, fake = 0;
    ASSERT_EQ(std::sscanf(r.out.c_str() + at, "QAT int8: %lf%% top-1 through the int8 engine (fake-quantized %lf%%)", &int8,
                          &fake),
              2)
        << r.out.substr(at);
    EXPECT_NEAR(int8, fake, 0.3);
    EXPECT_GE(int8, 100 * fp32 - 0.5);  // within half a point of the fp32 model it started from
  }
  // Stopped inside its QAT epoch and resumed: the observers come back from the checkpoint.
  r = test_util::run_cli({"train", "lenet5", "--qat", "--data", "fashion-mnist", "--epochs", "1", "--lr", "0.005",
                          "--checkpoint", ck, "--out", (d / "qat3").string(), "--stop-after", "300"},
                         d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(d / "qat3" / "model.int8.onnx"));
  r = test_util::run_cli({"train", "lenet5", "--resume", "--out", (d / "qat3").string()}, d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("QAT int8: "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d / "qat3" / "model.int8.onnx"));
  r = test_util::run_cli({"train", "lenet5", "--qat", "--data", "fashion-mnist", "--out", (d / "qat2").string()}, d);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--qat fine-tunes trained weights"), std::string::npos) << r.err;
  fs::remove_all(d);
}
