// The training loop behind `reckon train`: a zoo model, a dataset spec, an optimizer with a
// per-step LR schedule, evaluation on the test split after every epoch, checkpoints
// (io/checkpoint.h), metrics files (io/metrics.h) and TensorBoard scalars (io/tensorboard.h),
// with a progress bar on a terminal and plain log lines otherwise. Its parts, each in its own
// file and all included here: the settings (config.h), the data specs (data_spec.h),
// evaluation and `reckon eval` (eval.h); the display and running sums (progress.h) are the
// loop's own.
//
// Determinism: the model is initialised from manual_seed(seed); the loader's batches are a
// pure function of (seed, epoch, index); dropout draws from default_generator(), whose state
// the checkpoint keeps. So with one thread a run stopped anywhere and resumed from its last
// checkpoint gives the same losses, bit for bit, as one that never stopped (with several
// threads the kernels' reduction order may differ from run to run).
// Mixed precision, gradient accumulation and loss scaling run through train::Step (step.h), the
// same code the ledger runs on the meta device; recomputation marks blocks (nn/recompute.h).
// Not here: several processes (dist/).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"
#include "reckon/nn/module.h"
#include "reckon/train/config.h"
#include "reckon/train/data_spec.h"
#include "reckon/train/eval.h"

namespace reckon::train {

struct EpochStats {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0.0, train_accuracy = 0.0;  // over the epoch's batches (train mode)
  double test_loss = 0.0, test_accuracy = 0.0;
  double seconds = 0.0;       // training time of this session's part of the epoch
  double images_per_s = 0.0;
  double val_loss = 0.0, val_accuracy = 0.0;  // --val-split (0 without)
};

struct TrainResult {
  int64_t parameters = 0;
  int64_t macs_per_image = 0;    // forward
  int64_t first_step = 0;        // steps done before this session (resume)
  int64_t steps = 0;             // steps done in all at the end
  std::vector<float> losses;     // loss of each step of this session (steps first_step+1 ..)
  std::vector<EpochStats> epochs;  // epochs finished in this session
  EvalResult final_eval;         // the last evaluation (samples 0 when none ran)
  std::string checkpoint;        // the last checkpoint written
  bool stopped = false;          // stop_after or stop_flag ended the run early
  std::array<uint64_t, 4> rng_state{};  // default_generator() at the end
  int64_t skipped_steps = 0;     // optimizer steps the loss scaler skipped (inf/NaN gradients)
  double loss_scale = 0;         // the scaler's scale at the end (0: no scaler)
  std::string int8_model;        // --qat: the int8 QDQ file written at the end
  double int8_accuracy = 0;      // --qat: its top-1 on the test split through the int8 engine
  std::string optimizer_defaults;  // what apply_optimizer_defaults chose ("" when lr and weight decay were given)
  std::vector<std::string> warnings;  // printed as they happened (a first epoch at chance)
  // --val-split: the best validation accuracy, its epoch (1-based; 0: none yet) and best.safetensors.
  double best_val_accuracy = -1;
  int64_t best_epoch = 0;
  std::string best_checkpoint;
  bool early_stopped = false;  // --early-stop ended the run before --epochs
  // --threads 0: the most threads the run had (train/threads.h), and the steps of this session
  // that ran on fewer because other processes held cores.
  int max_threads = 0;
  int64_t fewer_threads_steps = 0;
  // The ledger's prediction, made before the first step (reckon/ledger/ledger.h, with the run
  // around the step: the loader's batches, the epoch's last batch, the evaluation), and what the
  // run measured; predictions 0 when not made (--no-predict, --qat, the ledger refused).
  double predicted_step_s = 0;
  // The median wall time of this session's steps after its first 3 (of the first 65536): 0 with 3
  // steps or fewer.
  double measured_step_s = 0;
  int64_t predicted_process_peak_bytes = 0;
  // VmHWM at the end: the process's peak over its whole life (from Python: the interpreter's,
  // earlier work included).
  int64_t measured_process_peak_bytes = 0;
  int64_t dataset_bytes = 0;             // resident memory opening the data added (measured)
};

// Runs the training described by cfg. Throws reckon::Error (one line, naming the argument or
// file) for a bad config, an unknown model, a dataset that cannot be read, a model that does
// not fit the dataset's images, or a checkpoint that does not match.
TrainResult train(const TrainConfig& cfg);

}  // namespace reckon::train
