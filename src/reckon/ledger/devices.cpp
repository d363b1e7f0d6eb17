// The device catalog: datasheet GPUs and this machine's calibrated CPU (devices.h).
#include "reckon/ledger/devices.h"
#include "reckon/core/file.h"
#include "reckon/core/json.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include <dnnl.hpp>

#include "reckon/core/cpu_load.h"
#include "reckon/core/cuda.h"
#include "reckon/ledger/time_model.h"
#include "reckon/ledger/inference.h"
#include "reckon/engine/engine.h"
#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/nn/module.h"
#include "reckon/onnx/export.h"
#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"
#include "reckon/ops/quant.h"

namespace reckon {

namespace {
using json = nlohmann::json;
constexpr double kT = 1e12;
constexpr double kG = 1e9;
constexpr int64_t kGB = 1000LL * 1000 * 1000;

// Per-op fixed cost assumed for the GPUs: an eager framework's kernel launch plus its own
// dispatch, about 5 us (not a datasheet figure; reckon has no cuda backend to calibrate yet).
constexpr double kGpuOpOverheadS = 5e-6;

// Datasheet figures, dense (the datasheets print the 2:4 structured-sparsity figures with an
// asterisk; those are twice the dense ones and are not used). Tensor-core rates for bf16/fp16 are
// the FP32-accumulate ones.
std::vector<DeviceSpec> gpus() {
  std::vector<DeviceSpec> g;
  // NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM / 80GB SXM columns): FP32 19.5 TFLOPS,
  // TF32 156 TFLOPS, BF16 312, FP16 312, INT8 624 TOPS; HBM2 1,555 GB/s (40GB), HBM2e
  // 2,039 GB/s (80GB).
  g.push_back({"a100", "NVIDIA A100 SXM4 40GB", "NVIDIA A100 datasheet (dense)", false, 19.5 * kT, 156 * kT,
               312 * kT, 312 * kT, 624 * kT, 1555 * kG, 40 * kGB, kGpuOpOverheadS});
  g.push_back({"a100-80gb", "NVIDIA A100 SXM4 80GB", "NVIDIA A100 datasheet (dense)", false, 19.5 * kT, 156 * kT,
               312 * kT, 312 * kT, 624 * kT, 2039 * kG, 80 * kGB, kGpuOpOverheadS});
  // NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): FP32 67 TFLOPS; TF32 989, BF16 1,979,
  // FP16 1,979 TFLOPS and INT8 3,958 TOPS with sparsity, so dense 494.5 / 989.5 / 989.5 / 1,979;
  // HBM3 3.35 TB/s, 80 GB.
  g.push_back({"h100", "NVIDIA H100 SXM5 80GB", "NVIDIA H100 datasheet (dense = sparse / 2)", false, 67 * kT,
               494.5 * kT, 989.5 * kT, 989.5 * kT, 1979 * kT, 3350 * kG, 80 * kGB, kGpuOpOverheadS});
  // NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): the H100 SXM's compute (FP32 67 TFLOPS,
  // TF32 989*, BF16 1,979*, FP16 1,979*, INT8 3,958* with sparsity), HBM3e 4.8 TB/s, 141 GB.
  g.push_back({"h200", "NVIDIA H200 SXM 141GB", "NVIDIA H200 datasheet (dense = sparse / 2)", false, 67 * kT,
               494.5 * kT, 989.5 * kT, 989.5 * kT, 1979 * kT, 4800 * kG, 141 * kGB, kGpuOpOverheadS});
  // NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS; TF32 120, BF16 242, FP16 242 TFLOPS
  // and INT8 485 TOPS with sparsity (dense 60 / 121 / 121 / 242.5); GDDR6 300 GB/s, 24 GB.
  g.push_back({"l4", "NVIDIA L4 24GB", "NVIDIA L4 datasheet (dense = sparse / 2)", false, 30.3 * kT, 60 * kT,
               121 * kT, 121 * kT, 242.5 * kT, 300 * kG, 24 * kGB, kGpuOpOverheadS});
  // NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090: FP32 82.6 TFLOPS; dense
  // tensor TF32 82.6, BF16 and FP16 (FP32 accumulate) 165.2 TFLOPS, INT8 660.6 TOPS;
  // GDDR6X 1,008 GB/s, 24 GB.
  g.push_back({"rtx4090", "NVIDIA GeForce RTX 4090 24GB", "NVIDIA Ada Lovelace whitepaper (dense)", false,
               82.6 * kT, 82.6 * kT, 165.2 * kT, 165.2 * kT, 660.6 * kT, 1008 * kG, 24 * kGB, kGpuOpOverheadS});
  return g;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string s = line.substr(p + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  return "unknown CPU";
}

// The last-level cache's size (L3, else L2; 32 MiB when the system does not say).
int64_t last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
    if (long v = sysconf(name); v > 0) return int64_t(v);
  return int64_t(32) << 20;
}

int64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

// Bumped whenever what calibrate_cpu measures, or how, changes: an entry of another format is
// measured again. 2: the inference engine's per-step overhead, and the versions recorded. 3: the
// other processes' share of the CPU while it ran, the runs' spread and the attempts.
constexpr int kCalibrationFormat = 25;  // 4-6: the op families (time_model.h; 5: shape classes; 6: the
                                        // probe's bf16 steps channels-last, oneDNN's NHWC kernels;
                                        // 7: the pooling kernels, the small direct convolutions'
                                        // passes and the optimizer updates got faster; 8: the
                                        // bandwidth by working-set size; 9: bf16 autocast keeps
                                        // the probe's narrow layer f32 on some cpus, ops/conv.h;
                                        // 10: a family's rooflines within 2x of each other give
                                        // its efficiency, not a slope: kMinFamilySpread; 11: the
                                        // small direct convolution's output-lanes variant named
                                        // and probed; 12: the narrow probe's first layer 5x5;
                                        // 13: matrix products skinny or broad; 14: the small
                                        // direct convolution two rows a call, small linear
                                        // layers f32 under bf16 on some cpus, a broad probe
                                        // linear layer over that size; 15: the lines fitted
                                        // to the least relative error, not least squares;
                                        // 16: the small direct convolutions' work counted in
                                        // the lanes they issue, KernelCtx::lane_use; 17: the
                                        // inference engine's steps probed, their own lines;
                                        // 18: the in-place bandwidth curve, the updates timed
                                        // on it, dropout probed on 4096 features; 19: a
                                        // stride-1 max pooling probed, matrix products of
                                        // 16 to 47 rows their own class; 20: int8
                                        // depthwise layers on reckon's VNNI kernel; 21: the
                                        // engine's convolutions timed on the taps inside the
                                        // input; 22: not Winograd's nor gemm's, and the
                                        // probes timed in alternating rounds, probe_rounds;
                                        // 23: elementwise loops of at most kParallelMin
                                        // elements vectorized, no longer scalar; 24: the
                                        // small direct convolution's backward data with
                                        // the images in the lanes, n_lanes; 25: the
                                        // kernels' layout conversions timed apart,
                                        // reorder_bandwidth)

// A sanitized build runs every op several times slower (ASan measured 0.6 GB/s where the release
// build moves 23-130): its calibration must never time a release build's steps, nor the reverse.
std::string sanitizers_text() {
  const std::string s = RECKON_SANITIZERS;
  return s.empty() ? "" : ", sanitized (" + s + ")";
}

// A build whose kernels run at another speed than an optimized one's: sanitized, or unoptimized.
// Its calibrations are kept under keys of their own (a release build and a sanitized one sharing a
// cache would otherwise measure again, each over the other's, at every turn).
std::string build_flavour() {
  const std::string type = RECKON_BUILD_TYPE;
  const bool optimized = type == "Release" || type == "RelWithDebInfo" || type == "MinSizeRel";
  std::string s = std::string(RECKON_SANITIZERS).empty() ? "" : "sanitized " + std::string(RECKON_SANITIZERS);
  if (!optimized) s += (s.empty() ? "" : ", ") + (type.empty() ? std::string("unoptimized") : type) + " build";
  return s;
}

// How OpenMP's idle threads wait, where the environment says: a passive wait (threads sleep between
// parallel regions) costs every op a wake-up. Measured on the Intel Xeon of 2026-12-06: lenet5's
// step at batch 64 took 3.6-4.2 ms passive against 1.95 ms by default in `reckon train`.
std::string wait_policy() {
  std::string s;
  for (const char* v : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY"})
    if (const char* x = std::getenv(v); x && *x) s += fmt::format("{}{}={}", s.empty() ? "" : ", ", v, x);
  return s;
}

std::string cache_key() {
  const std::string w = wait_policy(), b = build_flavour();
  return fmt::format("{}|{} threads{}{}", cpu_model_name(), omp_get_max_threads(), w.empty() ? "" : "|" + w,
                     b.empty() ? "" : "|" + b);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best and the median time of reps runs of f (after one warm-up run).
struct Timed {
  double best = 0, median = 0;
  double spread() const { return best > 0 ? median / best - 1 : 0; }
};
// budget_s > 0: stop once the timed runs took that long, after two at least.
template <class F>
Timed time_runs(int reps, F&& f, double budget_s = 0) {
  f();
  std::vector<double> t;
  double total = 0;
  for (int i = 0; i < reps && !(budget_s > 0 && i >= 2 && total >= budget_s); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(seconds_since(t0));
    total += t.back();
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}
template <class F>
double best_of(int reps, F&& f) {
  return time_runs(reps, f).best;
}

std::string cpu_source(const DeviceSpec& d) {
  return fmt::format("calibrated {} (cached in {}); {}", d.calibrated_at, device_cache_path(), calibration_quality(d));
}

std::optional<DeviceSpec> read_cache() {
  try {
    json j = parse_json(read_regular_file(device_cache_path(), "devices", uint64_t(1) << 24), device_cache_path());
    const json& e = j.at("cpus").at(cache_key());
    DeviceSpec d;
    d.name = "cpu";
    d.description = e.at("description").get<std::string>();
    d.calibrated_at = e.at("calibrated_at").get<std::string>();
    d.calibrated = true;
    d.fp32_flops = e.at("fp32_gflops").get<double>() * kG;
    d.bf16_flops = e.at("bf16_gflops").get<double>() * kG;  // absent in older caches: calibrate again
    d.fp16_flops = d.fp32_flops;
    d.bandwidth_bytes = e.at("bandwidth_gbs").get<double>() * kG;
    // A curve: at least two points, ascending in bytes, non-increasing in bandwidth.
    auto read_curve = [&](const json& a, std::vector<std::pair<double, double>>& c) {
      for (const auto& p : a) {
        const double bytes = p.at(0).get<double>(), bw = p.at(1).get<double>() * kG;
        if (!(bytes > 0 && bytes < 1e15 && bw > 0 && bw < 1e15) || c.size() >= 64 ||
            (!c.empty() && !(bytes > c.back().first && bw <= c.back().second)))
          return false;
        c.emplace_back(bytes, bw);
      }
      return c.size() >= 2;
    };
    // (absent before formats 8 and 18: calibrate again)
    if (!read_curve(e.at("bandwidth_curve"), d.bandwidth_curve) ||
        !read_curve(e.at("inplace_bandwidth_curve"), d.inplace_bandwidth_curve))
      return std::nullopt;
    // The last point is the memory bandwidth (what the ridge and the report use).
    if (!(std::abs(d.bandwidth_curve.back().second - d.bandwidth_bytes) <= 1e-6 * d.bandwidth_bytes))
      return std::nullopt;
    d.bandwidth_bytes = d.bandwidth_curve.back().second;
    d.op_overhead_s = e.at("op_overhead_us").get<double>() * 1e-6;
    d.winograd_speedup = e.at("winograd_speedup").get<double>();  // absent in older caches: calibrate again
    d.reorder_bandwidth = e.at("reorder_gbs").get<double>() * kG;  // absent before format 25: calibrate again
    d.int8_ops = e.at("int8_gops").get<double>() * kG;            // absent in older caches: calibrate again
    d.engine_step_overhead_s = e.at("engine_step_overhead_us").get<double>() * 1e-6;
    d.memory_bytes = physical_memory_bytes();
    // How it went (absent before calibration format 3, whose versions differ anyway).
    d.others_cpu_share = e.at("others_cpu_share").get<double>();
    d.spread = e.at("spread").get<double>();
    d.under_load = e.at("under_load").get<bool>();
    const double attempts = e.at("attempts").get<double>();
    if (!(attempts >= 1 && attempts <= 1000) || !(d.others_cpu_share >= -1 && d.others_cpu_share <= 1) ||
        !(d.spread >= 0 && d.spread < 1e6))
      return std::nullopt;
    d.attempts = int(attempts);
    for (const auto& [k, v] : e.at("op_families").items()) {  // absent before format 4: calibrate again
      const double fixed_s = v.at("fixed_us").get<double>() * 1e-6, scale = v.at("scale").get<double>(),
                   samples = v.at("samples").get<double>();
      if (!(fixed_s >= 0 && fixed_s < 1) || !(scale >= kMinFamilyScale && scale <= kMaxFamilyScale) ||
          !(samples >= 1 && samples <= 1e6))
        return std::nullopt;
      d.op_families[k] = FamilyTime{fixed_s, scale, int(samples)};
    }
    if (d.op_families.empty()) return std::nullopt;
    d.source = cpu_source(d);
    if (e.at("versions").get<std::string>() != calibration_versions()) return std::nullopt;  // made by another build
    if (d.fp32_flops <= 0 || d.bf16_flops <= 0 || d.int8_ops <= 0 || !(d.bandwidth_bytes > 0 && d.bandwidth_bytes < 1e15) ||
        d.winograd_speedup < 1 || !(d.reorder_bandwidth > 0 && d.reorder_bandwidth < 1e15) ||
        !(d.engine_step_overhead_s > 0))
      return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;  // missing, old or damaged: calibrate again
  }
}

void write_cache(const DeviceSpec& d) {
  namespace fs = std::filesystem;
  const std::string path = device_cache_path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  json j = json::object();
  {
    try {
      j = parse_json(read_regular_file(path, "devices", uint64_t(1) << 24), path);
    } catch (const std::exception&) {
      j = json::object();  // missing or damaged: written afresh
    }
  }
  if (!j.is_object()) j = json::object();
  j["version"] = 1;
  json families = json::object();
  for (const auto& [k, f] : d.op_families)  // (fit_family's lines are finite and within its bounds)
    families[k] = {{"fixed_us", f.fixed_s * 1e6}, {"scale", f.scale}, {"samples", f.samples}};
  auto curve = [](const std::vector<std::pair<double, double>>& c) {
    json a = json::array();
    for (const auto& [bytes, bw] : c) a.push_back({bytes, bw / kG});
    return a;
  };
  j["cpus"][cache_key()] = {{"description", d.description},
                            {"calibrated_at", d.calibrated_at},
                            {"fp32_gflops", d.fp32_flops / kG},
                            {"bf16_gflops", d.bf16_flops / kG},
                            {"int8_gops", d.int8_ops / kG},
                            {"bandwidth_gbs", d.bandwidth_bytes / kG},
                            {"bandwidth_curve", curve(d.bandwidth_curve)},
                            {"inplace_bandwidth_curve", curve(d.inplace_bandwidth_curve)},
                            {"op_overhead_us", d.op_overhead_s * 1e6},
                            {"winograd_speedup", d.winograd_speedup},
                            {"reorder_gbs", d.reorder_bandwidth / kG},
                            {"engine_step_overhead_us", d.engine_step_overhead_s * 1e6},
                            {"others_cpu_share", d.others_cpu_share},
                            {"spread", d.spread},
                            {"under_load", d.under_load},
                            {"attempts", d.attempts},
                            {"op_families", families},
                            {"versions", calibration_versions()}};
  try {
    onnx::write_file_atomic(path, j.dump(2) + "\n");
  } catch (const std::exception&) {  // a read-only home, a full disk: the calibration is simply not kept
  }
}

std::mutex g_cpu_mu;
std::optional<DeviceSpec> g_cpu;
bool g_use_cached = false;  // use_cached_cpu_calibration

// calibration_to_keep's choice, written to the cache.
DeviceSpec keep_and_cache(const std::optional<DeviceSpec>& cached, const DeviceSpec& fresh) {
  DeviceSpec keep = calibration_to_keep(cached, fresh);
  write_cache(keep);
  keep.source = cpu_source(keep);
  return keep;
}
}  // namespace

bool fresh_calibration_kept(const std::optional<DeviceSpec>& cached, const DeviceSpec& fresh) {
  return !fresh.under_load || !cached || (cached->under_load && !(cached->others_cpu_share < fresh.others_cpu_share));
}

DeviceSpec calibration_to_keep(const std::optional<DeviceSpec>& cached, const DeviceSpec& fresh) {
  if (!fresh.under_load || !cached) {
    DeviceSpec keep = fresh;
    keep.attempts = 1;
    return keep;
  }
  if (!cached->under_load) return *cached;
  DeviceSpec keep = fresh_calibration_kept(cached, fresh) ? fresh : *cached;
  keep.attempts = cached->attempts + 1;
  return keep;
}

Recalibration recalibrate_cpu() {
  std::lock_guard<std::mutex> g(g_cpu_mu);
  std::optional<DeviceSpec> c = read_cache();
  Recalibration r;
  r.fresh = calibrate_cpu();
  r.fresh_kept = fresh_calibration_kept(c, r.fresh);
  r.kept = keep_and_cache(c, r.fresh);
  g_cpu = r.kept;
  return r;
}

double others_cpu_share(const std::string& stat_before, const std::string& stat_after, double self_cpu_s,
                        const std::vector<int>& cpus, int threads) {
  // The others' cores less what the cores the calibration left idle absorb, over its cores.
  const double others = others_busy_cores(stat_before, stat_after, self_cpu_s, cpus);
  const auto after = stat_ticks(stat_after, cpus);
  if (others < 0 || !after) return -1;
  const int n = after->cpus;
  const int t = threads > 0 ? std::min(threads, n) : n;
  return std::clamp((others - (n - t)) / t, 0.0, 1.0);
}

std::string slower_precision_note(const DeviceSpec& d, const std::string& precision) {
  if (precision == "fp32" || d.fp32_flops <= 0) return "";
  const double p = precision == "bf16" ? d.bf16_flops : precision == "fp16" ? d.fp16_flops : 0;
  if (p <= 0 || p >= 0.9 * d.fp32_flops) return "";
  return fmt::format("note: {}'s {} peak is {:.0f} GFLOP/s, below its fp32 peak of {:.0f}: {} halves the activations' "
                     "memory here but computes {:.1f}x slower (autocast keeps narrow convolutions and small linear "
                     "layers fp32 on such a cpu); fp32 may be the faster run",
                     d.name, precision, p / 1e9, d.fp32_flops / 1e9, precision, d.fp32_flops / p);
}

std::string calibration_quality(const DeviceSpec& d) {
  const std::string runs = fmt::format("runs within {:.0f}%", 100 * d.spread);
  if (d.others_cpu_share < 0) return "other processes' share of the CPU not known (no /proc/stat), " + runs;
  const std::string others = fmt::format("other processes took {:.0f}% of the CPU, {}", 100 * d.others_cpu_share, runs);
  if (!d.under_load) return "quiet: " + others;
  if (d.attempts >= kCalibrationAttempts)
    return fmt::format("made under load: {} (the least disturbed of {} calibrations; `reckon ledger --recalibrate` on a "
                       "quiet machine)",
                       others, d.attempts);
  return fmt::format("made under load: {} (calibration {} of at most {}: taken again by the next command)", others,
                     d.attempts, kCalibrationAttempts);
}

namespace {
double curve_at(const std::vector<std::pair<double, double>>& c, double bytes, double fallback) {
  if (c.empty() || !(bytes > c.front().first)) return c.empty() ? fallback : c.front().second;
  if (bytes >= c.back().first) return c.back().second;
  size_t i = 1;
  while (c[i].first < bytes) ++i;
  const double f = std::log(bytes / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
  return std::exp(std::log(c[i - 1].second) + f * (std::log(c[i].second) - std::log(c[i - 1].second)));
}
}  // namespace

double DeviceSpec::bandwidth_at(double bytes, bool in_place) const {
  if (in_place && !inplace_bandwidth_curve.empty()) return curve_at(inplace_bandwidth_curve, bytes, bandwidth_bytes);
  return curve_at(bandwidth_curve, bytes, bandwidth_bytes);
}

double DeviceSpec::peak(const std::string& precision) const {
  double p = precision == "fp32"   ? fp32_flops
             : precision == "tf32" ? tf32_flops
             : precision == "bf16" ? bf16_flops
             : precision == "fp16" ? fp16_flops
             : precision == "int8" ? int8_ops
                                   : -1;
  RK_CHECK(p >= 0, "[ledger] unknown precision '{}' (fp32, tf32, bf16, fp16, int8)", precision);
  RK_CHECK(p > 0, "[ledger] device {} has no {} peak in the catalog", name, precision);
  return p;
}

std::vector<std::string> device_names() {
  std::vector<std::string> r = {"cpu"};
  for (const auto& g : gpus()) r.push_back(g.name);
  return r;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string device_cache_key() { return cache_key(); }

std::string device_cache_path() {
  if (const char* d = std::getenv("RECKON_CACHE_DIR"); d && *d) return std::string(d) + "/devices.json";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/reckon/devices.json";
}

void forget_cpu_calibration() {
  std::lock_guard<std::mutex> g(g_cpu_mu);
  g_cpu.reset();
  g_use_cached = false;
}

void use_cached_cpu_calibration() {
  std::lock_guard<std::mutex> g(g_cpu_mu);
  g_use_cached = true;
}

namespace {
// The peaks' product: y = x w^T with x, w kPeakN x kPeakN.
constexpr int64_t kPeakN = 1024;
std::pair<Tensor, Tensor> peak_operands() {
  Tensor x = Tensor::empty({kPeakN, kPeakN}), w = Tensor::empty({kPeakN, kPeakN});
  fill_uniform_(x, -1, 1);
  fill_uniform_(w, -1, 1);
  return {x, w};
}
}  // namespace

double fp32_flops_now() {
  const std::pair<Tensor, Tensor> xw = peak_operands();  // (no structured binding: clang 14's
  const Tensor &x = xw.first, &w = xw.second;             // lambdas cannot capture one)
  return 2.0 * double(kPeakN * kPeakN * kPeakN) / time_runs(15, [&] { linear(x, w); }).best;
}

DeviceSpec calibrate_cpu() {
  KeepDefaultGenerator keep;  // its fills and the probe's weights and dropout draw from it
  NoGrad no_grad;
  TagGuard tag(Tag::temporary);
  DeviceSpec d;
  d.name = "cpu";
  d.calibrated = true;
  const int threads = omp_get_max_threads();
  const std::string wait = wait_policy();
  d.description = fmt::format("{}, {} thread{}{}", cpu_model_name(), threads, threads == 1 ? "" : "s",
                              wait.empty() ? "" : ", " + wait);
  d.memory_bytes = physical_memory_bytes();
  // What else ran meanwhile: /proc/stat's ticks of the cpus this process may run on, before and
  // after, less this process's own CPU time.
  const std::vector<int> cpus = affinity_cpus();
  const std::string stat0 = read_proc_stat();
  const double self0 = self_cpu_seconds();
  auto note = [&](const Timed& t) {
    d.spread = std::max(d.spread, t.spread());
    return t.best;
  };
  {
    // fp32 peak: peak_operands' product (1.07 G MACs), reckon's linear op (oneDNN). Many short
    // runs, the best kept: a machine shared with other jobs has quiet moments.
    const int64_t n = kPeakN;
    const std::pair<Tensor, Tensor> xw = peak_operands();
    const Tensor &x = xw.first, &w = xw.second;
    double s = note(time_runs(15, [&] { linear(x, w); }));
    d.fp32_flops = 2.0 * double(n * n * n) / s;
    // bf16 peak: the same product in bf16 (oneDNN's avx512_core_bf16 kernels where the cpu has
    // them). fp16: no fp16 arithmetic on this path (the dispatcher computes f16 ops in f32), so
    // its peak is the fp32 one.
    Tensor xb = cast(x, DType::bf16), wb = cast(w, DType::bf16);
    double sb = note(time_runs(15, [&] { linear(xb, wb); }));
    d.bf16_flops = 2.0 * double(n * n * n) / sb;
    d.fp16_flops = d.fp32_flops;
    // int8 peak: the same product as linear_int8 (u8 x s8, int32 accumulation, f32 out: oneDNN's
    // VNNI or AMX kernels where the cpu has them), in operations (2 per MAC) per second.
    Tensor xq = Tensor::empty({n, n}, DType::u8), wq = Tensor::empty({n, n}, DType::i8);
    std::memset(xq.raw_data(), 3, size_t(xq.nbytes()));
    std::memset(wq.raw_data(), 5, size_t(wq.nbytes()));
    QuantLinearAttrs qa;
    qa.y_dtype = "f32";
    double si = note(time_runs(15, [&] { call1<LinearInt8>({xq, wq}, qa); }));
    d.int8_ops = 2.0 * double(n * n * n) / si;
  }
  {
    // Bandwidth by working-set size: reckon's cpu relu (read n x 4 bytes, write as many into a
    // buffer the allocator keeps) over 512 KiB, 2, 8 and 32 MiB (inside L2, then L3 on most
    // cpus) and twice the last-level cache (at least 128 MiB, at most 256 MiB or an eighth of
    // memory): past the cache this process gets, the memory bandwidth. (A 260 MiB L3 shared
    // with other tenants measured 18-23 GB/s at 256 MiB and at 1 GiB alike; a larger buffer
    // cost seconds under the sanitizers, which calibrate in CI.) Each size runs its reps or
    // for about half a second, whichever ends first, at least twice. A larger working set is
    // never counted faster than a smaller one (noise would otherwise bend the curve up). The
    // in-place curve (add_) is measured alongside, at the same sizes.
    const int64_t llc = last_level_cache_bytes();
    int64_t big = std::clamp<int64_t>(2 * llc, int64_t(128) << 20, int64_t(256) << 20);
    if (d.memory_bytes > 0) big = std::max<int64_t>(int64_t(32) << 20, std::min(big, d.memory_bytes / 8));
    Timed last;
    for (int64_t in_bytes : {int64_t(512) << 10, int64_t(2) << 20, int64_t(8) << 20, int64_t(32) << 20, big}) {
      if (!d.bandwidth_curve.empty() && in_bytes <= d.bandwidth_curve.back().first / 2) continue;
      const int64_t n = in_bytes / 4;
      Tensor x = Tensor::empty({n});
      fill_(x, 1.0);
      const int reps = in_bytes <= (int64_t(8) << 20) ? 25 : 7;
      const Timed t = time_runs(reps, [&] { relu(x); }, 0.5);
      d.bandwidth_curve.emplace_back(2.0 * double(in_bytes), 2.0 * double(in_bytes) / t.best);
      last = t;
      x = Tensor();
      // In place, the same bytes moved: a += b reads a and b and writes a, 3 x 4 bytes an element.
      const int64_t m = 2 * in_bytes / 12;
      Tensor a = Tensor::empty({m}), b = Tensor::empty({m});
      fill_(a, 0.0);
      fill_(b, 1.0);
      const Timed ti = time_runs(reps, [&] { add_(a, b); }, 0.5);
      d.inplace_bandwidth_curve.emplace_back(12.0 * double(m), 12.0 * double(m) / ti.best);
    }
    note(last);  // the memory's (the small sizes' spread is the clock's, not the machine's)
    for (auto* c : {&d.bandwidth_curve, &d.inplace_bandwidth_curve})
      for (size_t i = c->size() - 1; i-- > 0;) (*c)[i].second = std::max((*c)[i].second, (*c)[i + 1].second);
    d.bandwidth_bytes = d.bandwidth_curve.back().second;
  }
  {
    // Per-op overhead as a training step pays it: 64 relus of one element, their autograd nodes,
    // and the backward pass through them (dispatcher, allocator, node, engine, kernel call),
    // divided by the number of op calls made.
    Tensor x = Tensor::ones({1});
    x.set_requires_grad(true);
    int64_t calls = 0;
    auto chain = [&] {
      EnableGrad grad;
      Tensor y = x;
      for (int i = 0; i < 64; ++i) y = relu(y);
      sum(y).backward();
      x.set_grad(Tensor());
    };
    {
      ObserveOps count([&](const OpRecord&) { ++calls; });
      chain();
    }
    double s = best_of(20, chain);
    d.op_overhead_s = s / double(std::max<int64_t>(calls, 1));
  }
  {
    // Winograd: a 3x3 convolution (64 -> 64 channels, 16x16, batch 32) that oneDNN runs as
    // Winograd F(4x4, 3x3) on AVX-512, timed with the direct algorithm and with the default
    // one. The ledger divides the FLOPs of convolutions that plan as Winograd by the ratio
    // (1 where the default stays direct).
    Tensor x = Tensor::empty({32, 64, 16, 16}), w = Tensor::empty({64, 64, 3, 3});
    fill_uniform_(x, -1, 1);
    fill_uniform_(w, -0.1, 0.1);
    auto time_with = [&](ConvAlgorithm a) {
      ConvAlgorithmScope algo(a);
      return best_of(7, [&] { conv2d(x, w, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 1}); });
    };
    const double direct_s = time_with(ConvAlgorithm::direct), auto_s = time_with(ConvAlgorithm::automatic);
    d.winograd_speedup = std::max(1.0, direct_s / auto_s);
  }
  {
    // The inference engine's fixed cost per compiled step: 64 one-element steps (affine and relu
    // in turn, kept apart: no passes) run as one program, the median run over the steps.
    class Chain : public nn::Module {
     public:
      Chain() : Module("chain", Device::cpu) {}
      Tensor forward(const Tensor& x) override {
        Tensor y = x;
        for (int i = 0; i < 64; ++i) y = i % 2 ? relu(y) : affine(y, 1.0, 0.0);
        return y;
      }
    } m;
    engine::EngineOptions o;
    o.passes = {};
    engine::Engine e(engine::make_program(m, {1}), o);
    Tensor x = Tensor::zeros({1}), y = Tensor::empty({1});
    for (int i = 0; i < 50; ++i) e.run(x, y);
    std::vector<double> t;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      e.run(x, y);
      t.push_back(seconds_since(t0));
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    d.engine_step_overhead_s = t[t.size() / 2] / double(e.steps().size());
  }
  {
    // Layout conversions: oneDNN's reorder of 3x3 weights of 256 and 512 channels (2.4 and 9.4 MB)
    // from the user's OIHW into the blocked layout its convolutions take, read + written bytes
    // over the best time, both sizes together. (resnet18_cifar's 512-channel layers at batch 1
    // convert 9.4 MB three times a step each: forward, backward data, the weight gradient back.)
    double bytes = 0, secs = 0;
    for (const int64_t c : {int64_t(256), int64_t(512)}) {
      const dnnl::memory::dims dims = {c, c, 3, 3};
      dnnl::memory src({dims, dnnl::memory::data_type::f32, dnnl::memory::format_tag::oihw}, dnnl_util::engine());
      dnnl::memory dst({dims, dnnl::memory::data_type::f32, dnnl::memory::format_tag::OIhw16i16o}, dnnl_util::engine());
      std::memset(src.get_data_handle(), 0, src.get_desc().get_size());
      dnnl::reorder r(src, dst);
      secs += time_runs(15, [&] {
                r.execute(dnnl_util::stream(), src, dst);
                dnnl_util::stream().wait();
              }).best;
      bytes += double(src.get_desc().get_size() + dst.get_desc().get_size());
    }
    d.reorder_bandwidth = bytes / secs;
  }
  {
    // The time model per op family: the probe's training steps timed op by op (time_model.h),
    // and the deployment ledger's lines per engine step family: the same probe networks compiled
    // by the inference engine in fp32 and int8 (inference.h), both against the peaks and
    // bandwidth just measured. Their rounds alternate (probe_rounds), each probe's seconds apart.
    OpProbe ops(d);
    EngineProbe steps(d);  // (its engines gone at the block's end, before the restart below)
    probe_rounds([&] {
      double train_s = 0;
      {
        EnableGrad grad;
        train_s = ops.round();
      }
      return std::vector<double>{train_s, steps.round()};
    }, [&] {
      // (A sanitized or unoptimized build's calibration times nothing a user runs, under keys of
      // its own: one round. With two under ASan, CI's hostile-input tests that calibrate took
      // 130-350 s each.)
      return build_flavour().empty() &&
             others_cpu_share(stat0, read_proc_stat(), self_cpu_seconds() - self0, cpus, threads) <=
                 kCalibrationBusyShare;
    });
    d.op_families = ops.fit();
    for (auto& [k, f] : steps.fit()) d.op_families[k] = f;
  }
  host_memory_restart(Device::cpu);  // the calibration's blocks go back to the system
  d.others_cpu_share = others_cpu_share(stat0, read_proc_stat(), self_cpu_seconds() - self0, cpus, threads);
  d.under_load = d.others_cpu_share > kCalibrationBusyShare;
  d.description += " (calibrated)";
  d.calibrated_at = now_utc();
  d.source = "calibrated now; " + calibration_quality(d);
  return d;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

std::string calibration_versions() {
  return fmt::format("reckon {}, calibration {}, oneDNN {}{}", RECKON_LIBRARY_VERSION, kCalibrationFormat,
                     onednn_version(), sanitizers_text());
}

std::string version_text() {
  return fmt::format("reckon {} ({} build{}; oneDNN {}; cuda {})", RECKON_LIBRARY_VERSION, RECKON_BUILD_TYPE,
                     sanitizers_text(), onednn_version(), cuda_available() ? "yes: " + cuda_status() : "no");
}

std::optional<DeviceSpec> cached_cpu_spec() { return read_cache(); }

bool cpu_calibration_settled(const std::optional<DeviceSpec>& c) {
  return c && (!c->under_load || c->attempts >= kCalibrationAttempts);
}

bool in_process_probe() {
  const char* p = std::getenv(kProcessProbeEnv);
  return p && *p;
}

namespace {
// cpu_calibration_due for a cached entry, under g_cpu_mu.
bool calibration_due_locked(const std::optional<DeviceSpec>& c) {
  if (g_cpu) return false;
  if (c && (g_use_cached || in_process_probe())) return false;  // taken as it is
  return !cpu_calibration_settled(c);
}
}  // namespace

bool cpu_calibration_due() {
  std::lock_guard<std::mutex> g(g_cpu_mu);
  return calibration_due_locked(read_cache());
}

std::string device_key(const std::string& name) {
  const std::string key = lower(name);
  return key == "a100-40gb" ? "a100" : key;
}

DeviceSpec device_spec(const std::string& name) {
  const std::string key = device_key(name);
  if (key == "cpu") {
    std::lock_guard<std::mutex> g(g_cpu_mu);
    if (!g_cpu) {
      // A quiet entry is used; one made under load is taken again, until the attempts are spent,
      // but not in a process-memory probe nor after a child calibrated for this command.
      std::optional<DeviceSpec> c = read_cache();
      g_cpu = calibration_due_locked(c) ? keep_and_cache(c, calibrate_cpu()) : *c;
    }
    return *g_cpu;
  }
  for (const auto& g : gpus())
    if (g.name == key) return g;
  std::string known;
  for (const auto& n : device_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(fmt::format("[ledger] unknown device '{}'; known devices: {}", name, known));
}

}  // namespace reckon
