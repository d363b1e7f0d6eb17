// VGG as torchvision.models.vgg11 / vgg16 (no batch norm): 3x3 pad 1 convs with ReLU, max
// pool 2 between stages, AdaptiveAvgPool2d((7, 7)), classifier fc 4096, ReLU, Dropout(0.5),
// fc 4096, ReLU, Dropout(0.5), fc classes. torchvision's init: conv kaiming_normal_(fan_out,
// relu), conv bias 0, linear N(0, 0.01), bias 0. 1000 classes: vgg11 132,863,336 and vgg16
// 138,357,544 parameters.
#pragma once
#include "reckon/nn/models/common.h"

namespace reckon::nn {

ModulePtr make_vgg11(const ModelConfig& cfg);
ModulePtr make_vgg16(const ModelConfig& cfg);

}  // namespace reckon::nn
