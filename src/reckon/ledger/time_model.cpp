// The time model per op family (time_model.h): the probe, the fit, and an op call's time.
#include "reckon/ledger/time_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "reckon/core/allocator.h"
#include "reckon/nn/models/mobilenet.h"
#include "reckon/nn/models/resnet.h"
#include "reckon/nn/module.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"
#include "reckon/ops/op.h"
#include "reckon/optim/factory.h"
#include "reckon/optim/step.h"

namespace reckon {

ConvShape conv_shape(std::string_view op, const std::vector<Shape>& ins, const std::vector<Shape>& outs) {
  if ((op == "matmul" || op == "linear") && ins.size() >= 2 && !outs.empty()) {
    // y (..., M, N); linear's x (M, K); matmul's a (..., M, K), or (..., K, M) transposed. Against
    // a shared 2-D b the kernel runs one product of all the batch's rows (kernels/cpu/matmul.cpp).
    const Shape &a = ins[0], &y = outs[0];
    if (a.size() < 2 || y.size() < 2) return {};
    const int64_t m1 = y[y.size() - 2], n = y.back();
    const int64_t k = op == "linear" || a[a.size() - 2] == m1 ? a.back() : a[a.size() - 2];
    int64_t m = m1;
    if (ins[1].size() == 2 && a.back() == k)  // (a transposed a is not folded: the kernel declines it)
      for (size_t i = 0; i + 2 < y.size(); ++i) m *= y[i];
    return {std::max<int64_t>(1, std::min({m, n, k})), 0, true};
  }
  const Shape *w = nullptr, *y = nullptr;  // the weight, the output image (dy in backward)
  if (op == "conv2d" && ins.size() >= 2 && !outs.empty()) w = &ins[1], y = &outs[0];
  if (op == "conv2d_backward_input" && ins.size() >= 2) w = &ins[1], y = &ins[0];
  if (op == "conv2d_backward_weight" && !ins.empty() && !outs.empty()) w = &outs[0], y = &ins[0];
  if (!w || w->size() != 4 || y->size() != 4) return {};
  return {std::max<int64_t>(1, std::min((*w)[0], (*w)[1])), (*y)[2] * (*y)[3]};
}

std::string conv_class(ConvShape c) {
  if (c.width <= 0) return "";
  if (c.matmul) return c.width < kSkinnyMatmul ? "skinny" : c.width < kSlimMatmul ? "slim" : "broad";
  if (c.width <= 4) return "few";
  if (c.width < 32) return "narrow";
  const bool small = c.out_hw > 0 && c.out_hw < 64;
  return std::string(c.width < 96 ? "mid" : "wide") + (small ? " small" : " large");
}

std::string time_family(std::string_view op, std::string_view impl, std::string_view precision, std::string_view cls) {
  if (impl.empty()) return time_family_of_op(op, precision, cls);
  return fmt::format("{} | {} [{}]{}{}", op, impl, precision, cls.empty() ? "" : " ", cls);
}

std::string time_family_of_op(std::string_view op, std::string_view precision, std::string_view cls) {
  return fmt::format("{} [{}]{}{}", op, precision, cls.empty() ? "" : " ", cls);
}

namespace {
// The keys op_time tries, most specific first (duplicates where the op names no impl or width).
std::vector<std::string> family_keys(std::string_view op, std::string_view impl, std::string_view precision,
                                     ConvShape shape) {
  std::vector<std::string> k;
  auto add = [&](std::string s) {
    if (std::find(k.begin(), k.end(), s) == k.end()) k.push_back(std::move(s));
  };
  const std::string cls = conv_class(shape), width_only = cls.substr(0, cls.find(' '));
  for (std::string_view p : {precision, precision == "fp16" ? std::string_view("fp32") : precision}) {
    for (std::string_view c : {std::string_view(cls), std::string_view(width_only)}) {
      add(time_family(op, impl, p, c));
      add(time_family_of_op(op, p, c));  // the shape decides more than the implementation
    }
    add(time_family(op, impl, p));
    add(time_family_of_op(op, p));
  }  // (fp16 is computed in f32 on the cpu: its lines, then fp32's)
  return k;
}
}  // namespace

std::string compute_precision(std::span<const DType> inputs) {
  for (DType t : inputs) {
    if (t == DType::bf16) return "bf16";
    if (t == DType::f16) return "fp16";
  }
  return "fp32";
}

double device_flops(const DeviceSpec& d, const Cost& c, KernelAlgo algo, double lane_use, double work_share) {
  double f = double(2 * c.macs + c.flops);
  if (d.name != "cpu") return f;
  if (work_share > 0 && work_share < 1) f = 2.0 * double(c.macs) * work_share + double(c.flops);
  if (lane_use > 0 && lane_use < 1) f /= lane_use;
  return algo == KernelAlgo::winograd ? f / d.winograd_speedup : f;
}

double kernel_bytes(const DeviceSpec& d, const Cost& c, int64_t unread_bytes) {
  const double skipped = d.name == "cpu" ? double(std::max<int64_t>(0, unread_bytes)) : 0.0;
  return std::max(0.0, double(c.bytes_read + c.bytes_written) - skipped);
}

bool reads_what_it_writes(int op, uint32_t aliases, size_t outputs) {
  if (op < 0 || outputs == 0 || outputs >= 32 || aliases != (uint32_t(1) << outputs) - 1) return false;
  return !op_info(op).overwrites;
}

double working_set_of(Phase phase, bool in_place) {
  return phase == Phase::optimizer && in_place ? std::numeric_limits<double>::infinity() : 0.0;
}

double memory_s(const DeviceSpec& d, double bytes, bool in_place, double working_set) {
  return bytes / d.bandwidth_at(std::max(bytes, working_set), in_place);
}

double roofline_s(const DeviceSpec& d, double flops, double bytes, const std::string& precision, bool in_place,
                  double working_set) {
  return std::max(flops / d.peak(precision), memory_s(d, bytes, in_place, working_set));
}

OpTime op_time(const DeviceSpec& d, std::string_view op, std::string_view impl, const std::string& precision,
               ConvShape shape, double flops, double bytes, bool in_place, double working_set,
               double reorder_bytes) {
  OpTime t;
  const double tc = flops / d.peak(precision), tm = memory_s(d, bytes, in_place, working_set);
  t.compute_s = tc, t.memory_s = tm;
  t.roofline_s = std::max(tc, tm);
  t.compute_bound = tc >= tm;
  const FamilyTime* f = nullptr;
  if (!d.op_families.empty()) {
    const std::vector<std::string> keys = family_keys(op, impl, precision, shape);
    for (size_t i = 0; i < keys.size() && !f; ++i)
      if (auto it = d.op_families.find(keys[i]); it != d.op_families.end()) {
        f = &it->second;
        t.source = keys[i].find(" | ") != std::string::npos || keys[i] == keys[0] ? "family" : "op";
      }
  }
  t.fixed_s = f ? f->fixed_s : d.op_overhead_s;
  t.reorder_s = reorder_s(d, reorder_bytes);
  t.total_s = t.fixed_s + (f ? f->scale : 1.0) * t.roofline_s + t.reorder_s;
  return t;
}

double reorder_s(const DeviceSpec& d, double reorder_bytes) {
  return d.reorder_bandwidth > 0 && reorder_bytes > 0 ? reorder_bytes / d.reorder_bandwidth : 0.0;
}

FamilyTime fit_family(const std::vector<FamilySample>& samples, double default_fixed_s) {
  FamilyTime f;
  f.samples = int(samples.size());
  if (samples.empty()) return {default_fixed_s, 1.0, 0};
  // Weighted means and the centred sums (no cancellation between large products).
  double S = 0, mx = 0, my = 0;
  for (const auto& s : samples) {
    const double w = 1.0 / std::max(s.measured_s, 1e-12);
    S += w, mx += w * s.roofline_s, my += w * s.measured_s;
  }
  mx /= S, my /= S;
  double Sxx = 0, Sxy = 0, lo = 1e300, hi = 0;
  for (const auto& s : samples) {
    const double w = 1.0 / std::max(s.measured_s, 1e-12), dx = s.roofline_s - mx;
    Sxx += w * dx * dx, Sxy += w * dx * (s.measured_s - my);
    lo = std::min(lo, s.roofline_s), hi = std::max(hi, s.roofline_s);
  }
  if (hi <= 0 || hi < kMinFamilySpread * lo || !(Sxx > 0)) {  // no spread to tell a fixed cost from a slope
    if (mx > 0 && mx >= 10 * default_fixed_s) {
      // The kernel's own time decides: one efficiency, and the per-op overhead. (Two calls of
      // oneDNN's narrow Winograd kernel at 2.7 and 3.6 ms of roofline, both about 7 ms, made a
      // line of slope 0.25, the floor, and a fixed cost of 4.7-7.0 ms: tinycnn's 16 -> 32 layer
      // at batch 64, 2.9 ms measured, predicted at 18.7 ms.)
      // (The fixed cost is refitted where the scale was clamped.)
      f.scale = std::clamp((my - std::min(default_fixed_s, my)) / mx, kMinFamilyScale, kMaxFamilyScale);
      f.fixed_s = std::max(0.0, my - f.scale * mx);
      return f;
    }
    f.scale = 1.0;
    f.fixed_s = std::max(0.0, my - mx);
    if (f.fixed_s == 0 && mx > 0) f.scale = std::clamp(my / mx, kMinFamilyScale, kMaxFamilyScale);
    return f;
  }
  // The weighted least-squares line is the first candidate.
  double b = Sxy / Sxx, a = my - b * mx;
  if (a < 0) {  // through the origin: sum w x t / sum w x^2
    double num = 0, den = 0;
    for (const auto& s : samples) {
      const double w = 1.0 / std::max(s.measured_s, 1e-12);
      num += w * s.roofline_s * s.measured_s, den += w * s.roofline_s * s.roofline_s;
    }
    a = 0;
    b = num / den;
  }
  if (b < kMinFamilyScale || b > kMaxFamilyScale) {
    b = std::clamp(b, kMinFamilyScale, kMaxFamilyScale);
    a = std::max(0.0, my - b * mx);
  }
  // Then the line of least relative error, sum |t - a - b x| / t. Its optimum lies where the
  // constraints and the samples meet: through two samples, through one with a = 0 or b at a
  // bound, or at a = 0 with b at a bound; every such line within the bounds is tried (n^3 / 2
  // sums, under 0.1 s for the largest family, 231 optimizer updates).
  auto rel_error = [&](double fa, double fb) {
    double e = 0;
    for (const auto& s : samples) e += std::abs(s.measured_s - fa - fb * s.roofline_s) / std::max(s.measured_s, 1e-12);
    return e;
  };
  double best = rel_error(a, b);
  auto consider = [&](double fa, double fb) {
    if (!(fa >= 0) || !(fb >= kMinFamilyScale) || !(fb <= kMaxFamilyScale)) return;
    if (const double e = rel_error(fa, fb); e < best) best = e, a = fa, b = fb;
  };
  consider(0, kMinFamilyScale);
  consider(0, kMaxFamilyScale);
  for (size_t i = 0; i < samples.size(); ++i) {
    const FamilySample& p = samples[i];
    if (p.roofline_s > 0) consider(0, p.measured_s / p.roofline_s);
    for (double fb : {kMinFamilyScale, kMaxFamilyScale}) consider(p.measured_s - fb * p.roofline_s, fb);
    for (size_t j = i + 1; j < samples.size(); ++j) {
      const FamilySample& q = samples[j];
      const double dx = q.roofline_s - p.roofline_s;
      if (std::abs(dx) <= 1e-6 * std::max(q.roofline_s, p.roofline_s)) continue;
      const double fb = (q.measured_s - p.measured_s) / dx;
      consider(p.measured_s - fb * p.roofline_s, fb);
    }
  }
  f.fixed_s = a;
  f.scale = b;
  return f;
}

namespace {

using Clock = std::chrono::steady_clock;

// The probe's networks: the op families of the zoo's training steps in fp32 and bf16 (checked by
// TimeModel.EveryOpOfTheZoosStepsHasACalibratedLine), at shapes of their own.
// Wide: a strided 7x7 first layer from 3 channels to 32; a 3x3 max pooling of stride 1 on its
// output (the one pooling of a large activation that runs in bf16 under autocast: fitted on the
// small ones alone, the bf16 line had timed tinycnn's at batch 128 at 4x); residual blocks (3x3 convolutions, strided ones
// with 1x1 shortcuts) narrow, mid and wide; two inverted residuals (1x1 expansion, depthwise 3x3 at
// stride 1 and 2, ReLU6, the residual add); a wide 1x1 convolution with a bias; local response
// norm (f32 under autocast, so what follows it is cast back); a wide 3x3 convolution; max
// pooling; two 3x3 convolutions to 512 channels on the smallest images (4x4 at most, as deep
// layers have); the global average; dropout on 512 and on 4096 features (fitted on the 512 alone,
// 2 to 24 images' worth, its line had timed alexnet_tv's on 32 x 9216 at 16x its measured time);
// and linear layers whose 10.5 M parameters are more than the caches hold (the updates stream
// them from memory).
class WideProbe : public nn::Module {
 public:
  WideProbe() : Module("TimeProbe") {
    using std::make_shared;
    auto shortcut = [](int64_t in, int64_t out, int64_t stride) {
      return make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
          make_shared<nn::Conv2d>(in, out, nn::Size2(1), nn::Conv2dOptions{.stride = stride, .bias = false}),
          make_shared<nn::BatchNorm2d>(out)});
    };
    body = make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        make_shared<nn::Conv2d>(3, 32, nn::Size2(7), nn::Conv2dOptions{.stride = 2, .padding = 3, .bias = false}),
        make_shared<nn::BatchNorm2d>(32), make_shared<nn::ReLU>(),
        make_shared<nn::MaxPool2d>(nn::Size2(3), nn::Size2(1), nn::Size2(1)),
        make_shared<nn::BasicBlock>(32, 24, 1, shortcut(32, 24, 1), Device::cpu),
        make_shared<nn::BasicBlock>(24, 48, 2, shortcut(24, 48, 2), Device::cpu),
        make_shared<nn::InvertedResidual>(48, 48, 1, 6, Device::cpu),
        make_shared<nn::InvertedResidual>(48, 64, 2, 4, Device::cpu),
        make_shared<nn::BasicBlock>(64, 128, 2, shortcut(64, 128, 2), Device::cpu),
        make_shared<nn::Conv2d>(128, 256, nn::Size2(1)), make_shared<nn::ReLU>(),
        make_shared<nn::LocalResponseNorm>(5),
        make_shared<nn::Conv2d>(256, 256, nn::Size2(3), nn::Conv2dOptions{.padding = 1}), make_shared<nn::ReLU>(),
        make_shared<nn::MaxPool2d>(nn::Size2(2)),
        make_shared<nn::Conv2d>(256, 512, nn::Size2(3), nn::Conv2dOptions{.padding = 1}), make_shared<nn::ReLU>(),
        make_shared<nn::Conv2d>(512, 512, nn::Size2(3), nn::Conv2dOptions{.padding = 1}), make_shared<nn::ReLU>(),
        make_shared<nn::AdaptiveAvgPool2d>(nn::Size2(1)), make_shared<nn::Flatten>(),
        make_shared<nn::Dropout>(0.3), make_shared<nn::Linear>(512, 4096), make_shared<nn::ReLU>(),
        make_shared<nn::Dropout>(0.5), make_shared<nn::Linear>(4096, 2048), make_shared<nn::ReLU>(), make_shared<nn::Linear>(2048, 10)});
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return (*body)(x); }
  std::shared_ptr<nn::Sequential> body;
};

