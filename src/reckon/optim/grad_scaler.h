// GradScaler: dynamic loss scaling for float16 training, with torch.amp.GradScaler's semantics
// and arithmetic (torch 2.x, its _amp_foreach_non_finite_check_and_unscale_ and
// _amp_update_scale_ kernels), checked step by step against PyTorch by
// tests/test_grad_scaler.cpp (golden/amp/grad_scaler.json, scripts/make_amp_golden.py).
//
//   GradScaler scaler;                          // scale 65536, x2 after 2000 clean steps, /2 on overflow
//   for (...) {
//     opt.zero_grad();
//     scaler.scale(loss).backward();            // gradients are scale times too large
//     scaler.unscale_(opt);                     // optional: to clip or inspect real gradients
//     scaler.step(opt);                         // skips opt.step() if a gradient is inf or NaN
//     scaler.update();                          // backs off or grows the scale
//   }
//
// Semantics (as torch):
// - The scale is a float32 value; the growth tracker an int32 count of consecutive clean steps.
// - scale(loss) = loss * scale through the op dispatcher (differentiable; shape-only on meta).
// - unscale_(opt): inv = float(1.0 / double(scale)) (torch takes the reciprocal in double); every
//   defined gradient of opt's parameters is multiplied by inv in place, in float32 — also when
//   it holds an inf or a NaN — and the step is marked overflowed if any element is inf or NaN.
//   Once per optimizer per step: a second call before update(), or a call after step(), throws.
// - step(opt): unscale_(opt) unless done; if a gradient overflowed, opt.step() is not called
//   (weights and optimizer state, Adam's step count included, are untouched) and step returns
//   false; else it calls opt.step() and returns true. A second step() before update() throws.
// - update(): overflow in any optimizer stepped this step: scale = float(double(scale) *
//   backoff_factor), tracker = 0; else tracker += 1 and when it reaches growth_interval,
//   scale = float(double(scale) * growth_factor) if that is finite, tracker = 0. (The kernel
//   multiplies the float scale by the double factor in double, then rounds to float: with a
//   factor that is not a power of two this differs from float32 arithmetic.) It then forgets
//   the step's per-optimizer state. update() with no inf check since the last update() throws.
// - enabled = false: scale() returns loss, unscale_/update/load_state_dict do nothing, step()
//   calls opt.step() and returns true, get_scale() is 1, state_dict() is empty.
//
// Differences from torch:
// - The scale exists from construction (torch creates it lazily at the first scale() call and
//   throws if unscale_/step/update come first); there is no device argument: gradients on cpu
//   are unscaled, gradients on meta (no data) are counted as checked and never overflow, so the
//   ledger can run a scaled training step on the meta device.
// - Only float32 gradients are unscaled; any other dtype throws (torch throws for float16 and
//   unscales the others). No sparse gradients, closures, or optimizers with their own scaling.
// - The options are checked more strictly: init_scale finite and > 0, growth_factor > 1,
//   0 < backoff_factor < 1, 1 <= growth_interval < 2^31 (torch checks the two factors only).
// - Extras, for the trainer's log: the scale after every update(), the count of skipped steps,
//   the first parameter whose gradient overflowed, and a warning when overflow drives the scale
//   below 1. None of them is part of state_dict() (torch has no such state).
// - bf16 needs no scaler (its range is float32's): as in torch, nothing here looks at the
//   autocast dtype; the trainer decides, and should enable a scaler for float16 only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/nn/module.h"
#include "reckon/optim/optim.h"

