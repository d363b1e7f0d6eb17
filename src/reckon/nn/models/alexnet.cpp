#include "reckon/nn/models/alexnet.h"

namespace reckon::nn {

namespace {
std::shared_ptr<Sequential> alexnet_classifier(int64_t num_classes, Device d) {
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Dropout>(0.5), std::make_shared<Linear>(256 * 6 * 6, 4096, d), std::make_shared<ReLU>(),
      std::make_shared<Dropout>(0.5), std::make_shared<Linear>(4096, 4096, d), std::make_shared<ReLU>(),
      std::make_shared<Linear>(4096, num_classes, d)});
}
}  // namespace

ModulePtr make_alexnet(const ModelConfig& cfg) {
  Device d = cfg.device;
  auto lrn = [] { return std::make_shared<LocalResponseNorm>(5, 1e-4, 0.75, 2.0); };
  auto features = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(cfg.in_channels, 96, 11, Conv2dOptions{.stride = 4, .padding = 2}, d),
      std::make_shared<ReLU>(), lrn(), std::make_shared<MaxPool2d>(3, 2),
      std::make_shared<Conv2d>(96, 256, 5, Conv2dOptions{.padding = 2}, d),
      std::make_shared<ReLU>(), lrn(), std::make_shared<MaxPool2d>(3, 2),
      std::make_shared<Conv2d>(256, 384, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(384, 384, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(384, 256, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(3, 2)});
  return std::make_shared<FeaturesClassifier>("AlexNet", features, nullptr, alexnet_classifier(cfg.num_classes, d),
                                              true, d);
}

ModulePtr make_alexnet_tv(const ModelConfig& cfg) {
  Device d = cfg.device;
  auto features = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(cfg.in_channels, 64, 11, Conv2dOptions{.stride = 4, .padding = 2}, d),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      std::make_shared<Conv2d>(64, 192, 5, Conv2dOptions{.padding = 2}, d),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(3, 2),
      std::make_shared<Conv2d>(192, 384, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(384, 256, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<Conv2d>(256, 256, 3, Conv2dOptions{.padding = 1}, d), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(3, 2)});
  return std::make_shared<FeaturesClassifier>("AlexNet", features, std::make_shared<AdaptiveAvgPool2d>(Size2(6, 6)),
                                              alexnet_classifier(cfg.num_classes, d), true, d);
}

}  // namespace reckon::nn
