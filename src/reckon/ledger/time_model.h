// The ledger's time model per op family (issue 15). The roofline alone, max(FLOPs / peak, bytes /
// bandwidth) plus one fixed cost per op call, was within 15% on the convolution-heavy models and
// 30% to 75% under on the rest: a depthwise convolution or a batch norm runs at a fraction of the
// bandwidth (its kernel makes several passes, or gathers), and a small op pays an OpenMP fork and
// join, not the 1-element op's fixed cost. So each op family gets its own line,
//     time = fixed_s + scale x roofline,
// fitted (to the least relative error) on a probe: two small training networks of their
// own (not zoo models) whose steps are timed op by op, at three sizes each, fp32 with SGD
// (momentum 0.9, the ledger's default) and bf16 with AdamW, on this machine at this thread count,
// when the cpu is calibrated (devices.h; about 3 s). A family is the op, the implementation its kernel chose ("conv2d |
// jit_dw:avx512_core") and the precision it computes in; an op whose implementation the probe
// did not meet falls back to the op's line over all its implementations; fp16 (which the cpu
// computes in f32) to the fp32 lines; an op the probe did not run at all (the fp16 loss scaler's
// ops) to the roofline and the per-op fixed cost. The inference engine's compiled steps, which
// run no autograd, have lines of their own, fitted on the same probe networks compiled by the
// engine (inference.h: EngineProbe).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/ledger/devices.h"
#include "reckon/ops/op.h"

namespace reckon::nn {
class Module;
}

