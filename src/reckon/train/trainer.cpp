// The training loop (see trainer.h). train() reads top to bottom as the run goes, one named
// step a function: read the checkpoint on --resume (its settings replace the numbers ones), open
// the data and check the model fits it, plan for a memory budget, build model / loader /
// optimizer / schedule, restore the checkpoint, open the output files, print the header, then
// epochs of optimizer steps (metrics, display, checkpoints, evaluation at each epoch's end) and
// the final report. The steps share one Run. Not here: the settings (config.h), the data
// specs (data_spec.h), evaluation (eval.h), the display (progress.h).
#include "reckon/train/trainer.h"
#include "reckon/core/json.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "reckon/io/checkpoint.h"
#include "reckon/io/files.h"
#include "reckon/io/metrics.h"
#include "reckon/io/tensorboard.h"
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/plan.h"
#include "reckon/ledger/process.h"
#include "reckon/nn/layers.h"
#include "reckon/nn/models/registry.h"
#include "reckon/nn/recompute.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/matmul.h"
#include "reckon/optim/factory.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/step.h"
#include "reckon/train/progress.h"
#include "reckon/train/qat.h"
#include "reckon/train/quantize.h"
#include "reckon/train/threads.h"

namespace reckon::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

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

// ---- the run, step by step ----

// A run as its steps share it: set up by the steps before the epochs, then changed by each step.
struct Run {
  explicit Run(const TrainConfig& in)
      : cfg(in), out_dir(in.out), ckpt_path((out_dir / "last.safetensors").string()), show(in),
        best_path((out_dir / "best.safetensors").string()) {}

  TrainConfig cfg;  // as given, then from the checkpoint (--resume) and the plan (--max-memory)
  // The process settings for the run, set once cfg is valid and put back last, when the run ends.
  std::optional<ThreadsGuard> threads_guard;
  std::optional<ThreadGovernor> governor;  // --threads 0: fewer while other processes hold cores
  std::optional<ConvAlgorithmScope> conv_algo_scope;  // the plan may switch it to direct
  TrainResult res;
  const fs::path out_dir;
  const std::string ckpt_path;
  Display show;

  io::Checkpoint ck;        // --resume: the checkpoint
  json train_state;         // --resume: its running sums, file marks and scaler
  data::Normalize norm;     // the checkpoint's, or from cfg.normalize
  data::Augment augment;
  TrainData data;
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<Qat> qat;  // --qat (after model: it goes first, putting the model's forwards back)
  int64_t recompute_blocks = 0;
  std::unique_ptr<data::Loader> loader;
  int64_t nb = 0;               // micro-batches per epoch
  int64_t steps_per_epoch = 0;  // optimizer steps per epoch: windows of accum micro-batches
  int64_t total_steps = 0;
  std::unique_ptr<optim::Optimizer> opt;
  std::shared_ptr<const optim::LRSchedule> sched;
  std::unique_ptr<optim::GradScaler> scaler;  // null: no loss scaling
  std::unique_ptr<Step> step;

  io::TrainProgress prog;
  Running epoch_run, interval_run;
  std::unique_ptr<io::MetricsLog> metrics;
  std::unique_ptr<io::EventWriter> events;
  std::unique_ptr<io::DirLock> out_lock;  // held while the run writes in --out
  json saved_config;
  std::string init_note;  // what reading --checkpoint's weights adapted (a "module." prefix)
  int64_t extended_from = 0;  // --resume --epochs: the checkpoint's epochs (0: not changed)
  int64_t since_best = 0;     // --val-split: epochs since the best validation accuracy
  int64_t epochs_done = 0;    // epochs ended, this session's and before
  std::string best_path;      // out/best.safetensors

  Ledger prediction;           // the run predicted before its first step (empty: not predicted)
  // This session's optimizer steps, wall time each (the first kStepTimesKept: a long run's median
  // is had from them without a vector that grows with the run).
  static constexpr size_t kStepTimesKept = 1 << 16;
  std::vector<double> step_seconds;

  // This session's clocks.
  Clock::time_point run_t0;
  double train_seconds = 0;      // in steps (loading included), for the ETA
  double last_eval_seconds = 0;
  int64_t session_steps = 0;

  // Samples in micro-batch i of an epoch (the last may be short).
  int64_t micro_size(int64_t i) const { return std::min(cfg.batch, loader->num_samples() - i * cfg.batch); }
};

// 1. On --resume: the checkpoint, and from it the settings that shape the numbers.
void read_resume(Run& r) {
  if (!r.cfg.resume) return;
  const std::string& path = r.ckpt_path;
  RK_CHECK(fs::exists(path), "--resume: {} does not exist (nothing to resume in --out {})", path, r.cfg.out);
  r.ck = io::read_checkpoint(path);
  RK_CHECK(r.ck.has_training_state, "--resume: {} holds only weights, not a training checkpoint", path);
  RK_CHECK(r.ck.info.model == r.cfg.model, "--resume: {} is a checkpoint of model '{}', not '{}'", path,
           r.ck.info.model, r.cfg.model);
  apply_saved_config(r.cfg, parse_json(r.ck.info.config_json, fmt::format("{}: metadata 'config'", path)), r.norm,
                     path);
  if (r.cfg.resume_epochs > 0 && r.cfg.resume_epochs != r.cfg.epochs) {
    const io::TrainProgress& p = r.ck.info.progress;  // epoch: the one under way (batch_in_epoch > 0) or next
    const int64_t least = p.epoch + (p.batch_in_epoch > 0 ? 1 : 0);
    RK_CHECK(r.cfg.resume_epochs >= least,
             "--resume --epochs {}: the run in {} is {} epochs in already (give at least {})", r.cfg.resume_epochs,
             r.cfg.out, least, least);
    r.extended_from = r.cfg.epochs;
    r.cfg.epochs = r.cfg.resume_epochs;
  }
  auto it = r.ck.info.extra.find("train_state");
  RK_CHECK(it != r.ck.info.extra.end(), "{}: metadata has no 'train_state'", path);
  r.train_state = parse_json(it->second, fmt::format("{}: metadata 'train_state'", path));
}

