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
#include "reckon/train/progress.h"

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

}  // namespace

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
  TrainData data = open_train_data(cfg.data);
  const std::unique_ptr<data::Dataset>&train_set = data.train, &test_set = data.test;
  const Shape chw = data.chw;
  const int64_t K = data.num_classes;
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