namespace reckon {

// What decides how well a convolution's kernel fills the vector registers: its width, the fewer of
// its output channels and its input channels per group (its weight's first two sizes; 1 for a
// depthwise one), and the size of its output image (H x W; oneDNN blocks along its rows). For a
// matrix product (matmul, linear) the width is the smallest of M, N and K, and out_hw 0. All 0
// for other ops. ins, outs: the call's input and output shapes.
struct ConvShape {
  int64_t width = 0, out_hw = 0;
  bool matmul = false;
};
ConvShape conv_shape(std::string_view op, const std::vector<Shape>& ins, const std::vector<Shape>& outs);
// The precision an op computes in, for its peak: bf16 or fp16 when an input is, else fp32.
std::string compute_precision(std::span<const DType> inputs);
// The FLOPs an op costs on a device: 2 x MACs + other FLOPs, except on the cpu, where a
// convolution whose kernel chose Winograd runs its direct FLOPs winograd_speedup times faster, and
// a kernel that fills only lane_use of its vectors' lanes (KernelCtx::lane_use) issues FLOPs /
// lane_use, and one that computes only work_share of its MACs (KernelCtx::work_share: oneDNN's
// direct convolutions skip the taps on padding) that share of them.
double device_flops(const DeviceSpec& d, const Cost& c, KernelAlgo algo, double lane_use = 1.0,
                    double work_share = 1.0);
// The bytes an op's kernel moves on a device: its counted traffic, on the calibrated cpu less what
// its kernel never reads (KernelCtx::unread_bytes; as device_flops takes work_share), at least 0.
double kernel_bytes(const DeviceSpec& d, const Cost& c, int64_t unread_bytes);
// Whether a call of op `op` (its id, ops/op_list.h) streams in place: every output is an input it
// writes in place (aliases: bit i for output i), after reading it (an optimizer's update, add_; not
// fill_ nor copy_, OpInfo::overwrites, which fetch the lines they overwrite as an out-of-place op
// fetches its output's). Its bytes are timed against the in-place bandwidth
// (DeviceSpec::inplace_bandwidth_curve): alexnet_tv's SGD update of 61 M parameters ran at 50 GB/s
// where the relus' curve gave 25, and was predicted at 2x.
bool reads_what_it_writes(int op, uint32_t aliases, size_t outputs);
// The working set an op's bytes are timed at: its own (0), except for the optimizer phase's ops
// that read what they write (the updates, the loss scaler's unscale): those at the memory's
// (infinity). Their data were last written by the backward pass, long before on a large model
// (the probe's update of 2.4 M parameters, 47 MB moved, ran at 45 GB/s, the in-place curve's
// memory bandwidth, where the curve gives 80 at that size), and on a small one by whichever core
// ran that part of it, while both threads split the update (LeNet-5's 48 k-parameter update,
// 0.96 MB, took 29 us in its step, at 33 GB/s; alone and hot it runs at 130).
double working_set_of(Phase phase, bool in_place);
// bytes / bandwidth, the bandwidth at max(bytes, working_set) (DeviceSpec::bandwidth_at; in_place:
// reads_what_it_writes).
double memory_s(const DeviceSpec& d, double bytes, bool in_place = false, double working_set = 0);
// max(flops / peak, memory_s).
double roofline_s(const DeviceSpec& d, double flops, double bytes, const std::string& precision,
                  bool in_place = false, double working_set = 0);

// The shape class a family names: "" (not a convolution nor a matrix product); a convolution's by
// width "few" (<= 4: an image's first layer, a depthwise one), "narrow" (< 32), "mid" (< 96),
// "wide"; a mid or wide one also by its output image, under 64 pixels (a deep layer's 4x4 or 7x7)
// or not: "wide small", "wide large". A matrix product's "skinny" where a side is under
// kSkinnyMatmul (a batch of a few images against a classifier's weights, a handful of classes),
// "slim" where one is under kSlimMatmul (a batch of 16 to 47), else "broad": the probe's
// products ran at 3-7x their roofline at a side of 2 to 8, 2.2-3.2x at 24 and 1.3-2x broad; one
// line over all had timed LeNet-5's at 2.6x their measured time, and one over the first two its
// backward products at batch 32 at 1.5-2x.
constexpr int64_t kSkinnyMatmul = 16;
constexpr int64_t kSlimMatmul = 48;
std::string conv_class(ConvShape c);
// The family of an op call: "conv2d | jit:avx512_core [fp32] wide" (its implementation when the
// kernel named one, the precision it computes in, a convolution's shape class) and the op's own
// "conv2d [fp32] wide" and "conv2d [fp32]".
std::string time_family(std::string_view op, std::string_view impl, std::string_view precision,
                        std::string_view cls = "");
std::string time_family_of_op(std::string_view op, std::string_view precision, std::string_view cls = "");

// One op call's predicted time on a device and where it comes from.
struct OpTime {
  double total_s = 0;      // fixed_s + scale x roofline_s + reorder_s
  double reorder_s = 0;    // the kernel's layout conversions (reorder_s())
  double fixed_s = 0;      // the family's fixed cost (or the device's per-op overhead)
  double roofline_s = 0;   // max(flops / peak, bytes / bandwidth)
  double compute_s = 0, memory_s = 0;  // the roofline's two sides: flops / peak, bytes / bandwidth
  bool compute_bound = false;
  // "family" (the family's own line, with or without its width class), "op" (the op's, over its
  // implementations) or "roofline": which line timed it.
  const char* source = "roofline";
};
// flops: what the op computes at the device's rate (Winograd already discounted); bytes, in_place
// and working_set: its traffic, as memory_s takes it. The lines
// tried in turn: the family with its shape class, the op's with its shape class (the shape decides
// more than the implementation), both again with the width class alone ("wide" for "wide
// small": its line is fitted on the calls of both image sizes), then without a class; else the
// roofline and the device's per-op overhead.
// reorder_bytes: what the kernel's own layout conversions move (KernelCtx::reorder_bytes), timed
// apart at the device's reorder bandwidth (reorder_s, part of total_s) where it has one.
OpTime op_time(const DeviceSpec& d, std::string_view op, std::string_view impl, const std::string& precision,
               ConvShape shape, double flops, double bytes, bool in_place = false, double working_set = 0,
               double reorder_bytes = 0);
// reorder_bytes at the device's reorder bandwidth (0 where it has none: its kernels convert no
// layouts, or the figure is not measured).
double reorder_s(const DeviceSpec& d, double reorder_bytes);

// One timed op call of the probe: its family, the roofline time on the device, the measured time.
struct FamilySample {
  std::string op, impl, precision;
  ConvShape shape;
  // measured_s: the call's time less its layout conversions' (reorder_s()), what the line explains
  double roofline_s = 0, measured_s = 0;
};
// The line through a family's samples of least relative error, sum |measured - line| / measured:
// every sample counts by its share of its own time, as the ledger's errors are judged, and a few
// calls that paid for something else (the time from the previous op's record includes what ran
// between the two, such as freeing a large block) move it less than a squared error would. (Least
// squares weighted by 1 / time, before calibration format 15, took the probe's fp32 ReLUs' fixed
// cost as 12 us where most of its small calls took 4-8; LeNet-5 at batch 8 was predicted 30-47%
// over its step, 5-15% after, on an Intel Xeon.) The fixed
// cost is kept >= 0 and the scale within [kMinFamilyScale, kMaxFamilyScale] (a family measured only
// inside the caches would otherwise be extrapolated to large tensors at a speed no memory gives,
// one measured only at tiny sizes at a slope no kernel has). With roofline times within a factor
// kMinFamilySpread of each other a slope is noise: where the roofline is at least ten times the
// per-op overhead (default_fixed_s) the scale is the samples' time over it and the fixed cost that
// overhead; below, the time beyond the roofline is the fixed cost and the scale 1.
constexpr double kMinFamilyScale = 0.25;
constexpr double kMaxFamilyScale = 50;
constexpr double kMinFamilySpread = 2.0;
FamilyTime fit_family(const std::vector<FamilySample>& samples, double default_fixed_s);

// The probe's timed op calls (what OpProbe fits), for tests and `--explain`: one
// pass, each call's best of its timed steps.
std::vector<FamilySample> probe_op_samples(const DeviceSpec& d);
// The probe in rounds: each round() one more pass (probe_op_samples), each call's best time over
// the passes kept (a pass whose calls do not line up with the first's, another kernel chosen,
// or shape, leaves them as they are); returns those times' geometric mean. fit(): a line per family
// met (and per op, over its families). d supplies the peaks and bandwidth the roofline times are
// taken against. calibrate_cpu runs it (a few seconds a round), with EnableGrad.
class OpProbe {
 public:
  explicit OpProbe(const DeviceSpec& d) : d_(d) {}
  double round();
  std::map<std::string, FamilyTime> fit() const;

