// The training loop (see trainer.h). One function, train(), reads top to bottom as the run
// goes: resolve the config (from the checkpoint on --resume), open the data, check the model
// fits it and count its MACs, build model / optimizer / schedule, restore the checkpoint,
// then epochs of steps with metrics, progress, evaluation and checkpoints.
#include "reckon/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reckon/io/checkpoint.h"
#include "reckon/io/metrics.h"
#include "reckon/io/tensorboard.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op.h"
#include "reckon/ops/node.h"
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/plan.h"
#include "reckon/nn/recompute.h"
#include "reckon/optim/factory.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/step.h"

namespace reckon::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

json scaler_json(const optim::GradScaler& g) {
  return json{{"scale", double(g.get_scale())}, {"growth_tracker", g.growth_tracker()},
              {"skipped_steps", g.skipped_steps()}};
}
void restore_scaler(optim::GradScaler& g, const json& j, const std::string& path) {
  try {
    nn::StateDict d;
    d.insert("scale", Tensor::from_vector({j.at("scale").get<double>()}, {}, DType::f32));
    d.insert("growth_factor", Tensor::from_vector({g.options().growth_factor}, {}, DType::f64));
    d.insert("backoff_factor", Tensor::from_vector({g.options().backoff_factor}, {}, DType::f64));
    d.insert("growth_interval", Tensor::from_vector({double(g.options().growth_interval)}, {}, DType::i64));
    d.insert("_growth_tracker", Tensor::from_vector({double(j.at("growth_tracker").get<int64_t>())}, {}, DType::i32));
    g.load_state_dict(d);
    g.set_skipped_steps(j.value("skipped_steps", int64_t(0)));
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: metadata 'train_state' has a bad 'scaler' entry ({})", path, e.what()));
  }
}

// Row-wise argmax of logits (B, K) compared with y (B): the number right.
int64_t count_correct(const Tensor& logits, const Tensor& y, std::vector<int64_t>* pred_out = nullptr) {
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

void check_labels(const data::Batch& b, int64_t K, const std::string& spec, int64_t epoch) {
  const int64_t* y = b.y.data<int64_t>();
  for (int64_t i = 0; i < b.y.numel(); ++i)
    RK_CHECK(y[i] >= 0 && y[i] < K, "--data {}: label {} in batch {} of epoch {} is out of range [0, {})", spec, y[i],
             b.index, epoch + 1, K);
}

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  auto t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

std::string fmt_floats(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.4f}", i ? ", " : "", v[i]);
  return s + "]";
}

// Running sums over a span of steps (an epoch, a log interval). Kept in the checkpoint so a
// resumed run reports the same figures.
struct Running {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, steps = 0;
  void add(float loss, int64_t right, int64_t n) {
    loss_sum += double(loss);
    correct += right;
    seen += n;
    steps += 1;
  }
  double loss() const { return steps ? loss_sum / double(steps) : 0.0; }
  double accuracy() const { return seen ? double(correct) / double(seen) : 0.0; }
  json to_json() const { return {{"loss_sum", loss_sum}, {"correct", correct}, {"seen", seen}, {"steps", steps}}; }
  static Running from_json(const json& j) {
    Running r;
    r.loss_sum = j.at("loss_sum").get<double>();
    r.correct = j.at("correct").get<int64_t>();
    r.seen = j.at("seen").get<int64_t>();
    r.steps = j.at("steps").get<int64_t>();
    return r;
  }
};

