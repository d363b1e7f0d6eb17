#include "reckon/optim/step.h"

#include <fmt/format.h>

#include "reckon/nn/module.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/optim.h"

namespace reckon::train {

bool grad_scaler_on(const std::string& mode, DType precision) {
  RK_CHECK(mode == "auto" || mode == "on" || mode == "off", "--grad-scaler '{}' is not one of auto, on, off", mode);
  return mode == "on" || (mode == "auto" && precision == DType::f16);
}

ActivationLayout parse_activation_layout(const std::string& s) {
  if (s == "auto") return ActivationLayout::automatic;
  if (s == "contiguous") return ActivationLayout::contiguous;
  if (s == "channels_last") return ActivationLayout::channels_last;
  throw Error(fmt::format("--memory-format '{}' is not one of auto, contiguous, channels_last", s));
}

bool channels_last_for(ActivationLayout l, DType precision) {
  return l == ActivationLayout::channels_last || (l == ActivationLayout::automatic && precision == DType::bf16);
}

Step::Step(nn::Module& model, optim::Optimizer& opt, optim::GradScaler* scaler, StepConfig cfg)
    : model_(model), opt_(opt), scaler_(scaler), cfg_(cfg) {
  RK_CHECK(cfg.precision == DType::f32 || cfg.precision == DType::bf16 || cfg.precision == DType::f16,
           "[train] precision must be fp32, bf16 or fp16, not {}", dtype_name(cfg.precision));
}

void Step::begin(int64_t window_samples) {
  RK_CHECK(window_samples >= 1, "[train] a step needs at least one sample, got {}", window_samples);
  window_ = window_samples;
  seen_ = 0;
  opt_.zero_grad();
}

MicroResult Step::micro(const Tensor& x, const Tensor& y) {
  const int64_t n = y.numel();
  RK_CHECK(window_ > 0 && seen_ + n <= window_, "[train] micro-batch of {} overflows the window ({} of {} seen)", n,
           seen_, window_);
  seen_ += n;
  MicroResult r;
  Tensor loss;
  {
    Autocast ac(cfg_.precision);
    const bool nhwc = x.dim() == 4 && channels_last_for(cfg_.layout, cfg_.precision);
    Tensor logits = model_(nhwc ? to_channels_last(x) : x);
    ScopeGuard scope("(loss)");
    Tensor ce = cross_entropy(logits, y, {.label_smoothing = cfg_.label_smoothing});
    if (!ce.is_meta()) r.loss = ce.item();
    if (on_loss) on_loss(ce);
    loss = n == window_ ? ce : scale(ce, double(n) / double(window_));
    if (scaler_) loss = scaler_->scale(loss);
    r.logits = logits.detach();
  }
  loss.backward();
  return r;
}

bool Step::finish() {
  RK_CHECK(seen_ == window_, "[train] the window holds {} samples but {} were run", window_, seen_);
  bool stepped = true;
  {
    ScopeGuard scope("(optimizer)");
    if (scaler_) {
      stepped = scaler_->step(opt_);
      scaler_->update();
    } else {
      opt_.step();
    }
  }
  window_ = seen_ = 0;
  return stepped;
}

}  // namespace reckon::train
