// One optimizer step of training, as both the trainer and the ledger run it: mixed precision
// (autocast over the forward), gradient accumulation over micro-batches, loss scaling, and the
// optimizer's update. Because the ledger predicts a step by running exactly this code on the
// meta device, what it predicts and what training does cannot drift apart.
//
// Accumulation: a window of K micro-batches holding n samples in all is one optimizer step.
// Each micro-batch's loss is its mean cross entropy times n_micro / n, so the gradients summed
// over the window are those of the mean over all n samples (a short last window of an epoch is
// normalised by its own n). The scaler (if any) scales each micro-batch's loss, and unscales,
// steps and updates once per window. Batch-norm statistics see one micro-batch at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "reckon/core/tensor.h"

namespace reckon::nn {
class Module;
}
namespace reckon::optim {
class Optimizer;
class GradScaler;
}  // namespace reckon::optim

namespace reckon::train {

// The loss-scaling rule of `--grad-scaler MODE` (auto, on, off) at a precision: auto scales fp16
// only (bf16 has f32's range). The trainer, the ledger and bench-train all ask here. Throws naming
// --grad-scaler for another mode.
bool grad_scaler_on(const std::string& mode, DType precision);

// The activations' layout of a training step: channels_last puts the input batch in NHWC, and the
// layers that take it (convolutions, batch norm, the elementwise ops: ops/op.h) keep it, so
// oneDNN's convolutions read and write it without reorders; a layer that does not take it gets a
// recorded reorder. auto: channels_last in bf16 (whose convolutions are direct), contiguous
// otherwise (f32's Winograd convolutions want oneDNN's blocked layout either way).
enum class ActivationLayout : uint8_t { automatic, contiguous, channels_last };
// "auto", "contiguous" or "channels_last" (--memory-format); throws naming the flag for others.
ActivationLayout parse_activation_layout(const std::string& s);
// Whether a step at this precision runs channels-last.
bool channels_last_for(ActivationLayout l, DType precision);

struct StepConfig {
  DType precision = DType::f32;  // f32: no autocast; bf16 or f16: autocast to it
  double label_smoothing = 0.0;
  ActivationLayout layout = ActivationLayout::automatic;
};

struct MicroResult {
  Tensor logits;   // detached (for accuracy)
  double loss = 0; // the micro-batch's mean cross entropy, unscaled and unnormalised
};

class Step {
 public:
  // scaler may be null (no loss scaling). The model, optimizer and scaler outlive the Step.
  Step(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler, StepConfig cfg);
  // Starts a window holding window_samples samples in all (>= 1): drops the gradients.
  void begin(int64_t window_samples);
  // Forward (under autocast) and backward of one micro-batch of the window.
  MicroResult micro(const Tensor& x, const Tensor& y);
  // The update: through the scaler when there is one. False when the scaler skipped it
  // (an inf or NaN gradient).
  bool finish();
  // Called with each micro-batch's mean cross entropy as soon as it is computed (may be empty):
  // a graph capture marks it as an output there, without keeping it alive any longer.
  std::function<void(const Tensor&)> on_loss;

 private:
  nn::Module& model_;
  optim::Optimizer& opt_;
  optim::GradScaler* scaler_;
  StepConfig cfg_;
  int64_t window_ = 0, seen_ = 0;
};

}  // namespace reckon::train
