// The bf16/f16 paths of the cpu kernels (kernels/cpu/lowp.h): each op a convnet step runs under
// autocast, called on bf16 and f16 tensors, must
//   - run on the cpu kernel itself (OpRecord.kernel "cpu", not the dispatcher's "cpu-f32"
//     widening), and
//   - give what the widening gives: the f32 kernel on f32 copies of the inputs, outputs rounded
//     back. The check takes a budget in ulps of the output format; every op meets 0 (bit for
//     bit): the same f32 formula rounded once, and sums in the order lowp::sum16 writes out.
// Also: cast's rounding on known bit patterns (nearest even, NaN, inf, -0, subnormals,
// overflow), and every f16 value through the vectorised conversions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <string>

#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/elementwise.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/norm.h"
#include "reckon/ops/pool.h"
#include "reckon/ops/shape_ops.h"

using namespace reckon;

namespace {

constexpr DType kLowp[] = {DType::bf16, DType::f16};

// Random f32 values in [lo, hi) rounded to dtype t (so both paths see the same values).
Tensor rnd(const Shape& s, DType t, uint64_t seed, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor x = Tensor::empty(s);
  fill_uniform_(x, lo, hi, g);
  return cast(x, t);
}
// Random values of magnitude in [lo, hi) with random signs (divisors away from 0).
Tensor rnd_away(const Shape& s, DType t, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  Tensor x = Tensor::empty(s);
  fill_uniform_(x, lo, hi, g);
  auto v = x.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (i % 3 == 1) x.set(int64_t(i), -v[i]);
  return cast(x, t);
}

Tensor copy_of(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  copy_(c, t);
  return c;
}

// Runs Op through the dispatcher and returns its outputs; *kernel = the kernel that ran it.
template <class Op>
std::vector<Tensor> run(const std::vector<Tensor>& in, const typename Op::Attrs& a, std::string* kernel,
                        std::string* skipped = nullptr) {
  std::vector<Tensor> out;
  {
    ObserveOps obs([&](const OpRecord& r) {
      if (r.op == Op::kName) {
        *kernel = std::string(r.kernel);
        if (skipped) *skipped = r.skipped;
      }
    });
    out = call<Op>(in, a);
  }
  return out;
}

// The widening the dispatcher would do, done by hand: bf16/f16 inputs cast to f32 (others as
// they are), the f32 kernel, each output cast back to the dtype the native call gave it.
template <class Op>
std::vector<Tensor> widened(const std::vector<Tensor>& in, const typename Op::Attrs& a,
                            const std::vector<Tensor>& like) {
  std::vector<Tensor> w;
  for (auto& t : in)
    w.push_back(t.defined() && detail::is_low_precision(t.dtype()) ? cast(t, DType::f32) : t);
  std::string kernel;
  auto out = run<Op>(w, a, &kernel);
  EXPECT_EQ(kernel, "cpu") << "the f32 kernel of " << Op::kName << " should be the cpu one";
  for (size_t i = 0; i < out.size(); ++i) out[i] = cast(out[i], like[i].dtype());
  return out;
}

// Distance in units in the last place of the output format: 16-bit formats through their
// bits, f32 through its bits, integers exact. NaN matches NaN only.
int64_t ordered(int64_t bits, int sign_bit) {
  const int64_t mag = bits & ((int64_t(1) << sign_bit) - 1);
  return (bits >> sign_bit) & 1 ? -mag : mag;
}
int64_t ulps(const Tensor& a, const Tensor& b, int64_t* where = nullptr) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return INT64_MAX;
  int64_t worst = 0;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = 0;
    switch (a.dtype()) {
      case DType::bf16:
      case DType::f16: {
        const uint16_t x = static_cast<const uint16_t*>(a.raw_data())[i];
        const uint16_t y = static_cast<const uint16_t*>(b.raw_data())[i];
        const bool nx = std::isnan(a.get(i)), ny = std::isnan(b.get(i));
        d = nx || ny ? (nx == ny ? 0 : INT64_MAX) : std::abs(ordered(x, 15) - ordered(y, 15));
        break;
      }
      case DType::f32: {
        const float x = a.data<float>()[i], y = b.data<float>()[i];
        d = std::isnan(x) || std::isnan(y)
                ? (std::isnan(x) == std::isnan(y) ? 0 : INT64_MAX)
                : std::abs(ordered(std::bit_cast<uint32_t>(x), 31) - ordered(std::bit_cast<uint32_t>(y), 31));
        break;
      }
      default:
        d = a.get(i) == b.get(i) ? 0 : INT64_MAX;
    }
    if (d > worst) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

// The check: Op on in (bf16/f16 tensors) runs on "cpu" and matches the widening within
// max_ulps on every output. prepare() is called just before each of the two runs (dropout's
// seed, batch norm's running statistics).
template <class Op>
void check(const std::string& label, const std::vector<Tensor>& in, const typename Op::Attrs& a, int64_t max_ulps,
           const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& prepare = nullptr) {
  SCOPED_TRACE(std::string(Op::kName) + " " + label + " " + std::string(dtype_name(in[0].dtype())));
  std::vector<Tensor> in_native = prepare ? prepare(in) : in;
  std::string kernel, skipped;
  std::vector<Tensor> got;
  {
    FillOutputsWithNaN nan;
    got = run<Op>(in_native, a, &kernel, &skipped);
  }
  EXPECT_EQ(kernel, "cpu") << "skipped: " << skipped;
  std::vector<Tensor> in_wide = prepare ? prepare(in) : in;
  auto want = widened<Op>(in_wide, a, got);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    int64_t at = -1;
    int64_t u = ulps(got[i], want[i], &at);
    EXPECT_LE(u, max_ulps) << "output " << i << " element " << at << ": got " << (at >= 0 ? got[i].get(at) : 0.0)
                           << ", widened " << (at >= 0 ? want[i].get(at) : 0.0);
  }
  // In-place updates (running statistics) must agree as well.
  for (size_t i = 0; i < in.size(); ++i)
    if (in_native[i].defined() && !in_native[i].same(in[i])) {
      EXPECT_LE(ulps(in_native[i], in_wide[i]), max_ulps) << "input " << i << " updated in place";
    }
}

