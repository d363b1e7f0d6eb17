// The ledger's time model per op family (issue 15). The roofline alone, max(FLOPs / peak, bytes /
// bandwidth) plus one fixed cost per op call, was within 15% on the convolution-heavy models and
// 30% to 75% under on the rest: a depthwise convolution or a batch norm runs at a fraction of the
// bandwidth (its kernel makes several passes, or gathers), and a small op pays an OpenMP fork and
// join, not the 1-element op's fixed cost. So each op family gets its own line,
//     time = fixed_s + scale x roofline,
// fitted (weighted least squares, relative errors) on a probe: two small training networks of
// their own (not zoo models) whose steps are timed op by op, at three sizes each, fp32 with SGD and
// bf16 with AdamW, on this machine at this thread count, when the cpu is calibrated
// (devices.h). A family is the op, the implementation its kernel chose ("conv2d |
// jit_dw:avx512_core") and the precision it computes in; an op whose implementation the probe
// did not meet falls back to the op's line over all its implementations, and an op the probe did
// not run at all to the roofline and the per-op fixed cost.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/ledger/devices.h"

namespace reckon {

// A convolution's width, the fewer of its output channels and its input channels per group (its
// weight's first two sizes; 1 for a depthwise one), which decides how well its kernel fills the
// vector registers: 0 for other ops. ins, outs: the call's input and output shapes.
int64_t conv_width(std::string_view op, const std::vector<Shape>& ins, const std::vector<Shape>& outs);
// The width class a family names: "" (not a convolution), "few" (<= 4: an image's first layer, a
// depthwise one), "narrow" (< 32), "mid" (< 96), "wide".
std::string_view width_class(int64_t width);
// The family of an op call: "conv2d | jit:avx512_core [fp32] wide" (its implementation when the
// kernel named one, the precision it computes in, a convolution's width class) and the op's own
// "conv2d [fp32] wide" and "conv2d [fp32]".
std::string time_family(std::string_view op, std::string_view impl, std::string_view precision, int64_t width = 0);
std::string time_family_of_op(std::string_view op, std::string_view precision, int64_t width = 0);

// One op call's predicted time on a device and where it comes from.
struct OpTime {
  double total_s = 0;      // fixed_s + scale x roofline_s
  double fixed_s = 0;      // the family's fixed cost (or the device's per-op overhead)
  double roofline_s = 0;   // max(flops / peak, bytes / bandwidth)
  bool compute_bound = false;
  const char* source = "roofline";  // "family", "op" or "roofline": which line timed it
};
// flops: what the op computes at the device's rate (Winograd already discounted). The lines
// tried in turn: the family with its width class, the op's with its width class (the width
// decides more than the implementation), the family without it, the op's without it; else the
// roofline and the device's per-op overhead.
OpTime op_time(const DeviceSpec& d, std::string_view op, std::string_view impl, const std::string& precision,
               int64_t width, double flops, double bytes);

// One timed op call of the probe: its family, the roofline time on the device, the measured time.
struct FamilySample {
  std::string op, impl, precision;
  int64_t width = 0;
  double roofline_s = 0, measured_s = 0;
};
// The line through a family's samples: least squares weighted by 1 / time (between absolute
// errors, where the long ops decide the slope, and relative ones, where the many short ops decide
// the fixed cost), with the fixed
// cost kept >= 0 and the scale >= kMinFamilyScale (a family measured only inside the caches would
// otherwise be extrapolated to large tensors at a speed no memory gives). With one distinct
// roofline time, the fixed cost is min(default_fixed_s, half the time) and the scale the rest.
constexpr double kMinFamilyScale = 0.25;
FamilyTime fit_family(const std::vector<FamilySample>& samples, double default_fixed_s);

// Runs the probe on the cpu and fits every family it met (and every op, over its families): a
// second or two. d supplies the peaks and bandwidth that the roofline times are taken against.
std::map<std::string, FamilyTime> calibrate_op_families(const DeviceSpec& d);
// The probe's timed op calls (what calibrate_op_families fits), for tests and `--explain`.
std::vector<FamilySample> probe_op_samples(const DeviceSpec& d);

}  // namespace reckon
