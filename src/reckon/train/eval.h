// Evaluation: loss, top-1 and the confusion matrix of a model over a dataset (after each epoch
// of a run, and `reckon eval` on a checkpoint), and the matrix as text. Not here: top-k,
// per-class metrics beyond recall, evaluating on several processes.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"
#include "reckon/io/checkpoint.h"
#include "reckon/nn/module.h"

namespace reckon::engine {
class Engine;
}

namespace reckon::train {

struct EvalResult {
  double loss = 0.0;      // mean cross entropy (no label smoothing)
  double accuracy = 0.0;  // top-1, in [0, 1]
  int64_t samples = 0;
  int64_t num_classes = 0;
  std::vector<int64_t> confusion;  // (K, K) row-major: [true class][predicted class]
  std::vector<std::string> class_names;
  double seconds = 0.0;
  std::vector<float> outputs;  // (samples, K) row-major, when asked for (keep_outputs)
  std::string runner = "eager";  // what ran the forward passes: "engine" (engine/engine.h) or "eager"
  std::string normalization;     // evaluate_checkpoint: which normalisation it used, and why
  std::string weights_note;      // evaluate_checkpoint: what reading the weights adapted ("" : nothing)
};

// Loss, top-1 and the confusion matrix of model (put in eval mode, then back) over ds, under
// autocast to `precision` (f32: none) as a mixed-precision run trains: the forward then never
// takes more memory than a training micro-batch of the same size (an fp32 forward could: its
// convolutions may pick Winograd, whose workspace the bf16 ones do not need).
// With `use_engine` (f32 on the cpu) the forward passes run through the inference engine, one
// engine per batch size (built from the model's weights as they are now, so the trainer, whose
// weights change between evaluations and whose memory budget counts each tensor, evaluates eagerly).
EvalResult evaluate(nn::Module& model, const data::Dataset& ds, const data::Normalize& normalize, int64_t batch,
                    DType precision = DType::f32, bool keep_outputs = false, bool use_engine = false);

// `reckon eval`: builds model_name (a zoo name or an .onnx file) for data's test split, loads
// the checkpoint (a reckon checkpoint or a plain state dict; "" for an .onnx file's own
// weights) and evaluates through the inference engine. normalize as TrainConfig::normalize, where "auto" means the
// checkpoint's own figures when it has them.
EvalResult evaluate_checkpoint(const std::string& model_name, const std::string& checkpoint, const std::string& data,
                               const std::string& normalize = "auto", int64_t batch = 500, int threads = 0,
                               bool keep_outputs = false);

// What `reckon eval` evaluates: model_name built for spec's test split with the checkpoint's
// weights, the test split, and the normalisation (as evaluate_checkpoint says).
struct EvalSetup {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<data::Dataset> test;
  data::Normalize norm;
  std::string normalization;  // which, and why: "the checkpoint's: mean [..] std [..]", ...
  std::string weights_note;   // io::load_model_state's ("" when the keys were read as they are)
};
EvalSetup prepare_evaluation(const std::string& model_name, const std::string& checkpoint, const std::string& spec,
                             const std::string& normalize = "auto");
// The same with the checkpoint already read (ck.path empty: none, for an .onnx file's own weights).
EvalSetup prepare_evaluation(const std::string& model_name, const io::Checkpoint& ck, const std::string& spec,
                             const std::string& normalize = "auto");

// A training checkpoint's own normalisation (its config's normalize_mean / normalize_std) and
// what to call it ("the checkpoint's: mean [..] std [..]", or "none, as the checkpoint's run
// trained"); nullopt when it keeps none (a state dict, an older file). Throws naming the file when
// the figures are not lists of numbers or do not fit `channels` (`against` names what has them).
struct StoredNormalize {
  data::Normalize norm;
  std::string described;
};
std::optional<StoredNormalize> checkpoint_normalization(const io::Checkpoint& ck, int64_t channels,
                                                        const std::string& against);

// A model run through the inference engine, one engine per batch size, each built on first use
// from the model's weights as they are then (evaluation and `reckon predict` share it).
class BatchEngines {
 public:
  explicit BatchEngines(nn::Module& model);
  ~BatchEngines();
  Tensor run(const Tensor& x);  // x contiguous (N, C, H, W)

 private:
  nn::Module& model_;
  std::vector<std::pair<int64_t, std::unique_ptr<engine::Engine>>> engines_;
};

// The confusion matrix as text, with class names.
std::string format_confusion(const EvalResult& r);

// Row-wise argmax of logits (B, K) compared with y (B): the number right; the predictions
// into *pred_out when given.
int64_t count_correct(const Tensor& logits, const Tensor& y, std::vector<int64_t>* pred_out = nullptr);

}  // namespace reckon::train
