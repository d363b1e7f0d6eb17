// The time model per op family (time_model.h): the probe, the fit, and an op call's time.
#include "reckon/ledger/time_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "reckon/core/allocator.h"
#include "reckon/nn/models/mobilenet.h"
#include "reckon/nn/models/resnet.h"
#include "reckon/nn/module.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op.h"
#include "reckon/optim/factory.h"
#include "reckon/optim/step.h"

namespace reckon {

int64_t conv_width(std::string_view op, const std::vector<Shape>& ins, const std::vector<Shape>& outs) {
  const Shape* w = nullptr;
  if ((op == "conv2d" || op == "conv2d_backward_input") && ins.size() >= 2) w = &ins[1];
  if (op == "conv2d_backward_weight" && !outs.empty()) w = &outs[0];
  if (!w || w->size() != 4) return 0;
  return std::max<int64_t>(1, std::min((*w)[0], (*w)[1]));
}

std::string_view width_class(int64_t width) {
  if (width <= 0) return "";
  return width <= 4 ? "few" : width < 32 ? "narrow" : width < 96 ? "mid" : "wide";
}

std::string time_family(std::string_view op, std::string_view impl, std::string_view precision, int64_t width) {
  if (impl.empty()) return time_family_of_op(op, precision, width);
  const std::string_view c = width_class(width);
  return fmt::format("{} | {} [{}]{}{}", op, impl, precision, c.empty() ? "" : " ", c);
}

std::string time_family_of_op(std::string_view op, std::string_view precision, int64_t width) {
  const std::string_view c = width_class(width);
  return fmt::format("{} [{}]{}{}", op, precision, c.empty() ? "" : " ", c);
}

namespace {
// The keys op_time tries, most specific first (duplicates where the op names no impl or width).
std::vector<std::string> family_keys(std::string_view op, std::string_view impl, std::string_view precision,
                                     int64_t width) {
  std::vector<std::string> k;
  auto add = [&](std::string s) {
    if (std::find(k.begin(), k.end(), s) == k.end()) k.push_back(std::move(s));
  };
  add(time_family(op, impl, precision, width));
  add(time_family_of_op(op, precision, width));  // the width decides more than the implementation
  add(time_family(op, impl, precision, 0));
  add(time_family_of_op(op, precision, 0));
  return k;
}
}  // namespace

OpTime op_time(const DeviceSpec& d, std::string_view op, std::string_view impl, const std::string& precision,
               int64_t width, double flops, double bytes) {
  OpTime t;
  const double tc = flops / d.peak(precision), tm = bytes / d.bandwidth_bytes;
  t.roofline_s = std::max(tc, tm);
  t.compute_bound = tc >= tm;
  const FamilyTime* f = nullptr;
  if (!d.op_families.empty()) {
    const std::vector<std::string> keys = family_keys(op, impl, precision, width);
    for (size_t i = 0; i < keys.size() && !f; ++i)
      if (auto it = d.op_families.find(keys[i]); it != d.op_families.end()) {
        f = &it->second;
        t.source = i == 0 ? "family" : "op";
      }
  }
  t.fixed_s = f ? f->fixed_s : d.op_overhead_s;
  t.total_s = t.fixed_s + (f ? f->scale : 1.0) * t.roofline_s;
  return t;
}

FamilyTime fit_family(const std::vector<FamilySample>& samples, double default_fixed_s) {
  FamilyTime f;
  f.samples = int(samples.size());
  if (samples.empty()) return {default_fixed_s, 1.0, 0};
  double lo = 1e300, hi = 0;
  for (const auto& s : samples) lo = std::min(lo, s.roofline_s), hi = std::max(hi, s.roofline_s);
  double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
  for (const auto& s : samples) {
    const double w = 1.0 / std::max(s.measured_s, 1e-12);
    S += w, Sx += w * s.roofline_s, Sy += w * s.measured_s;
    Sxx += w * s.roofline_s * s.roofline_s, Sxy += w * s.roofline_s * s.measured_s;
  }
  if (hi <= 0 || hi < 1.2 * lo) {  // no spread to tell a fixed cost from a slope
    const double t = Sy / S, x = Sx / S;
    f.fixed_s = hi <= 0 ? t : std::min(default_fixed_s, 0.5 * t);
    f.scale = x > 0 ? std::max(kMinFamilyScale, (t - f.fixed_s) / x) : 1.0;
    return f;
  }
  const double det = S * Sxx - Sx * Sx;
  double b = (S * Sxy - Sx * Sy) / det, a = (Sy - b * Sx) / S;
  if (a < 0) {  // through the origin
    a = 0;
    b = Sxy / Sxx;
  }
  if (b < kMinFamilyScale) {
    b = kMinFamilyScale;
    a = std::max(0.0, (Sy - b * Sx) / S);
  }
  f.fixed_s = a;
  f.scale = b;
  return f;
}

namespace {

using Clock = std::chrono::steady_clock;

// The probe's networks: every op family the zoo's training steps use, at shapes of their own.
// Wide: a strided 7x7 first layer from 3 channels to 32; residual blocks (3x3 convolutions, strided ones
// with 1x1 shortcuts) narrow, mid and wide; two inverted residuals (1x1 expansion, depthwise 3x3 at
// stride 1 and 2, ReLU6, the residual add); a wide 1x1 convolution with a bias; local response
// norm (f32 under autocast, so what follows it is cast back); a wide 3x3 convolution; max
// pooling; the global average; dropout; and linear layers whose
// 9.4 M parameters are more than the caches hold (the updates stream them from memory).
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
        make_shared<nn::BasicBlock>(32, 24, 1, shortcut(32, 24, 1), Device::cpu),
        make_shared<nn::BasicBlock>(24, 48, 2, shortcut(24, 48, 2), Device::cpu),
        make_shared<nn::InvertedResidual>(48, 48, 1, 6, Device::cpu),
        make_shared<nn::InvertedResidual>(48, 64, 2, 4, Device::cpu),
        make_shared<nn::BasicBlock>(64, 128, 2, shortcut(64, 128, 2), Device::cpu),
        make_shared<nn::Conv2d>(128, 256, nn::Size2(1)), make_shared<nn::ReLU>(),
        make_shared<nn::LocalResponseNorm>(5),
        make_shared<nn::Conv2d>(256, 256, nn::Size2(3), nn::Conv2dOptions{.padding = 1}), make_shared<nn::ReLU>(),
        make_shared<nn::MaxPool2d>(nn::Size2(2)),
        make_shared<nn::AdaptiveAvgPool2d>(nn::Size2(1)), make_shared<nn::Flatten>(),
        make_shared<nn::Dropout>(0.3), make_shared<nn::Linear>(256, 4096), make_shared<nn::ReLU>(),
        make_shared<nn::Linear>(4096, 2048), make_shared<nn::ReLU>(), make_shared<nn::Linear>(2048, 10)});
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return (*body)(x); }
  std::shared_ptr<nn::Sequential> body;
};

