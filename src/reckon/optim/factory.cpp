// Optimizers and schedules by name (factory.h).
#include "reckon/optim/factory.h"

#include <algorithm>

#include "reckon/core/error.h"

namespace reckon::optim {

std::string join_names(std::span<const std::string_view> names) {
  std::string s;
  for (std::string_view n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<Tensor> params) {
  auto set = [&](auto& o) {
    if (spec.lr) o.lr = *spec.lr;
    if (spec.weight_decay) o.weight_decay = *spec.weight_decay;
    return o;
  };
  if (spec.name == "sgd") {
    SGDOptions o{.momentum = spec.momentum, .nesterov = spec.nesterov};
    return std::make_unique<SGD>(std::move(params), set(o));
  }
  if (spec.name == "adam") {
    AdamOptions o;
    return std::make_unique<Adam>(std::move(params), set(o));
  }
  if (spec.name == "adamw") {
    AdamWOptions o;
    return std::make_unique<AdamW>(std::move(params), set(o));
  }
  throw Error(fmt::format("[optim] unknown optimizer '{}' (one of {})", spec.name, join_names(kOptimizerNames)));
}

std::shared_ptr<const LRSchedule> make_schedule(const ScheduleSpec& spec) {
  std::shared_ptr<const LRSchedule> s;
  if (spec.name == "cosine") {
    s = std::make_shared<CosineAnnealingLR>(spec.lr, std::max<int64_t>(1, spec.total_steps - spec.warmup_steps));
  } else if (spec.name == "step") {
    s = std::make_shared<StepLR>(spec.lr, spec.step_size, spec.gamma);
  } else if (spec.name == "none") {
    s = std::make_shared<ConstantLR>(spec.lr);
  } else {
    throw Error(fmt::format("[optim] unknown schedule '{}' (one of {})", spec.name, join_names(kScheduleNames)));
  }
  if (spec.warmup_steps > 0) s = std::make_shared<LinearWarmup>(s, spec.warmup_steps);
  return s;
}

}  // namespace reckon::optim