// The one-line display: a redrawn progress bar on a terminal, or plain lines every few steps.
class Display {
 public:
  Display(const TrainConfig& c) : verbose_(c.verbose > 0), print_every_(c.print_every) {
    bar_ = verbose_ && (c.progress == 1 || (c.progress < 0 && ::isatty(STDOUT_FILENO)));
  }
  void step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss, double acc,
            double images_per_s, double eta_s) {
    if (!verbose_) return;
    if (bar_) {
      auto now = Clock::now();
      if (batch != batches && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
      last_ = now;
      drawn_ = true;
      constexpr int kWidth = 24;
      int filled = int(double(kWidth) * double(batch) / double(std::max<int64_t>(1, batches)));
      std::string bar(size_t(filled), '#');
      bar.resize(kWidth, '.');
      std::printf("\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  acc %.2f%%  %.0f img/s  ETA %s", (long long)epoch,
                  (long long)epochs, bar.c_str(), (long long)batch, (long long)batches, loss, 100 * acc, images_per_s,
                  fmt_duration(eta_s).c_str());
      std::fflush(stdout);
    } else if (step % print_every_ == 0) {
      std::printf("epoch %lld/%lld  batch %lld/%lld  step %lld  loss %.4f  acc %.2f%%  %.0f img/s  ETA %s\n",
                  (long long)epoch, (long long)epochs, (long long)batch, (long long)batches, (long long)step, loss,
                  100 * acc, images_per_s, fmt_duration(eta_s).c_str());
      std::fflush(stdout);
    }
  }
  // A full line (ends the bar's line first).
  void line(const std::string& s) {
    if (!verbose_) return;
    if (bar_ && drawn_) std::printf("\r\033[K");
    drawn_ = false;
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  }

 private:
  bool verbose_, bar_ = false, drawn_ = false;
  int64_t print_every_;
  Clock::time_point last_{};
};

}  // namespace

// ---- building blocks ----

data::Normalize parse_normalize(const std::string& spec, const data::Dataset& train_set) {
  data::Normalize n;
  if (spec == "none") return n;
  int64_t C = train_set.sample_shape()[0];
  if (spec == "auto") {
    n.mean = data::channel_mean(train_set);
    n.std = data::channel_std(train_set);
    for (float& s : n.std)
      if (!(s > 0)) s = 1.0f;  // a constant channel: centre it only
    return n;
  }
  auto slash = spec.find('/');
  RK_CHECK(slash != std::string::npos, "--normalize '{}' is not auto, none or MEAN,../STD,..", spec);
  auto parse_list = [&](const std::string& s) {
    std::vector<float> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t used = 0;
      float f = 0;
      try {
        f = std::stof(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      RK_CHECK(used > 0 && used == item.size() && std::isfinite(f), "--normalize '{}': '{}' is not a number", spec,
               item);
      v.push_back(f);
    }
    return v;
  };
  n.mean = parse_list(spec.substr(0, slash));
  n.std = parse_list(spec.substr(slash + 1));
  RK_CHECK(int64_t(n.mean.size()) == C && int64_t(n.std.size()) == C,
           "--normalize '{}' gives {} means and {} stds but the images have {} channels", spec, n.mean.size(),
           n.std.size(), C);
  for (float s : n.std) RK_CHECK(s > 0, "--normalize '{}': every std must be positive", spec);
  return n;
}

data::Augment parse_augment(const std::string& spec) {
  data::Augment a;
  if (spec == "none" || spec.empty()) return a;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "flip") {
      a.hflip = true;
    } else if (item == "crop") {
      a.crop_padding = 4;
    } else if (item.rfind("crop:", 0) == 0) {
      std::string n = item.substr(5);
      RK_CHECK(!n.empty() && n.size() < 6 && std::all_of(n.begin(), n.end(), ::isdigit),
               "--augment '{}': crop padding '{}' is not a count", spec, n);
      a.crop_padding = std::stoll(n);
    } else {
      throw Error(fmt::format("--augment '{}': '{}' is not one of none, crop[:PAD], flip", spec, item));
    }
  }
  return a;
}

