// Evaluation (eval.h).
#include "reckon/train/eval.h"
#include "reckon/core/json.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "reckon/engine/engine.h"
#include "reckon/io/checkpoint.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/train/config.h"
#include "reckon/train/data_spec.h"
#include "reckon/train/progress.h"

namespace reckon::train {

using json = nlohmann::json;

int64_t count_correct(const Tensor& logits, const Tensor& y, std::vector<int64_t>* pred_out) {
  Tensor l = contiguous(cast(logits, DType::f32));
  const float* p = l.data<float>();
  const int64_t* t = y.data<int64_t>();
  int64_t B = l.size(0), K = l.size(1), right = 0;
  if (pred_out) pred_out->resize(size_t(B));
  for (int64_t i = 0; i < B; ++i) {
    const float* row = p + i * K;
    int64_t best = 0;
    for (int64_t k = 1; k < K; ++k)
      if (row[k] > row[best]) best = k;
    right += best == t[i];
    if (pred_out) (*pred_out)[size_t(i)] = best;
  }
  return right;
}

BatchEngines::BatchEngines(nn::Module& model) : model_(model) {}
BatchEngines::~BatchEngines() = default;

// A batch smaller than one an engine was built for (an epoch's last) runs through that engine,
// zero-padded: a second engine would hold a second copy of the weights in its layouts and a
// second arena (resnet18_cifar at 500 and 48: 150 MiB of weights each). Rows are independent in
// an eval-mode forward, so the padding changes nothing in the rows kept.
Tensor BatchEngines::run(const Tensor& x) {
  const int64_t n = x.size(0);
  // An engine for this batch: the capture runs the forward eagerly at it, and its freed blocks are
  // of no use to the engine's arena (one block of another size): handed back before it is mapped.
  auto build = [&] {
    engine::Program p = engine::make_program(model_, x.shape());
    host_memory_trim(x.device());
    engines_.emplace_back(n, std::make_unique<engine::Engine>(std::move(p)));
    return engines_.back().second.get();
  };
  engine::Engine* best = nullptr;
  int64_t best_batch = 0;
  for (auto& [b, e] : engines_)
    if (b >= n && (!best || b < best_batch)) best = e.get(), best_batch = b;
  if (!best) return build()->run(x);
  if (best_batch == n) return best->run(x);
  Shape padded_shape = x.shape();
  padded_shape[0] = best_batch;
  Tensor padded = Tensor::zeros(padded_shape, x.dtype(), x.device());
  copy_(narrow(padded, 0, 0, n), x);
  const Tensor y = best->run(padded);
  if (y.dim() > 0 && y.size(0) == best_batch) return contiguous(narrow(y, 0, 0, n));
  return build()->run(x);  // an output that does not lead with the batch (an .onnx graph's own)
}

std::optional<StoredNormalize> checkpoint_normalization(const io::Checkpoint& ck, int64_t channels,
                                                        const std::string& against) {
  if (!ck.has_training_state) return std::nullopt;
  const std::string& path = ck.path;
  json c = parse_json(ck.info.config_json, fmt::format("{}: metadata 'config'", path));
  if (!c.contains(kNormalizeMeanKey) || !c.contains(kNormalizeStdKey)) return std::nullopt;
  StoredNormalize s;
  try {
    s.norm.mean = c[kNormalizeMeanKey].get<std::vector<float>>();
    s.norm.std = c[kNormalizeStdKey].get<std::vector<float>>();
  } catch (const json::exception&) {
    throw Error(fmt::format("{}: metadata 'config': {} and {} must be lists of numbers (they are {} and {})", path,
                            kNormalizeMeanKey, kNormalizeStdKey,
                            c[kNormalizeMeanKey].dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 80),
                            c[kNormalizeStdKey].dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 80)));
  }
  RK_CHECK(s.norm.mean.size() == s.norm.std.size() && (s.norm.mean.empty() || int64_t(s.norm.mean.size()) == channels),
           "{}: its normalisation has {} means and {} stds but {} has {} channels", path, s.norm.mean.size(),
           s.norm.std.size(), against, channels);
  s.described = s.norm.mean.empty() ? "none, as the checkpoint's run trained"
                                    : fmt::format("the checkpoint's: mean {} std {}", fmt_floats(s.norm.mean),
                                                  fmt_floats(s.norm.std));
  return s;
}

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, const data::Normalize& normalize, int64_t batch,
                    DType precision, bool keep_outputs, bool use_engine) {
  auto t0 = Clock::now();
  EvalResult r;
  r.num_classes = ds.num_classes();
  r.class_names = ds.class_names();
  const int64_t K = r.num_classes;
  r.confusion.assign(size_t(K * K), 0);
  bool was_training = model.is_training();
  model.eval();
  data::LoaderOptions lo;
  lo.batch = batch;
  lo.shuffle = false;
  lo.normalize = normalize;
  data::Loader loader(ds, lo);
  loader.start_epoch(0);
  double loss_sum = 0;
  int64_t right = 0;
  std::vector<int64_t> pred;
  data::Batch b;
  use_engine = use_engine && precision == DType::f32 && model.device() == Device::cpu;
  r.runner = use_engine ? "engine" : "eager";
  BatchEngines engines(model);
  auto forward = [&](const Tensor& x) { return use_engine ? engines.run(contiguous(x)) : model(x); };
  {
    NoGrad ng;
    Autocast ac(precision);
    while (loader.next(b)) {
      check_labels(b, K, ds.name(), 0);
      Tensor logits = forward(b.x);
      if (keep_outputs) {
        const Tensor l = contiguous(logits);
        const float* p = l.data<float>();
        r.outputs.insert(r.outputs.end(), p, p + l.numel());
      }
      loss_sum += cross_entropy(logits, b.y, {.reduction = Reduction::sum}).item();
      right += count_correct(logits, b.y, &pred);
      const int64_t* y = b.y.data<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) r.confusion[size_t(y[i] * K + pred[i])] += 1;
      r.samples += b.y.numel();
    }
  }
  model.train(was_training);
  r.loss = r.samples ? loss_sum / double(r.samples) : 0.0;
  r.accuracy = r.samples ? double(right) / double(r.samples) : 0.0;
  r.seconds = seconds_since(t0);
  return r;
}

