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
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"
#include "reckon/nn/module.h"

namespace reckon::train {

struct TrainConfig {
  std::string model = "lenet5";
  std::string data = "fashion-mnist";
  int64_t epochs = 5;
  int64_t batch = 64;
  double lr = 0.05;
  std::string optimizer = "sgd";  // sgd | adam | adamw
  double momentum = 0.9;          // sgd
  bool nesterov = false;          // sgd
  double weight_decay = 5e-4;
  std::string schedule = "cosine";  // none | step | cosine (per step, over the whole run)
  int64_t warmup = 0;               // linear warm-up steps before the schedule
  double step_epochs = 0;           // step schedule: lr *= gamma every this many epochs (0: epochs / 3)
  double gamma = 0.1;
  double label_smoothing = 0.0;
  // Mixed precision: "fp32", "bf16" or "fp16" (autocast; parameters stay f32).
  std::string precision = "fp32";
  // Gradient accumulation: one optimizer step per `accum` micro-batches of `batch` (the
  // effective batch is batch x accum; the last window of an epoch may be shorter).
  int64_t accum = 1;
  bool recompute = false;           // recompute each block's activations in backward
  // The convolution algorithm for the run (ops/conv.h): "auto", "direct", or "" (the process's
  // setting: RECKON_CONV_ALGO, else auto). --max-memory may choose direct.
  std::string conv_algo;
  // Dynamic loss scaling (optim/grad_scaler.h): "auto" (on for fp16 only), "on", "off".
  std::string grad_scaler = "auto";
  // A memory budget in bytes (0: none). The run is planned to fit (reckon plan): batch x accum
  // is kept as the effective batch while micro-batch, accumulation, precision and recomputation
  // are chosen; a run that cannot fit stops before it starts, with the ladder as its error.
  int64_t max_memory = 0;
  uint64_t seed = 0;
  int threads = 0;                  // omp_set_num_threads when > 0
  std::string out = "runs/lenet5";
  // Continue from out/last.safetensors. The checkpoint's settings then replace every field
  // above that shapes the numbers (model must match; data, epochs, batch, lr, optimizer, ...,
  // seed, normalize, augment, drop_last); threads and the fields below stay as given.
  bool resume = false;
  // "auto" (per-channel mean/std of the training split), "none", or "M1,M2,../S1,S2,..".
  std::string normalize = "auto";
  // "none" or a comma list of "crop[:PAD]" (random crop with PAD zero padding, default 4) and "flip".
  std::string augment = "none";
  int64_t checkpoint_every = 0;     // also checkpoint every N steps (0: only at epoch ends)
  int64_t log_every = 10;           // steps per metrics row / TensorBoard point
  int64_t print_every = 200;        // steps per plain log line (no terminal)
  int64_t eval_batch = 500;
  bool drop_last = false;
  int prefetch = 2;
  // Stop after this many steps in all (a checkpoint is written first), as if interrupted;
  // 0: run to the end. For tests and for splitting a run.
  int64_t stop_after = 0;
  int progress = -1;                // progress bar: -1 when stdout is a terminal, 0 off, 1 on
  int verbose = 1;                  // 0: print nothing
  // Set from elsewhere (a SIGINT handler) to stop at the next step, with a checkpoint.
  std::atomic<bool>* stop_flag = nullptr;
};

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