namespace reckon::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16; kept as float(init_scale)
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  // requires (when enabled): init_scale finite and > 0 as a float32, growth_factor > 1,
  // 0 < backoff_factor < 1, 1 <= growth_interval < 2^31; otherwise throws reckon::Error naming it.
  explicit GradScaler(const GradScalerOptions& o = {});

  // loss * scale (a new tensor through the dispatcher; loss's dtype and device), or loss
  // itself when disabled.
  Tensor scale(const Tensor& loss) const;

  // Multiplies opt's gradients by float(1 / double(scale)) in place and records whether any is
  // inf or NaN. requires: not yet called for opt since the last update(), and step(opt) not
  // called; every defined gradient is f32 on cpu or meta. Throws reckon::Error otherwise.
  void unscale_(Optimizer& opt);

  // unscale_(opt) if not done this step; then opt.step() unless a gradient overflowed.
  // ensures: returns whether opt.step() ran (true when disabled). Throws if called twice before
  // update(), or if none of opt's parameters has a gradient (torch: "No inf checks were
  // recorded for this optimizer").
  bool step(Optimizer& opt);

  // Backs off or grows the scale (see the file comment) and starts a new step.
  // requires: unscale_ or step was called for some optimizer with gradients since the last
  // update().
  void update();
  // torch's update(new_scale): sets the scale to float(new_scale) (finite, > 0), leaves the
  // growth tracker alone, and starts a new step. Needs no inf check.
  void update(double new_scale);

  bool is_enabled() const { return options_.enabled; }
  // The float32 scale (1 when disabled, as torch's get_scale()).
  float get_scale() const { return options_.enabled ? scale_ : 1.0f; }
  // Consecutive clean steps since the last growth or backoff (0 when disabled).
  int32_t growth_tracker() const { return options_.enabled ? growth_tracker_ : 0; }
  const GradScalerOptions& options() const { return options_; }

  // ---- beyond torch: for the trainer's log ----
  // The scale after each update() of this object, oldest first (4 bytes a step).
  const std::vector<float>& scale_history() const { return scale_history_; }
  // How many step() calls skipped opt.step() because a gradient overflowed.
  int64_t skipped_steps() const { return skipped_steps_; }
  // A resumed run carries its count on (it is not part of state_dict(), as torch has none).
  void set_skipped_steps(int64_t n) { skipped_steps_ = n; }
  // The name (Tensor::name(), or "parameter <i>" when it has none) of the first parameter in
  // the optimizer's order (optimizers in the order they were unscaled) whose gradient held an
  // inf or a NaN in the latest step; "" if none. Set by unscale_/step, kept after update() until
  // the next step's first unscale_.
  const std::string& overflow_param() const { return overflow_param_; }
  // Non-empty right after an update() that backed the scale off to below 1 (gradients
  // overflowed even at a scale <= 1, so they overflow unscaled: a diverging loss, or values
  // outside float16's range); it names the parameter and both scales. Cleared by the next
  // update(). reckon never prints it: the caller logs it.
  const std::string& warning() const { return warning_; }

  // torch's GradScaler.state_dict() keys, as 0-dim tensors on cpu:
  //   "scale" f32 (the scale's exact value), "growth_factor" f64, "backoff_factor" f64,
  //   "growth_interval" i64, "_growth_tracker" i32 (torch's tracker tensor is int32).
  // Empty when disabled (as torch). Take it after update(), as torch advises.
  nn::StateDict state_dict() const;
  // Restores all five entries (any dtype holding the value; the integers must be integral).
  // Does nothing when disabled. Throws reckon::Error naming the key for a missing or unknown
  // key, a tensor that is not a single value on cpu, or a value the constructor would refuse
  // (or a growth tracker outside [0, growth_interval)); an empty dict is refused as torch does
  // ("saved from a disabled GradScaler?"). Nothing is changed unless the whole dict is valid.
  void load_state_dict(const nn::StateDict& dict);

 private:
  enum class Stage : uint8_t { ready, unscaled, stepped };
  struct PerOptimizer {
    const Optimizer* opt;
    Stage stage = Stage::ready;
    bool checked = false;    // some parameter had a gradient (torch: found_inf_per_device non-empty)
    bool found_inf = false;
  };
  PerOptimizer& per_optimizer(const Optimizer& opt);
  void start_next_step();

  GradScalerOptions options_;
  float scale_ = 1.0f;
  int32_t growth_tracker_ = 0;
  std::vector<PerOptimizer> per_opt_;  // this step's optimizers, in first-use order
  bool new_step_ = true;               // no unscale_ since the last update()
  std::vector<float> scale_history_;
  int64_t skipped_steps_ = 0;
  std::string overflow_param_;
  std::string warning_;
};

}  // namespace reckon::optim
