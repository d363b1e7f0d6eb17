// What the zoo's models share: their config and the "features -> classifier" layout of the
// plain CNNs (LeNet, AlexNet, VGG, TinyCNN). Each model family lives in its own file; the
// registry (registry.h) is how tools and tests build them by name.
#pragma once
#include <string_view>

#include "reckon/nn/layers.h"

namespace reckon::nn {

struct ModelConfig {
  // 0 means the model's default: 10 classes for the 28x28 models (tinycnn, lenet5) and
  // resnet18_cifar, 1000 for the ImageNet ones.
  int64_t num_classes = 0;
  // 0 means the model's default: 1 for the 28x28 models, 3 for the others.
  int64_t in_channels = 0;
  Device device = Device::cpu;
};

// features, an optional pooling module, then classifier; forward flattens before the
// classifier when flatten_before_classifier (torchvision's AlexNet and VGG, reckon's
// original AlexNet) and leaves it to the classifier otherwise (a Flatten module inside it).
// Children are registered as "features", "avgpool" (if any), "classifier".
class FeaturesClassifier : public Module {
 public:
  FeaturesClassifier(std::string type_name, std::shared_ptr<Sequential> features, ModulePtr avgpool,
                     std::shared_ptr<Sequential> classifier, bool flatten_before_classifier, Device device);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Sequential> features;
  ModulePtr avgpool;  // may be null
  std::shared_ptr<Sequential> classifier;
  bool flatten_before_classifier;
};

// torchvision's usual init: every Conv2d weight ~ kaiming_normal_(mode = fan_out,
// nonlinearity), conv biases 0; with linear_std > 0 every Linear weight ~ N(0, linear_std)
// and bias 0 (linear_std = 0 keeps Linear's default init). BatchNorm is already 1 / 0.
void init_torchvision_style(Module& m, std::string_view nonlinearity, double linear_std);

}  // namespace reckon::nn
