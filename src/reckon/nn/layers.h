// The standard layers, PyTorch's names, defaults and default initialisation:
//   Conv2d, Linear    weight ~ kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
//                     bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
//   BatchNorm2d       weight 1, bias 0; buffers running_mean 0, running_var 1,
//                     num_batches_tracked (i64 scalar) 0; momentum 0.1, eps 1e-5
// Each layer is a thin Module around one op of ops/functional.h; the math lives there.
// Layers with parameters take the device last (Device::meta: shapes and accounts, no data).
// Not here: layers with several inputs (residual adds are written in the model's forward).
#pragma once
#include <memory>
#include <vector>

#include "reckon/nn/module.h"
#include "reckon/ops/functional.h"

namespace reckon::nn {

// A 2-d size that converts from one int (both sides) or two: `.stride = 2`, `.padding = {3, 1}`.
struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2() = default;
  constexpr Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  constexpr Int2 arr() const { return {h, w}; }
  bool operator==(const Size2&) const = default;
};

// Runs its children in order; they are named "0", "1", ...
class Sequential : public Module {
 public:
  explicit Sequential(std::vector<ModulePtr> modules = {});
  Sequential& push_back(ModulePtr m);
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;

  // Recomputation by segments (nn::enable_recompute sets them): with ends {e0, e1, ...},
  // children [0, e0), [e0, e1), ... each run as one recomputed block (Module::operator()'s
  // rule: grad enabled, something requiring grad); children from the last end on run plainly.
  // requires: ends strictly increasing, each in [1, size()]. Empty: no segments.
  void set_recompute_segments(std::vector<size_t> ends);
  const std::vector<size_t>& recompute_segments() const { return segment_ends_; }

 private:
  std::vector<size_t> segment_ends_;
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x (N, C, H, W) -> (N, O, H', W'); weight (O, C/groups, KH, KW), bias (O).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, const Conv2dOptions& o = {},
         Device device = Device::cpu);
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel, Device device)
      : Conv2d(in_channels, out_channels, kernel, Conv2dOptions{}, device) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // The convolution's arguments (stride, padding, dilation, groups) from options.
  Conv2dArgs args() const;
  // PyTorch's reset_parameters(): kaiming_uniform_(a = sqrt(5)) and the bias bound.
  void reset_parameters();

  int64_t in_channels, out_channels;
  Size2 kernel;
  Conv2dOptions options;
  Tensor weight, bias;  // bias undefined when options.bias is false
};

// x (N, IN) -> (N, OUT); weight (OUT, IN), bias (OUT).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Device device = Device::cpu);
  Linear(int64_t in_features, int64_t out_features, Device device = Device::cpu)
      : Linear(in_features, out_features, true, device) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t in_features, out_features;
  Tensor weight, bias;
};

// Per-channel batch normalisation of x (N, C, H, W), affine, tracking running statistics.
// Training: batch statistics, running stats updated by the op, num_batches_tracked += 1.
// Eval: running statistics.
class BatchNorm2d : public Module {
 public:
  BatchNorm2d(int64_t num_features, double eps, double momentum, Device device = Device::cpu);
  explicit BatchNorm2d(int64_t num_features, Device device = Device::cpu)
      : BatchNorm2d(num_features, 1e-5, 0.1, device) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias;                                       // (C), parameters
  Tensor running_mean, running_var, num_batches_tracked;     // (C), (C), i64 scalar; buffers
};

// ---- activations ----
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class ReLU6 : public Module {
 public:
  ReLU6() : Module("ReLU6") {}
  Tensor forward(const Tensor& x) override { return relu6(x); }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string extra_repr() const override;
  double negative_slope;
};
class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override { return gelu(x); }
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

// ---- pooling ----
// stride 0 (the default) means stride = kernel, as PyTorch's stride=None.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool2dArgs args;
};
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel, Size2 stride = 0, Size2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Pool2dArgs args;
};
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 output_size;
};

// ---- normalisation, regularisation, shape ----
// torch.nn.LocalResponseNorm(size, alpha, beta, k) across channels.
class LocalResponseNorm : public Module {
 public:
  explicit LocalResponseNorm(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t size;
  double alpha, beta, k;
};
// Zeroes elements with probability p in training and scales the rest by 1/(1-p); identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

}  // namespace reckon::nn