// Narrow: one grey channel and few filters, as small networks have (reckon's small direct
// convolutions) on 26x26 images, then max pooling, ReLU and three linear layers.
// The first convolution is LeNet-5's, 1 -> 6 with 5x5 filters: the few-channel line is fitted on
// its 25 taps an output (a 1 -> 8 3x3 layer, amortizing each row's loads over 9, ran at 6-7x its
// roofline where this one runs at 2.4x, and had timed LeNet-5's first layer at 2.6x its measured
// time on a Xeon). The first linear layer has 108 x 640 weights: over kSmallLinearWeights, so it
// runs bf16 on every cpu (ops/matmul.h) and its products at batch 48 and 384 give the broad bf16
// lines; at batch 32, the slim lines' small products (the wide probe's at batch 24 are 0.3-1.3 ms:
// fitted on those alone, a slim line's fixed cost came out at 0.1-0.5 ms).
class NarrowProbe : public nn::Module {
 public:
  NarrowProbe() : Module("TimeProbe") {
    body = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(1, 6, nn::Size2(5)), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(nn::Size2(2)), std::make_shared<nn::Conv2d>(6, 12, nn::Size2(5)),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Size2(2)),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12 * 3 * 3, 640),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(640, 60), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(60, 10)});
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return (*body)(x); }
  std::shared_ptr<nn::Sequential> body;
};

