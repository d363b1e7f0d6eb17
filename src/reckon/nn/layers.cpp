#include "reckon/nn/layers.h"

#include <cmath>

#include "reckon/nn/init.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon::nn {

namespace {
std::string size2_str(Size2 s) { return fmt::format("({}, {})", s.h, s.w); }
std::string pool_repr(const Pool2dArgs& a) {
  return fmt::format("kernel_size=({}, {}), stride=({}, {}), padding=({}, {}), ceil_mode={}", a.kernel[0],
                     a.kernel[1], a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.ceil_mode);
}
Pool2dArgs pool_args(Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode, bool count_include_pad) {
  Pool2dArgs a;
  a.kernel = kernel.arr();
  a.stride = (stride.h == 0 && stride.w == 0) ? kernel.arr() : stride.arr();
  a.padding = padding.arr();
  a.ceil_mode = ceil_mode;
  a.count_include_pad = count_include_pad;
  return a;
}
}  // namespace

// ---- Sequential ----

Sequential::Sequential(std::vector<ModulePtr> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential& Sequential::push_back(ModulePtr m) {
  attach(std::to_string(size()), std::move(m));
  return *this;
}

ModulePtr Sequential::operator[](size_t i) const {
  RK_CHECK(i < size(), "[Sequential] index {} out of range for {} modules", i, size());
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  const auto& kids = named_children();
  Tensor y = x;
  size_t begin = 0;
  if (!segment_ends_.empty() && grad_enabled() && !recomputing()) {
    for (size_t end : segment_ends_) {
      std::vector<Module*> mods;
      for (size_t i = begin; i < end; ++i) mods.push_back(kids[i].second.get());
      auto run = [this, begin, end](const Tensor& in) {
        Tensor t = in;
        for (size_t i = begin; i < end; ++i) t = (*named_children()[i].second)(t);
        return t;
      };
      y = checkpointed(mods, run, y);
      begin = end;
    }
  }
  for (size_t i = begin; i < kids.size(); ++i) y = (*kids[i].second)(y);
  return y;
}

void Sequential::set_recompute_segments(std::vector<size_t> ends) {
  for (size_t i = 0; i < ends.size(); ++i)
    RK_CHECK(ends[i] >= 1 && ends[i] <= size() && (i == 0 || ends[i] > ends[i - 1]),
             "[Sequential] recompute segment end {} (#{}) must be increasing and in [1, {}]", ends[i], i, size());
  segment_ends_ = std::move(ends);
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, const Conv2dOptions& o, Device device)
    : Module("Conv2d", device), in_channels(in_channels), out_channels(out_channels), kernel(kernel), options(o) {
  RK_CHECK(in_channels > 0 && out_channels > 0 && o.groups > 0 && in_channels % o.groups == 0 &&
               out_channels % o.groups == 0,
           "[Conv2d] groups={} must divide in_channels {} and out_channels {}", o.groups, in_channels, out_channels);
  RK_CHECK(kernel.h > 0 && kernel.w > 0, "[Conv2d] bad kernel size {}", size2_str(kernel));
  weight = add_parameter("weight", {out_channels, in_channels / o.groups, kernel.h, kernel.w});
  if (o.bias) bias = add_parameter("bias", {out_channels});
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = init::fans(weight).fan_in;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Conv2dArgs Conv2d::args() const {
  return {.stride = options.stride.arr(), .padding = options.padding.arr(), .dilation = options.dilation.arr(),
          .groups = options.groups};
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, args()); }

std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels, size2_str(kernel),
                              size2_str(options.stride));
  if (options.padding != Size2(0)) s += ", padding=" + size2_str(options.padding);
  if (options.dilation != Size2(1)) s += ", dilation=" + size2_str(options.dilation);
  if (options.groups != 1) s += fmt::format(", groups={}", options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Device device)
    : Module("Linear", device), in_features(in_features), out_features(out_features) {
  RK_CHECK(in_features > 0 && out_features > 0, "[Linear] bad sizes in_features={} out_features={}", in_features,
           out_features);
  weight = add_parameter("weight", {out_features, in_features});
  if (with_bias) bias = add_parameter("bias", {out_features});
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(double(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features,
                     bias.defined() ? "True" : "False");
}

// ---- BatchNorm2d ----

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, Device device)
    : Module("BatchNorm2d", device), num_features(num_features), eps(eps), momentum(momentum) {
  RK_CHECK(num_features > 0, "[BatchNorm2d] bad num_features {}", num_features);
  weight = add_parameter("weight", {num_features});
  bias = add_parameter("bias", {num_features});
  init::ones_(weight);
  init::zeros_(bias);
  running_mean = add_buffer("running_mean", {num_features});
  running_var = add_buffer("running_var", {num_features});
  init::ones_(running_var);
  num_batches_tracked = add_buffer("num_batches_tracked", {}, DType::i64);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  bool training = is_training();
  // A forward run again in backward (autograd/checkpoint.h) already updated the running
  // statistics the first time: it normalises with the batch statistics and updates nothing.
  if (training && recomputing()) return batch_norm2d(x, weight, bias, Tensor(), Tensor(), true, momentum, eps);
  if (training) add_scalar_(num_batches_tracked, 1.0);
  return batch_norm2d(x, weight, bias, running_mean, running_var, training, momentum, eps);
}

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine=True, track_running_stats=True", num_features, eps, momentum);
}

// ---- the rest ----

std::string LeakyReLU::extra_repr() const { return fmt::format("negative_slope={}", negative_slope); }

MaxPool2d::MaxPool2d(Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode)
    : Module("MaxPool2d"), args(pool_args(kernel, stride, padding, ceil_mode, true)) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, args); }
std::string MaxPool2d::extra_repr() const { return pool_repr(args); }

AvgPool2d::AvgPool2d(Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode, bool count_include_pad)
    : Module("AvgPool2d"), args(pool_args(kernel, stride, padding, ceil_mode, count_include_pad)) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, args); }
std::string AvgPool2d::extra_repr() const {
  return pool_repr(args) + fmt::format(", count_include_pad={}", args.count_include_pad);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : Module("AdaptiveAvgPool2d"), output_size(output_size) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size.arr()); }
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size2_str(output_size); }

LocalResponseNorm::LocalResponseNorm(int64_t size, double alpha, double beta, double k)
    : Module("LocalResponseNorm"), size(size), alpha(alpha), beta(beta), k(k) {
  RK_CHECK(size > 0, "[LocalResponseNorm] bad size {}", size);
}
Tensor LocalResponseNorm::forward(const Tensor& x) { return local_response_norm(x, size, alpha, beta, k); }
std::string LocalResponseNorm::extra_repr() const {
  return fmt::format("{}, alpha={}, beta={}, k={}", size, alpha, beta, k);
}

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  RK_CHECK(p >= 0.0 && p <= 1.0, "[Dropout] probability {} is not in [0, 1]", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

}  // namespace reckon::nn
