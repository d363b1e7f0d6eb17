// `reckon bench-train MODEL --batch B --steps S --threads T [--inference]`: the speed of a
// training step (forward, cross entropy, backward, SGD with momentum) or of an inference
// forward, on one fixed random batch of the model's default input, printed as JSON with
// images/s and the process's peak resident memory (getrusage ru_maxrss). The counterpart of
// bench/train_vs_pytorch.py's PyTorch side; data loading is deliberately not timed.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/train/config.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/conv.h"
#include "reckon/optim/grad_scaler.h"
#include "reckon/optim/optim.h"
#include "reckon/optim/step.h"

using namespace reckon;

namespace {

struct BenchArgs {
  std::string model = "lenet5";
  int64_t batch = 64;
  int steps = 20;
  int warmup = 3;
  int threads = 0;
  int64_t size = 0;  // input H = W (0: the model's default)
  bool inference = false;
  uint64_t seed = 0;
  std::string precision = "fp32";
  std::string conv_algo;  // "" = as set (RECKON_CONV_ALGO or auto)
  std::string memory_format = "auto";
};

double peak_rss_mib() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

int cmd_bench_train(const BenchArgs& a) {
  RK_CHECK(a.batch >= 1 && a.steps >= 1 && a.warmup >= 0 && a.threads >= 0 && a.size >= 0,
           "bench-train: --batch and --steps must be >= 1, --warmup, --threads and --size >= 0");
  train::ThreadsGuard threads(a.threads);
  if (!a.conv_algo.empty()) set_conv_algorithm(parse_conv_algorithm(a.conv_algo, "--conv-algo"));
  manual_seed(a.seed);
  auto model = onnx::make_model(a.model, {});
  Shape in = onnx::model_input_shape(a.model, {});
  if (a.size > 0) in[1] = in[2] = a.size;
  in.insert(in.begin(), a.batch);
  int64_t classes = onnx::resolve_model_config(a.model, {}).num_classes;
  Tensor x, y;
  {
    TagGuard g(Tag::input);
    x = Tensor::empty(in);
    fill_normal_(x, 0.0, 1.0);
    y = Tensor::empty({a.batch}, DType::i64);
    for (int64_t i = 0; i < a.batch; ++i) y.set(i, double(i % classes));
  }
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  const DType precision = precision_dtype(a.precision);
  std::unique_ptr<optim::GradScaler> scaler;
  if (train::grad_scaler_on("auto", precision)) scaler = std::make_unique<optim::GradScaler>();
  const auto layout = train::parse_activation_layout(a.memory_format);
  train::Step step(*model, opt, scaler.get(), {.precision = precision, .layout = layout});  // what `reckon train` runs
  std::vector<double> step_s;
  double loss_v = 0;
  if (a.inference) model->eval(); else model->train();
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    if (a.inference) {
      NoGrad ng;
      Autocast ac(precision);
      Tensor out = (*model)(x);
      loss_v = out.get(0);
    } else {
      step.begin(a.batch);
      loss_v = step.micro(x, y).loss;
      step.finish();
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= a.warmup) step_s.push_back(dt);
  }
  double total = 0;
  for (double d : step_s) total += d;
  nlohmann::json kernels = nlohmann::json::object();  // the oneDNN convolutions that ran, per call kind
  for (const auto& [name, count] : conv_kernels_used()) kernels[name] = count;
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  auto st = tracker(Device::cpu).stats();
  nlohmann::json j{{"framework", "reckon"},
                   {"model", a.model},
                   {"mode", a.inference ? "inference" : "train"},
                   {"precision", a.precision},
                   {"memory_format", a.inference ? "contiguous"
                                                 : (train::channels_last_for(layout, precision) ? "channels_last" : "contiguous")},
                   {"batch", a.batch},
                   {"input", in},
                   {"steps", a.steps},
                   {"threads", omp_get_max_threads()},
                   {"seconds", total},
                   {"images_per_s", double(a.batch) * double(a.steps) / total},
                   {"median_step_ms", 1e3 * median},
                   {"peak_rss_mib", peak_rss_mib()},
                   {"peak_tracked_mib", double(st.peak_total_bytes) / (1 << 20)},
                   {"conv_algorithm", conv_algorithm_name(conv_algorithm())},
                   {"conv_kernels", kernels},
                   {"last_value", loss_v}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

tools::RegisterCommand reg_bench_train([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static BenchArgs a;
  sub = app.add_subcommand("bench-train", "images/s of training steps (or inference) on random data, as JSON");
  sub->add_option("model", a.model, "zoo model name")->required();
  sub->add_option("--batch", a.batch, "batch size")->capture_default_str();
  sub->add_option("--steps", a.steps, "timed steps")->capture_default_str();
  sub->add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  sub->add_option("--threads", a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_option("--size", a.size, "input height = width (0: the model's default)")->capture_default_str();
  sub->add_option("--seed", a.seed, "random seed")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--precision", a.precision, "fp32 | bf16 | fp16 (autocast)")->capture_default_str();
  sub->add_option("--conv-algo", a.conv_algo, "auto | direct (default: RECKON_CONV_ALGO, else auto)");
  sub->add_option("--memory-format", a.memory_format,
                  "auto | contiguous | channels_last: the training step's activations (auto: channels_last in bf16)")
      ->capture_default_str();
  sub->add_flag("--inference", a.inference, "time eval-mode forward passes under no-grad instead");
  return [] { return cmd_bench_train(a); };
});

}  // namespace
