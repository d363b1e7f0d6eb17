// `reckon train` (a zoo model on a dataset, with checkpoints, metrics and TensorBoard files)
// and `reckon eval` (loss, top-1 and the confusion matrix of a checkpoint on a test split).
// The work is in reckon/train/trainer.h; this file is the options and the printout.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/ledger/ledger.h"
#include "reckon/train/trainer.h"

using namespace reckon;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) {
  // A second Ctrl-C ends the process at once; the first stops at the next step with a checkpoint.
  if (g_stop.exchange(true)) std::_Exit(130);
}

tools::RegisterCommand reg_train([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static train::TrainConfig c;
  static bool no_progress = false, progress = false, quiet = false;
  static bool out_given = false;
  static std::string max_memory;
  sub = app.add_subcommand("train", "train a zoo model on a dataset (checkpoints, metrics, TensorBoard events)");
  sub->add_option("model", c.model, "zoo model name (reckon models)")->required();
  sub->add_option("--data", c.data,
                  "fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR | cifar100:DIR | folder:DIR | synthetic:CxHxW[:N[:K]]")
      ->capture_default_str();
  sub->add_option("--epochs", c.epochs, "epochs")->capture_default_str();
  sub->add_option("--batch", c.batch, "batch size")->capture_default_str();
  sub->add_option("--lr", c.lr, "base learning rate")->capture_default_str();
  sub->add_option("--optimizer", c.optimizer, "sgd | adam | adamw")->capture_default_str();
  sub->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  sub->add_flag("--nesterov", c.nesterov, "SGD with Nesterov momentum");
  sub->add_option("--weight-decay", c.weight_decay, "weight decay (decoupled for adamw)")->capture_default_str();
  sub->add_option("--schedule", c.schedule, "none | step | cosine (per step over the run)")->capture_default_str();
  sub->add_option("--warmup", c.warmup, "linear warm-up steps")->capture_default_str();
  sub->add_option("--step-epochs", c.step_epochs, "step schedule: epochs between lr drops (0: epochs/3)")
      ->capture_default_str();
  sub->add_option("--gamma", c.gamma, "step schedule: lr factor at each drop")->capture_default_str();
  sub->add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing")->capture_default_str();
  sub->add_option("--precision", c.precision, "fp32 | bf16 | fp16 (mixed precision: autocast, f32 master weights)")
      ->capture_default_str();
  sub->add_option("--accum", c.accum, "gradient accumulation: optimizer step every K micro-batches of --batch")
      ->capture_default_str();
  sub->add_flag("--recompute", c.recompute, "recompute each block's activations in backward (saves memory)");
  sub->add_option("--conv-algo", c.conv_algo,
                  "auto | direct: convolution algorithm (direct: no Winograd workspace; default: RECKON_CONV_ALGO, else auto)");
  sub->add_option("--grad-scaler", c.grad_scaler, "dynamic loss scaling: auto (fp16 only) | on | off")
      ->capture_default_str();
  sub->add_option("--max-memory", max_memory,
                  "memory budget (e.g. 4GiB, 512MiB): plan micro-batch, accumulation, precision and recomputation "
                  "for the effective batch --batch x --accum; refuse a run that cannot fit");
  sub->add_option("--seed", c.seed, "random seed (initialisation, shuffling, augmentation, dropout)")
      ->capture_default_str();
  sub->add_option("--threads", c.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_option("--out", c.out, "output directory (last.safetensors, metrics.csv/.jsonl, events.out.tfevents.*); "
                                  "default runs/MODEL")
      ->each([](const std::string&) { out_given = true; });
  sub->add_flag("--resume", c.resume, "continue the run in --out from its last.safetensors");
  sub->add_option("--normalize", c.normalize, "auto (training-split mean/std) | none | M1,M2,../S1,S2,..")
      ->capture_default_str();
  sub->add_option("--augment", c.augment, "none | comma list of crop[:PAD], flip")->capture_default_str();
  sub->add_option("--checkpoint-every", c.checkpoint_every, "also checkpoint every N steps (0: at epoch ends only)")
      ->capture_default_str();
  sub->add_option("--log-every", c.log_every, "steps per metrics row / TensorBoard point")->capture_default_str();
  sub->add_option("--print-every", c.print_every, "steps per log line when stdout is not a terminal")
      ->capture_default_str();
  sub->add_option("--eval-batch", c.eval_batch, "batch size of the evaluation")->capture_default_str();
  sub->add_flag("--drop-last", c.drop_last, "drop the last partial batch of each epoch");
  sub->add_option("--stop-after", c.stop_after, "stop after N steps in all, with a checkpoint (resume later)")
      ->capture_default_str();
  sub->add_flag("--progress", progress, "always draw the progress bar");
  sub->add_flag("--no-progress", no_progress, "never draw the progress bar (plain log lines)");
  sub->add_flag("--quiet", quiet, "print only the final line");
  CLI::App* self = sub;
  return [self] {
    if (!out_given) c.out = "runs/" + c.model;
    if (c.resume) {
      std::string ignored;
      for (const char* o : {"--data", "--epochs", "--batch", "--lr", "--optimizer", "--momentum", "--nesterov",
                            "--weight-decay", "--schedule", "--warmup", "--step-epochs", "--gamma", "--label-smoothing",
                            "--seed", "--normalize", "--augment", "--drop-last", "--precision", "--accum",
                            "--recompute", "--grad-scaler", "--max-memory"})
        if (self->count(o) > 0) ignored += std::string(ignored.empty() ? "" : ", ") + o;
      if (!ignored.empty())
        std::fprintf(stderr, "reckon train: --resume takes its settings from the checkpoint; ignoring %s\n",
                     ignored.c_str());
    }
    if (!max_memory.empty()) c.max_memory = parse_bytes(max_memory, "--max-memory");
    c.progress = no_progress ? 0 : progress ? 1 : -1;
    c.verbose = quiet ? 0 : 1;
    g_stop = false;
    c.stop_flag = &g_stop;
    std::signal(SIGINT, on_sigint);
    train::TrainResult r = train::train(c);
    std::signal(SIGINT, SIG_DFL);
    if (quiet)
      std::printf("final test accuracy %.2f%% (loss %.4f); checkpoint: %s\n", 100 * r.final_eval.accuracy,
                  r.final_eval.loss, r.checkpoint.c_str());
    return r.stopped && g_stop.load() ? 130 : 0;
  };
});

struct EvalArgs {
  std::string model;
  std::string checkpoint;
  std::string data = "fashion-mnist";
  std::string normalize = "auto";
  int64_t batch = 500;
  int threads = 0;
  bool json = false;
};

tools::RegisterCommand reg_eval([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static EvalArgs a;
  sub = app.add_subcommand("eval", "loss, top-1 accuracy and confusion matrix of a checkpoint on a test split");
  sub->add_option("model", a.model, "zoo model name")->required();
  sub->add_option("--checkpoint", a.checkpoint, "a reckon checkpoint or a safetensors state dict")->required();
  sub->add_option("--data", a.data, "dataset spec (its test split is used)")->capture_default_str();
  sub->add_option("--normalize", a.normalize, "auto (the checkpoint's figures) | none | M1,../S1,..")
      ->capture_default_str();
  sub->add_option("--batch", a.batch, "batch size")->capture_default_str();
  sub->add_option("--threads", a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_flag("--json", a.json, "print JSON");
  return [] {
    train::EvalResult r =
        train::evaluate_checkpoint(a.model, a.checkpoint, a.data, a.normalize, a.batch, a.threads);
    if (a.json) {
      nlohmann::json j{{"model", a.model},       {"checkpoint", a.checkpoint}, {"data", a.data},
                       {"samples", r.samples},   {"loss", r.loss},             {"accuracy", r.accuracy},
                       {"classes", r.class_names}, {"seconds", r.seconds}};
      std::vector<std::vector<int64_t>> m(size_t(r.num_classes));
      for (int64_t t = 0; t < r.num_classes; ++t)
        m[size_t(t)].assign(r.confusion.begin() + t * r.num_classes, r.confusion.begin() + (t + 1) * r.num_classes);
      j["confusion"] = m;
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("%s on %s (test split, %lld samples): loss %.4f, top-1 accuracy %.2f%%\n", a.model.c_str(),
                a.data.c_str(), (long long)r.samples, r.loss, 100 * r.accuracy);
    std::printf("%s", train::format_confusion(r).c_str());
    return 0;
  };
});

}  // namespace
