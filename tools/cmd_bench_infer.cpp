// `reckon bench-infer MODEL|model.onnx --batch N --threads T [--json]`: the inference engine's
// latency (p50, p90, p99 of single forward passes) and throughput on one fixed random batch, and
// what the engine did to the model (the passes that ran, reorders per run, arena and weight
// bytes). bench/infer_vs_peers.py runs it next to ONNX Runtime and PyTorch.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/train/config.h"
#include "reckon/engine/engine.h"
#include "reckon/engine/quantize.h"
#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"

using namespace reckon;

namespace {

struct Args {
  std::string model;
  int64_t batch = 1;
  int threads = 0;
  std::string precision = "fp32";
  int iters = 0;          // 0: as many as fit in min_time
  double min_time = 2.0;  // seconds of timed runs (when iters is 0)
  int warmup = 5;
  std::string input;      // CxHxW, default the model's
  std::vector<std::string> passes{"all"};
  bool plain_layouts = false;
  bool json = false;
  bool profile = false;
  uint64_t seed = 0;
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5));
  return v[i];
}

int cmd_bench_infer(const Args& a) {
  RK_CHECK(a.batch >= 1 && a.threads >= 0 && a.iters >= 0 && a.warmup >= 0 && a.min_time > 0,
           "[bench-infer] --batch must be >= 1, --threads, --iters and --warmup >= 0, --min-time > 0");
  RK_CHECK(a.precision == "fp32" || a.precision == "int8",
           "[bench-infer] --precision {}: the engine runs fp32 and int8 (a bf16 engine is not built yet)", a.precision);
  train::ThreadsGuard threads(a.threads);
  manual_seed(a.seed);
  auto model = onnx::make_model(a.model, {});
  Shape in = a.input.empty() ? onnx::model_input_shape(a.model, {}) : tools::parse_input(a.input, "bench-infer");
  in.insert(in.begin(), a.batch);
  engine::EngineOptions o;
  o.passes = a.passes;
  if (o.passes.size() == 1 && o.passes[0] == "none") o.passes.clear();
  o.blocked_layouts = !a.plain_layouts;
  const auto t_build = std::chrono::steady_clock::now();
  engine::Program prog = engine::make_program(*model, in);
  if (a.precision == "int8") {
    // Calibrated on random batches like the one timed (the scales do not change the speed):
    // the passes first, then the int8 rewrite of their fused graph.
    engine::run_passes(prog, o.passes);
    engine::Calibrator cal(prog);
    for (int i = 0; i < 3; ++i) {
      Tensor c = Tensor::empty(in);
      fill_normal_(c, 0.0, 1.0);
      cal.observe(c);
    }
    prog = engine::quantize_program(prog, cal, {}).program;
    o.passes.clear();
  }
  engine::Engine e(std::move(prog), o);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();
  model.reset();  // the engine holds what it needs
  Tensor x;
  {
    TagGuard g(Tag::input);
    x = Tensor::empty(in);
    fill_normal_(x, 0.0, 1.0);
  }
  Tensor y = Tensor::empty(e.output_shape());
  for (int i = 0; i < a.warmup; ++i) e.run(x, y);
  std::vector<double> lat;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (a.iters > 0 ? i >= a.iters
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= a.min_time &&
                          i >= 10)
      break;
    const auto t0 = std::chrono::steady_clock::now();
    e.run(x, y);
    lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double p50 = pct(lat, 50), p90 = pct(lat, 90), p99 = pct(lat, 99);
  // Per step: the fastest of 20 timed runs (each step synchronised, so the sum exceeds p50).
  std::vector<double> step_s;
  if (a.profile) {
    for (int r = 0; r < 20; ++r) {
      auto t = e.run_timed(x, y);
      if (step_s.empty()) step_s = t;
      for (size_t i = 0; i < t.size(); ++i) step_s[i] = std::min(step_s[i], t[i]);
    }
  }
  int kernels = 0, onednn = 0, direct = 0;
  for (const auto& s : e.steps()) {
    kernels += s.kind == "kernel";
    onednn += s.kind == "onednn";
    direct += s.kind == "direct";
  }
  nlohmann::json passes = nlohmann::json::array();
  for (const auto& r : e.passes())
    passes.push_back({{"name", r.name}, {"rewrites", r.rewrites}, {"nodes_before", r.nodes_before}, {"nodes_after", r.nodes_after},
                      {"bytes_before", r.bytes_before}, {"bytes_after", r.bytes_after}});
  nlohmann::json j{{"framework", "reckon"},
                   {"model", a.model},
                   {"batch", a.batch},
                   {"input", in},
                   {"threads", omp_get_max_threads()},
                   {"precision", a.precision},
                   {"iterations", lat.size()},
                   {"p50_ms", 1e3 * p50},
                   {"p90_ms", 1e3 * p90},
                   {"p99_ms", 1e3 * p99},
                   {"images_per_s", double(a.batch) / p50},
                   {"build_s", build_s},
                   {"steps", e.steps().size()},
                   {"onednn_steps", onednn},
                   {"kernel_steps", kernels},
                   {"direct_steps", direct},
                   {"reorders_per_run", e.reorders()},
                   {"arena_bytes", e.arena_bytes()},
                   {"weight_bytes", e.weight_bytes()},
                   {"layouts", a.plain_layouts ? "plain" : "blocked"},
                   {"passes", passes},
                   {"cpu_isa", dnnl_util::cpu_isa_name()},
                   {"checksum", y.get(0)}};
  if (a.profile) {
    nlohmann::json prof = nlohmann::json::array();
    for (size_t i = 0; i < step_s.size(); ++i)
      prof.push_back({{"name", e.steps()[i].name}, {"op", e.steps()[i].op}, {"impl", e.steps()[i].impl},
                      {"ms", 1e3 * step_s[i]}, {"macs", e.steps()[i].cost.macs}});
    j["profile"] = prof;
  }
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s, batch %lld, %d threads, %s (oneDNN: %s)\n", a.model.c_str(), (long long)a.batch,
              omp_get_max_threads(), a.precision.c_str(), dnnl_util::cpu_isa_name().c_str());
  std::printf("  latency      p50 %.3f ms   p90 %.3f ms   p99 %.3f ms   (%zu runs)\n", 1e3 * p50, 1e3 * p90, 1e3 * p99,
              lat.size());
  std::printf("  throughput   %.1f images/s (batch / p50)\n", double(a.batch) / p50);
  std::printf("  engine       %zu steps (%d oneDNN primitives, %d direct, %d op kernels), %d reorders per run, built in %.2f s\n",
              e.steps().size(), onednn, direct, kernels, e.reorders(), build_s);
  std::printf("  memory       arena %.2f MiB, weights %.2f MiB\n", double(e.arena_bytes()) / (1 << 20),
              double(e.weight_bytes()) / (1 << 20));
  std::printf("  passes      ");
  for (const auto& r : e.passes()) std::printf(" %s (%d)", r.name.c_str(), r.rewrites);
  std::printf("\n");
  if (a.profile) {
    std::printf("  %-32s %-40s %9s %9s  %s\n", "step", "op", "ms", "GMAC/s", "implementation");
    for (size_t i = 0; i < step_s.size(); ++i) {
      const auto& s = e.steps()[i];
      std::printf("  %-32s %-40s %9.3f %9.1f  %s\n", s.name.substr(0, 32).c_str(), s.op.substr(0, 40).c_str(),
                  1e3 * step_s[i], double(s.cost.macs) / step_s[i] / 1e9, s.impl.c_str());
    }
  }
  return 0;
}