// 2. The data, whether the model fits it (and its MACs), the normalisation unless resumed.
void open_data(Run& r) {
  const int64_t rss_before = process_rss_bytes();
  r.data = open_train_data(r.cfg.data);
  r.res.dataset_bytes = std::max<int64_t>(0, process_rss_bytes() - rss_before);
  if (r.cfg.val_split > 0) {
    data::Split sp = data::split_dataset(std::shared_ptr<const data::Dataset>(std::move(r.data.train)),
                                         r.cfg.val_split, r.cfg.seed);
    r.data.train = std::move(sp.kept);
    r.data.val = std::move(sp.held);
  }
  r.res.macs_per_image = forward_macs(r.cfg.model, r.data.chw[0], r.data.num_classes, r.data.chw);
  if (!r.cfg.resume) r.norm = parse_normalize(r.cfg.normalize, *r.data.train);
}

// 3. A memory budget: plan micro-batch, accumulation, precision and recomputation for the
// effective batch before anything is built (on --resume the checkpoint holds the plan).
void plan_to_fit(Run& r) {
  TrainConfig& cfg = r.cfg;
  PlanConfig pc;
  pc.model = cfg.model;
  pc.batch = cfg.batch * cfg.accum;
  pc.memory_bytes = cfg.max_memory;
  pc.input = r.data.chw;
  pc.num_classes = r.data.num_classes;
  pc.optimizer = cfg.optimizer == "sgd" ? "sgd" : "adamw";  // adam's state is adamw's
  pc.momentum = cfg.momentum;
  Plan p = plan(pc);
  const PlanRung* best = p.best();
  RK_CHECK(best != nullptr, "--max-memory {}: this run cannot fit; the ladder:\n{}", format_bytes(cfg.max_memory),
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
  if (cfg.eval_batch > cfg.batch) cfg.eval_batch = 0;
  r.show.line(format_plan(p));
  tracker(Device::cpu).reset_peak();  // the planner's cpu calibration (if it ran) is not the run's
}

// 4. Model (from manual_seed(seed)), loader, optimizer, schedule, loss scaler and the step.
void build(Run& r) {
  const TrainConfig& cfg = r.cfg;
  manual_seed(cfg.seed);
  r.model = onnx::make_model(cfg.model, {.num_classes = r.data.num_classes, .in_channels = r.data.chw[0]});
  r.res.parameters = r.model->num_parameters();
  if (!cfg.checkpoint.empty() && !cfg.resume) {  // weights to start from (--resume brings its own)
    const io::Checkpoint ck = io::read_checkpoint(cfg.checkpoint);
    r.init_note = io::load_model_state(ck, *r.model, cfg.model);
  }
  if (cfg.qat) r.qat = std::make_unique<Qat>(*r.model, r.data.chw);
  r.recompute_blocks = cfg.recompute ? nn::enable_recompute(*r.model) : 0;
  data::LoaderOptions lo;
  lo.batch = cfg.batch;
  lo.shuffle = true;
  lo.drop_last = cfg.drop_last;
  lo.seed = cfg.seed;
  lo.normalize = r.norm;
  lo.augment = r.augment;
  lo.prefetch = cfg.prefetch;
  r.loader = std::make_unique<data::Loader>(*r.data.train, lo);
  r.nb = r.loader->num_batches();
  RK_CHECK(r.nb > 0, "--data {}: {} training samples make no batch of {} (drop_last)", cfg.data, r.data.train->size(),
           cfg.batch);
  r.steps_per_epoch = (r.nb + cfg.accum - 1) / cfg.accum;
  r.total_steps = cfg.epochs * r.steps_per_epoch;
  r.opt = optim::make_optimizer(optimizer_spec(cfg), r.model->parameters());
  r.sched = optim::make_schedule(schedule_spec(cfg, r.steps_per_epoch));
  if (grad_scaler_on(cfg.grad_scaler, precision_dtype(cfg.precision))) r.scaler = std::make_unique<optim::GradScaler>();
  r.step = std::make_unique<Step>(*r.model, *r.opt, r.scaler.get(),
                                  StepConfig{.precision = precision_dtype(cfg.precision),
                                             .label_smoothing = cfg.label_smoothing,
                                             .layout = parse_activation_layout(cfg.memory_format)});
}

// Where the output files of a resumed run stood at its checkpoint.
struct FileMarks {
  io::MetricsLog::Marks metrics;
  std::string events_file;
  int64_t events_bytes = 0;
};

// 5. On --resume: weights, optimizer state, progress, the RNG, the running sums, the scaler.
FileMarks restore(Run& r) {
  FileMarks m;
  if (!r.cfg.resume) return m;
  const std::string& path = r.ckpt_path;
  io::load_model_state(r.ck, *r.model, r.cfg.model);
  io::load_optimizer_state(r.ck, *r.opt, r.cfg.optimizer);
  r.prog = r.ck.info.progress;
  r.epochs_done = r.prog.epoch;
  RK_CHECK(r.prog.batch_in_epoch <= r.nb, "{}: batch_in_epoch {} is past the {} batches of an epoch", path,
           r.prog.batch_in_epoch, r.nb);
  RK_CHECK(r.prog.batch_in_epoch % r.cfg.accum == 0 || r.prog.batch_in_epoch == r.nb,
           "{}: batch_in_epoch {} is inside an accumulation window of {}", path, r.prog.batch_in_epoch, r.cfg.accum);
  default_generator().set_state(r.prog.rng_state);
  const json& st = r.train_state;
  try {
    r.epoch_run = Running::from_json(st.at("epoch"));
    r.interval_run = Running::from_json(st.at("interval"));
    m.metrics.csv_bytes = st.at("metrics_csv_bytes").get<int64_t>();
    m.metrics.jsonl_bytes = st.at("metrics_jsonl_bytes").get<int64_t>();
    m.events_file = st.at("events_file").get<std::string>();
    if (!m.events_file.empty())  // a name from the file: it must stay inside --out
      io::check_plain_name(m.events_file, fmt::format("{}: metadata events_file", path));
    m.events_bytes = st.at("events_bytes").get<int64_t>();
    if (r.scaler && st.contains("scaler")) restore_scaler(*r.scaler, st.at("scaler"), path);
    if (r.qat && st.contains("qat")) r.qat->from_json(st.at("qat"), path);
    if (st.contains("best")) {
      const json& b = st.at("best");
      r.res.best_val_accuracy = b.at("val_accuracy").get<double>();
      r.res.best_epoch = b.at("epoch").get<int64_t>();
      r.since_best = b.at("since").get<int64_t>();
      r.res.early_stopped = b.at("early_stopped").get<bool>();
      if (r.res.best_epoch > 0) r.res.best_checkpoint = r.best_path;
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: metadata 'train_state' is incomplete ({})", path, e.what()));
  }
  return m;
}

// 6. The output directory, the metrics files and the TensorBoard events (on --resume cut back
// to the checkpoint and appended to).
void open_outputs(Run& r, const FileMarks& m) {
  std::error_code ec;
  fs::create_directories(r.out_dir, ec);
  RK_CHECK(fs::is_directory(r.out_dir), "--out {}: cannot create the directory{}", r.cfg.out,
           ec ? ": " + ec.message() : std::string());
  r.out_lock = std::make_unique<io::DirLock>(r.out_dir.string(), "--out");
  for (const auto& name : io::remove_stale_temporaries(r.out_dir.string()))
    r.show.line(fmt::format("removed {} (a temporary file an interrupted save left in --out)", name));
  r.metrics = std::make_unique<io::MetricsLog>(
      r.out_dir.string(),
      std::vector<std::string>{"epoch", "loss", "accuracy", "lr", "images_per_s", "seconds", "loss_scale",
                               "skipped_steps"},
      r.cfg.resume ? &m.metrics : nullptr);
  r.events = r.cfg.resume && !m.events_file.empty()
                 ? std::make_unique<io::EventWriter>((r.out_dir / m.events_file).string(), m.events_bytes)
                 : std::make_unique<io::EventWriter>(r.out_dir.string());
  r.saved_config = config_json(r.cfg, r.norm);
}

// The evaluation's batch: --eval-batch, else the training batch (before a split's size caps it).
int64_t eval_batch_of(const TrainConfig& cfg) { return cfg.eval_batch > 0 ? cfg.eval_batch : cfg.batch; }

// 6b. The run predicted by the ledger before its first step: the step on the meta device with what
// runs around it (the loader's prefetched batches, the epoch's last micro-batch, the evaluation), so
// that the allocator's blocks at their peak are the run's; the process once the step is planned is
// this one, the data already in it. Not with --qat (the fake-quantized forward is not the ledger's).
void predict_run(Run& r) {
  const TrainConfig& cfg = r.cfg;
  if (cfg.no_predict || cfg.qat) return;
  const int64_t n = r.data.train->size();
  LedgerConfig lc;
  lc.batch = std::min(cfg.batch, n);  // the loader's batches
  lc.input = r.data.chw;
  lc.num_classes = r.data.num_classes;
  lc.precision = cfg.precision;
  lc.accum = cfg.accum;
  lc.recompute = cfg.recompute;
  lc.conv_algo = conv_algorithm() == ConvAlgorithm::direct ? "direct" : "auto";
  lc.memory_format = cfg.memory_format;
  lc.grad_scaler = cfg.grad_scaler;
  lc.optimizer = cfg.optimizer == "sgd" ? "sgd" : "adamw";  // adam's state is adamw's
  lc.momentum = cfg.optimizer == "sgd" ? cfg.momentum : 0.0;
  lc.loader_batches = cfg.prefetch;
  lc.last_batch = cfg.drop_last || cfg.batch >= n ? 0 : n % cfg.batch;
  const int64_t test_n = r.data.test->size();
  lc.eval_batch = std::min(eval_batch_of(cfg), test_n);
  lc.eval_loader_batches = data::LoaderOptions{}.prefetch;  // evaluate()'s loader (eval.cpp)
  lc.eval_samples = test_n;
  if (r.data.val) {  // evaluated after the test set, at its own batch (end_epoch)
    lc.val_samples = r.data.val->size();
    lc.val_batch = std::min(eval_batch_of(cfg), lc.val_samples);
  }
  calibrate_cpu_in_child();  // a first calibration's buffers are not this run's peak
  try {
    r.prediction = ledger(cfg.model, lc);
  } catch (const Error& e) {  // the run itself may still go (its own checks come first)
    r.show.line(fmt::format("not predicted: {}", e.what()));
    return;
  }
  tracker(Device::cpu).reset_peak();  // a first calibration of the cpu (if it ran) is not the run's
  r.res.predicted_step_s = r.prediction.times.at(0).step_s;
  r.res.predicted_process_peak_bytes = r.prediction.memory.process_peak_bytes;
}

// 7. What the run is, in a few lines.
void print_header(Run& r) {
  const TrainConfig& cfg = r.cfg;
  const TrainData& d = r.data;
  r.show.line(fmt::format("{}: {} parameters, {:.3f} M forward MACs per image ({} images, {} classes)", cfg.model,
                          r.res.parameters, double(r.res.macs_per_image) / 1e6, shape_str(d.chw), d.num_classes));
  if (!cfg.checkpoint.empty() && !cfg.resume)
    r.show.line(fmt::format("weights from {}{}", cfg.checkpoint, r.init_note.empty() ? "" : " (" + r.init_note + ")"));
  if (r.qat) {
    const auto folded = r.qat->folded();
    std::string f;
    for (size_t i = 0; i < folded.size() && i < 3; ++i) f += (i ? ", " : " (") + folded[i];
    if (!folded.empty()) f += folded.size() > 3 ? ", ...)" : ")";
    r.show.line(fmt::format("QAT: {} conv/linear layers fake-quantized (s8 weights per channel, u8/s8 inputs) from "
                            "epoch {}; batch norm folded into {} convolutions{}",
                            r.qat->layers(), cfg.qat_start_epoch + 1, folded.size(), f));
  }
  if (d.val)
    r.show.line(fmt::format("validation: {} of the {} training samples held out (--val-split {}, by seed {}); "
                            "best.safetensors kept by validation accuracy{}",
                            d.val->size(), d.val->size() + d.train->size(), cfg.val_split, cfg.seed,
                            cfg.early_stop > 0 ? fmt::format("; early stop after {} epochs without a gain", cfg.early_stop)
                                               : std::string()));
  r.show.line(fmt::format("data {}: {} training / {} test samples; normalize {}", cfg.data, d.train->size(),
                          d.test->size(),
                          r.norm.mean.empty()
                              ? std::string("none")
                              : fmt::format("mean {} std {}", fmt_floats(r.norm.mean), fmt_floats(r.norm.std))));
  r.show.line(fmt::format("{} lr {} (momentum {}, weight decay {}), schedule {} (warm-up {} steps), batch {}, {} "
                          "batches per epoch, {} epochs, seed {}, {} threads{}; output {}",
                          cfg.optimizer, cfg.lr, cfg.optimizer == "sgd" ? cfg.momentum : 0.0, cfg.weight_decay,
                          cfg.schedule, cfg.warmup, cfg.batch, r.nb, cfg.epochs, cfg.seed, r.res.max_threads,
                          r.governor ? " (fewer while other processes hold cores; --threads N fixes the count)" : "",
                          cfg.out));
  if (!r.res.optimizer_defaults.empty())
    r.show.line(fmt::format("({}; --lr and --weight-decay set them)", r.res.optimizer_defaults));
  r.show.line(fmt::format("precision {}{}, batch {} x accumulation {} = effective batch {} ({} optimizer steps per "
                          "epoch){}",
                          cfg.precision, r.scaler ? " with dynamic loss scaling" : "", cfg.batch, cfg.accum,
                          cfg.batch * cfg.accum, r.steps_per_epoch,
                          cfg.recompute ? fmt::format(", recomputing {} blocks in backward", r.recompute_blocks) : "") +
              (conv_algorithm() == ConvAlgorithm::direct ? "; convolutions direct (no Winograd)" : ""));
  if (cfg.precision != "fp32") {  // autocast's exception (ops/conv.h), named with its reason
    std::vector<std::string> kept, narrow;
    for (auto& [name, mod] : r.model->named_modules())
      if (auto* c = dynamic_cast<nn::Conv2d*>(mod)) {
        const Conv2dArgs g = c->args();
        const ConvAttrs a{g.stride, g.padding, g.dilation, g.groups};
        if (few_channel_first_layer({1, c->in_channels, 1, 1}, c->weight.shape(), a))
          kept.push_back(name);
        else if (cfg.precision == "bf16" && narrow_conv_keeps_f32(c->weight.shape(), a))
          narrow.push_back(name);
      } else if (auto* l = dynamic_cast<nn::Linear*>(mod)) {
        if (cfg.precision == "bf16" && small_linear_keeps_f32(l->weight.shape())) narrow.push_back(name);
      }
    if (!kept.empty())
      r.show.line(fmt::format("autocast keeps {} in fp32: an image's first layer of at most 3 channels, where {} kernels "
                              "have no channels to fill their vector lanes (and reckon's direct loops run it)",
                              fmt::join(kept, ", "), cfg.precision));
    if (!narrow.empty())
      r.show.line(fmt::format("autocast keeps {} in fp32: narrow layers (convolutions under 16 input channels, at "
                              "most 16 outputs; linear layers of at most {} weights), and this cpu's bf16 dot products "
                              "are slower than its f32 FMAs (no AMX), so bf16 would cost time and save little memory",
                              fmt::join(narrow, ", "), kSmallLinearWeights));
  }
  if (cfg.accum > 1)
    for (auto& [name, mod] : r.model->named_modules())
      if (mod->type_name() == "BatchNorm2d") {
        r.show.line(fmt::format("note: batch-norm statistics see one micro-batch of {} samples, not the effective "
                                "batch of {}",
                                cfg.batch, cfg.batch * cfg.accum));
        break;
      }
  if (r.res.predicted_step_s > 0) {
    const LedgerMemory& m = r.prediction.memory;
    r.show.line(fmt::format("predicted (reckon ledger): {:.2f} ms per step on this cpu; process peak memory {} = "
                            "this process {} (the data {}) + reckon's allocator {} + running the kernels {}",
                            1e3 * r.res.predicted_step_s, format_mib(m.process_peak_bytes),
                            format_mib(m.process_planned_bytes), format_mib(r.res.dataset_bytes),
                            format_mib(m.allocator_resident_bytes), format_mib(m.process_overhead_bytes)));
  }
  if (cfg.max_memory <= 0) {  // (a plan's table says it already)
    const std::optional<DeviceSpec> cpu =
        r.res.predicted_step_s > 0 ? std::optional<DeviceSpec>(r.prediction.times.at(0).device) : cached_cpu_spec();
    if (cpu)
      if (const std::string n = slower_precision_note(*cpu, cfg.precision); !n.empty()) r.show.line(n);
  }
  if (cfg.resume)
    r.show.line(fmt::format("resuming from {} at step {} (epoch {}, batch {}); settings from the checkpoint",
                            r.ckpt_path, r.prog.step, r.prog.epoch + 1, r.prog.batch_in_epoch));
  if (r.extended_from > 0) {
    TrainConfig before = cfg;
    before.epochs = r.extended_from;
    const double was = optim::make_schedule(schedule_spec(before, r.steps_per_epoch))->get_lr(r.prog.step);
    r.show.line(fmt::format("--epochs {}: the run goes from {} to {} epochs; the {} schedule is re-planned over {} "
                            "steps (lr at step {} now {:.6g}, was {:.6g})",
                            cfg.epochs, r.extended_from, cfg.epochs, cfg.schedule, r.total_steps, r.prog.step,
                            r.sched->get_lr(r.prog.step), was));
  }
}

// Checkpointing: weights, optimizer state, progress (epoch, batch_in_epoch: where the run
// stands), the RNG, the config and the train state, after flushing the files it marks.
void save(Run& r, int64_t epoch, int64_t batch_in_epoch) {
  r.metrics->flush();
  r.events->flush();
  io::MetricsLog::Marks m = r.metrics->marks();
  json st{{"epoch", r.epoch_run.to_json()},
          {"interval", r.interval_run.to_json()},
          {"metrics_csv_bytes", m.csv_bytes},
          {"metrics_jsonl_bytes", m.jsonl_bytes},
          {"events_file", fs::path(r.events->path()).filename().string()},
          {"events_bytes", r.events->bytes()}};
  if (r.scaler) st["scaler"] = scaler_json(*r.scaler);
  if (r.qat) st["qat"] = r.qat->to_json();
  if (r.data.val)
    st["best"] = {{"val_accuracy", r.res.best_val_accuracy},
                  {"epoch", r.res.best_epoch},
                  {"since", r.since_best},
                  {"early_stopped", r.res.early_stopped}};
  io::CheckpointInfo info;
  info.model = r.cfg.model;
  info.optimizer = r.cfg.optimizer;
  info.progress = {.step = r.prog.step, .epoch = epoch, .batch_in_epoch = batch_in_epoch,
                   .rng_state = default_generator().state()};
  info.config_json = r.saved_config.dump();
  info.extra["train_state"] = st.dump();
  info.extra["num_classes"] = std::to_string(r.data.num_classes);
  info.extra["input_shape"] = shape_str(r.data.chw);
  info.extra["class_names"] = json(r.data.train->class_names()).dump();  // for reckon predict
  io::save_checkpoint(r.ckpt_path, *r.model, r.opt.get(), info);
  r.res.checkpoint = r.ckpt_path;
  // At the end of the epoch that set the best validation accuracy: the same checkpoint as best.
  if (r.data.val && batch_in_epoch == 0 && r.res.best_epoch == epoch && r.since_best == 0) {
    io::save_checkpoint(r.best_path, *r.model, r.opt.get(), info);
    r.res.best_checkpoint = r.best_path;
  }
}

// An epoch's clocks: since its start, and since the last metrics row.
struct EpochClock {
  Clock::time_point epoch_t0 = Clock::now(), interval_t0 = epoch_t0;
  int64_t epoch_images = 0, interval_images = 0;
};

// What one optimizer step did.
struct StepDone {
  int64_t last = 0;  // the micro-batch after its window
  int64_t n = 0;     // samples
  double lr = 0;
};

// One optimizer step: the window of micro-batches [b.index, b.index + accum) of the epoch, b
// its first (the loader gives the rest). Adds its mean loss to the running sums and the losses.
StepDone optimizer_step(Run& r, data::Batch& b, int64_t epoch) {
  const TrainConfig& cfg = r.cfg;
  const int64_t first = b.index, last = std::min(first + cfg.accum, r.nb);
  int64_t window = 0;
  for (int64_t i = first; i < last; ++i) window += r.micro_size(i);
  const double lr = r.sched->get_lr(r.prog.step);
  r.opt->set_lr(lr);
  r.step->begin(window);
  double loss_sum = 0;
  int64_t right = 0, n = 0;
  for (int64_t i = first; i < last; ++i) {
    if (i > first) RK_CHECK(r.loader->next(b) && b.index == i, "[train] the loader ended inside a window");
    check_labels(b, r.data.num_classes, cfg.data, epoch);
    MicroResult m = r.step->micro(b.x, b.y);
    loss_sum += m.loss * double(b.y.numel());
    right += count_correct(m.logits, b.y);
    n += b.y.numel();
  }
  const bool stepped = r.step->finish();
  r.prog.step += 1;
  r.session_steps += 1;
  const float l = float(loss_sum / double(n));
  RK_CHECK(std::isfinite(l), "[train] the loss is {} at step {} (epoch {}); try a lower --lr (now {})", l,
           r.prog.step, epoch + 1, lr);
  if (!stepped && r.scaler && r.scaler->skipped_steps() <= 5)
    r.show.line(fmt::format("step {}: skipped, the gradient of {} overflowed; loss scale now {}", r.prog.step,
                            r.scaler->overflow_param(), r.scaler->get_scale()));
  if (r.scaler && !r.scaler->warning().empty()) r.show.line("warning: " + r.scaler->warning());
  r.epoch_run.add(l, right, n);
  r.interval_run.add(l, right, n);
  r.res.losses.push_back(l);
  return {.last = last, .n = n, .lr = lr};
}

// Every log_every steps: a metrics row and TensorBoard points over the interval, then a new one.
void log_interval(Run& r, int64_t epoch, double lr, EpochClock& t) {
  const optim::GradScaler* scaler = r.scaler.get();
  const int64_t step = r.prog.step;
  double ips = double(t.interval_images) / std::max(1e-9, seconds_since(t.interval_t0));
  r.metrics->write("train", step,
                   {{"epoch", double(epoch + 1)},
                    {"loss", r.interval_run.loss()},
                    {"accuracy", r.interval_run.accuracy()},
                    {"lr", lr},
                    {"images_per_s", ips},
                    {"loss_scale", scaler ? double(scaler->get_scale()) : 0.0},
                    {"skipped_steps", scaler ? double(scaler->skipped_steps()) : 0.0}});
  if (scaler) r.events->add_scalar("train/loss_scale", scaler->get_scale(), step);
  r.events->add_scalar("train/loss", float(r.interval_run.loss()), step);
  r.events->add_scalar("train/accuracy", float(r.interval_run.accuracy()), step);
  r.events->add_scalar("train/lr", float(lr), step);
  r.events->add_scalar("train/images_per_s", float(ips), step);
  r.interval_run = Running{};
  t.interval_t0 = Clock::now();
  t.interval_images = 0;
}

// The end of the run's last step when stop_after or the stop flag ended it (after a checkpoint).
void stopped(Run& r, int64_t epoch, int64_t batch) {
  r.res.stopped = true;
  r.show.line(fmt::format("stopped at step {} (epoch {}, batch {}/{}); checkpoint: {} (continue with --resume)",
                          r.prog.step, epoch + 1, batch, r.nb, r.ckpt_path));
  r.res.steps = r.prog.step;
  if (r.scaler) r.res.skipped_steps = r.scaler->skipped_steps(), r.res.loss_scale = r.scaler->get_scale();
  r.res.rng_state = default_generator().state();
}

// A first epoch that ended where a guess starts (training loss near ln K, accuracy near 1/K)
// learnt nothing: too high a learning rate is the usual cause (Adam at the SGD recipe's 0.05
// stays at 10% on lenet5). Said once, with a learning rate to try; the run goes on.
void warn_if_at_chance(Run& r, const EpochStats& es) {
  const double K = double(r.data.num_classes);
  if (es.epoch != 1 || K < 2) return;
  const bool learnt = es.train_loss < 0.9 * std::log(K) || es.train_accuracy > 1.5 / K;  // NaN loss: not learnt
  if (learnt) return;
  const TrainConfig& cfg = r.cfg;
  const double def = optimizer_defaults(cfg.optimizer).value().lr;  // validated before the run
  const double try_lr = cfg.lr > def ? def : cfg.lr / 10;
  std::string w = fmt::format("warning: epoch 1 ended at chance (train loss {:.4f}, ln {} = {:.4f}; train accuracy "
                              "{:.2f}%, 1/{} = {:.2f}%): lr {} is likely too high for {}; try --lr {}",
                              es.train_loss, r.data.num_classes, std::log(K), 100 * es.train_accuracy,
                              r.data.num_classes, 100 / K, cfg.lr, cfg.optimizer, try_lr);
  r.show.line(w);
  r.res.warnings.push_back(std::move(w));
}

// An evaluation between training steps. At the training batch (the default) its requests are the
// forward's, served by the blocks the steps cached. At another batch the allocator's cached
// blocks are handed back before and after it: neither phase's blocks could serve the other's
// requests, and kept they would add up (resnet18_cifar at batch 64 evaluated at 500: 2.0 GiB
// resident, against 0.75 GiB evaluated at 64, as fast).
// (The ledger's prediction of the run takes the same steps: predict_run.)
EvalResult evaluate_between_steps(Run& r, const data::Dataset& ds) {
  const int64_t batch = eval_batch_of(r.cfg);
  const bool other_batch = std::min(batch, ds.size()) != std::min(r.cfg.batch, r.data.train->size());
  if (other_batch) host_memory_trim(Device::cpu);
  EvalResult ev = evaluate(*r.model, ds, r.norm, batch, precision_dtype(r.cfg.precision));
  if (other_batch) host_memory_trim(Device::cpu);
  return ev;
}

// The end of an epoch: evaluate, log, checkpoint (at the next epoch's start).
void end_epoch(Run& r, int64_t epoch, const EpochClock& t) {
  const TrainConfig& cfg = r.cfg;
  const double epoch_seconds = seconds_since(t.epoch_t0);
  EvalResult ev = evaluate_between_steps(r, *r.data.test);
  r.last_eval_seconds = ev.seconds;
  EpochStats es{.epoch = epoch + 1,
                .train_loss = r.epoch_run.loss(),
                .train_accuracy = r.epoch_run.accuracy(),
                .test_loss = ev.loss,
                .test_accuracy = ev.accuracy,
                .seconds = epoch_seconds,
                .images_per_s = double(t.epoch_images) / std::max(1e-9, epoch_seconds)};
  if (r.data.val) {
    EvalResult v = evaluate_between_steps(r, *r.data.val);
    es.val_loss = v.loss, es.val_accuracy = v.accuracy;
    r.metrics->write("val", r.prog.step,
                     {{"epoch", double(epoch + 1)}, {"loss", v.loss}, {"accuracy", v.accuracy}, {"seconds", v.seconds}});
    r.events->add_scalar("val/loss", float(v.loss), r.prog.step);
    r.events->add_scalar("val/accuracy", float(v.accuracy), r.prog.step);
    if (v.accuracy > r.res.best_val_accuracy) {
      r.res.best_val_accuracy = v.accuracy, r.res.best_epoch = epoch + 1, r.since_best = 0;
    } else {
      r.since_best += 1;
    }
    r.res.early_stopped = cfg.early_stop > 0 && r.since_best >= cfg.early_stop && epoch + 1 < cfg.epochs;
  }
  r.epochs_done = epoch + 1;
  r.res.epochs.push_back(es);
  r.res.final_eval = ev;
  const int64_t step = r.prog.step;
  r.metrics->write("epoch", step,
                   {{"epoch", double(epoch + 1)},
                    {"loss", es.train_loss},
                    {"accuracy", es.train_accuracy},
                    {"images_per_s", es.images_per_s},
                    {"seconds", es.seconds}});
  r.metrics->write("test", step,
                   {{"epoch", double(epoch + 1)},
                    {"loss", ev.loss},
                    {"accuracy", ev.accuracy},
                    {"seconds", ev.seconds}});
  r.events->add_scalar("epoch/train_loss", float(es.train_loss), step);
  r.events->add_scalar("epoch/train_accuracy", float(es.train_accuracy), step);
  r.events->add_scalar("epoch/images_per_s", float(es.images_per_s), step);
  r.events->add_scalar("test/loss", float(ev.loss), step);
  r.events->add_scalar("test/accuracy", float(ev.accuracy), step);
  r.show.line(fmt::format("epoch {}/{}  train loss {:.4f} acc {:.2f}%  test loss {:.4f} acc {:.2f}%  {:.1f} s  "
                          "{:.0f} img/s  (eval {:.1f} s)",
                          epoch + 1, cfg.epochs, es.train_loss, 100 * es.train_accuracy, ev.loss, 100 * ev.accuracy,
                          es.seconds, es.images_per_s, ev.seconds) +
              (r.data.val ? fmt::format("  val loss {:.4f} acc {:.2f}%{}", es.val_loss, 100 * es.val_accuracy,
                                        r.since_best == 0 ? " (best)" : "")
                          : std::string()));
  if (r.res.early_stopped)
    r.show.line(fmt::format("early stop: no gain in validation accuracy for {} epochs (best {:.2f}% at epoch {})",
                            r.since_best, 100 * r.res.best_val_accuracy, r.res.best_epoch));
  warn_if_at_chance(r, es);
  r.epoch_run = Running{};
  save(r, epoch + 1, 0);
}

// 8. One epoch from its batch `skip` on: steps with metrics, display and checkpoints, then the
// epoch's end. False when the run stopped inside it (stop_after or the stop flag).
bool run_epoch(Run& r, int64_t epoch, int64_t skip) {
  const TrainConfig& cfg = r.cfg;
  r.model->train();
  if (r.qat) {
    r.qat->enable(epoch >= cfg.qat_start_epoch);
    if (epoch > cfg.qat_start_epoch && !r.qat->frozen()) {
      r.qat->freeze();
      r.show.line(fmt::format("QAT: observers and batch norm statistics frozen from epoch {}", epoch + 1));
    }
  }
  r.loader->start_epoch(epoch, skip);
  if (skip == 0) r.epoch_run = Running{};
  EpochClock t;
  data::Batch b;
  while (true) {
    auto step_t0 = Clock::now();
    if (!r.loader->next(b)) break;
    const StepDone s = optimizer_step(r, b, epoch);
    const double step_s = seconds_since(step_t0);
    if (r.step_seconds.size() < Run::kStepTimesKept) r.step_seconds.push_back(step_s);
    r.train_seconds += step_s;
    if (r.governor) {
      if (r.governor->threads() < r.governor->max()) ++r.res.fewer_threads_steps;
      if (r.governor->tick())
        r.show.line(fmt::format("threads: {} of {} from step {} (other processes took {:.1f} cpus)",
                                r.governor->threads(), r.governor->max(), r.prog.step + 1,
                                r.governor->others_cores()));
    }
    t.epoch_images += s.n;
    t.interval_images += s.n;
    if (r.prog.step % cfg.log_every == 0) log_interval(r, epoch, s.lr, t);
    const double rate = double(r.session_steps) / std::max(1e-9, r.train_seconds);  // steps/s
    const double eta = double(r.total_steps - r.prog.step) / rate + double(cfg.epochs - epoch) * r.last_eval_seconds;
    r.show.step(epoch + 1, cfg.epochs, s.last, r.nb, r.prog.step, r.epoch_run.loss(), r.epoch_run.accuracy(),
                double(t.epoch_images) / std::max(1e-9, seconds_since(t.epoch_t0)), eta);

    bool stop = (cfg.stop_after > 0 && r.prog.step >= cfg.stop_after) || (cfg.stop_flag && cfg.stop_flag->load());
    if (cfg.on_step &&
        !cfg.on_step({.step = r.prog.step, .epoch = epoch + 1, .batch = s.last, .batches = r.nb,
                      .loss = r.res.losses.back(), .lr = s.lr, .samples = s.n}))
      stop = true;
    if (stop || (cfg.checkpoint_every > 0 && r.prog.step % cfg.checkpoint_every == 0)) save(r, epoch, s.last);
    if (stop) {
      stopped(r, epoch, s.last);
      return false;
    }
  }
  end_epoch(r, epoch, t);
  return true;
}

// 9. The final report: the last evaluation (one now when no epoch ended in this session),
// time, peak memory and where the files are.
void final_report(Run& r) {
  TrainResult& res = r.res;
  res.steps = r.prog.step;
  res.rng_state = default_generator().state();
  if (r.scaler) {
    res.skipped_steps = r.scaler->skipped_steps();
    res.loss_scale = r.scaler->get_scale();
    r.show.line(fmt::format("loss scaling: {} of {} steps skipped, final scale {}", res.skipped_steps, r.prog.step,
                            res.loss_scale));
  }
  if (res.final_eval.samples == 0)
    res.final_eval = evaluate_between_steps(r, *r.data.test);
  auto st = tracker(Device::cpu).stats();
  r.show.result(fmt::format("final test accuracy {:.2f}% (loss {:.4f}) after {} epochs, {} steps, {:.1f} s; peak "
                          "tracked memory {:.1f} MiB",
                          100 * res.final_eval.accuracy, res.final_eval.loss,
                          res.early_stopped ? r.epochs_done : r.cfg.epochs, r.prog.step,
                          seconds_since(r.run_t0), double(st.peak_total_bytes) / (1 << 20)));
  res.measured_process_peak_bytes = process_hwm_bytes();
  if (r.step_seconds.size() > 3) {
    std::vector<double> s(r.step_seconds.begin() + 3, r.step_seconds.end());
    std::nth_element(s.begin(), s.begin() + ptrdiff_t(s.size() / 2), s.end());
    res.measured_step_s = s[s.size() / 2];
  }
  if (res.predicted_step_s > 0 && res.measured_step_s > 0) {
    auto err = [](double p, double m) { return fmt::format("{:+.1f}%", 100 * (p - m) / m); };
    r.show.result(fmt::format("predicted against measured: step {:.2f} ms / {:.2f} ms ({}; median of {} steps); "
                              "process peak memory (VmHWM) {} / {} ({})",
                              1e3 * res.predicted_step_s, 1e3 * res.measured_step_s,
                              err(res.predicted_step_s, res.measured_step_s), r.step_seconds.size() - 3,
                              format_mib(res.predicted_process_peak_bytes), format_mib(res.measured_process_peak_bytes),
                              err(double(res.predicted_process_peak_bytes), double(res.measured_process_peak_bytes))));
  }
  if (res.fewer_threads_steps > 0)
    r.show.result(fmt::format("threads: {} of the {} steps ran on fewer than {} threads (other processes held cores)",
                              res.fewer_threads_steps, r.session_steps, res.max_threads));
  if (res.checkpoint.empty() && fs::exists(r.ckpt_path)) res.checkpoint = r.ckpt_path;
  if (r.qat) {  // the int8 program of the trained weights, with the ranges QAT learnt
    QuantizeArgs qa;
    qa.model = r.cfg.model;
    qa.checkpoint = r.ckpt_path;
    qa.data = r.cfg.data;
    qa.input_ranges = r.qat->input_ranges();
    qa.threads = r.cfg.threads;
    qa.out = (r.out_dir / "model.int8.onnx").string();
    const QuantizeReport q = quantize_model(qa);
    res.int8_model = q.out;
    res.int8_accuracy = q.methods.at(0).int8_accuracy;
    r.show.result(fmt::format("QAT int8: {:.2f}% top-1 through the int8 engine (fake-quantized {:.2f}%), {} layer "
                            "inputs at QAT's ranges; wrote {}",
                            100 * res.int8_accuracy, 100 * res.final_eval.accuracy, q.fixed_ranges, q.out));
  }
  if (r.data.val && r.res.best_epoch > 0)
    r.show.result(fmt::format("best validation accuracy {:.2f}% at epoch {}{}: {}", 100 * r.res.best_val_accuracy,
                              r.res.best_epoch, r.res.early_stopped ? " (stopped early)" : "", r.best_path));
  r.show.result(fmt::format("checkpoint: {}  metrics: {}  tensorboard: {}", r.ckpt_path, r.metrics->csv_path(),
                            r.events->path()));
}

}  // namespace

TrainResult train(const TrainConfig& in) {
  Run r(in);
  read_resume(r);
  r.res.optimizer_defaults = apply_optimizer_defaults(r.cfg);
  validate(r.cfg);
  r.threads_guard.emplace(r.cfg.threads);
  r.res.max_threads = omp_get_max_threads();
  if (threads_adapt(r.cfg.threads)) r.governor.emplace(r.res.max_threads);
  r.conv_algo_scope.emplace(r.cfg.conv_algo);
  r.augment = parse_augment(r.cfg.augment);
  open_data(r);
  if (r.cfg.max_memory > 0 && !r.cfg.resume) {
    calibrate_cpu_in_child();  // (plan() times on the cpu: not in this run's peak)
    plan_to_fit(r);
  }
  build(r);
  const FileMarks marks = restore(r);
  r.ck = io::Checkpoint{};  // restored: its tensors are not held over the run
  r.res.first_step = r.prog.step;
  open_outputs(r, marks);  // (first: a locked or bad --out is said before the prediction's work)
  predict_run(r);
  print_header(r);
  r.run_t0 = Clock::now();
  for (int64_t epoch = r.prog.epoch, skip = r.prog.batch_in_epoch; epoch < r.cfg.epochs && !r.res.early_stopped;
       ++epoch, skip = 0)
    if (!run_epoch(r, epoch, skip)) return std::move(r.res);
  final_report(r);
  return std::move(r.res);
}

}  // namespace reckon::train