// Narrow: one grey channel and few filters, as small networks have (reckon's small direct
// convolutions) on 26x26 images, then max pooling, ReLU and three linear layers.
class NarrowProbe : public nn::Module {
 public:
  NarrowProbe() : Module("TimeProbe") {
    body = std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(1, 8, nn::Size2(3)), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(nn::Size2(2)), std::make_shared<nn::Conv2d>(8, 12, nn::Size2(5)),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(nn::Size2(2)),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12 * 4 * 4, 100),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(100, 60), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(60, 10)});
    register_module("body", body);
  }
  Tensor forward(const Tensor& x) override { return (*body)(x); }
  std::shared_ptr<nn::Sequential> body;
};

std::string precision_of(const OpRecord& r) {
  for (DType t : r.in_dtypes) {
    if (t == DType::bf16) return "bf16";
    if (t == DType::f16) return "fp16";
  }
  return "fp32";
}

// Times `timed` steps of the model (after two untimed ones) op by op, as the ledger's --measure
// does: an op's time is the wall time from the previous op's record to its own, the best of the
// steps kept.
void probe_model(const DeviceSpec& d, nn::Module& model, const Shape& x_shape, DType precision,
                 const std::string& optimizer, int timed, std::vector<FamilySample>& out) {
  model.train();
  model.zero_grad(true);
  auto opt = optim::make_optimizer({.name = optimizer}, model.parameters());
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
  std::vector<double> best;
  for (int k = 0; k < timed; ++k) {
    size_t i = 0;
    auto last = Clock::now();
    {
      ObserveOps obs([&](const OpRecord& r) {
        const auto now = Clock::now();
        if (k == 0) {
          const std::string p = precision_of(r);
          const bool winograd = r.algo == KernelAlgo::winograd;
          const double flops = double(2 * r.cost.macs + r.cost.flops) / (winograd ? d.winograd_speedup : 1.0);
          const double bytes = double(r.cost.bytes_read + r.cost.bytes_written);
          FamilySample s;
          s.op = r.op;
          s.impl = r.impl;
          s.precision = p;
          s.width = conv_width(r.op, r.in_shapes, r.out_shapes);
          s.roofline_s = std::max(flops / d.peak(p), bytes / d.bandwidth_bytes);
          samples.push_back(std::move(s));
          best.push_back(1e30);
        }
        if (i < best.size()) best[i] = std::min(best[i], std::chrono::duration<double>(now - last).count());
        ++i;
        last = Clock::now();
      });
      step();
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].measured_s = best[i];
    out.push_back(std::move(samples[i]));
  }
  opt.reset();
  model.zero_grad(true);
}

}  // namespace

std::vector<FamilySample> probe_op_samples(const DeviceSpec& d) {
  std::vector<FamilySample> out;
  WideProbe wide;
  NarrowProbe narrow;
  struct Run {
    DType precision;
    const char* optimizer;
  };
  for (const Run run : {Run{DType::f32, "sgd"}, Run{DType::bf16, "adamw"}}) {
    for (const Shape& s : {Shape{2, 3, 40, 40}, Shape{8, 3, 72, 72}, Shape{24, 3, 128, 128}})
      probe_model(d, wide, s, run.precision, run.optimizer, 3, out);
    for (const Shape& s : {Shape{4, 1, 26, 26}, Shape{48, 1, 26, 26}, Shape{384, 1, 26, 26}})
      probe_model(d, narrow, s, run.precision, run.optimizer, 3, out);
    host_memory_restart(Device::cpu);
  }
  return out;
}

std::map<std::string, FamilyTime> calibrate_op_families(const DeviceSpec& d) {
  const std::vector<FamilySample> samples = probe_op_samples(d);
  std::map<std::string, std::vector<FamilySample>> by;
  for (const auto& s : samples)
    for (const std::string& k : family_keys(s.op, s.impl, s.precision, s.width)) by[k].push_back(s);
  std::map<std::string, FamilyTime> out;
  for (const auto& [k, v] : by) out[k] = fit_family(v, d.op_overhead_s);
  return out;
}

}  // namespace reckon
