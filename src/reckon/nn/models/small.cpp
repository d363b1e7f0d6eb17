#include "reckon/nn/models/small.h"

namespace reckon::nn {

ModulePtr make_tinycnn(const ModelConfig& cfg) {
  Device d = cfg.device;
  Conv2dOptions no_bias{.padding = 1, .bias = false};
  auto features = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(cfg.in_channels, 16, 3, no_bias, d), std::make_shared<BatchNorm2d>(16, d),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(16, 32, 3, no_bias, d), std::make_shared<BatchNorm2d>(32, d),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3, no_bias, d), std::make_shared<BatchNorm2d>(64, d),
      std::make_shared<ReLU>(), std::make_shared<AdaptiveAvgPool2d>(1)});
  auto classifier = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(64, cfg.num_classes, d)});
  return std::make_shared<FeaturesClassifier>("TinyCNN", features, nullptr, classifier, false, d);
}

ModulePtr make_lenet5(const ModelConfig& cfg) {
  Device d = cfg.device;
  auto features = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(cfg.in_channels, 6, 5, Conv2dOptions{.padding = 2}, d), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(6, 16, 5, d), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2)});
  auto classifier = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Flatten>(), std::make_shared<Linear>(16 * 5 * 5, 120, d), std::make_shared<ReLU>(),
      std::make_shared<Linear>(120, 84, d), std::make_shared<ReLU>(),
      std::make_shared<Linear>(84, cfg.num_classes, d)});
  return std::make_shared<FeaturesClassifier>("LeNet5", features, nullptr, classifier, false, d);
}

}  // namespace reckon::nn
