// Softmax, log-softmax and the classification losses, each with its backward op.
// Softmax family: any rank, over one dim (negative counts from the end), numerically stable
// (the row maximum is subtracted first); no MACs.
// Losses follow torch.nn.functional exactly: cross_entropy with reduction, label_smoothing
// and ignore_index (mean divides by the number of targets not ignored: NaN when all are),
// nll_loss likewise. logits/logp (N, C), target (N) int64 class indices; a target outside
// [0, C) other than ignore_index is an Error naming it. mse_loss is a composite in
// functional (sub, square, mean/sum) with no op of its own.
// Not here: class weights, (N, C, d1, ...) inputs, probability targets.
#pragma once
#include "reckon/ops/functional.h"  // Reduction, CrossEntropyArgs
#include "reckon/ops/op.h"

namespace reckon {

struct SoftmaxAttrs {
  int64_t dim = -1;
  RK_FIELDS(dim)
};

// x seen as (outer, len, inner) around the softmax dim: element (o, j, i) is at
// (o * len + j) * inner + i. A 0-d x is one row of one element (dim 0 or -1).
struct RowGeo {
  int64_t outer = 1, len = 1, inner = 1;
};
RowGeo softmax_geo(std::string_view op, const Shape& x, int64_t dim);

// in = x -> y = exp(x - max) / sum(exp(x - max)) along dim. Keeps y.
struct Softmax {
  static constexpr std::string_view kName = "softmax";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  RK_OP_DECLS(SoftmaxAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = x -> y = x - max - log(sum(exp(x - max))) along dim. Keeps y.
struct LogSoftmax {
  static constexpr std::string_view kName = "log_softmax";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  RK_OP_DECLS(SoftmaxAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy, y) -> dx = y * (dy - sum(dy * y)) along dim.
struct SoftmaxBackward {
  static constexpr std::string_view kName = "softmax_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  RK_OP_DECLS(SoftmaxAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (dy, y) -> dx = dy - exp(y) * sum(dy) along dim.
struct LogSoftmaxBackward {
  static constexpr std::string_view kName = "log_softmax_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  RK_OP_DECLS(SoftmaxAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (logits (N, C), target (N) i64) -> loss ([] for mean/sum, (N) for none), logp (N, C).
// loss_i = (1 - eps) * -logp[i, t_i] + eps / C * -sum_c logp[i, c] (0 where t_i is ignored);
// mean divides the sum by the number of targets not ignored. logp is a hidden output the
// autograd node keeps (with target) for the backward; a gradient reaching logp (should a
// caller use it) flows back as log_softmax's.
struct CrossEntropy {
  static constexpr std::string_view kName = "cross_entropy";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  static constexpr std::string_view kNotExportable = "a training loss: the exported forward ends at the logits";
  RK_OP_DECLS(CrossEntropyArgs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy ([] or (N)), logp (N, C), target (N)) -> dlogits (N, C) =
// g_i * (exp(logp) - (1 - eps) * onehot(t_i) - eps / C), 0 on ignored rows; g_i = dy (sum),
// dy / count (mean), dy_i (none).
struct CrossEntropyBackward {
  static constexpr std::string_view kName = "cross_entropy_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  RK_OP_DECLS(CrossEntropyArgs);
  RK_OP_REF;
  RK_OP_CPU;
};

struct NllAttrs {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  RK_FIELDS(reduction, ignore_index)
};

// in = (logp (N, C), target (N) i64) -> loss ([] or (N)): -logp[i, t_i], 0 where ignored.
// Keeps target.
struct NllLoss {
  static constexpr std::string_view kName = "nll_loss";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  static constexpr std::string_view kNotExportable = "a training loss: the exported forward ends at the logits";
  RK_OP_DECLS(NllAttrs);
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy ([] or (N)), target (N)) -> dlogp (N, C): -g_i at (i, t_i), 0 elsewhere.
struct NllLossBackward {
  static constexpr std::string_view kName = "nll_loss_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    NllAttrs nll;
    int64_t classes = 0;
    RK_FIELDS(nll, classes)
  };
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

// Targets of a loss: (N) i64, each in [0, classes) or == ignore_index; on the cpu device the
// values are checked here (inference), so kernels may trust them. Names the op and index.
void check_targets(std::string_view op, const Tensor& target, int64_t n, int64_t classes, int64_t ignore_index);

}  // namespace reckon

#define RK_LOSS_OPS(X)                                                                                  \
  X(Softmax) X(LogSoftmax) X(SoftmaxBackward) X(LogSoftmaxBackward) X(CrossEntropy) X(CrossEntropyBackward) \
  X(NllLoss) X(NllLossBackward)
