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

// in = (x (N, IN), w (OUT, IN), b (OUT) or undefined) -> y (N, OUT) = x w^T + b.
struct Linear {
  static constexpr std::string_view kName = "linear";
  static constexpr AmpPolicy kAmp = AmpPolicy::lower;
  static constexpr OpClass kClass = OpClass::linear;
  RK_OP_DECLS(NoAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

}  // namespace reckon
