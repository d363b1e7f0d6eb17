// Learning-rate schedules as closed forms of the step count: get_lr(step) is the lr PyTorch's
// scheduler holds after `step` calls of scheduler.step() (its last_epoch). A training loop
// calls apply(opt, step) before each optimizer step. Not stateful, so a resumed run needs only
// the step count.
#pragma once
#include <cstdint>
#include <memory>

namespace reckon::optim {

class Optimizer;

class LRSchedule {
 public:
  explicit LRSchedule(double base_lr) : base_lr_(base_lr) {}
  virtual ~LRSchedule() = default;
  virtual double get_lr(int64_t step) const = 0;
  double base_lr() const { return base_lr_; }
  // opt.set_lr(get_lr(step)).
  void apply(Optimizer& opt, int64_t step) const;

 protected:
  double base_lr_;
};

// A fixed lr.
class ConstantLR final : public LRSchedule {
 public:
  explicit ConstantLR(double base_lr) : LRSchedule(base_lr) {}
  double get_lr(int64_t) const override { return base_lr_; }
};

// torch.optim.lr_scheduler.StepLR: base_lr * gamma^floor(step / step_size).
class StepLR final : public LRSchedule {
 public:
  StepLR(double base_lr, int64_t step_size, double gamma = 0.1);
  double get_lr(int64_t step) const override;
  int64_t step_size;
  double gamma;
};

// torch.optim.lr_scheduler.CosineAnnealingLR (its closed form):
// eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2.
class CosineAnnealingLR final : public LRSchedule {
 public:
  CosineAnnealingLR(double base_lr, int64_t T_max, double eta_min = 0.0);
  double get_lr(int64_t step) const override;
  int64_t T_max;
  double eta_min;
};

// Linear warmup, then `after` restarted at step 0. Equals PyTorch's
//   SequentialLR(opt, [LinearLR(opt, start_factor, 1.0, total_iters=warmup_steps), after],
//                milestones=[warmup_steps])
// step < warmup_steps: after.base_lr * (start_factor + (1 - start_factor) * step / warmup_steps);
// else after.get_lr(step - warmup_steps). start_factor 0 (the default) means 1 / warmup_steps.
class LinearWarmup final : public LRSchedule {
 public:
  LinearWarmup(std::shared_ptr<const LRSchedule> after, int64_t warmup_steps, double start_factor = 0.0);
  double get_lr(int64_t step) const override;
  std::shared_ptr<const LRSchedule> after;
  int64_t warmup_steps;
  double start_factor;
};

}  // namespace reckon::optim