int64_t forward_macs(const std::string& model_name, int64_t in_channels, int64_t num_classes, const Shape& chw) {
  nn::ModelConfig mc{.num_classes = num_classes, .in_channels = in_channels, .device = Device::meta};
  auto model = nn::make_model(model_name, mc);  // throws for an unknown name, listing the known ones
  model->eval();
  Shape in = chw;
  in.insert(in.begin(), 1);
  int64_t macs = 0;
  Tensor out;
  try {
    ObserveOps obs([&](const OpRecord& r) { macs += r.cost.macs; });
    NoGrad ng;
    out = (*model)(Tensor::empty(in, DType::f32, Device::meta));
  } catch (const Error& e) {
    throw Error(fmt::format("model {} does not fit {} images (C, H, W): {}", model_name, shape_str(chw), e.what()));
  }
  RK_CHECK(out.shape() == Shape({1, num_classes}), "model {} maps {} images to {}, not [1, {}]", model_name,
           shape_str(chw), shape_str(out.shape()), num_classes);
  return macs;
}

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, const data::Normalize& normalize, int64_t batch,
                    DType precision) {
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
  {
    NoGrad ng;
    Autocast ac(precision);
    while (loader.next(b)) {
      check_labels(b, K, ds.name(), 0);
      Tensor logits = model(b.x);
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

EvalResult evaluate_checkpoint(const std::string& model_name, const std::string& checkpoint, const std::string& spec,
                               const std::string& normalize, int64_t batch, int threads) {
  RK_CHECK(batch >= 1, "--batch must be at least 1 (got {})", batch);
  RK_CHECK(threads >= 0, "--threads must be >= 0 (got {})", threads);
  ThreadsGuard threads_guard(threads);
  io::Checkpoint ck = io::read_checkpoint(checkpoint);
  auto test_set = data::open_dataset(spec, false, 0);
  Shape chw = test_set->sample_shape();
  const int64_t K = test_set->num_classes();
  forward_macs(model_name, chw[0], K, chw);  // fits?
  auto model = nn::make_model(model_name, {.num_classes = K, .in_channels = chw[0]});
  io::load_model_state(ck, *model, model_name);

  data::Normalize norm;
  if (normalize == "auto" && ck.has_training_state) {
    json c = json::parse(ck.info.config_json);
    if (c.contains(kNormalizeMeanKey) && c.contains(kNormalizeStdKey)) {
      norm.mean = c[kNormalizeMeanKey].get<std::vector<float>>();
      norm.std = c[kNormalizeStdKey].get<std::vector<float>>();
      RK_CHECK(int64_t(norm.mean.size()) == chw[0] || norm.mean.empty(),
               "{}: its normalisation has {} channels but --data {} has {}", checkpoint, norm.mean.size(), spec, chw[0]);
    }
  } else if (normalize != "none") {
    auto train_set = data::open_dataset(spec, true, 0);
    norm = parse_normalize(normalize, *train_set);
  }
  return evaluate(*model, *test_set, norm, batch);
}

// ---- the loop ----

TrainResult train(const TrainConfig& in) {
  TrainConfig cfg = in;
  TrainResult res;
  const fs::path out_dir = cfg.out;
  const std::string ckpt_path = (out_dir / "last.safetensors").string();
  Display show(cfg);

  // 1. The config, and on --resume the checkpoint it comes from.
  io::Checkpoint ck;
  data::Normalize norm;
  json train_state;
  if (cfg.resume) {
    RK_CHECK(fs::exists(ckpt_path), "--resume: {} does not exist (nothing to resume in --out {})", ckpt_path, cfg.out);
    ck = io::read_checkpoint(ckpt_path);
    RK_CHECK(ck.has_training_state, "--resume: {} holds only weights, not a training checkpoint", ckpt_path);
    RK_CHECK(ck.info.model == cfg.model, "--resume: {} is a checkpoint of model '{}', not '{}'", ckpt_path,
             ck.info.model, cfg.model);
    apply_saved_config(cfg, json::parse(ck.info.config_json), norm, ckpt_path);
    auto it = ck.info.extra.find("train_state");
    RK_CHECK(it != ck.info.extra.end(), "{}: metadata has no 'train_state'", ckpt_path);
    try {
      train_state = json::parse(it->second);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: metadata 'train_state' is not valid JSON ({})", ckpt_path, e.what()));
    }
  }
  validate(cfg);
  ThreadsGuard threads_guard(cfg.threads);
  ConvAlgorithmScope conv_algo_scope(cfg.conv_algo);  // the plan below may switch it to direct
  const data::Augment augment = parse_augment(cfg.augment);

  // 2. Data, and whether the model fits it.
  auto train_set = data::open_dataset(cfg.data, true, 0);
  auto test_set = data::open_dataset(cfg.data, false, 0);
  const Shape chw = train_set->sample_shape();
  const int64_t K = train_set->num_classes();
  RK_CHECK(test_set->sample_shape() == chw && test_set->num_classes() == K,
           "--data {}: the test split has {} images of {} classes but the training split {} of {}", cfg.data,
           shape_str(test_set->sample_shape()), test_set->num_classes(), shape_str(chw), K);
  RK_CHECK(chw.size() == 3, "--data {}: samples have shape {}, not (C, H, W)", cfg.data, shape_str(chw));
  res.macs_per_image = forward_macs(cfg.model, chw[0], K, chw);
  if (!cfg.resume) norm = parse_normalize(cfg.normalize, *train_set);

  // A memory budget: plan micro-batch, accumulation, precision and recomputation for the
  // effective batch before anything is built (on --resume the checkpoint holds the plan).
  if (cfg.max_memory > 0 && !cfg.resume) {
    PlanConfig pc;
    pc.model = cfg.model;
    pc.batch = cfg.batch * cfg.accum;
    pc.memory_bytes = cfg.max_memory;
    pc.input = chw;
    pc.num_classes = K;
    pc.optimizer = cfg.optimizer == "sgd" ? "sgd" : "adamw";  // adam's state is adamw's
    pc.momentum = cfg.momentum;
    Plan p = plan(pc);
    const PlanRung* best = p.best();
    RK_CHECK(best != nullptr, "--max-memory {}: this run cannot fit; the ladder:\n{}", format_mib(cfg.max_memory),
             format_plan(p));
    cfg.batch = best->micro_batch;
    cfg.accum = best->accum;
    cfg.precision = best->precision;
    cfg.recompute = best->recompute;
    if (best->direct_conv) {
      cfg.conv_algo = "direct";
      set_conv_algorithm(ConvAlgorithm::direct);  // until conv_algo_scope ends with the run
    }
    // Evaluation (in the run's precision) holds no gradients or saved activations: at the
    // micro-batch it stays below the training step's peak, so the budget holds for the whole run.
    cfg.eval_batch = std::min(cfg.eval_batch, cfg.batch);
    show.line(format_plan(p));
    tracker(Device::cpu).reset_peak();  // the planner's cpu calibration (if it ran) is not the run's
  }

  // 3. Model, loader, optimizer, schedule.
  manual_seed(cfg.seed);
  auto model = nn::make_model(cfg.model, {.num_classes = K, .in_channels = chw[0]});
  res.parameters = model->num_parameters();
  const int64_t recompute_blocks = cfg.recompute ? nn::enable_recompute(*model) : 0;
  data::LoaderOptions lo;
  lo.batch = cfg.batch;
  lo.shuffle = true;
  lo.drop_last = cfg.drop_last;
  lo.seed = cfg.seed;
  lo.normalize = norm;
  lo.augment = augment;
  lo.prefetch = cfg.prefetch;
  data::Loader loader(*train_set, lo);
  const int64_t nb = loader.num_batches();  // micro-batches per epoch
  RK_CHECK(nb > 0, "--data {}: {} training samples make no batch of {} (drop_last)", cfg.data, train_set->size(),
           cfg.batch);
  const int64_t steps_per_epoch = (nb + cfg.accum - 1) / cfg.accum;  // optimizer steps: windows of accum
  const int64_t total_steps = cfg.epochs * steps_per_epoch;
  auto micro_size = [&](int64_t i) { return std::min(cfg.batch, loader.num_samples() - i * cfg.batch); };
  auto opt = optim::make_optimizer(optimizer_spec(cfg), model->parameters());
  auto sched = optim::make_schedule(schedule_spec(cfg, steps_per_epoch));
  std::unique_ptr<optim::GradScaler> scaler;
  if (grad_scaler_on(cfg.grad_scaler, precision_dtype(cfg.precision))) scaler = std::make_unique<optim::GradScaler>();
  Step step(*model, *opt, scaler.get(), {.precision = precision_dtype(cfg.precision), .label_smoothing = cfg.label_smoothing});

  // 4. Restore.
  io::TrainProgress prog;
  io::MetricsLog::Marks marks;
  std::string events_file;
  int64_t events_bytes = 0;
  Running epoch_run, interval_run;
  if (cfg.resume) {
    io::load_model_state(ck, *model, cfg.model);
    io::load_optimizer_state(ck, *opt, cfg.optimizer);
    prog = ck.info.progress;
    RK_CHECK(prog.batch_in_epoch <= nb, "{}: batch_in_epoch {} is past the {} batches of an epoch", ckpt_path,
             prog.batch_in_epoch, nb);
    RK_CHECK(prog.batch_in_epoch % cfg.accum == 0 || prog.batch_in_epoch == nb,
             "{}: batch_in_epoch {} is inside an accumulation window of {}", ckpt_path, prog.batch_in_epoch, cfg.accum);
    default_generator().set_state(prog.rng_state);
    try {
      epoch_run = Running::from_json(train_state.at("epoch"));
      interval_run = Running::from_json(train_state.at("interval"));
      marks.csv_bytes = train_state.at("metrics_csv_bytes").get<int64_t>();
      marks.jsonl_bytes = train_state.at("metrics_jsonl_bytes").get<int64_t>();
      events_file = train_state.at("events_file").get<std::string>();
      events_bytes = train_state.at("events_bytes").get<int64_t>();
      if (scaler && train_state.contains("scaler")) restore_scaler(*scaler, train_state.at("scaler"), ckpt_path);
    } catch (const json::exception& e) {
      throw Error(fmt::format("{}: metadata 'train_state' is incomplete ({})", ckpt_path, e.what()));
    }
  }
  res.first_step = prog.step;

  // 5. Output files.
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  RK_CHECK(fs::is_directory(out_dir), "--out {}: cannot create the directory{}", cfg.out,
           ec ? ": " + ec.message() : std::string());
  io::MetricsLog metrics(out_dir.string(),
                         {"epoch", "loss", "accuracy", "lr", "images_per_s", "seconds", "loss_scale", "skipped_steps"},
                         cfg.resume ? &marks : nullptr);
  std::unique_ptr<io::EventWriter> events =
      cfg.resume && !events_file.empty()
          ? std::make_unique<io::EventWriter>((out_dir / events_file).string(), events_bytes)
          : std::make_unique<io::EventWriter>(out_dir.string());
  const json saved_config = config_json(cfg, norm);

  show.line(fmt::format("{}: {} parameters, {:.3f} M forward MACs per image ({} images, {} classes)", cfg.model,
                        res.parameters, double(res.macs_per_image) / 1e6, shape_str(chw), K));
  show.line(fmt::format("data {}: {} training / {} test samples; normalize {}", cfg.data, train_set->size(),
                        test_set->size(),
                        norm.mean.empty() ? std::string("none")
                                          : fmt::format("mean {} std {}", fmt_floats(norm.mean), fmt_floats(norm.std))));
  show.line(fmt::format("{} lr {} (momentum {}, weight decay {}), schedule {} (warm-up {} steps), batch {}, {} batches "
                        "per epoch, {} epochs, seed {}, {} threads; output {}",
                        cfg.optimizer, cfg.lr, cfg.optimizer == "sgd" ? cfg.momentum : 0.0, cfg.weight_decay,
                        cfg.schedule, cfg.warmup, cfg.batch, nb, cfg.epochs, cfg.seed, omp_get_max_threads(),
                        cfg.out));
  show.line(fmt::format("precision {}{}, batch {} x accumulation {} = effective batch {} ({} optimizer steps per "
                        "epoch){}",
                        cfg.precision,
                        scaler ? " with dynamic loss scaling" : "", cfg.batch, cfg.accum, cfg.batch * cfg.accum,
                        steps_per_epoch,
                        cfg.recompute ? fmt::format(", recomputing {} blocks in backward", recompute_blocks) : "") +
            (conv_algorithm() == ConvAlgorithm::direct ? "; convolutions direct (no Winograd)" : ""));
  if (cfg.accum > 1)
    for (auto& [name, mod] : model->named_modules())
      if (mod->type_name() == "BatchNorm2d") {
        show.line(fmt::format("note: batch-norm statistics see one micro-batch of {} samples, not the effective "
                              "batch of {}",
                              cfg.batch, cfg.batch * cfg.accum));
        break;
      }
  if (cfg.resume)
    show.line(fmt::format("resuming from {} at step {} (epoch {}, batch {}); settings from the checkpoint", ckpt_path,
                          prog.step, prog.epoch + 1, prog.batch_in_epoch));

  auto save = [&](int64_t epoch, int64_t batch_in_epoch) {
    metrics.flush();
    events->flush();
    io::MetricsLog::Marks m = metrics.marks();
    json st{{"epoch", epoch_run.to_json()},
            {"interval", interval_run.to_json()},
            {"metrics_csv_bytes", m.csv_bytes},
            {"metrics_jsonl_bytes", m.jsonl_bytes},
            {"events_file", fs::path(events->path()).filename().string()},
            {"events_bytes", events->bytes()}};
    if (scaler) st["scaler"] = scaler_json(*scaler);
    io::CheckpointInfo info;
    info.model = cfg.model;
    info.optimizer = cfg.optimizer;
    info.progress = {.step = prog.step, .epoch = epoch, .batch_in_epoch = batch_in_epoch,
                     .rng_state = default_generator().state()};
    info.config_json = saved_config.dump();
    info.extra["train_state"] = st.dump();
    info.extra["num_classes"] = std::to_string(K);
    info.extra["input_shape"] = shape_str(chw);
    io::save_checkpoint(ckpt_path, *model, opt.get(), info);
    res.checkpoint = ckpt_path;
  };

  // 6. Epochs.
  const auto run_t0 = Clock::now();
  double train_seconds = 0, last_eval_seconds = 0;
  int64_t session_steps = 0;
  int64_t epoch = prog.epoch, skip = prog.batch_in_epoch;
  while (epoch < cfg.epochs) {
    model->train();
    loader.start_epoch(epoch, skip);
    if (skip == 0) epoch_run = Running{};
    auto epoch_t0 = Clock::now();
    auto interval_t0 = epoch_t0;
    int64_t epoch_images = 0, interval_images = 0;
    data::Batch b;
    while (true) {
      auto step_t0 = Clock::now();
      if (!loader.next(b)) break;
      // One optimizer step: the window of micro-batches [first, last) of the epoch.
      const int64_t first = b.index, last = std::min(first + cfg.accum, nb);
      int64_t window = 0;
      for (int64_t i = first; i < last; ++i) window += micro_size(i);
      const double lr = sched->get_lr(prog.step);
      opt->set_lr(lr);
      step.begin(window);
      double loss_sum = 0;
      int64_t right = 0, n = 0;
      for (int64_t i = first; i < last; ++i) {
        if (i > first) RK_CHECK(loader.next(b) && b.index == i, "[train] the loader ended inside a window");
        check_labels(b, K, cfg.data, epoch);
        MicroResult r = step.micro(b.x, b.y);
        loss_sum += r.loss * double(b.y.numel());
        right += count_correct(r.logits, b.y);
        n += b.y.numel();
      }
      const bool stepped = step.finish();
      prog.step += 1;
      session_steps += 1;
      const float l = float(loss_sum / double(n));
      RK_CHECK(std::isfinite(l), "[train] the loss is {} at step {} (epoch {}); try a lower --lr (now {})", l,
               prog.step, epoch + 1, lr);
      if (!stepped && scaler && scaler->skipped_steps() <= 5)
        show.line(fmt::format("step {}: skipped, the gradient of {} overflowed; loss scale now {}", prog.step,
                              scaler->overflow_param(), scaler->get_scale()));
      if (scaler && !scaler->warning().empty()) show.line("warning: " + scaler->warning());
      epoch_run.add(l, right, n);
      interval_run.add(l, right, n);
      res.losses.push_back(l);
      train_seconds += seconds_since(step_t0);
      epoch_images += n;
      interval_images += n;

      if (prog.step % cfg.log_every == 0) {
        double ips = double(interval_images) / std::max(1e-9, seconds_since(interval_t0));
        metrics.write("train", prog.step,
                      {{"epoch", double(epoch + 1)},
                       {"loss", interval_run.loss()},
                       {"accuracy", interval_run.accuracy()},
                       {"lr", lr},
                       {"images_per_s", ips},
                       {"loss_scale", scaler ? double(scaler->get_scale()) : 0.0},
                       {"skipped_steps", scaler ? double(scaler->skipped_steps()) : 0.0}});
        if (scaler) events->add_scalar("train/loss_scale", scaler->get_scale(), prog.step);
        events->add_scalar("train/loss", float(interval_run.loss()), prog.step);
        events->add_scalar("train/accuracy", float(interval_run.accuracy()), prog.step);
        events->add_scalar("train/lr", float(lr), prog.step);
        events->add_scalar("train/images_per_s", float(ips), prog.step);
        interval_run = Running{};
        interval_t0 = Clock::now();
        interval_images = 0;
      }
      const double rate = double(session_steps) / std::max(1e-9, train_seconds);  // steps/s
      const double eta = double(total_steps - prog.step) / rate + double(cfg.epochs - epoch) * last_eval_seconds;
      show.step(epoch + 1, cfg.epochs, last, nb, prog.step, epoch_run.loss(), epoch_run.accuracy(),
                double(epoch_images) / std::max(1e-9, seconds_since(epoch_t0)), eta);

      const bool stop = (cfg.stop_after > 0 && prog.step >= cfg.stop_after) ||
                        (cfg.stop_flag && cfg.stop_flag->load());
      if (stop || (cfg.checkpoint_every > 0 && prog.step % cfg.checkpoint_every == 0)) save(epoch, last);
      if (stop) {
        res.stopped = true;
        show.line(fmt::format("stopped at step {} (epoch {}, batch {}/{}); checkpoint: {} (continue with --resume)",
                              prog.step, epoch + 1, last, nb, ckpt_path));
        res.steps = prog.step;
        if (scaler) res.skipped_steps = scaler->skipped_steps(), res.loss_scale = scaler->get_scale();
        res.rng_state = default_generator().state();
        return res;
      }
    }
    const double epoch_seconds = seconds_since(epoch_t0);

    // End of the epoch: evaluate, log, checkpoint.
    EvalResult ev = evaluate(*model, *test_set, norm, cfg.eval_batch, precision_dtype(cfg.precision));
    last_eval_seconds = ev.seconds;
    EpochStats es{.epoch = epoch + 1,
                  .train_loss = epoch_run.loss(),
                  .train_accuracy = epoch_run.accuracy(),
                  .test_loss = ev.loss,
                  .test_accuracy = ev.accuracy,
                  .seconds = epoch_seconds,
                  .images_per_s = double(epoch_images) / std::max(1e-9, epoch_seconds)};
    res.epochs.push_back(es);
    res.final_eval = ev;
    metrics.write("epoch", prog.step,
                  {{"epoch", double(epoch + 1)},
                   {"loss", es.train_loss},
                   {"accuracy", es.train_accuracy},
                   {"images_per_s", es.images_per_s},
                   {"seconds", es.seconds}});
    metrics.write("test", prog.step,
                  {{"epoch", double(epoch + 1)}, {"loss", ev.loss}, {"accuracy", ev.accuracy}, {"seconds", ev.seconds}});
    events->add_scalar("epoch/train_loss", float(es.train_loss), prog.step);
    events->add_scalar("epoch/train_accuracy", float(es.train_accuracy), prog.step);
    events->add_scalar("epoch/images_per_s", float(es.images_per_s), prog.step);
    events->add_scalar("test/loss", float(ev.loss), prog.step);
    events->add_scalar("test/accuracy", float(ev.accuracy), prog.step);
    show.line(fmt::format("epoch {}/{}  train loss {:.4f} acc {:.2f}%  test loss {:.4f} acc {:.2f}%  {:.1f} s  "
                          "{:.0f} img/s  (eval {:.1f} s)",
                          epoch + 1, cfg.epochs, es.train_loss, 100 * es.train_accuracy, ev.loss, 100 * ev.accuracy,
                          es.seconds, es.images_per_s, ev.seconds));
    epoch += 1;
    skip = 0;
    epoch_run = Running{};
    save(epoch, 0);
  }

  res.steps = prog.step;
  res.rng_state = default_generator().state();
  if (scaler) {
    res.skipped_steps = scaler->skipped_steps();
    res.loss_scale = scaler->get_scale();
    show.line(fmt::format("loss scaling: {} of {} steps skipped, final scale {}", res.skipped_steps, prog.step,
                          res.loss_scale));
  }
  if (res.final_eval.samples == 0) res.final_eval = evaluate(*model, *test_set, norm, cfg.eval_batch, precision_dtype(cfg.precision));
  auto st = tracker(Device::cpu).stats();
  show.line(fmt::format("final test accuracy {:.2f}% (loss {:.4f}) after {} epochs, {} steps, {:.1f} s; peak tracked "
                        "memory {:.1f} MiB",
                        100 * res.final_eval.accuracy, res.final_eval.loss, cfg.epochs, prog.step,
                        seconds_since(run_t0), double(st.peak_total_bytes) / (1 << 20)));
  if (res.checkpoint.empty() && fs::exists(ckpt_path)) res.checkpoint = ckpt_path;
  show.line(fmt::format("checkpoint: {}  metrics: {}  tensorboard: {}", ckpt_path, metrics.csv_path(),
                        events->path()));
  return res;
}

}  // namespace reckon::train