uint16_t bits_of(const Tensor& t, int64_t i) { return static_cast<const uint16_t*>(t.raw_data())[i]; }
Tensor f32_from_bits(const std::vector<uint32_t>& bits) {
  Tensor x = Tensor::empty({int64_t(bits.size())});
  for (size_t i = 0; i < bits.size(); ++i) x.data<float>()[i] = std::bit_cast<float>(bits[i]);
  return x;
}

}  // namespace

// ---- cast ----

TEST(OpsLowp, CastF32ToBf16RoundsToNearestEven) {
  // input bits -> bf16 bits
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000, 0x3f80},  // 1
      {0x3f808000, 0x3f80},  // 1 + half an ulp: tie, to even (down)
      {0x3f818000, 0x3f82},  // 1 + 1.5 ulp: tie, to even (up)
      {0x3f808001, 0x3f81},  // just above the tie: up
      {0x3f807fff, 0x3f80},  // just below the tie: down
      {0x80000000, 0x8000},  // -0
      {0x7f800000, 0x7f80},  // inf
      {0xff800000, 0xff80},  // -inf
      {0x7f7fffff, 0x7f80},  // max float rounds up to inf
      {0x00000001, 0x0000},  // smallest subnormal: to 0
      {0x00008000, 0x0000},  // subnormal tie, to even (0)
      {0x00018000, 0x0002},  // subnormal tie, to even (up)
      {0x00400000, 0x0040},  // subnormal, exact
      {0x807fffff, 0x8080},  // largest negative subnormal rounds to -min normal
      {0x7fc00000, 0x7fc0},  // quiet NaN
      {0x7f800001, 0x7fc0},  // signalling NaN: stays a NaN, made quiet
      {0xffc00001, 0xffc0},  // negative NaN
  };
  std::vector<uint32_t> in;
  for (auto& c : cases) in.push_back(c.first);
  std::string kernel;
  Tensor y = run<Cast>({f32_from_bits(in)}, {DType::bf16}, &kernel)[0];
  EXPECT_EQ(kernel, "cpu");
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(bits_of(y, int64_t(i)), cases[i].second) << std::hex << "input 0x" << cases[i].first;
}

