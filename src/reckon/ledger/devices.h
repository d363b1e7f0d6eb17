// The device catalog the ledger times a step against: this machine's CPU, measured on first use
// by a short calibration through reckon's own ops (so the peak is what reckon's kernels reach,
// not what the vendor prints) and cached, plus datasheet entries for common GPUs (dense figures,
// no structured sparsity). A device is a roofline: a compute peak per precision, a memory
// bandwidth (the cpu: by working-set size, so an op inside the caches is timed at the caches'
// rate), and a fixed cost per op. Not here: clocks under load, multi-GPU links.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

// The process's random numbers as they were when it was made, put back when it dies. The ledger's
// steps draw dropout seeds (on any device), building a model draws its initial weights, and so
// does the calibration's probe: a training run that asks for a prediction (or calibrates) before
// its first step must draw the same numbers as one that does not (--resume is bit-identical to an
// uninterrupted run), and a program that builds its model after a first device_spec("cpu") the
// same weights whether the calibration was cached or not.
class KeepDefaultGenerator {
 public:
  KeepDefaultGenerator() : state_(default_generator().state()) {}
  ~KeepDefaultGenerator() { default_generator().set_state(state_); }
  KeepDefaultGenerator(const KeepDefaultGenerator&) = delete;
  KeepDefaultGenerator& operator=(const KeepDefaultGenerator&) = delete;

 private:
  std::array<uint64_t, 4> state_;
};

// One op family's line in the time model (time_model.h): time = fixed_s + scale x roofline.
struct FamilyTime {
  double fixed_s = 0;
  double scale = 1;
  int samples = 0;  // the probe's op calls it was fitted on
};

struct DeviceSpec {
  std::string name;         // catalog key: "cpu", "a100", "h100", ...
  std::string description;  // "AMD EPYC, 2 threads (calibrated)", "NVIDIA H100 SXM5 80GB"
  std::string source;       // where the figures come from
  bool calibrated = false;  // measured on this machine (true) or from a datasheet
  // Peak dense throughput in operations per second (FLOP/s; int8: OP/s); 0 = unknown.
  double fp32_flops = 0, tf32_flops = 0, bf16_flops = 0, fp16_flops = 0, int8_ops = 0;
  double bandwidth_bytes = 0;  // memory bandwidth, bytes per second (the cpu: past its last-level cache)
  int64_t memory_bytes = 0;    // device memory (the CPU: physical memory)
  double op_overhead_s = 0;    // fixed time per op call (dispatch, kernel launch)
  // How much faster than its direct-sum FLOPs at peak a convolution runs when its kernel chose
  // Winograd (the cpu: calibrated; 1 elsewhere, where reckon picks no algorithm).
  double winograd_speedup = 1;
  // Bytes per second (read + written) that a kernel's own layout conversions move: oneDNN's
  // reorder of a convolution's weights into its blocked layout (the cpu: calibrated on 256- and
  // 512-channel 3x3 weights; 0 elsewhere: no term). KernelCtx::reorder_bytes at this rate is
  // timed apart from the op's line (time_model.h: op_time).
  double reorder_bandwidth = 0;
  // The inference engine's fixed time per compiled step (a run of 1-element steps, the median per
  // step; the cpu: calibrated with the rest, so every process times the engine alike; elsewhere
  // the per-op overhead).
  double engine_step_overhead_s = 0;
  // How the calibration went (the cpu; datasheet entries keep the defaults): the share of the
  // CPU time of the cores this process may run on that other processes (and the hypervisor's
  // steal) took while it ran, from /proc/stat (-1: not known), the spread of its timed runs
  // (the largest median / best - 1 of the four peaks), whether it counts as made under load
  // (others_cpu_share over kCalibrationBusyShare), and of how many calibrations in a row made
  // under load it is the least disturbed (calibration_to_keep).
  double others_cpu_share = -1;
  double spread = 0;
  bool under_load = false;
  int attempts = 1;
  std::string calibrated_at = {};  // when (UTC, ISO 8601; the cpu)
  // The time model per op family (time_model.h), keyed by time_family(); the cpu: fitted on the
  // calibration's probe; empty elsewhere (the roofline and op_overhead_s time every op).
  std::map<std::string, FamilyTime> op_families = {};
  // The bandwidth a streaming op sees by the bytes it moves (read + written): measured points
  // {bytes, bytes per second}, ascending in bytes and non-increasing in bandwidth, the last one
  // bandwidth_bytes. The cpu: calibrated from inside L2 to past the last-level cache (an Intel
  // Xeon, 2 threads: 132 GB/s at 1 MiB moved against 23-26 from memory; a lenet5 step runs in
  // the caches);
  // empty for datasheet entries (bandwidth_bytes at every size).
  std::vector<std::pair<double, double>> bandwidth_curve = {};
  // The same for an op that writes in place what it has just read (an optimizer's update, a
  // gradient accumulated with add_; time_model.h: reads_what_it_writes): no cache line is fetched
  // only to be overwritten, so past L2 it moves its bytes faster than the relus of
  // bandwidth_curve, whose outputs are fetched before they are written (an Intel Xeon, 2 threads:
  // add_ and sgd_update 80 GB/s at 64 MiB moved and 43 at 1 GiB, relu 47 and 25). The cpu:
  // calibrated with add_ at the curve's sizes; empty: bandwidth_curve's.
  std::vector<std::pair<double, double>> inplace_bandwidth_curve = {};

