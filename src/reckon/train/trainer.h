// The training loop behind `reckon train` and `reckon eval`: a zoo model, a dataset spec, an
// optimizer with a per-step LR schedule, evaluation on the test split after every epoch,
// checkpoints (io/checkpoint.h), metrics files (io/metrics.h) and TensorBoard scalars
// (io/tensorboard.h), with a progress bar on a terminal and plain log lines otherwise.
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

namespace reckon::train {

struct EvalResult {
  double loss = 0.0;      // mean cross entropy (no label smoothing)
  double accuracy = 0.0;  // top-1, in [0, 1]
  int64_t samples = 0;
  int64_t num_classes = 0;
  std::vector<int64_t> confusion;  // (K, K) row-major: [true class][predicted class]
  std::vector<std::string> class_names;
  double seconds = 0.0;
};

struct EpochStats {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0.0, train_accuracy = 0.0;  // over the epoch's batches (train mode)
  double test_loss = 0.0, test_accuracy = 0.0;
  double seconds = 0.0;       // training time of this session's part of the epoch
  double images_per_s = 0.0;
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
};

// Runs the training described by cfg. Throws reckon::Error (one line, naming the argument or
// file) for a bad config, an unknown model, a dataset that cannot be read, a model that does
// not fit the dataset's images, or a checkpoint that does not match.
TrainResult train(const TrainConfig& cfg);

// Loss, top-1 and the confusion matrix of model (put in eval mode, then back) over ds, under
// autocast to `precision` (f32: none) as a mixed-precision run trains: the forward then never
// takes more memory than a training micro-batch of the same size (an fp32 forward could: its
// convolutions may pick Winograd, whose workspace the bf16 ones do not need).
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, const data::Normalize& normalize, int64_t batch,
                    DType precision = DType::f32);

// `reckon eval`: builds model_name for data's test split, loads the checkpoint (a reckon
// checkpoint or a plain state dict) and evaluates. normalize as TrainConfig::normalize,
// where "auto" means the checkpoint's own figures when it has them.
EvalResult evaluate_checkpoint(const std::string& model_name, const std::string& checkpoint, const std::string& data,
                               const std::string& normalize = "auto", int64_t batch = 500, int threads = 0);

// Building blocks, public for the tools and tests.
data::Normalize parse_normalize(const std::string& spec, const data::Dataset& train_set);
data::Augment parse_augment(const std::string& spec);
// Forward MACs of one (C, H, W) image through model_name on the meta device; throws one line
// naming the model and the shape when the image does not fit the model.
int64_t forward_macs(const std::string& model_name, int64_t in_channels, int64_t num_classes, const Shape& chw);
// The confusion matrix as text, with class names.
std::string format_confusion(const EvalResult& r);

}  // namespace reckon::train