TEST(OpsLowp, CastF32ToF16RoundsAndOverflowsToInf) {
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000, 0x3c00},  // 1
      {0x3f801000, 0x3c00},  // 1 + half an ulp (2^-11): tie, to even (down)
      {0x3f803000, 0x3c02},  // 1 + 1.5 ulp: tie, to even (up)
      {0x3f801001, 0x3c01},  // just above the tie
      {0x80000000, 0x8000},  // -0
      {0x477fe000, 0x7bff},  // 65504, the largest half
      {0x477fefff, 0x7bff},  // just below 65520: still 65504
      {0x477ff000, 0x7c00},  // 65520: tie between 65504 and 2^16, to even = inf
      {0x47800000, 0x7c00},  // 65536: overflow to inf
      {0xc7800000, 0xfc00},  // -65536: -inf
      {0x7f7fffff, 0x7c00},  // max float: inf
      {0x7f800000, 0x7c00},  // inf
      {0x38800000, 0x0400},  // 2^-14, smallest normal half
      {0x33800000, 0x0001},  // 2^-24, smallest subnormal half
      {0x33000000, 0x0000},  // 2^-25: tie between 0 and 2^-24, to even (0)
      {0x33400000, 0x0001},  // 1.5 * 2^-25: up to 2^-24
      {0x33c00000, 0x0002},  // 1.5 * 2^-24: tie, to even (2 * 2^-24)
      {0x387fc000, 0x03ff},  // 2^-14 - 2^-24: the largest subnormal half, exact
      {0x387fe000, 0x0400},  // 2^-14 - 2^-25: tie, to even = the smallest normal
      {0x00000001, 0x0000},  // f32 subnormal: 0
      {0x7fc00000, 0x7e00},  // quiet NaN
      {0x7f800001, 0x7e00},  // signalling NaN: quiet
  };
  std::vector<uint32_t> in;
  for (auto& c : cases) in.push_back(c.first);
  std::string kernel;
  Tensor y = run<Cast>({f32_from_bits(in)}, {DType::f16}, &kernel)[0];
  EXPECT_EQ(kernel, "cpu");
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(bits_of(y, int64_t(i)), cases[i].second) << std::hex << "input 0x" << cases[i].first;
}

TEST(OpsLowp, EveryF16ValueLoadsAndStoresAsTheCompilersConversion) {
  // lowp's f16 conversions are bit manipulation (they vectorise); _Float16 is the spec.
  for (uint32_t h = 0; h < 65536; ++h) {
    f16_t x;
    x.bits = uint16_t(h);
    const float want = float(x), got = lowp::load(x);
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << "half 0x" << h;
    if (!std::isnan(want)) {
      // back to half exactly, and the neighbours' midpoints round to even
      ASSERT_EQ(lowp::store<f16_t>(want).bits, x.bits) << std::hex << "half 0x" << h;
    }
  }
  // A sweep of floats between and beyond the halves, against _Float16's rounding.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float f = std::bit_cast<float>(uint32_t(u));
    ASSERT_EQ(lowp::store<f16_t>(f).bits, f16_t(f).bits) << std::hex << "float 0x" << u;
    ASSERT_EQ(lowp::store<bf16_t>(f).bits, bf16_t(f).bits) << std::hex << "float 0x" << u;
  }
}