std::string format_confusion(const EvalResult& r) {
  const int64_t K = r.num_classes;
  size_t name_w = 5;
  for (const auto& n : r.class_names) name_w = std::max(name_w, std::min<size_t>(n.size(), 20));
  int64_t most = 1;
  for (int64_t c : r.confusion) most = std::max(most, c);
  int cell = std::max(5, int(std::to_string(most).size()) + 1);
  std::string s = fmt::format("confusion matrix (rows: true class, columns: predicted class index)\n{:>{}}", "", name_w + 6);
  for (int64_t k = 0; k < K; ++k) s += fmt::format("{:>{}}", k, cell);
  s += fmt::format("{:>9}\n", "recall");
  for (int64_t t = 0; t < K; ++t) {
    std::string name = t < int64_t(r.class_names.size()) ? r.class_names[size_t(t)] : std::to_string(t);
    if (name.size() > 20) name.resize(20);
    int64_t row = 0;
    for (int64_t p = 0; p < K; ++p) row += r.confusion[size_t(t * K + p)];
    s += fmt::format("{:>3}  {:<{}} ", t, name, name_w);
    for (int64_t p = 0; p < K; ++p) s += fmt::format("{:>{}}", r.confusion[size_t(t * K + p)], cell);
    double recall = row ? double(r.confusion[size_t(t * K + t)]) / double(row) : 0.0;
    s += fmt::format("{:>8.2f}%\n", 100 * recall);
  }
  return s;
}

EvalSetup prepare_evaluation(const std::string& model_name, const std::string& checkpoint, const std::string& spec,
                             const std::string& normalize) {
  return prepare_evaluation(model_name, checkpoint.empty() ? io::Checkpoint{} : io::read_checkpoint(checkpoint), spec,
                            normalize);
}

EvalSetup prepare_evaluation(const std::string& model_name, const io::Checkpoint& ck, const std::string& spec,
                             const std::string& normalize) {
  const std::string& checkpoint = ck.path;
  RK_CHECK(!checkpoint.empty() || onnx::is_onnx_path(model_name),
           "--checkpoint is required for the zoo model {} (an .onnx file carries its own weights)", model_name);
  EvalSetup s;
  s.test = data::open_dataset(spec, false, 0);
  Shape chw = s.test->sample_shape();
  const int64_t K = s.test->num_classes();
  forward_macs(model_name, chw[0], K, chw);  // fits?
  s.model = onnx::make_model(model_name, {.num_classes = K, .in_channels = chw[0]});
  if (!checkpoint.empty()) s.weights_note = io::load_model_state(ck, *s.model, model_name);
  std::optional<StoredNormalize> stored;
  if (normalize == "auto") stored = checkpoint_normalization(ck, chw[0], "--data " + spec);
  if (stored) {
    s.norm = std::move(stored->norm);
    s.normalization = std::move(stored->described);
  } else if (normalize != "none") {
    auto train_set = data::open_dataset(spec, true, 0);
    s.norm = parse_normalize(normalize, *train_set);
    const std::string figures = fmt::format("mean {} std {}", fmt_floats(s.norm.mean), fmt_floats(s.norm.std));
    if (normalize != "auto")
      s.normalization = "as given: " + figures;
    else  // a state dict (PyTorch's among them) or an .onnx file says nothing of how its inputs were scaled
      s.normalization = fmt::format("the training split's {} ({} holds none; --normalize none or M1,../S1,.. sets it)",
                                    figures, checkpoint.empty() ? model_name : checkpoint);
  } else {
    s.normalization = "none, as given";
  }
  return s;
}

EvalResult evaluate_checkpoint(const std::string& model_name, const std::string& checkpoint, const std::string& spec,
                               const std::string& normalize, int64_t batch, int threads, bool keep_outputs) {
  RK_CHECK(batch >= 1, "--batch must be at least 1 (got {})", batch);
  RK_CHECK(threads >= 0, "--threads must be >= 0 (got {})", threads);
  ThreadsGuard threads_guard(threads);
  EvalSetup s = prepare_evaluation(model_name, checkpoint, spec, normalize);
  EvalResult r = evaluate(*s.model, *s.test, s.norm, batch, DType::f32, keep_outputs, /*use_engine=*/true);
  r.normalization = s.normalization;
  r.weights_note = s.weights_note;
  return r;
}

}  // namespace reckon::train
