#include "reckon/nn/models/mobilenet.h"

#include <cmath>

namespace reckon::nn {

std::shared_ptr<Sequential> conv_bn_relu6(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                          Device d) {
  auto s = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(
          in, out, kernel,
          Conv2dOptions{.stride = stride, .padding = (kernel - 1) / 2, .groups = groups, .bias = false}, d),
      std::make_shared<BatchNorm2d>(out, d), std::make_shared<ReLU6>()});
  return s;
}

InvertedResidual::InvertedResidual(int64_t inp, int64_t oup, int64_t stride, int64_t expand_ratio, Device d)
    : Module("InvertedResidual", d), use_res_connect(stride == 1 && inp == oup) {
  RK_CHECK(stride == 1 || stride == 2, "[InvertedResidual] stride must be 1 or 2, got {}", stride);
  int64_t hidden = inp * expand_ratio;  // torchvision: int(round(inp * t)), t integral here
  auto layers = std::make_shared<Sequential>();
  if (expand_ratio != 1) layers->push_back(conv_bn_relu6(inp, hidden, 1, 1, 1, d));
  layers->push_back(conv_bn_relu6(hidden, hidden, 3, stride, hidden, d));
  layers->push_back(std::make_shared<Conv2d>(hidden, oup, 1, Conv2dOptions{.bias = false}, d));
  layers->push_back(std::make_shared<BatchNorm2d>(oup, d));
  conv = register_module("conv", layers);
}

Tensor InvertedResidual::forward(const Tensor& x) {
  Tensor y = (*conv)(x);
  return use_res_connect ? add(x, y) : y;
}

MobileNetV2::MobileNetV2(const ModelConfig& cfg) : Module("MobileNetV2", cfg.device) {
  Device d = cfg.device;
  // t (expansion), c (output channels), n (repeats), s (first stride). With width 1.0 every
  // channel count is already a multiple of 8, so torchvision's _make_divisible changes none.
  const int64_t setting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                 {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  const int64_t last_channel = 1280;
  auto f = std::make_shared<Sequential>();
  int64_t c_in = 32;
  f->push_back(conv_bn_relu6(cfg.in_channels, c_in, 3, 2, 1, d));
  for (const auto& row : setting) {
    for (int64_t i = 0; i < row[2]; ++i) {
      f->push_back(std::make_shared<InvertedResidual>(c_in, row[1], i == 0 ? row[3] : 1, row[0], d));
      c_in = row[1];
    }
  }
  f->push_back(conv_bn_relu6(c_in, last_channel, 1, 1, 1, d));
  features = register_module("features", f);
  classifier = register_module("classifier", std::make_shared<Sequential>(std::vector<ModulePtr>{
                                                 std::make_shared<Dropout>(0.2),
                                                 std::make_shared<Linear>(last_channel, cfg.num_classes, d)}));
  init_torchvision_style(*this, "leaky_relu", 0.01);  // torchvision: kaiming_normal_(mode="fan_out")
}

Tensor MobileNetV2::forward(const Tensor& x) {
  Tensor y = (*features)(x);
  y = flatten(adaptive_avg_pool2d(y, {1, 1}), 1);
  return (*classifier)(y);
}

ModulePtr make_mobilenet_v2(const ModelConfig& cfg) { return std::make_shared<MobileNetV2>(cfg); }

}  // namespace reckon::nn
