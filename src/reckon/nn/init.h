// Parameter initialisers with torch.nn.init's formulas (the random streams are reckon's own
// Generator, not PyTorch's). All are no-ops on meta tensors and run under no autograd.
#pragma once
#include <string_view>

#include "reckon/core/tensor.h"

namespace reckon::nn::init {

enum class FanMode { fan_in, fan_out };

struct Fans {
  int64_t fan_in = 0, fan_out = 0;
};
// torch.nn.init._calculate_fan_in_and_fan_out: dim 1 input, dim 0 output, times the
// receptive field (product of dims 2..). requires: t.dim() >= 2.
Fans fans(const Tensor& t);
// torch.nn.init.calculate_gain for "linear", "conv2d", "sigmoid", "tanh", "relu",
// "leaky_relu" (param = negative slope, default 0.01), "selu".
double calculate_gain(std::string_view nonlinearity, double param = 0.01);

void uniform_(const Tensor& t, double lo = 0.0, double hi = 1.0, Generator& g = default_generator());
void normal_(const Tensor& t, double mean = 0.0, double stddev = 1.0, Generator& g = default_generator());
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
// U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan).
void kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                      std::string_view nonlinearity = "leaky_relu", Generator& g = default_generator());
// N(0, s) with s = gain(nonlinearity, a) / sqrt(fan).
void kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                     std::string_view nonlinearity = "leaky_relu", Generator& g = default_generator());
void xavier_uniform_(const Tensor& t, double gain = 1.0, Generator& g = default_generator());

}  // namespace reckon::nn::init
