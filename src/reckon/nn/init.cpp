#include "reckon/nn/init.h"

#include <cmath>

#include "reckon/ops/functional.h"

namespace reckon::nn::init {

Fans fans(const Tensor& t) {
  RK_CHECK(t.dim() >= 2, "[init] fan in and fan out need at least 2 dimensions, got {}", shape_str(t.shape()));
  int64_t rf = 1;
  for (int64_t d = 2; d < t.dim(); ++d) rf *= t.size(d);
  return {t.size(1) * rf, t.size(0) * rf};
}

double calculate_gain(std::string_view nl, double param) {
  if (nl == "linear" || nl == "conv2d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  throw Error(fmt::format("[init] unsupported nonlinearity '{}'", nl));
}

void uniform_(const Tensor& t, double lo, double hi, Generator& g) { fill_uniform_(t, lo, hi, g); }

void normal_(const Tensor& t, double mean, double stddev, Generator& g) {
  if (t.is_meta()) return;
  if (t.dtype() == DType::f32 && t.is_contiguous()) {  // the fast path of core's fill_normal_
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(mean + stddev * g.normal());
    return;
  }
  fill_normal_(t, mean, stddev, g);
}

void constant_(const Tensor& t, double value) { fill_(t, value); }
void zeros_(const Tensor& t) { fill_(t, 0.0); }
void ones_(const Tensor& t) { fill_(t, 1.0); }

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, std::string_view nl) {
  Fans f = fans(t);
  int64_t fan = mode == FanMode::fan_in ? f.fan_in : f.fan_out;
  RK_CHECK(fan > 0, "[init] kaiming init of an empty tensor {}", shape_str(t.shape()));
  return calculate_gain(nl, a) / std::sqrt(double(fan));
}
}  // namespace

void kaiming_uniform_(const Tensor& t, double a, FanMode mode, std::string_view nl, Generator& g) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  uniform_(t, -bound, bound, g);
}

void kaiming_normal_(const Tensor& t, double a, FanMode mode, std::string_view nl, Generator& g) {
  normal_(t, 0.0, kaiming_std(t, a, mode, nl), g);
}

void xavier_uniform_(const Tensor& t, double gain, Generator& g) {
  Fans f = fans(t);
  double bound = gain * std::sqrt(6.0 / double(f.fan_in + f.fan_out));
  uniform_(t, -bound, bound, g);
}

}  // namespace reckon::nn::init
