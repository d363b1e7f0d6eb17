#include "reckon/optim/schedule.h"

#include <cmath>

#include "reckon/core/error.h"
#include "reckon/optim/optim.h"

namespace reckon::optim {

void LRSchedule::apply(Optimizer& opt, int64_t step) const { opt.set_lr(get_lr(step)); }

StepLR::StepLR(double base_lr, int64_t step_size, double gamma)
    : LRSchedule(base_lr), step_size(step_size), gamma(gamma) {
  RK_CHECK(step_size > 0, "[StepLR] step_size must be positive, got {}", step_size);
}

double StepLR::get_lr(int64_t step) const {
  return base_lr_ * std::pow(gamma, double(std::max<int64_t>(step, 0) / step_size));
}

CosineAnnealingLR::CosineAnnealingLR(double base_lr, int64_t T_max, double eta_min)
    : LRSchedule(base_lr), T_max(T_max), eta_min(eta_min) {
  RK_CHECK(T_max > 0, "[CosineAnnealingLR] T_max must be positive, got {}", T_max);
}

double CosineAnnealingLR::get_lr(int64_t step) const {
  return eta_min + (base_lr_ - eta_min) * (1.0 + std::cos(M_PI * double(step) / double(T_max))) / 2.0;
}

LinearWarmup::LinearWarmup(std::shared_ptr<const LRSchedule> after_, int64_t warmup_steps, double start_factor)
    : LRSchedule(after_ ? after_->base_lr() : 0.0),
      after(std::move(after_)),
      warmup_steps(warmup_steps),
      start_factor(start_factor > 0.0 ? start_factor : 1.0 / double(std::max<int64_t>(warmup_steps, 1))) {
  RK_CHECK(after != nullptr, "[LinearWarmup] needs the schedule that follows the warmup");
  RK_CHECK(warmup_steps >= 0, "[LinearWarmup] warmup_steps must be >= 0, got {}", warmup_steps);
  RK_CHECK(this->start_factor <= 1.0, "[LinearWarmup] start_factor must be in (0, 1], got {}", start_factor);
}

double LinearWarmup::get_lr(int64_t step) const {
  if (step >= warmup_steps) return after->get_lr(step - warmup_steps);
  double f = start_factor + (1.0 - start_factor) * double(std::max<int64_t>(step, 0)) / double(warmup_steps);
  return base_lr_ * f;
}

}  // namespace reckon::optim
