// ResNet as torchvision.models.resnet18/34/50 (v1.5: in a Bottleneck the stride is on the
// 3x3 conv), with torchvision's parameter names (conv1, bn1, layer1.0.conv1,
// layer2.0.downsample.0, fc) and init (conv kaiming_normal_(fan_out, relu), BN 1 / 0, fc
// default). resnet18_cifar swaps the stem for conv 3x3 stride 1 pad 1 and drops the max pool
// (an Identity stays in its place, as the usual PyTorch CIFAR recipe does), for 32x32 inputs.
// 1000 classes: resnet18 11,689,512, resnet34 21,797,672, resnet50 25,557,032 parameters;
// resnet18_cifar at 10 classes 11,173,962.
#pragma once
#include "reckon/nn/models/common.h"

namespace reckon::nn {

// conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU. expansion 1.
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, ModulePtr downsample, Device device);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<ReLU> relu;
  ModulePtr downsample;  // null: identity shortcut
};

// conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1(x4)-BN, plus the shortcut, then ReLU.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, ModulePtr downsample, Device device);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<ReLU> relu;
  ModulePtr downsample;
};

class ResNet : public Module {
 public:
  // blocks: per stage (layer1..layer4) the number of blocks; bottleneck picks the block type.
  ResNet(bool bottleneck, std::vector<int64_t> blocks, const ModelConfig& cfg, bool cifar_stem = false);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<ReLU> relu;
  ModulePtr maxpool;  // MaxPool2d, or Identity with the CIFAR stem
  std::shared_ptr<Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Linear> fc;

 private:
  std::shared_ptr<Sequential> make_layer(bool bottleneck, int64_t planes, int64_t blocks, int64_t stride,
                                         Device device);
  int64_t inplanes_ = 64;
};

ModulePtr make_resnet18(const ModelConfig& cfg);
ModulePtr make_resnet34(const ModelConfig& cfg);
ModulePtr make_resnet50(const ModelConfig& cfg);
ModulePtr make_resnet18_cifar(const ModelConfig& cfg);

}  // namespace reckon::nn
