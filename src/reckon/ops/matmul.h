// Matrix products. Letters: M rows of a, K the contracted dim, N columns of b.
#pragma once
#include "reckon/ops/op.h"

namespace reckon {

// in = (a (..., M, K), b (..., K, N)); a's batch dims equal b's, or b is 2-D (shared).
// trans_a / trans_b: the stored a is (..., K, M) / b is (..., N, K).
struct Matmul {
  static constexpr std::string_view kName = "matmul";
  static constexpr AmpPolicy kAmp = AmpPolicy::lower;
  static constexpr OpClass kClass = OpClass::linear;
  struct A {
    bool trans_a = false, trans_b = false;
    RK_FIELDS(trans_a, trans_b)
  };
  RK_OP_DECLS(A);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// Autocast's exception for linear layers, to bf16 only, as narrow_conv_keeps_f32 is for
// convolutions (ops/conv.h): on a cpu whose bf16 dot products are slower than its f32 FMAs
// (cpu_bf16_slower_than_f32), a small linear layer, of at most kSmallLinearWeights weights (all of
// LeNet-5's: 400 -> 120 has 48,000), stays f32. bf16 would save only its input's half (a batch of
// a few hundred features) and cost the casts and the slower products: lenet5's bf16 step on an
// Intel Xeon without AMX, its convolutions already f32, was 33.6k images/s at batch 64 against
// 43.2k in fp32.
constexpr int64_t kSmallLinearWeights = int64_t(1) << 16;
bool small_linear_keeps_f32(const Shape& w);

// in = (x (N, IN), w (OUT, IN), b (OUT) or undefined) -> y (N, OUT) = x w^T + b.
struct Linear {
  static constexpr std::string_view kName = "linear";
  static constexpr AmpPolicy kAmp = AmpPolicy::lower;
  static constexpr OpClass kClass = OpClass::linear;
  static bool amp_keeps_f32(std::span<const Tensor> in, const NoAttrs&) {
    return in.size() > 1 && in[1].defined() && autocast_state().dtype == DType::bf16 &&
           small_linear_keeps_f32(in[1].shape());
  }
  RK_OP_DECLS(NoAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

}  // namespace reckon
