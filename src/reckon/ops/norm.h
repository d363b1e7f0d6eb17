// Normalisation and regularisation: batch norm with running statistics, local response norm
// across channels, dropout with a saved mask; each with its backward.
// x (N, C, *): batch norm and LRN take any rank >= 2 (>= 3 for LRN, as torch); the spatial
// dims are flattened to S. Semantics are PyTorch's (torch.nn.functional.batch_norm,
// torch.nn.LocalResponseNorm, torch.nn.functional.dropout); differences are listed per op.
// Not here: group/layer norm, dropout2d.
#pragma once
#include "reckon/ops/op.h"

namespace reckon {

struct BatchNormAttrs {
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  RK_FIELDS(training, momentum, eps)
};

// in = (x (N, C, *), weight (C), bias (C), running_mean (C), running_var (C)); weight and bias
// may be undefined (1 and 0); the running stats may be undefined in training only.
// training: y = (x - mean) * invstd * weight + bias with the batch mean and biased variance,
//   invstd = 1 / sqrt(var + eps); out = y, save_mean (C), save_invstd (C) (x's dtype), and, when
//   the running stats are given, running_mean and running_var themselves as outputs 3 and 4,
//   updated in place (as ONNX's training-mode BatchNormalization has them as outputs):
//   running = (1 - momentum) * running + momentum * batch, with the unbiased variance
//   (var * M / (M - 1), M = N * S).
// eval: y from running_mean / running_var; out = y.
// Keeps x and weight, plus save_mean/save_invstd (training) or running_mean/running_var (eval).
// Backward is BatchNorm2dBackward, plus the exact gradient of save_mean/save_invstd should a
// caller use them. No MACs: every operation is elementwise or a plain sum.
// Batch norm runs channels-last as the elementwise ops do (ops/op.h) on its first `big` inputs
// (x; dy and x), when its per-channel tensors are f32 (the fast kernel's mixed precision):
// kernels/cpu/norm.cpp has NHWC loops.
bool batch_norm_channels_last(std::span<const Tensor> in, uint32_t big);

struct BatchNorm2d {
  static constexpr std::string_view kName = "batch_norm2d";
  static bool channels_last(std::span<const Tensor> in, const BatchNormAttrs&) { return batch_norm_channels_last(in, 1); }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 1u;
  static constexpr AmpPolicy kAmp = AmpPolicy::keep;
  static int alias_of(int out, const BatchNormAttrs&) { return out == 3 || out == 4 ? out : -1; }
  RK_OP_DECLS(BatchNormAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy (N, C, *), x, weight (C) or undefined, save_mean (C), save_invstd (C)) in training;
//      (dy, x, weight or undefined, running_mean (C), running_var (C)) in eval (attrs.training).
// out = dx (N, C, *), dweight (C), dbias (C). Training (as PyTorch, xhat = (x - mean) * invstd):
//   dx = weight * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)); eval: dx = dy * weight *
//   invstd; dweight = sum(dy * xhat), dbias = sum(dy), sums over N and S.
struct BatchNorm2dBackward {
  static constexpr std::string_view kName = "batch_norm2d_backward";
  static bool channels_last(std::span<const Tensor> in, const BatchNormAttrs&) { return batch_norm_channels_last(in, 2); }
  static constexpr uint32_t kChannelsLastIn = 3u, kChannelsLastOut = 1u;
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  RK_OP_DECLS(BatchNormAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

struct LrnAttrs {
  int64_t size = 5;
  double alpha = 1e-4, beta = 0.75, k = 1.0;
  RK_FIELDS(size, alpha, beta, k)
};
// Channel window of local response norm at channel c: [c - size / 2, c + (size - 1) / 2],
// zero outside [0, C) (torch pads size / 2 channels before and (size - 1) / 2 after).
inline int64_t lrn_lo(int64_t c, int64_t size) { return c - size / 2; }
inline int64_t lrn_hi(int64_t c, int64_t size) { return c + (size - 1) / 2; }  // inclusive

// in = x (N, C, *) -> y = x * s^-beta, s = k + alpha / size * sum over the window of x^2.
// MACs: size per element, the window's padding taps included (as conv counts them).
// Keeps x (the backward recomputes s rather than keeping a second tensor of x's size).
struct LocalResponseNorm {
  static constexpr std::string_view kName = "local_response_norm";
  static constexpr AmpPolicy kAmp = AmpPolicy::fp32;
  RK_OP_DECLS(LrnAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy, x) -> dx_j = dy_j s_j^-beta - 2 alpha beta / size * x_j * sum over the channels c
// whose window holds j of dy_c x_c s_c^(-beta-1). MACs: 2 * size per element (s again, then
// the transposed window sum).
struct LocalResponseNormBackward {
  static constexpr std::string_view kName = "local_response_norm_backward";
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  RK_OP_DECLS(LrnAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

struct DropoutAttrs {
  double p = 0.5;
  bool training = true;
  uint64_t seed = 0;  // the mask's seed: drawn by dropout() from default_generator(), one per call
  RK_FIELDS(p, training, seed)
};
// Element i of a dropout mask keeps its value when dropout_keep(seed, i, p): a counter-based
// uniform (splitmix64 of seed and i) >= p. The functional dropout() draws the seed once from
// default_generator() (on every device, so the meta device's stream stays the cpu's) and passes
// it as an attribute: the ref and cpu kernels give the same mask, the cpu one can run in parallel,
// and a captured graph replays the same mask (or a fresh one: Dropout::reseed). (The numbers are
// not PyTorch's stream; the distribution is.)
inline bool dropout_keep(uint64_t seed, int64_t i, double p) {
  uint64_t z = seed + (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1.0p-53 >= p;
}

// in = x -> y = x * mask, mask (x's shape and dtype) holding 0 or 1 / (1 - p) (all 0 when
// p == 1). Not training: y = x, mask = 1 and no random numbers are drawn (functional dropout
// returns x itself then, without calling the op). Keeps the mask; backward = dy * mask.
struct Dropout {
  static constexpr std::string_view kName = "dropout";
  // A new mask for a replay that should draw afresh (GraphModule in training).
  static void reseed(DropoutAttrs& a) {
    if (a.training && a.p > 0.0 && a.p < 1.0) a.seed = default_generator().next_u64();
  }
  RK_OP_DECLS(DropoutAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

}  // namespace reckon

#define RK_NORM_OPS(X)                                                                        \
  X(BatchNorm2d) X(BatchNorm2dBackward) X(LocalResponseNorm) X(LocalResponseNormBackward) \
  X(Dropout)
