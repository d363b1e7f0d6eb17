#include "reckon/nn/models/common.h"

#include "reckon/nn/init.h"

namespace reckon::nn {

FeaturesClassifier::FeaturesClassifier(std::string type_name, std::shared_ptr<Sequential> features_,
                                       ModulePtr avgpool_, std::shared_ptr<Sequential> classifier_,
                                       bool flatten_before_classifier, Device device)
    : Module(std::move(type_name), device), flatten_before_classifier(flatten_before_classifier) {
  features = register_module("features", std::move(features_));
  if (avgpool_) avgpool = register_module("avgpool", std::move(avgpool_));
  classifier = register_module("classifier", std::move(classifier_));
}

Tensor FeaturesClassifier::forward(const Tensor& x) {
  Tensor y = (*features)(x);
  if (avgpool) y = (*avgpool)(y);
  if (flatten_before_classifier) y = flatten(y, 1);
  return (*classifier)(y);
}

void init_torchvision_style(Module& root, std::string_view nonlinearity, double linear_std) {
  for (auto& [name, m] : root.named_modules()) {
    if (auto* c = dynamic_cast<Conv2d*>(m)) {
      init::kaiming_normal_(c->weight, 0.0, init::FanMode::fan_out, nonlinearity);
      if (c->bias.defined()) init::zeros_(c->bias);
    } else if (auto* l = dynamic_cast<Linear*>(m); l && linear_std > 0) {
      init::normal_(l->weight, 0.0, linear_std);
      if (l->bias.defined()) init::zeros_(l->bias);
    }
  }
}

}  // namespace reckon::nn