// A first layer of 16 filters over one grey channel (TinyCNN's: no bias, batch norm after it): the
// small direct convolution with the output channels in its vector lanes
// (conv_small::output_channel_lanes), which the narrow probe runs only past its first layer; then
// max pooling and one linear layer.
class FirstLayerProbe : public nn::Module {
 public:
  FirstLayerProbe() : Module("TimeProbe") {
    body = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(1, 16, nn::Size2(3), nn::Conv2dOptions{.padding = 1, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(16), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Size2(2)),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(16 * 13 * 13, 10)});
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return (*body)(x); }
  std::shared_ptr<nn::Sequential> body;
};

// Times `timed` steps of the model (after two untimed ones) op by op, as the ledger's --measure
// does: an op's time is the wall time from the previous op's record to its own, the best of the
// steps kept.
void probe_model(const DeviceSpec& d, nn::Module& model, const Shape& x_shape, DType precision,
                 const std::string& optimizer, int timed, std::vector<FamilySample>& out) {
  model.train();
  model.zero_grad(true);
  auto opt = optim::make_optimizer({.name = optimizer, .momentum = optimizer == "sgd" ? 0.9 : 0.0},
                                   model.parameters());
  Tensor x = Tensor::empty(x_shape);
  fill_uniform_(x, -1, 1);
  Tensor y = Tensor::zeros({x_shape[0]}, DType::i64);
  for (int64_t i = 0; i < x_shape[0]; ++i) y.set(i, double(i % 10));
  auto step = [&] {
    train::Step s(model, *opt, nullptr, {.precision = precision});
    s.begin(x.size(0));
    s.micro(x, y);
    s.finish();
  };
  step();
  step();
  std::vector<FamilySample> samples;
  std::vector<double> best, reorder;  // per call: its best time, its layout conversions' time
  for (int k = 0; k < timed; ++k) {
    size_t i = 0;
    auto last = Clock::now();
    {
      ObserveOps obs([&](const OpRecord& r) {
        const auto now = Clock::now();
        if (k == 0) {
          FamilySample s;
          s.op = r.op;
          s.impl = r.impl;
          s.precision = compute_precision(r.in_dtypes);
          s.shape = conv_shape(r.op, r.in_shapes, r.out_shapes);
          const bool in_place = reads_what_it_writes(r.op_id, r.aliases, r.out_shapes.size());
          s.roofline_s = roofline_s(d, device_flops(d, r.cost, r.algo, r.lane_use, r.work_share),
                                    kernel_bytes(d, r.cost, r.unread_bytes), s.precision, in_place,
                                    working_set_of(r.phase, in_place));
          samples.push_back(std::move(s));
          best.push_back(1e30);
          reorder.push_back(reorder_s(d, double(r.reorder_bytes)));
        }
        // An op that is not the one the first step ran at this position is not timed.
        if (i < best.size() && samples[i].op == r.op && samples[i].impl == r.impl)
          best[i] = std::min(best[i], std::chrono::duration<double>(now - last).count());
        ++i;
        last = Clock::now();
      });
      step();
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    if (best[i] >= 1e30) continue;  // never matched
    // What the line explains: the time less the conversions', at least a tenth of it (a
    // conversion measured slower than the call it ran in is the machine's noise).
    samples[i].measured_s = std::max(best[i] - reorder[i], 0.1 * best[i]);
    out.push_back(std::move(samples[i]));
  }
  opt.reset();
  model.zero_grad(true);
}

}  // namespace