  // Peak for a precision name ("fp32", "tf32", "bf16", "fp16", "int8"); throws if unknown or 0.
  double peak(const std::string& precision) const;
  // The roofline's ridge point: peak / bandwidth, in FLOPs per byte. An op whose arithmetic
  // intensity is above it is compute-bound on this device, below it bandwidth-bound.
  double ridge(const std::string& precision) const { return peak(precision) / bandwidth_bytes; }
  // The bandwidth for an op that moves `bytes`: the curve's first point below it, its last
  // (bandwidth_bytes) above it, and between two points the bandwidth interpolated linearly in
  // log(bytes) (a working set that spills a cache level does so gradually). in_place: the
  // in-place curve (where there is one).
  double bandwidth_at(double bytes, bool in_place = false) const;
};

// Catalog keys, "cpu" first.
std::vector<std::string> device_names();
// The entry for a key (case-insensitive; "a100-40gb" is "a100"). "cpu" is read from the cache
// file or calibrated now and cached. Throws naming the known devices for an unknown key.
DeviceSpec device_spec(const std::string& name);
// The catalog key a name stands for, as device_spec reads it ("CPU" is "cpu", "a100-40gb" "a100").
std::string device_key(const std::string& name);

// A calibration during which other processes took more than this share of the CPU time of the
// cores it ran on is made under load: used, marked in the cache and taken again by the next command
// (one command calibrates at most once: see use_cached_cpu_calibration), up to
// kCalibrationAttempts calibrations, after which the least disturbed one stays.
constexpr double kCalibrationBusyShare = 0.10;
constexpr int kCalibrationAttempts = 3;

// Set (to 1) in the environment of the process-memory probes (ledger/process.h). A probe takes any
// cached cpu entry as it is: a calibration run inside it would be its peak resident memory (the
// calibration's buffers: 1.3 GiB of a lenet5 probe's peak on a Xeon), which is what it measures.
constexpr const char* kProcessProbeEnv = "RECKON_PROCESS_PROBE";
bool in_process_probe();

// Measures this machine now (a few seconds): fp32, bf16 and int8 peaks from the best of 15
// 1024^3 linear ops (int8: linear_int8, u8 x s8), the bandwidth curve from relus (read + write)
// over 512 KiB to twice the last-level cache (128 to 256 MiB) and the in-place one from add_ at
// the same sizes, the per-op overhead from a chain of
// 1-element relus run forward and backward (so autograd's share of each op call is in it), the
// Winograd speedup from a 3x3 convolution timed direct and with the default algorithm, the
// inference engine's per-step overhead from a compiled chain of 1-element steps, the time
// model's op families from the probe's training steps (time_model.h), and the engine's step
// families from the same networks compiled by the engine (inference.h).
// Measures others_cpu_share and under_load as it runs.
DeviceSpec calibrate_cpu();
// This cpu's fp32 peak now, measured as calibrate_cpu measures it (a tenth of a second): how fast
// the machine runs at this moment against its calibration. (A shared Intel Xeon here moved
// between 155 and 350 GFLOP/s within minutes, and every measured step with it; `reckon ledger
// --measure` prints both, so that a prediction's error can be told from the machine's.)
double fp32_flops_now();
// Which of a cached entry (if any) and a fresh calibration is kept, in the cache and for this
// process: a quiet fresh one always (it replaces a cached one, quiet or not); a cached quiet one
// against a fresh one made under load (a busy moment cannot spoil a quiet calibration); between
// two made under load, the less disturbed (lower others_cpu_share; the fresh one on a tie),
// counting the cached entry's attempts plus one (a quiet one counts 1).
DeviceSpec calibration_to_keep(const std::optional<DeviceSpec>& cached, const DeviceSpec& fresh);
// Whether calibration_to_keep keeps the fresh calibration (rather than the cached entry).
bool fresh_calibration_kept(const std::optional<DeviceSpec>& cached, const DeviceSpec& fresh);
// Measures the cpu again now (`reckon ledger --recalibrate`) and keeps what calibration_to_keep
// says, in the cache and in this process.
struct Recalibration {
  DeviceSpec kept, fresh;
  bool fresh_kept = false;  // kept is fresh (with its attempts counted), not the cached entry
};
Recalibration recalibrate_cpu();
// The share of the CPU time of `threads` cores that other processes took between two readings of
// /proc/stat, this process having used self_cpu_s of CPU time meanwhile, over the cpus in `cpus`
// (their lines "cpuN"; the aggregate line when empty) of which `threads` ran this process (0: all
// of them): the others' busy time less what the remaining cores absorb (the scheduler gives
// other work the idle cores first), over the time of `threads` cores, clamped to [0, 1]. Busy
// counts user, nice, system, irq, softirq and steal. -1 when the texts do not hold those lines or
// no time passed.
double others_cpu_share(const std::string& stat_before, const std::string& stat_after, double self_cpu_s,
                        const std::vector<int>& cpus = {}, int threads = 0);