tools::RegisterCommand reg([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static Args a;
  sub = app.add_subcommand("bench-infer", "latency and throughput of the inference engine on random data");
  sub->add_option("model", a.model, "zoo model name or an .onnx file")->required();
  sub->add_option("--batch", a.batch, "images per run")->capture_default_str();
  sub->add_option("--threads", a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_option("--precision", a.precision,
                  "fp32, or int8 (calibrated min-max on random batches; reckon quantize calibrates on data)")
      ->check(CLI::IsMember({"fp32", "int8", "bf16"}))
      ->capture_default_str();
  sub->add_option("--iters", a.iters, "timed runs (0: as many as --min-time allows)")->capture_default_str();
  sub->add_option("--min-time", a.min_time, "seconds of timed runs when --iters is 0")->capture_default_str();
  sub->add_option("--warmup", a.warmup, "untimed runs first")->capture_default_str();
  sub->add_option("--input", a.input, "one sample's shape CxHxW (default: the model's)");
  sub->add_option("--passes", a.passes, "graph passes to run: all, none, or names (reckon bench-infer --help)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_flag("--plain-layouts", a.plain_layouts, "keep every value NCHW (reorder around each convolution)");
  sub->add_flag("--json", a.json, "print JSON");
  sub->add_flag("--profile", a.profile, "time each step too (the fastest of 20 runs)");
  sub->add_option("--seed", a.seed, "random seed of the input")->capture_default_str()->check(CLI::NonNegativeNumber);
  return [] { return cmd_bench_infer(a); };
});

}  // namespace
