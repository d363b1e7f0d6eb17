// Elementwise ops: binary arithmetic with numpy broadcasting, affine (alpha x + beta), and
// the unary activations. Each unary op is one functor (value and derivative); its backward is
// the matching *_backward op, so backward cost is counted like any other op.
#pragma once
#include <cmath>

#include "reckon/ops/op.h"

namespace reckon {

// ---- binary ----
template <class F>
struct Binary {
  static constexpr std::string_view kName = F::kName;
  // Channels-last in, channels-last out, for two inputs of one shape (the flat loop).
  static bool channels_last(std::span<const Tensor> in, const NoAttrs&) { return elementwise_channels_last(in, 3u); }
  static constexpr uint32_t kChannelsLastIn = 3u, kChannelsLastOut = 1u;
  RK_OP_DECLS(NoAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};
struct AddF {
  static constexpr std::string_view kName = "add", kOnnxType = "Add";
  static constexpr uint32_t kSaved = 0;
  template <class T> static T f(T a, T b) { return a + b; }
};
struct SubF {
  static constexpr std::string_view kName = "sub", kOnnxType = "Sub";
  static constexpr uint32_t kSaved = 0;
  template <class T> static T f(T a, T b) { return a - b; }
};
struct MulF {
  static constexpr std::string_view kName = "mul", kOnnxType = "Mul";
  static constexpr uint32_t kSaved = 3;
  template <class T> static T f(T a, T b) { return a * b; }
};
struct DivF {
  static constexpr std::string_view kName = "div", kOnnxType = "Div";
  static constexpr uint32_t kSaved = 3;
  template <class T> static T f(T a, T b) { return a / b; }
};
using Add = Binary<AddF>;
using Sub = Binary<SubF>;
using Mul = Binary<MulF>;
using Div = Binary<DivF>;

struct Affine {
  static constexpr std::string_view kName = "affine";
  struct A {
    double alpha = 1.0, beta = 0.0;
    RK_FIELDS(alpha, beta)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// ---- unary ----
// alpha, beta: the op's parameters (leaky_relu's slope alpha; clamp's bounds [alpha, beta]),
// unused elsewhere. A functor with kOnnxType maps to that one ONNX operator (with alpha as its
// "alpha" attribute where it has one); the others are lowered by Unary<F>::onnx itself.
struct UnaryAttrs {
  double alpha = 0.0, beta = 0.0;
  RK_FIELDS(alpha, beta)
};

template <class F>
struct Unary {
  static constexpr std::string_view kName = F::kName;
  static bool channels_last(std::span<const Tensor> in, const UnaryAttrs&) { return elementwise_channels_last(in, 1u); }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 1u;
  RK_OP_DECLS(UnaryAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};
// in = (dy, s) where s is x or y as F::kSavesOutput says; out = dx = dy * F::df(s).
template <class F>
struct UnaryBackward {
  static constexpr std::string_view kName = F::kGradName;
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  static bool channels_last(std::span<const Tensor> in, const UnaryAttrs&) { return elementwise_channels_last(in, 3u); }
  static constexpr uint32_t kChannelsLastIn = 3u, kChannelsLastOut = 1u;
  RK_OP_DECLS(UnaryAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

struct ReluF {
  static constexpr std::string_view kName = "relu", kGradName = "relu_backward", kOnnxType = "Relu";
  static constexpr bool kSavesOutput = true;
  static constexpr int64_t kFlops = 1;
  template <class T> static T f(T x, T, T) { return x > T(0) ? x : T(0); }
  template <class T> static T df(T y, T, T) { return y > T(0) ? T(1) : T(0); }
};
struct Relu6F {
  static constexpr std::string_view kName = "relu6", kGradName = "relu6_backward";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 2;
  template <class T> static T f(T x, T, T) { return x < T(0) ? T(0) : (x > T(6) ? T(6) : x); }
  template <class T> static T df(T x, T, T) { return (x > T(0) && x < T(6)) ? T(1) : T(0); }
};
struct LeakyReluF {
  static constexpr std::string_view kName = "leaky_relu", kGradName = "leaky_relu_backward",
                                    kOnnxType = "LeakyRelu";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 2;
  template <class T> static T f(T x, T a, T) { return x > T(0) ? x : a * x; }
  template <class T> static T df(T x, T a, T) { return x > T(0) ? T(1) : a; }
};
struct ClampF {  // [alpha, beta]; the gradient passes where alpha <= x <= beta (as torch.clamp)
  static constexpr std::string_view kName = "clamp", kGradName = "clamp_backward";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 2;
  template <class T> static T f(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
  template <class T> static T df(T x, T lo, T hi) { return (x >= lo && x <= hi) ? T(1) : T(0); }
};
struct GeluF {  // exact: x * Phi(x)
  static constexpr std::string_view kName = "gelu", kGradName = "gelu_backward";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 8;
  template <class T> static T f(T x, T, T) { return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2))); }
  template <class T> static T df(T x, T, T) {
    T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
    T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
    return cdf + x * pdf;
  }
};
struct SiluF {
  static constexpr std::string_view kName = "silu", kGradName = "silu_backward";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 5;
  template <class T> static T f(T x, T, T) { return x / (T(1) + std::exp(-x)); }
  template <class T> static T df(T x, T, T) {
    T s = T(1) / (T(1) + std::exp(-x));
    return s * (T(1) + x * (T(1) - s));
  }
};
struct SigmoidF {
  static constexpr std::string_view kName = "sigmoid", kGradName = "sigmoid_backward", kOnnxType = "Sigmoid";
  static constexpr bool kSavesOutput = true;
  static constexpr int64_t kFlops = 4;
  template <class T> static T f(T x, T, T) { return T(1) / (T(1) + std::exp(-x)); }
  template <class T> static T df(T y, T, T) { return y * (T(1) - y); }
};
struct TanhF {
  static constexpr std::string_view kName = "tanh", kGradName = "tanh_backward", kOnnxType = "Tanh";
  static constexpr bool kSavesOutput = true;
  static constexpr int64_t kFlops = 4;
  template <class T> static T f(T x, T, T) { return std::tanh(x); }
  template <class T> static T df(T y, T, T) { return T(1) - y * y; }
};
struct ExpF {
  static constexpr std::string_view kName = "exp", kGradName = "exp_backward", kOnnxType = "Exp";
  static constexpr bool kSavesOutput = true;
  static constexpr int64_t kFlops = 4;
  template <class T> static T f(T x, T, T) { return std::exp(x); }
  template <class T> static T df(T y, T, T) { return y; }
};
struct LogF {
  static constexpr std::string_view kName = "log", kGradName = "log_backward", kOnnxType = "Log";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 4;
  template <class T> static T f(T x, T, T) { return std::log(x); }
  template <class T> static T df(T x, T, T) { return T(1) / x; }
};
struct SquareF {
  static constexpr std::string_view kName = "square", kGradName = "square_backward";
  static constexpr bool kSavesOutput = false;
  static constexpr int64_t kFlops = 1;
  template <class T> static T f(T x, T, T) { return x * x; }
  template <class T> static T df(T x, T, T) { return T(2) * x; }
};

using Relu = Unary<ReluF>;
using Relu6 = Unary<Relu6F>;
using LeakyRelu = Unary<LeakyReluF>;
using Clamp = Unary<ClampF>;
using Gelu = Unary<GeluF>;
using Silu = Unary<SiluF>;
using Sigmoid = Unary<SigmoidF>;
using Tanh = Unary<TanhF>;
using Exp = Unary<ExpF>;
using Log = Unary<LogF>;
using Square = Unary<SquareF>;

// The functors, for code that instantiates per activation (kernels, op list).
#define RK_UNARY_FUNCTORS(X) X(ReluF) X(Relu6F) X(LeakyReluF) X(ClampF) X(GeluF) X(SiluF) X(SigmoidF) X(TanhF) X(ExpF) X(LogF) X(SquareF)
#define RK_BINARY_FUNCTORS(X) X(AddF) X(SubF) X(MulF) X(DivF)

}  // namespace reckon