// How the cpu entry's calibration went, in words ("quiet: other processes took 2% of the CPU,
// runs within 3%" or "made under load: ..."), for the ledger's report.
std::string calibration_quality(const DeviceSpec& d);
// Where `precision`'s peak on d is below fp32's (bf16 on a cpu without AMX or AMD's bf16 dot
// products: oneDNN's bf16 kernels emulate it at half the fp32 rate), one line that says so with
// both measured peaks, for the ledger, the plan and `reckon train` to print; "" otherwise.
std::string slower_precision_note(const DeviceSpec& d, const std::string& precision);
// Where the calibration is cached: $RECKON_CACHE_DIR/devices.json, else
// ~/.cache/reckon/devices.json. Entries are keyed by CPU model, thread count, OpenMP's wait
// policy where the environment sets one (OMP_WAIT_POLICY, GOMP_SPINCOUNT, KMP_BLOCKTIME,
// KMP_LIBRARY) and the build where it is sanitized or unoptimized, and each records
// when it was made and by what (calibration_versions()).
std::string device_cache_path();
// This process's entry in it: "CPU model|N threads[|wait policy][|build]" (see above).
std::string device_cache_key();
// Now, UTC, ISO 8601 ("2026-12-05T16:31:28Z"): when a cached calibration or probe was made.
std::string now_utc();
// What made a calibration: reckon's version, the calibration's own format number, oneDNN's
// version and the build's sanitizers if any ("reckon 0.1.0, calibration 2, oneDNN 2.6.3"; ",
// sanitized (address,undefined)" after it). An entry made by another is not used.
std::string calibration_versions();
// The oneDNN this process runs on ("2.6.3").
std::string onednn_version();
// What `reckon --version` and the Python package's reckon.version() print: the version, how it
// was built, the oneDNN it runs on, and whether cuda can run
// ("reckon 0.1.0 (Release build; oneDNN 2.6.3; cuda no)").
std::string version_text();
// This CPU's entry in the cache file, when the file holds a sound one for this CPU model and
// thread count, made by these versions; nothing otherwise (a missing, damaged, outdated or hostile
// file is never an error: the next device_spec("cpu") calibrates again and rewrites it).
std::optional<DeviceSpec> cached_cpu_spec();
// Whether this cached entry is settled: a quiet one, or one made under load whose attempts are
// spent. An unsettled one is calibrated again by the next command that needs the cpu's figures.
bool cpu_calibration_settled(const std::optional<DeviceSpec>& cached);
// Whether device_spec("cpu") would calibrate now: this process holds no entry yet, and the cache's
// is missing, or unsettled and neither in_process_probe() nor use_cached_cpu_calibration() has this
// process take it as it is.
bool cpu_calibration_due();
// From now on this process's device_spec("cpu") takes a cached entry as it is, settled or not:
// called once a child process has calibrated for this command (ledger/process.h), so that an
// entry made under load is taken again by the next command, not by this one.
void use_cached_cpu_calibration();
// Drops this process's cached cpu entry (and use_cached_cpu_calibration's mark) so the next
// device_spec("cpu") reads the cache file again, or calibrates and rewrites it.
void forget_cpu_calibration();

}  // namespace reckon