std::vector<ProbeNetwork> probe_networks() {
  return {{std::make_shared<WideProbe>(), {Shape{2, 3, 40, 40}, Shape{8, 3, 72, 72}, Shape{24, 3, 128, 128}}},
          {std::make_shared<NarrowProbe>(),
           {Shape{4, 1, 26, 26}, Shape{32, 1, 26, 26}, Shape{48, 1, 26, 26}, Shape{384, 1, 26, 26}}},
          {std::make_shared<FirstLayerProbe>(), {Shape{4, 1, 26, 26}, Shape{48, 1, 26, 26}, Shape{384, 1, 26, 26}}}};
}

std::vector<FamilySample> probe_op_samples(const DeviceSpec& d) {
  std::vector<FamilySample> out;
  struct Run {
    DType precision;
    const char* optimizer;
  };
  const std::vector<ProbeNetwork> nets = probe_networks();
  for (const Run run : {Run{DType::f32, "sgd"}, Run{DType::bf16, "adamw"}}) {
    for (const ProbeNetwork& net : nets)
      for (const Shape& s : net.inputs) probe_model(d, *net.module, s, run.precision, run.optimizer, 3, out);
    host_memory_restart(Device::cpu);
  }
  return out;
}

int probe_rounds(const std::function<std::vector<double>()>& round, const std::function<bool()>& more) {
  std::vector<double> last = round();
  int rounds = 1;
  while (rounds < kMaxProbeRounds && (!more || more())) {
    const std::vector<double> now = round();
    ++rounds;
    bool gained = false;
    for (size_t i = 0; i < now.size() && i < last.size(); ++i) gained |= now[i] < (1.0 - kProbeRoundGain) * last[i];
    if (rounds >= kMinProbeRounds && !gained) break;
    last = now;
  }
  return rounds;
}

