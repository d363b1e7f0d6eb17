// `reckon train` (a zoo model on a dataset, with checkpoints, metrics and TensorBoard files)
// and `reckon eval` (loss, top-1 and the confusion matrix of a checkpoint on a test split).
// The work is in reckon/train/trainer.h; this file is the options and the printout.
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "command.h"
#include "reckon/io/npy.h"
#include "reckon/ledger/ledger.h"
#include "reckon/train/trainer.h"

using namespace reckon;

namespace {

// A real option given as nan or inf is refused (CLI11 reads them as numbers); an unset lr is
// the optimizer's default, never a NaN given on purpose.
CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str()) return {};  // not a number: CLI11 says so
        return std::isfinite(v) ? std::string() : s + " is not a finite number";
      },
      "");
}

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) {
  // A second Ctrl-C ends the process at once; the first stops at the next step with a checkpoint.
  if (g_stop.exchange(true)) std::_Exit(130);
}

tools::RegisterCommand reg_train([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static train::TrainConfig c;
  static bool no_progress = false, progress = false, quiet = false;
  static bool out_given = false;
  static std::map<std::string, std::string> bytes_text;  // Cli::bytes fields: the text given, by flag
  sub = app.add_subcommand("train", "train a zoo model on a dataset (checkpoints, metrics, TensorBoard events)");
  // The options of the fields (reckon/train/config_fields.h), in their order.
  train::for_each_field(c, [&](const train::FieldInfo& f, auto& value, const auto&) {
    using T = std::remove_cvref_t<decltype(value)>;
    switch (f.cli) {
      case train::Cli::none: break;
      case train::Cli::positional: sub->add_option(f.flag(), value, f.help)->required(); break;
      case train::Cli::flag:
        if constexpr (std::is_same_v<T, bool>) sub->add_flag(f.flag(), value, f.help);
        break;
      case train::Cli::option: {
        CLI::Option* o = sub->add_option(f.flag(), value, f.help)->capture_default_str();
        // CLI11 reads "-1" into an unsigned field as 2^64-1: refuse a sign there.
        if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) o->check(CLI::NonNegativeNumber);
        if constexpr (std::is_floating_point_v<T>) o->check(finite_number());
        break;
      }
      case train::Cli::option_no_default: {
        CLI::Option* o = sub->add_option(f.flag(), value, f.help);
        if constexpr (std::is_floating_point_v<T>) o->check(finite_number());
        break;
      }
      case train::Cli::bytes: sub->add_option(f.flag(), bytes_text[f.flag()], f.help); break;
    }
  });
  // PyTorch users look for --init; it is --checkpoint (weights to start a new run from).
  sub->add_option("--init", c.checkpoint,
                  "the same as --checkpoint: start from these weights (a reckon checkpoint, or a safetensors state "
                  "dict: reckon's or PyTorch's, a 'module.' prefix stripped)")
      ->excludes(sub->get_option("--checkpoint"));
  sub->get_option("--out")->each([](const std::string&) { out_given = true; });
  sub->add_flag("--progress", progress, "always draw the progress bar");
  sub->add_flag("--no-progress", no_progress, "never draw the progress bar (plain log lines)");
  sub->add_flag("--quiet", quiet, "print only the final line");
  CLI::App* self = sub;
  return [self] {
    if (!out_given) c.out = "runs/" + c.model;
    if (c.resume) {
      // --epochs N with --resume is the run's new length (the schedule re-planned), not ignored.
      c.resume_epochs = self->count("--epochs") > 0 ? c.epochs : 0;
      std::string ignored;  // listed by what the checkpoint does with them, then in the fields' order
      for (train::Keep k : {train::Keep::numbers, train::Keep::numbers_or_default, train::Keep::planned})
        train::for_each_field(c, [&](const train::FieldInfo& f, const auto&, const auto&) {
          if (f.keep == k && f.cli != train::Cli::none && self->count(f.flag()) > 0 && f.flag() != "--epochs")
            ignored += (ignored.empty() ? "" : ", ") + f.flag();
        });
      if (!ignored.empty())
        std::fprintf(stderr, "reckon train: --resume takes its settings from the checkpoint; ignoring %s\n",
                     ignored.c_str());
    }
    train::for_each_field(c, [&](const train::FieldInfo& f, auto& value, const auto&) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(value)>, int64_t>)
        if (f.cli == train::Cli::bytes && !bytes_text[f.flag()].empty())
          value = parse_bytes(bytes_text[f.flag()], f.flag());
    });
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
  std::string dump;
};

tools::RegisterCommand reg_eval([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static EvalArgs a;
  sub = app.add_subcommand("eval", "loss, top-1 accuracy and confusion matrix of a checkpoint on a test split");
  sub->add_option("model", a.model, "zoo model name or an .onnx file")->required();
  sub->add_option("--checkpoint", a.checkpoint,
                  "a reckon checkpoint or a safetensors state dict (an .onnx file brings its own weights)");
  sub->add_option("--dump-outputs", a.dump, "write the raw outputs (samples, classes) as float32 .npy");
  sub->add_option("--data", a.data, "dataset spec (its test split is used)")->capture_default_str();
  sub->add_option("--normalize", a.normalize, "auto (the checkpoint's figures) | none | M1,../S1,..")
      ->capture_default_str();
  sub->add_option("--batch", a.batch, "batch size")->capture_default_str();
  sub->add_option("--threads", a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_flag("--json", a.json, "print JSON");
  return [] {
    train::EvalResult r =
        train::evaluate_checkpoint(a.model, a.checkpoint, a.data, a.normalize, a.batch, a.threads, !a.dump.empty());
    if (!a.dump.empty()) {
      Tensor out = Tensor::empty({r.samples, r.num_classes}, DType::f32, Device::cpu);
      std::copy(r.outputs.begin(), r.outputs.end(), out.data<float>());
      io::write_npy(a.dump, out);
    }
    if (!r.weights_note.empty()) std::fprintf(stderr, "weights from %s: %s\n", a.checkpoint.c_str(), r.weights_note.c_str());
    if (a.json) {
      nlohmann::json j{{"model", a.model},       {"checkpoint", a.checkpoint}, {"data", a.data},
                       {"normalization", r.normalization},
                       {"samples", r.samples},   {"loss", r.loss},             {"accuracy", r.accuracy},
                       {"classes", r.class_names}, {"seconds", r.seconds}, {"runner", r.runner}};
      std::vector<std::vector<int64_t>> m(size_t(r.num_classes));
      for (int64_t t = 0; t < r.num_classes; ++t)
        m[size_t(t)].assign(r.confusion.begin() + t * r.num_classes, r.confusion.begin() + (t + 1) * r.num_classes);
      j["confusion"] = m;
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("%s on %s (test split, %lld samples): loss %.4f, top-1 accuracy %.2f%% (%.2f s, %s)\n", a.model.c_str(),
                a.data.c_str(), (long long)r.samples, r.loss, 100 * r.accuracy, r.seconds,
                r.runner == "engine" ? "the inference engine" : "eager");
    std::printf("normalize: %s\n", r.normalization.c_str());
    std::printf("%s", train::format_confusion(r).c_str());
    return 0;
  };
});

}  // namespace
