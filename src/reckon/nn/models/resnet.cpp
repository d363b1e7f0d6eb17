#include "reckon/nn/models/resnet.h"

namespace reckon::nn {

namespace {
std::shared_ptr<Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride, Device d) {
  return std::make_shared<Conv2d>(in, out, 3, Conv2dOptions{.stride = stride, .padding = 1, .bias = false}, d);
}
std::shared_ptr<Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride, Device d) {
  return std::make_shared<Conv2d>(in, out, 1, Conv2dOptions{.stride = stride, .bias = false}, d);
}
}  // namespace

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, ModulePtr downsample_, Device d)
    : Module("BasicBlock", d) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride, d));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes, d));
  relu = register_module("relu", std::make_shared<ReLU>());
  conv2 = register_module("conv2", conv3x3(planes, planes, 1, d));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes, d));
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(add(out, identity));
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, ModulePtr downsample_, Device d)
    : Module("Bottleneck", d) {
  int64_t width = planes;  // base_width 64, groups 1
  conv1 = register_module("conv1", conv1x1(inplanes, width, 1, d));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(width, d));
  conv2 = register_module("conv2", conv3x3(width, width, stride, d));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(width, d));
  conv3 = register_module("conv3", conv1x1(width, planes * kExpansion, 1, d));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion, d));
  relu = register_module("relu", std::make_shared<ReLU>());
  if (downsample_) downsample = register_module("downsample", std::move(downsample_));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*relu)((*bn2)((*conv2)(out)));
  out = (*bn3)((*conv3)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  return (*relu)(add(out, identity));
}

ResNet::ResNet(bool bottleneck, std::vector<int64_t> blocks, const ModelConfig& cfg, bool cifar_stem)
    : Module("ResNet", cfg.device) {
  RK_CHECK(blocks.size() == 4, "[ResNet] needs 4 stages of blocks, got {}", blocks.size());
  Device d = cfg.device;
  if (cifar_stem) {
    conv1 = register_module("conv1", conv3x3(cfg.in_channels, 64, 1, d));
  } else {
    conv1 = register_module(
        "conv1", std::make_shared<Conv2d>(cfg.in_channels, 64, 7,
                                          Conv2dOptions{.stride = 2, .padding = 3, .bias = false}, d));
  }
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64, d));
  relu = register_module("relu", std::make_shared<ReLU>());
  if (cifar_stem)
    maxpool = register_module("maxpool", std::make_shared<Identity>());
  else
    maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  layer1 = register_module("layer1", make_layer(bottleneck, 64, blocks[0], 1, d));
  layer2 = register_module("layer2", make_layer(bottleneck, 128, blocks[1], 2, d));
  layer3 = register_module("layer3", make_layer(bottleneck, 256, blocks[2], 2, d));
  layer4 = register_module("layer4", make_layer(bottleneck, 512, blocks[3], 2, d));
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  fc = register_module("fc", std::make_shared<Linear>(512 * expansion, cfg.num_classes, d));
  init_torchvision_style(*this, "relu", 0.0);
}

std::shared_ptr<Sequential> ResNet::make_layer(bool bottleneck, int64_t planes, int64_t blocks, int64_t stride,
                                               Device d) {
  int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  ModulePtr downsample;
  if (stride != 1 || inplanes_ != planes * expansion)
    downsample = std::make_shared<Sequential>(std::vector<ModulePtr>{
        conv1x1(inplanes_, planes * expansion, stride, d), std::make_shared<BatchNorm2d>(planes * expansion, d)});
  auto block = [&](int64_t in, int64_t s, ModulePtr ds) -> ModulePtr {
    if (bottleneck) return std::make_shared<Bottleneck>(in, planes, s, std::move(ds), d);
    return std::make_shared<BasicBlock>(in, planes, s, std::move(ds), d);
  };
  auto layer = std::make_shared<Sequential>();
  layer->push_back(block(inplanes_, stride, downsample));
  inplanes_ = planes * expansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(block(inplanes_, 1, nullptr));
  return layer;
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor y = (*maxpool)((*relu)((*bn1)((*conv1)(x))));
  y = (*layer4)((*layer3)((*layer2)((*layer1)(y))));
  y = flatten((*avgpool)(y), 1);
  return (*fc)(y);
}

ModulePtr make_resnet18(const ModelConfig& cfg) { return std::make_shared<ResNet>(false, std::vector<int64_t>{2, 2, 2, 2}, cfg); }
ModulePtr make_resnet34(const ModelConfig& cfg) { return std::make_shared<ResNet>(false, std::vector<int64_t>{3, 4, 6, 3}, cfg); }
ModulePtr make_resnet50(const ModelConfig& cfg) { return std::make_shared<ResNet>(true, std::vector<int64_t>{3, 4, 6, 3}, cfg); }
ModulePtr make_resnet18_cifar(const ModelConfig& cfg) {
  return std::make_shared<ResNet>(false, std::vector<int64_t>{2, 2, 2, 2}, cfg, true);
}

}  // namespace reckon::nn
