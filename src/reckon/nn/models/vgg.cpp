#include "reckon/nn/models/vgg.h"

namespace reckon::nn {

namespace {
constexpr int64_t M = 0;  // a max pool in the stage list

ModulePtr make_vgg(const std::vector<int64_t>& stages, const ModelConfig& cfg) {
  Device d = cfg.device;
  auto features = std::make_shared<Sequential>();
  int64_t c = cfg.in_channels;
  for (int64_t v : stages) {
    if (v == M) {
      features->push_back(std::make_shared<MaxPool2d>(2, 2));
    } else {
      features->push_back(std::make_shared<Conv2d>(c, v, 3, Conv2dOptions{.padding = 1}, d));
      features->push_back(std::make_shared<ReLU>());
      c = v;
    }
  }
  auto classifier = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(512 * 7 * 7, 4096, d), std::make_shared<ReLU>(), std::make_shared<Dropout>(0.5),
      std::make_shared<Linear>(4096, 4096, d), std::make_shared<ReLU>(), std::make_shared<Dropout>(0.5),
      std::make_shared<Linear>(4096, cfg.num_classes, d)});
  auto net = std::make_shared<FeaturesClassifier>("VGG", features, std::make_shared<AdaptiveAvgPool2d>(Size2(7, 7)),
                                                  classifier, true, d);
  init_torchvision_style(*net, "relu", 0.01);
  return net;
}
}  // namespace

ModulePtr make_vgg11(const ModelConfig& cfg) {
  return make_vgg({64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M}, cfg);
}

ModulePtr make_vgg16(const ModelConfig& cfg) {
  return make_vgg({64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M}, cfg);
}

}  // namespace reckon::nn
