// Optimizers and LR schedules by name: the one place that turns "sgd" / "adam" / "adamw" and
// "none" / "step" / "cosine" plus their settings into the classes of optim.h and schedule.h.
// The trainer (train/) and the ledger (ledger/) both build theirs here, so what the ledger
// predicts a step of is the optimizer a run steps with.
// Not here: the range checks of each setting (callers name their own flags in the error),
// parameter groups, resuming a schedule (schedules are closed forms of the step count).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/schedule.h"

namespace reckon::optim {

// The names make_optimizer and make_schedule know, in the order messages list them.
inline constexpr std::array<std::string_view, 3> kOptimizerNames{"sgd", "adam", "adamw"};
inline constexpr std::array<std::string_view, 3> kScheduleNames{"none", "step", "cosine"};

// "a, b, c": the names as a message lists them.
std::string join_names(std::span<const std::string_view> names);

struct OptimizerSpec {
  std::string name = "sgd";            // one of kOptimizerNames
  // Unset: the optimizer's own default (optim.h): lr 0.01 for SGD, 1e-3 for Adam and AdamW;
  // weight decay 0 for SGD and Adam, 0.01 for AdamW (PyTorch's AdamW default).
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;  // coupled (SGD, Adam) or decoupled (AdamW)
  double momentum = 0.0;               // sgd only (0: no momentum buffer)
  bool nesterov = false;               // sgd only
};

// requires: params as Optimizer's. Throws naming spec.name when it is not one of kOptimizerNames.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<Tensor> params);

// A per-step schedule over a whole run, in optimizer steps.
struct ScheduleSpec {
  std::string name = "none";   // one of kScheduleNames
  double lr = 0.01;            // the base lr
  int64_t total_steps = 1;     // steps of the run (cosine anneals over those after the warm-up)
  int64_t warmup_steps = 0;    // linear warm-up before the schedule (0: none)
  int64_t step_size = 1;       // step: steps between drops (>= 1)
  double gamma = 0.1;          // step: lr factor at each drop
};

// none: ConstantLR; step: StepLR(lr, step_size, gamma); cosine: CosineAnnealingLR(lr, T_max =
// max(1, total_steps - warmup_steps)); each behind LinearWarmup when warmup_steps > 0.
// Throws naming spec.name when it is not one of kScheduleNames.
std::shared_ptr<const LRSchedule> make_schedule(const ScheduleSpec& spec);

}  // namespace reckon::optim
