// MobileNetV2 as torchvision.models.mobilenet_v2 (width 1.0): names features.N..., each
// Conv2dNormActivation a Sequential (conv no bias, BN, ReLU6), each InvertedResidual holding
// `conv` = [expand 1x1 (if t != 1)], depthwise 3x3, project 1x1 conv, BN. Global average pool
// (functional, as torchvision's forward), classifier Dropout(0.2), Linear(1280, classes).
// torchvision's init: conv kaiming_normal_(fan_out), BN 1 / 0, Linear N(0, 0.01) bias 0.
// 3,504,872 parameters at 1000 classes.
#pragma once
#include "reckon/nn/models/common.h"

namespace reckon::nn {

// conv k x k (pad (k-1)/2, groups, no bias) - BatchNorm2d - ReLU6; a Sequential "0", "1", "2".
std::shared_ptr<Sequential> conv_bn_relu6(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                                          Device device);

class InvertedResidual : public Module {
 public:
  InvertedResidual(int64_t inp, int64_t oup, int64_t stride, int64_t expand_ratio, Device device);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Sequential> conv;
  bool use_res_connect;
};

class MobileNetV2 : public Module {
 public:
  explicit MobileNetV2(const ModelConfig& cfg);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Sequential> features, classifier;
};

ModulePtr make_mobilenet_v2(const ModelConfig& cfg);

}  // namespace reckon::nn
