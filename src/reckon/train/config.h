// TrainConfig: the settings of `reckon train`, their one list (config_fields.h) reflected so that
// the checkpoint's config JSON, the restore on --resume and the command line's options all come
// from it; the checks of a config; and what it builds in optim/ (optimizer and schedule specs).
// Not here: opening the data (data_spec.h), the loop (trainer.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "reckon/data/loader.h"
#include "reckon/optim/factory.h"

namespace reckon::train {

// What a checkpoint does with a field.
enum class Keep {
  run,                 // how the run is carried out (threads, files, logging): not saved; on --resume as given
  match,               // saved; on --resume it must equal the checkpoint's (the model)
  numbers,             // shapes the numbers: saved, and on --resume taken from the checkpoint
  numbers_or_default,  // as numbers, but checkpoints from before it existed lack it: the default then
  planned,             // not saved: what it chose is in the numbers fields, so on --resume ignored
};
// How `reckon train` takes a field.
enum class Cli {
  none,               // not an option (cmd_train sets it from others, or only code does)
  positional,         // a required positional argument
  flag,               // --name (bool)
  option,             // --name VALUE, its default shown in --help
  option_no_default,  // --name VALUE, no default shown (empty, or a stand-in as out's)
  bytes,              // --name SIZE as parse_bytes reads it (4GiB, 512MiB), into bytes
};

struct FieldInfo {
  const char* name;  // the member, and the JSON key
  Keep keep;
  Cli cli;
  const char* help;
  std::string flag() const;  // "--name" with '-' for '_' (positional: the name)
  bool saved() const { return keep == Keep::match || keep == Keep::numbers || keep == Keep::numbers_or_default; }
};

// lr or weight_decay left to the optimizer (apply_optimizer_defaults).
inline constexpr double kOptimizerDefault = std::numeric_limits<double>::quiet_NaN();
// The SGD recipe's (the README's lenet5 run): lr 0.05, weight decay 5e-4. Adam and AdamW take
// PyTorch's (optim.h: lr 1e-3; weight decay 0, and 0.01 for AdamW).
inline constexpr double kSgdRecipeLr = 0.05;
inline constexpr double kSgdRecipeWeightDecay = 5e-4;

// What one optimizer step did, for TrainConfig::on_step.
struct StepReport {
  int64_t step = 0;             // steps done in all (1-based: this step's number)
  int64_t epoch = 0;            // 1-based
  int64_t batch = 0, batches = 0;  // micro-batches of the epoch done, of how many
  double loss = 0;              // the step's mean loss over its micro-batches
  double lr = 0;
  int64_t samples = 0;          // images in the step
};

struct TrainConfig {
#define RK_TRAIN_FIELD(type, name, def, keep, cli, help) type name = def;
#include "reckon/train/config_fields.h"
#undef RK_TRAIN_FIELD
  // Not a setting: set from elsewhere (a SIGINT handler) to stop at the next step, with a checkpoint.
  std::atomic<bool>* stop_flag = nullptr;
  // Not a setting: called after every optimizer step (the Python package's callback); returning
  // false stops the run as stop_flag does, with a checkpoint. Empty: none.
  std::function<bool(const StepReport&)> on_step;
};

// Calls f(info, member, default_value) for each field of config_fields.h, in its order.
// Config is TrainConfig or const TrainConfig.
template <class Config, class F>
void for_each_field(Config& c, F&& f) {
#define RK_TRAIN_FIELD(type, name, def, keep, cli, help) \
  f(FieldInfo{#name, Keep::keep, Cli::cli, help}, c.name, static_cast<type>(def));
#include "reckon/train/config_fields.h"
#undef RK_TRAIN_FIELD
}

// The keys the config JSON holds beside the fields: the normalisation's figures ("auto" computes
// them from the training split), so a resumed run and `reckon eval` use the run's own.
inline constexpr const char* kNormalizeMeanKey = "normalize_mean";
inline constexpr const char* kNormalizeStdKey = "normalize_std";

// The checkpoint's "config": every saved field, and the normalisation.
nlohmann::json config_json(const TrainConfig& c, const data::Normalize& norm);
// On --resume: the numbers fields and the normalisation from j (a config_json), into c and
// norm. Throws naming path when j lacks one (numbers_or_default ones: the default then).
void apply_saved_config(TrainConfig& c, const nlohmann::json& j, data::Normalize& norm, const std::string& path);
// An optimizer's lr and weight decay when not given (above); nullopt for an unknown name.
struct OptimizerDefaults {
  double lr, weight_decay;
};
std::optional<OptimizerDefaults> optimizer_defaults(const std::string& optimizer);
// Sets lr and weight_decay where they are kOptimizerDefault to c.optimizer's defaults (above).
// Returns what it chose, e.g. "lr 0.001 and weight decay 0.01 are adamw's defaults", or "" when
// both were given (or the optimizer is unknown: validate names it).
std::string apply_optimizer_defaults(TrainConfig& c);
// Throws one line naming the flag for a value out of range (not the data, model or specs:
// those are checked as they are opened).
void validate(const TrainConfig& c);

// The run's optimizer (optim/factory.h), and its schedule per optimizer step over all epochs
// (the step schedule's interval given in epochs: 0 is a third of the run, at least one epoch).
optim::OptimizerSpec optimizer_spec(const TrainConfig& c);
optim::ScheduleSpec schedule_spec(const TrainConfig& c, int64_t steps_per_epoch);

// Sets OpenMP's thread count for a scope (when n > 0) and restores it after, so a library
// call leaves its caller's setting as it was. requires: 0 <= n <= kMaxThreads (else an Error
// naming --threads).
inline constexpr int kMaxThreads = 1024;
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n);
  ~ThreadsGuard();
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int prev_;
};

}  // namespace reckon::train
