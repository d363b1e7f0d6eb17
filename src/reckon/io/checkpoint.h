// Training checkpoints: one safetensors file holding everything a run needs to continue
// bit-identically (weights, buffers, optimizer state, step / epoch / batch, the RNG state and
// the run's config). Not here: sharded or lazy files, anything but the zoo's models.
//
// File layout (a plain safetensors file; save goes through save_safetensors, which is atomic:
// temporary file, fsync, rename, fsync of the directory):
//   tensors
//     <model key>                          the model's state_dict() under PyTorch's names
//                                          ("features.0.weight", "bn1.num_batches_tracked")
//     optimizer.<optimizer key>            Optimizer::state_dict() with the prefix
//                                          "optimizer.", e.g. "optimizer.state.3.momentum_buffer",
//                                          "optimizer.state.0.exp_avg", "optimizer.state.0.step"
//   __metadata__ (all strings)
//     format "reckon.checkpoint", format_version "1", model (zoo name), optimizer ("sgd",
//     "adam", "adamw" or ""), step, epoch, batch_in_epoch, rng_state (the default generator's
//     four xoshiro words as 16-digit hex, comma-separated), config (the run config as JSON),
//     and any extra keys the caller adds (the trainer keeps its running sums there).
//
// In Python the model part loads into the PyTorch twin (scripts/torch_models.py) with
//   sd = safetensors.torch.load_file(f)
//   net.load_state_dict({k: v for k, v in sd.items() if not k.startswith("optimizer.")})
// and a file holding only a state dict (no metadata; e.g. written by safetensors.torch.save_file)
// reads as a weights-only checkpoint: good for `reckon eval`, not for resuming.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "reckon/nn/module.h"
#include "reckon/optim/optim.h"

namespace reckon::io {

inline constexpr const char* kCheckpointFormat = "reckon.checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kOptimizerPrefix = "optimizer.";

// Where a run stands. step counts optimizer steps taken; epoch is the epoch in progress
// (0-based; equal to the number of epochs when the run is done); batch_in_epoch counts the
// batches of that epoch already trained (0 at an epoch boundary).
struct TrainProgress {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  std::array<uint64_t, 4> rng_state{};  // reckon::default_generator().state()
};

// What a checkpoint holds beside the tensors.
struct CheckpointInfo {
  std::string model;      // zoo name
  std::string optimizer;  // "sgd", "adam", "adamw", or "" (no optimizer state)
  TrainProgress progress;
  std::string config_json = "{}";            // the run config (a JSON object)
  std::map<std::string, std::string> extra;  // more metadata; keys must not clash with the above
};

// requires: path's directory exists; info.config_json is a JSON object; extra's keys are not
//           among the metadata keys above.
// ensures:  path holds the checkpoint or is unchanged when this throws (atomic replace).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const CheckpointInfo& info);

struct Checkpoint {
  std::string path;
  // True for a file written by save_checkpoint (format metadata present); false for a plain
  // state dict, in which case info is empty and only model_state is filled.
  bool has_training_state = false;
  CheckpointInfo info;
  nn::StateDict model_state;      // keys without a prefix
  nn::StateDict optimizer_state;  // keys "state.<i>.<name>" (the prefix removed)
};

// Reads path. Throws reckon::Error, one line naming the file (and the key), for any framing
// error of the safetensors reader, an unknown format or newer version, or metadata that does
// not parse (a step that is not a number, a bad rng_state, config that is not a JSON object).
Checkpoint read_checkpoint(const std::string& path);

// Copies ck.model_state into model after checking it all first: the checkpoint's model name
// (when it has one) equals model_name, no key is missing or unexpected, every shape matches.
// On any problem it throws one line, e.g.
//   "run/last.safetensors: tensor 'classifier.5.weight' has shape [100, 84] but lenet5 has [10, 84]"
//   "run/w.safetensors: missing tensor 'features.3.bias' of lenet5; unexpected tensor 'features.3.b' (lenet5 has
//    no such parameter or buffer)"
// and the model is unchanged. Missing and unexpected keys are both listed (the first few of each).
// A plain state dict whose every key starts with "module." (torch.nn.DataParallel's) is read
// without the prefix when that is what matches; the return value then says so ("" otherwise).
std::string load_model_state(const Checkpoint& ck, nn::Module& model, const std::string& model_name);

// Restores the optimizer state. requires: ck.has_training_state. Throws one line naming the
// file when the checkpoint's optimizer differs from optimizer_name or a key does not fit.
void load_optimizer_state(const Checkpoint& ck, optim::Optimizer& opt, const std::string& optimizer_name);

// The rng_state metadata string, and back (throws on a malformed string).
std::string rng_state_str(const std::array<uint64_t, 4>& s);
std::array<uint64_t, 4> parse_rng_state(const std::string& s);

}  // namespace reckon::io