 private:
  const DeviceSpec& d_;
  std::vector<FamilySample> samples_;
};
// Runs `round` (every probe timed once more, each timing's best so far kept; it returns their
// geometric means, one per probe, so that a thousand small calls count as much as one large one)
// kMinProbeRounds times, then again while the last round took any of them down by more than
// kProbeRoundGain, at most kMaxProbeRounds in all; returns the rounds run. A machine shared
// with other tenants has slow spells of seconds that its own /proc/stat does not show: on a 2-core
// AMD EPYC, 2 of 7 calibrations taken minutes apart, each one pass over the probes, had put every
// small engine step's line at 1.5-2x the others' (the peaks, measured before, were not slow), and
// the deployment ledger's predictions at batch 1 1.6-2.2x apart; 1 of 14 with these rounds (a
// spell as long as its 15 s). calibrate_cpu alternates the training probe's rounds with the
// engine's (inference.h: EngineProbe), so that the rounds of each lie seconds apart. `more` (when
// given) is asked before each round after the first, and false ends them: a calibration that others' work disturbs is marked and taken again anyway, and under
// load every round gains (the test of the calibration cache, four calibrations three of them under
// load, had taken 300 s rather than 74).
constexpr int kMinProbeRounds = 2, kMaxProbeRounds = 4;
constexpr double kProbeRoundGain = 0.03;
int probe_rounds(const std::function<std::vector<double>()>& round, const std::function<bool()>& more = {});
// exp(mean(log t)) over the positive t (0 if none).
double geometric_mean(const std::vector<double>& t);
// The probe's networks and the input shapes each runs at (the deployment ledger's engine probe,
// inference.h, compiles the same ones).
struct ProbeNetwork {
  std::shared_ptr<nn::Module> module;
  std::vector<Shape> inputs;
};
std::vector<ProbeNetwork> probe_networks();

}  // namespace reckon