double geometric_mean(const std::vector<double>& t) {
  double sum = 0;
  int n = 0;
  for (double x : t)
    if (x > 0) sum += std::log(x), ++n;
  return n ? std::exp(sum / n) : 0.0;
}

double OpProbe::round() {
  std::vector<FamilySample> more = probe_op_samples(d_);
  if (samples_.empty()) {
    samples_ = std::move(more);
  } else if (more.size() == samples_.size()) {
    for (size_t i = 0; i < samples_.size(); ++i) {
      const FamilySample &a = samples_[i], &b = more[i];
      if (a.op == b.op && a.impl == b.impl && a.precision == b.precision && a.shape.width == b.shape.width &&
          a.shape.out_hw == b.shape.out_hw && a.roofline_s == b.roofline_s)
        samples_[i].measured_s = std::min(a.measured_s, b.measured_s);
    }
  }
  std::vector<double> t;
  for (const FamilySample& s : samples_) t.push_back(s.measured_s);
  return geometric_mean(t);
}

std::map<std::string, FamilyTime> OpProbe::fit() const {
  std::map<std::string, std::vector<FamilySample>> by;
  for (const auto& s : samples_)
    for (const std::string& k : family_keys(s.op, s.impl, s.precision, s.shape)) by[k].push_back(s);
  std::map<std::string, FamilyTime> out;
  for (const auto& [k, v] : by) out[k] = fit_family(v, d_.op_overhead_s);
  return out;
}

}  // namespace reckon