TEST(OpsLowp, CastPairsRunOnTheCpuKernelAndMatchTheReference) {
  const DType all[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  for (DType s : all)
    for (DType d : all) {
      if ((s == DType::f64) != (d == DType::f64) && s != DType::f32 && d != DType::f32) continue;  // declined
      SCOPED_TRACE(std::string(dtype_name(s)) + " -> " + std::string(dtype_name(d)));
      for (int64_t n : {int64_t(37), int64_t(1) << 16}) {  // serial and parallel
        Tensor x = rnd({n}, DType::f32, 7 + uint64_t(n), -70000, 70000);  // beyond f16's range too
        if (s != DType::f32) x = cast(x, s);
        std::string kernel;
        Tensor got = run<Cast>({x}, {d}, &kernel)[0];
        EXPECT_EQ(kernel, "cpu");
        Tensor want;
        {
          ForceReference ref;
          want = call<Cast>({x}, {d})[0];
        }
        EXPECT_EQ(ulps(got, want), 0);
      }
    }
  // f64 -> bf16/f16 is declined: the dispatcher casts to an f32 workspace (this kernel), then rounds.
  std::string kernel;
  run<Cast>({cast(rnd({5}, DType::f32, 1), DType::f64)}, {DType::bf16}, &kernel);
  EXPECT_EQ(kernel, "cpu-f32");
}

// ---- elementwise ----

template <class F>
void check_unary(DType t, double lo, double hi, double alpha = 0.0) {
  for (const Shape& s : {Shape{3, 5, 7}, Shape{1}, Shape{40001}}) {
    Tensor x = rnd(s, t, 11, lo, hi);
    check<Unary<F>>(shape_str(s), {x}, {alpha}, 0);
    Tensor dy = rnd(s, t, 12);
    Tensor saved = F::kSavesOutput ? call<Unary<F>>({x}, {alpha})[0] : x;
    check<UnaryBackward<F>>(shape_str(s), {dy, saved}, {alpha}, 0);
  }
}

TEST(OpsLowp, UnaryOpsAndBackwardsMatchTheWidening) {
  for (DType t : kLowp) {
    check_unary<ReluF>(t, -3, 3);
    check_unary<Relu6F>(t, -3, 9);
    check_unary<LeakyReluF>(t, -3, 3, 0.1);
    check_unary<GeluF>(t, -4, 4);
    check_unary<SiluF>(t, -6, 6);
    check_unary<SigmoidF>(t, -6, 6);
    check_unary<TanhF>(t, -3, 3);
    check_unary<ExpF>(t, -5, 5);
    check_unary<LogF>(t, 0.01, 20);
    check_unary<SquareF>(t, -10, 10);
  }
}

template <class F>
void check_binary(DType t) {
  const std::pair<Shape, Shape> shapes[] = {
      {{3, 5, 7}, {3, 5, 7}},          // same shape
      {{40001}, {40001}},              // parallel
      {{4, 3, 5, 6}, {1, 3, 1, 1}},    // per-channel bias: b constant along each row
      {{1, 3, 1, 1}, {4, 3, 5, 6}},    // a constant along each row
      {{4, 3, 5, 6}, {6}},             // rows of b
      {{5, 1}, {1, 7}},                // outer: both broadcast
      {{2, 3, 1}, {2, 1, 4}},          // strided rows
      {{3, 1, 5}, {3, 4, 1}},
  };
  for (auto& [sa, sb] : shapes) {
    Tensor a = rnd(sa, t, 21, -4, 4);
    Tensor b = rnd_away(sb, t, 22, 0.25, 4);
    check<Binary<F>>(shape_str(sa) + " " + shape_str(sb), {a, b}, {}, 0);
  }
}

TEST(OpsLowp, BinaryOpsWithBroadcastMatchTheWidening) {
  for (DType t : kLowp) {
    check_binary<AddF>(t);
    check_binary<SubF>(t);
    check_binary<MulF>(t);
    check_binary<DivF>(t);
  }
}

TEST(OpsLowp, AffineMatchesTheWidening) {
  for (DType t : kLowp)
    for (const Shape& s : {Shape{3, 5, 7}, Shape{40001}})
      check<Affine>(shape_str(s), {rnd(s, t, 31, -5, 5)}, {0.3, -1.7}, 0);
}

TEST(OpsLowp, MixedDtypesAreDeclined) {
  // add(bf16, f32) is not an elementwise call the kernels take; nothing must read it wrongly.
  Tensor a = rnd({4}, DType::bf16, 1), b = rnd({4}, DType::f32, 2);
  std::string kernel, skipped;
  try {
    run<Add>({a, b}, {}, &kernel, &skipped);
  } catch (const Error&) {
    kernel = "refused";  // infer may refuse mixed dtypes outright
  }
  EXPECT_NE(kernel, "cpu");
}

// ---- batch norm ----

TEST(OpsLowp, BatchNormForwardAndBackwardMatchTheWidening) {
  // bf16/f16 x, y, dy, dx; f32 weight, bias, running and saved statistics (autocast's mix).
  for (DType t : kLowp)
    for (const Shape& s : {Shape{4, 3, 5, 7}, Shape{2, 5, 9}, Shape{8, 16, 17, 17}}) {
      const int64_t C = s[1];
      Tensor x = rnd(s, t, 41, -2, 3);
      Tensor w = rnd({C}, DType::f32, 42, 0.5, 1.5), b = rnd({C}, DType::f32, 43);
      Tensor rm = rnd({C}, DType::f32, 44), rv = rnd({C}, DType::f32, 45, 0.5, 2);
      // The running statistics are updated in place: each run gets its own copies.
      auto fresh_stats = [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{in[0], in[1], in[2], copy_of(in[3]), copy_of(in[4])};
      };
      // Channel sums in lowp::sum16's order: the statistics and y are bit for bit the f32 ones.
      for (bool with_w : {true, false}) {
        Tensor ww = with_w ? w : Tensor(), bb = with_w ? b : Tensor();
        check<BatchNorm2d>("train " + shape_str(s), {x, ww, bb, rm, rv}, {true, 0.1, 1e-5}, 0, fresh_stats);
        check<BatchNorm2d>("train, no running stats " + shape_str(s), {x, ww, bb, Tensor(), Tensor()},
                           {true, 0.1, 1e-5}, 0);
        check<BatchNorm2d>("eval " + shape_str(s), {x, ww, bb, rm, rv}, {false, 0.1, 1e-5}, 0);

        auto fw = call<BatchNorm2d>({x, ww, bb, copy_of(rm), copy_of(rv)}, {true, 0.1, 1e-5});
        ASSERT_EQ(fw[1].dtype(), DType::f32);
        Tensor dy = rnd(s, t, 46);
        check<BatchNorm2dBackward>("train " + shape_str(s), {dy, x, ww, fw[1], fw[2]}, {true, 0.1, 1e-5}, 0);
        check<BatchNorm2dBackward>("eval " + shape_str(s), {dy, x, ww, rm, rv}, {false, 0.1, 1e-5}, 0);
      }
    }
}

TEST(OpsLowp, BatchNormWithLowPrecisionParametersIsDeclined) {
  // All-bf16 batch norm (parameters in bf16 too) is not the mix the kernel takes: widened.
  Tensor x = rnd({2, 3, 4, 4}, DType::bf16, 1);
  Tensor w = rnd({3}, DType::bf16, 2), b = rnd({3}, DType::bf16, 3);
  std::string kernel;
  run<BatchNorm2d>({x, w, b, Tensor(), Tensor()}, {true, 0.1, 1e-5}, &kernel);
  EXPECT_EQ(kernel, "cpu-f32");
}

// ---- pooling ----

PoolAttrs pool(int64_t k, int64_t s, int64_t p = 0, bool ceil = false, int64_t dil = 1, bool include_pad = true) {
  PoolAttrs a;
  a.kernel = {k, k};
  a.stride = {s, s};
  a.padding = {p, p};
  a.dilation = {dil, dil};
  a.ceil_mode = ceil;
  a.count_include_pad = include_pad;
  return a;
}

TEST(OpsLowp, MaxPoolAndBackwardMatchTheWidening) {
  struct C {
    const char* label;
    Shape x;
    PoolAttrs a;
  };
  const C cases[] = {
      {"2x2/2", {2, 3, 8, 10}, pool(2, 2)},
      {"2x2/2 odd, large", {8, 16, 33, 31}, pool(2, 2)},
      {"3x3/2 inside", {2, 3, 9, 9}, pool(3, 2)},
      {"3x3/2 pad 1", {2, 3, 9, 10}, pool(3, 2, 1)},
      {"3x3/2 ceil", {2, 3, 8, 8}, pool(3, 2, 0, true)},
      {"3x3/1 dilation 2 pad 2", {1, 2, 9, 9}, pool(3, 1, 2, false, 2)},
  };
  for (DType t : kLowp)
    for (auto& c : cases) {
      Tensor x = rnd(c.x, t, 51, -3, 3);
      check<MaxPool2d>(c.label, {x}, c.a, 0);
      auto fw = call<MaxPool2d>({x}, c.a);
      Tensor dy = rnd(fw[0].shape(), t, 52);
      // overlapping windows add several dy into one dx: f32 sums in the same order
      check<MaxPool2dBackward>(c.label, {dy, fw[1]}, {c.x}, 0);
    }
}

TEST(OpsLowp, AvgPoolAndBackwardMatchTheWidening) {
  struct C {
    const char* label;
    Shape x;
    PoolAttrs a;
  };
  const C cases[] = {
      {"2x2/2", {2, 3, 8, 10}, pool(2, 2)},
      {"3x3/1 pad 1", {2, 3, 7, 9}, pool(3, 1, 1)},
      {"3x3/1 pad 1 exclude pad", {2, 3, 7, 9}, pool(3, 1, 1, false, 1, false)},
      {"3x3/2 pad 1 ceil", {2, 3, 8, 11}, pool(3, 2, 1, true)},
      {"2x2/2 ceil exclude pad, large", {8, 16, 33, 31}, pool(2, 2, 0, true, 1, false)},
  };
  for (DType t : kLowp)
    for (auto& c : cases) {
      Tensor x = rnd(c.x, t, 61, -3, 3);
      check<AvgPool2d>(c.label, {x}, c.a, 0);
      Shape ys = call<AvgPool2d>({x}, c.a)[0].shape();
      check<AvgPool2dBackward>(c.label, {rnd(ys, t, 62)}, {c.a, c.x}, 0);
    }
}

TEST(OpsLowp, AdaptiveAvgPoolAndBackwardMatchTheWidening) {
  struct C {
    Shape x;
    std::array<int64_t, 2> out;
  };
  const C cases[] = {
      {{4, 8, 4, 4}, {1, 1}},      // global, as resnet's head
      {{2, 3, 7, 11}, {3, 5}},     // uneven windows
      {{2, 3, 6, 6}, {6, 6}},      // identity
      {{16, 64, 9, 9}, {1, 1}},    // global, parallel
      {{8, 16, 13, 15}, {4, 4}},   // parallel
  };
  for (DType t : kLowp)
    for (auto& c : cases) {
      const std::string label = shape_str(c.x) + " -> " + std::to_string(c.out[0]) + "x" + std::to_string(c.out[1]);
      Tensor x = rnd(c.x, t, 71, -3, 3);
      // The global pool sums a plane with lowp::sum16: bit for bit.
      check<AdaptiveAvgPool2d>(label, {x}, {c.out}, 0);
      Shape ys = {c.x[0], c.x[1], c.out[0], c.out[1]};
      check<AdaptiveAvgPool2dBackward>(label, {rnd(ys, t, 72)}, {c.x}, 0);
    }
}

// ---- dropout, sum ----

TEST(OpsLowp, DropoutMatchesTheWidening) {
  auto reseed = [](const std::vector<Tensor>& in) {
    manual_seed(1234);  // both runs draw the same mask
    return in;
  };
  for (DType t : kLowp)
    for (const Shape& s : {Shape{3, 5, 7}, Shape{40001}})
      for (double p : {0.0, 0.3, 1.0}) {
        check<Dropout>(shape_str(s) + " p " + std::to_string(p), {rnd(s, t, 81)}, {p, true}, 0, reseed);
        check<Dropout>(shape_str(s) + " eval", {rnd(s, t, 81)}, {p, false}, 0, reseed);
      }
}

TEST(OpsLowp, SumMatchesTheWidening) {
  struct C {
    Shape x;
    std::vector<int64_t> dims;
    bool keepdim;
  };
  const C cases[] = {
      {{4, 5, 6}, {}, false},   {{4, 5, 6}, {0}, false}, {{4, 5, 6}, {2}, true},
      {{4, 5, 6}, {0, 2}, false}, {{3, 1, 7}, {1}, false}, {{32, 10}, {0}, false},  // linear's bias gradient
      {{1, 1}, {}, false},      {{3, 1000}, {1}, false},
  };
  for (DType t : kLowp)
    for (auto& c : cases) {
      std::string label = shape_str(c.x) + " dims";
      for (auto d : c.dims) label += " " + std::to_string(d);
      // Sums in f32 in the f32 kernel's order, rounded once: identical.
      check<Sum>(label, {rnd(c.x, t, 91, -2, 2)}, {c.dims, c.keepdim}, 0);
    }
}

// ---- a step under autocast ----

TEST(OpsLowp, ConvnetOpsUnderAutocastTakeNoWideningPath) {
  // A small conv block forward and backward under bf16 autocast: no op may fall back to the
  // dispatcher's f32 widening ("cpu-f32" / "ref-f32"), except the convolutions on a cpu where
  // oneDNN has no bf16 kernels (AVX2), which must widen to its f32 kernel ("cpu-f32").
  const bool native = dnnl_util::bf16_kernels_available();
  Tensor x = rnd({2, 3, 8, 8}, DType::f32, 101);
  Tensor w = rnd({4, 3, 3, 3}, DType::f32, 102).set_requires_grad(true);
  Tensor g = rnd({4}, DType::f32, 103, 0.5, 1.5).set_requires_grad(true);
  Tensor b = rnd({4}, DType::f32, 104).set_requires_grad(true);
  Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
  std::vector<std::string> widened_ops;
  {
    ObserveOps obs([&](const OpRecord& r) {
      if (!r.kernel.ends_with("-f32")) return;
      if (!native && r.op.starts_with("conv2d") && r.kernel == "cpu-f32") return;
      widened_ops.push_back(std::string(r.op) + ":" + std::string(r.kernel));
    });
    Tensor loss;
    {
      Autocast ac(DType::bf16);
      Tensor y = conv2d(x, w, Tensor(), {{1, 1}, {1, 1}});
      y = relu(batch_norm2d(y, g, b, rm, rv, true, 0.1, 1e-5));
      y = add(y, max_pool2d(avg_pool2d(y, {{2, 2}, {1, 1}, {1, 1}}), {{2, 2}, {1, 1}}));
      y = adaptive_avg_pool2d(y, {1, 1});
      loss = sum(y);
    }
    loss.backward();
  }
  EXPECT_TRUE(widened_ops.empty()) << widened_ops.front();
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(g.grad().dtype(), DType::f32);
}
