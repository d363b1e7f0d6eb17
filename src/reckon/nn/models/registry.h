// The model zoo by name: what `reckon ledger resnet18` and the tests build.
//   tinycnn, lenet5                     1x28x28, 10 classes   (small.h)
//   alexnet, alexnet_tv                 3x224x224, 1000       (alexnet.h)
//   vgg11, vgg16                        3x224x224, 1000       (vgg.h)
//   resnet18, resnet34, resnet50        3x224x224, 1000       (resnet.h)
//   resnet18_cifar                      3x32x32, 10           (resnet.h)
//   mobilenet_v2                        3x224x224, 1000       (mobilenet.h)
// ModelConfig's 0s take these defaults. Parameter names, shapes and counts equal the PyTorch
// definitions in scripts/torch_models.py (checked against golden/param_counts.json).
#pragma once
#include <string>
#include <vector>

#include "reckon/nn/models/common.h"

namespace reckon::nn {

std::vector<std::string> model_names();
// cfg with its 0s replaced by the model's defaults. Throws for an unknown name, listing the
// known ones, or for negative sizes.
ModelConfig resolve_model_config(const std::string& name, const ModelConfig& cfg = {});
// Builds the model on cfg.device (meta: no data, all accounts).
std::shared_ptr<Module> make_model(const std::string& name, const ModelConfig& cfg = {});
// The default input of one sample, (C, H, W), with C = the resolved in_channels.
Shape model_input_shape(const std::string& name, const ModelConfig& cfg = {});

}  // namespace reckon::nn
