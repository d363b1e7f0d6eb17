#include "reckon/nn/models/registry.h"

#include "reckon/nn/models/alexnet.h"
#include "reckon/nn/models/mobilenet.h"
#include "reckon/nn/models/resnet.h"
#include "reckon/nn/models/small.h"
#include "reckon/nn/models/vgg.h"

namespace reckon::nn {

namespace {
struct ZooEntry {
  const char* name;
  ModulePtr (*make)(const ModelConfig&);
  int64_t num_classes, in_channels, height, width;  // defaults
};

// The one list of models.
constexpr ZooEntry kZoo[] = {
    {"tinycnn", make_tinycnn, 10, 1, 28, 28},
    {"lenet5", make_lenet5, 10, 1, 28, 28},
    {"alexnet", make_alexnet, 1000, 3, 224, 224},
    {"alexnet_tv", make_alexnet_tv, 1000, 3, 224, 224},
    {"vgg11", make_vgg11, 1000, 3, 224, 224},
    {"vgg16", make_vgg16, 1000, 3, 224, 224},
    {"resnet18", make_resnet18, 1000, 3, 224, 224},
    {"resnet34", make_resnet34, 1000, 3, 224, 224},
    {"resnet50", make_resnet50, 1000, 3, 224, 224},
    {"resnet18_cifar", make_resnet18_cifar, 10, 3, 32, 32},
    {"mobilenet_v2", make_mobilenet_v2, 1000, 3, 224, 224},
};

const ZooEntry& entry(const std::string& name) {
  for (const auto& e : kZoo)
    if (name == e.name) return e;
  std::string known;
  for (const auto& e : kZoo) known += std::string(known.empty() ? "" : ", ") + e.name;
  throw Error(fmt::format("[make_model] unknown model '{}'; known models: {}", name, known));
}
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> r;
  for (const auto& e : kZoo) r.emplace_back(e.name);
  return r;
}

ModelConfig resolve_model_config(const std::string& name, const ModelConfig& cfg) {
  const ZooEntry& e = entry(name);
  RK_CHECK(cfg.num_classes >= 0 && cfg.in_channels >= 0,
           "[make_model] {}: num_classes ({}) and in_channels ({}) must be positive (0: the default)", name,
           cfg.num_classes, cfg.in_channels);
  ModelConfig r = cfg;
  if (r.num_classes == 0) r.num_classes = e.num_classes;
  if (r.in_channels == 0) r.in_channels = e.in_channels;
  return r;
}

std::shared_ptr<Module> make_model(const std::string& name, const ModelConfig& cfg) {
  return entry(name).make(resolve_model_config(name, cfg));
}

Shape model_input_shape(const std::string& name, const ModelConfig& cfg) {
  const ZooEntry& e = entry(name);
  return {resolve_model_config(name, cfg).in_channels, e.height, e.width};
}

}  // namespace reckon::nn
