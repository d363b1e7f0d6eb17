// Fused ops: what the inference engine's fusion passes (engine/passes.h) rewrite a forward graph
// into. A convolution or linear layer followed by its bias, an activation chain and a residual
// add becomes one call (oneDNN runs it as one primitive with post-ops); a chain of elementwise
// ops becomes one loop. Each is an op like any other (shape, cost, reference kernel), so the
// ledger costs a fused graph as it costs any graph, and a pass is checked against the ops it
// replaced.
// Not here: gradients (inference only: the engine fuses a forward graph no backward runs
// through) or ONNX export (the engine fuses after export).
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "reckon/ops/conv.h"
#include "reckon/ops/elementwise.h"
#include "reckon/ops/op.h"

namespace reckon {

// One step of a post-op chain, applied to each output element in order:
//   relu (alpha: the negative slope, 0 for relu), clamp [alpha, beta] (relu6 is clamp [0, 6]),
//   sigmoid, tanh, gelu (exact), silu, hardswish (x * clamp(alpha x + beta, 0, 1): torch's is
//   alpha 1/6, beta 1/2), affine (alpha x + beta), exp, log, square,
//   sum (adds the op's residual input, its last; at most once per chain).
struct PostOp {
  std::string kind;
  double alpha = 0.0, beta = 0.0;
  RK_FIELDS(kind, alpha, beta)
};
enum class PostKind : uint8_t { relu, clamp, sigmoid, tanh, gelu, silu, hardswish, affine, exp, log, square, sum };
// The kind named `kind`, or an Error naming `op` and the known kinds.
PostKind post_kind(std::string_view op, const std::string& kind);
// Flops one element of a step costs (as the unary op's own cost counts them).
int64_t post_flops(PostKind k);
// "relu", "clamp[0,6]", "sum": how the ledger prints a chain ("+bias+relu" and so on).
std::string post_ops_str(const std::vector<PostOp>& post);
// Whether the chain has a sum step (then the op takes a residual input last).
bool has_sum(const std::vector<PostOp>& post);

// One element through one step; r is the residual element (sum only).
template <class T>
T apply_post(PostKind k, double alpha, double beta, T x, T r) {
  const T a = T(alpha), b = T(beta);
  switch (k) {
    case PostKind::relu: return LeakyReluF::f(x, a, b);
    case PostKind::clamp: return ClampF::f(x, a, b);
    case PostKind::sigmoid: return SigmoidF::f(x, a, b);
    case PostKind::tanh: return TanhF::f(x, a, b);
    case PostKind::gelu: return GeluF::f(x, a, b);
    case PostKind::silu: return SiluF::f(x, a, b);
    case PostKind::hardswish: return x * ClampF::f(a * x + b, T(0), T(1));
    case PostKind::affine: return a * x + b;
    case PostKind::exp: return ExpF::f(x, a, b);
    case PostKind::log: return LogF::f(x, a, b);
    case PostKind::square: return SquareF::f(x, a, b);
    case PostKind::sum: return x + r;
  }
  return x;
}

struct PostOpsAttrs {
  std::vector<PostOp> post;
  RK_FIELDS(post)
};
struct FusedConvAttrs {
  ConvAttrs conv;
  std::vector<PostOp> post;
  RK_FIELDS(conv, post)
};

inline constexpr std::string_view kFusedNoGradient =
    "inference only: the engine fuses a forward graph that no backward runs through";
inline constexpr std::string_view kFusedNotExportable =
    "an inference-engine op: export the model before the engine fuses it";

// in = (x (N, C, H, W), w, b or undefined, residual (the output's shape; iff a sum step))
// -> y = post(conv2d(x, w, b)).
struct FusedConv2d {
  static constexpr std::string_view kName = "conv2d_fused";
  static constexpr OpClass kClass = OpClass::conv;
  static constexpr std::string_view kNoGradient = kFusedNoGradient;
  static constexpr std::string_view kNotExportable = kFusedNotExportable;
  RK_OP_DECLS(FusedConvAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (x (N, IN), w (OUT, IN), b or undefined, residual (N, OUT) iff a sum step)
// -> y = post(linear(x, w, b)).
struct FusedLinear {
  static constexpr std::string_view kName = "linear_fused";
  static constexpr OpClass kClass = OpClass::linear;
  static constexpr std::string_view kNoGradient = kFusedNoGradient;
  static constexpr std::string_view kNotExportable = kFusedNotExportable;
  RK_OP_DECLS(PostOpsAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (x) -> y = post(x), one pass over the data (no sum step).
struct FusedElementwise {
  static constexpr std::string_view kName = "elementwise_fused";
  static constexpr std::string_view kNoGradient = kFusedNoGradient;
  static constexpr std::string_view kNotExportable = kFusedNotExportable;
  RK_OP_DECLS(PostOpsAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

#define RK_FUSED_OPS(X) X(FusedConv2d) X(FusedLinear) X(FusedElementwise)

}  // namespace reckon
