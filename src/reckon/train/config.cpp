// TrainConfig to and from the checkpoint's JSON, its checks, and the specs it builds (config.h).
#include "reckon/train/config.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "reckon/core/error.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/conv.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"

namespace reckon::train {

using json = nlohmann::json;

// tools/cmd_train.cpp binds a flag to a bool and a bytes option to an int64_t.
#define RK_TRAIN_FIELD(type, name, def, keep, cli, help)                                                      \
  static_assert(Cli::cli != Cli::flag || std::is_same_v<type, bool>, "config_fields.h: " #name " is a flag"); \
  static_assert(Cli::cli != Cli::bytes || std::is_same_v<type, int64_t>, "config_fields.h: " #name " is bytes");
#include "reckon/train/config_fields.h"
#undef RK_TRAIN_FIELD

std::string FieldInfo::flag() const {
  std::string s = name;
  std::replace(s.begin(), s.end(), '_', '-');
  return cli == Cli::positional ? s : "--" + s;
}

json config_json(const TrainConfig& c, const data::Normalize& norm) {
  json j = json::object();
  for_each_field(c, [&](const FieldInfo& f, const auto& value, const auto&) {
    if (f.saved()) j[f.name] = value;
  });
  j[kNormalizeMeanKey] = norm.mean;
  j[kNormalizeStdKey] = norm.std;
  return j;
}

// On --resume every setting that shapes the numbers (epochs too: the schedule depends on
// them) comes from the checkpoint; the ones that only shape how the run is carried out
// (threads, checkpoints, logging, stopping) from cfg.
void apply_saved_config(TrainConfig& c, const json& j, data::Normalize& norm, const std::string& path) {
  RK_CHECK(j.is_object(), "{}: metadata 'config' is not a JSON object", path);
  // Each setting read on its own, so an error names the key and what it holds.
  auto read = [&](const char* key, auto& value, bool required) {
    using T = std::remove_cvref_t<decltype(value)>;
    if (!j.contains(key)) {
      RK_CHECK(!required, "{}: metadata 'config' lacks the training setting '{}'", path, key);
      return;
    }
    try {
      value = j.at(key).template get<T>();
    } catch (const json::exception&) {
      std::string shown = j.at(key).dump();
      if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
      throw Error(fmt::format("{}: metadata 'config' setting '{}' is {} ({}), not the {} it must be", path, key, shown,
                              j.at(key).type_name(), json(T{}).type_name()));
    }
  };
  for_each_field(c, [&](const FieldInfo& f, auto& value, const auto& def) {
    if (f.keep == Keep::numbers) read(f.name, value, true);
    if (f.keep == Keep::numbers_or_default) {
      value = def;
      read(f.name, value, false);
    }
  });
  read(kNormalizeMeanKey, norm.mean, true);
  read(kNormalizeStdKey, norm.std, true);
}

std::optional<OptimizerDefaults> optimizer_defaults(const std::string& optimizer) {
  if (optimizer == "sgd") return OptimizerDefaults{kSgdRecipeLr, kSgdRecipeWeightDecay};
  if (optimizer == "adam") return OptimizerDefaults{optim::AdamOptions{}.lr, optim::AdamOptions{}.weight_decay};
  if (optimizer == "adamw") return OptimizerDefaults{optim::AdamWOptions{}.lr, optim::AdamWOptions{}.weight_decay};
  return std::nullopt;
}

std::string apply_optimizer_defaults(TrainConfig& c) {
  const std::optional<OptimizerDefaults> d = optimizer_defaults(c.optimizer);
  if (!d) return "";
  const double lr = d->lr, wd = d->weight_decay;
  std::vector<std::string> chose;
  if (std::isnan(c.lr)) c.lr = lr, chose.push_back(fmt::format("lr {}", lr));
  if (std::isnan(c.weight_decay)) c.weight_decay = wd, chose.push_back(fmt::format("weight decay {}", wd));
  if (chose.empty()) return "";
  return fmt::format("{} {} {}'s default{}", chose.size() == 2 ? chose[0] + " and " + chose[1] : chose[0],
                     chose.size() == 2 ? "are" : "is", c.optimizer, chose.size() == 2 ? "s" : "");
}

void validate(const TrainConfig& c) {
  RK_CHECK(c.epochs >= 1, "--epochs must be at least 1 (got {})", c.epochs);
  RK_CHECK(!c.qat || !c.checkpoint.empty() || c.resume,
           "--qat fine-tunes trained weights: give them with --checkpoint FILE");
  RK_CHECK(!c.qat || c.precision == "fp32", "--qat trains in fp32 (fake quantization), not --precision {}", c.precision);
  RK_CHECK(c.qat_start_epoch >= 0 && c.qat_start_epoch < c.epochs,
           "--qat-start-epoch must be in [0, --epochs) (got {} of {})", c.qat_start_epoch, c.epochs);
  RK_CHECK(c.batch >= 1, "--batch must be at least 1 (got {})", c.batch);
  RK_CHECK(std::ranges::count(optim::kOptimizerNames, c.optimizer), "--optimizer '{}' is not one of {}", c.optimizer,
           optim::join_names(optim::kOptimizerNames));
  RK_CHECK(std::isfinite(c.lr) && c.lr > 0, "--lr must be a positive number (got {})", c.lr);
  RK_CHECK(std::ranges::count(optim::kScheduleNames, c.schedule), "--schedule '{}' is not one of {}", c.schedule,
           optim::join_names(optim::kScheduleNames));
  RK_CHECK(c.momentum >= 0 && c.momentum < 1, "--momentum must be in [0, 1) (got {})", c.momentum);
  RK_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "--weight-decay must be >= 0 (got {})",
           c.weight_decay);
  RK_CHECK(c.val_split >= 0 && c.val_split < 1, "--val-split must be in [0, 1) (got {})", c.val_split);
  RK_CHECK(c.early_stop >= 0, "--early-stop must be >= 0 epochs (got {})", c.early_stop);
  RK_CHECK(c.early_stop == 0 || c.val_split > 0, "--early-stop watches the validation accuracy: give --val-split too");
  RK_CHECK(c.warmup >= 0, "--warmup must be >= 0 steps (got {})", c.warmup);
  RK_CHECK(c.step_epochs >= 0, "--step-epochs must be >= 0 (got {})", c.step_epochs);
  RK_CHECK(c.gamma > 0, "--gamma must be positive (got {})", c.gamma);
  RK_CHECK(c.label_smoothing >= 0 && c.label_smoothing < 1, "--label-smoothing must be in [0, 1) (got {})",
           c.label_smoothing);
  RK_CHECK(c.threads >= 0, "--threads must be >= 0 (got {})", c.threads);
  RK_CHECK(c.checkpoint_every >= 0, "--checkpoint-every must be >= 0 (got {})", c.checkpoint_every);
  RK_CHECK(c.log_every >= 1, "--log-every must be at least 1 (got {})", c.log_every);
  RK_CHECK(c.print_every >= 1, "--print-every must be at least 1 (got {})", c.print_every);
  RK_CHECK(c.eval_batch >= 0, "--eval-batch must be >= 0 (got {}; 0: the training batch)", c.eval_batch);
  RK_CHECK(c.stop_after >= 0, "--stop-after must be >= 0 (got {})", c.stop_after);
  RK_CHECK(!c.out.empty(), "--out must name a directory");
  precision_dtype(c.precision);  // throws naming --precision
  RK_CHECK(c.accum >= 1, "--accum must be at least 1 (got {})", c.accum);
  grad_scaler_on(c.grad_scaler, precision_dtype(c.precision));  // throws naming --grad-scaler
  RK_CHECK(c.max_memory >= 0, "--max-memory must be >= 0 bytes (got {})", c.max_memory);
  if (!c.conv_algo.empty()) parse_conv_algorithm(c.conv_algo, "--conv-algo");
  parse_activation_layout(c.memory_format);  // throws naming --memory-format
}

optim::OptimizerSpec optimizer_spec(const TrainConfig& c) {
  return {.name = c.optimizer, .lr = c.lr, .weight_decay = c.weight_decay, .momentum = c.momentum,
          .nesterov = c.nesterov};
}

optim::ScheduleSpec schedule_spec(const TrainConfig& c, int64_t steps_per_epoch) {
  double every_epochs = c.step_epochs > 0 ? c.step_epochs : std::max(1.0, double(c.epochs) / 3.0);
  return {.name = c.schedule,
          .lr = c.lr,
          .total_steps = c.epochs * steps_per_epoch,
          .warmup_steps = c.warmup,
          .step_size = std::max<int64_t>(1, int64_t(std::llround(every_epochs * double(steps_per_epoch)))),
          .gamma = c.gamma};
}

ThreadsGuard::ThreadsGuard(int n) : prev_(omp_get_max_threads()) {
  // OpenMP would try to start them all (100000 threads hang the machine before any error).
  RK_CHECK(n >= 0 && n <= kMaxThreads, "--threads must be between 0 (automatic) and {}, got {} (this machine has {} cpus)",
           kMaxThreads, n, omp_get_num_procs());
  if (n > 0) omp_set_num_threads(n);
}
ThreadsGuard::~ThreadsGuard() { omp_set_num_threads(prev_); }

}  // namespace reckon::train
