// Which blocks of a model are recomputed in backward (activation checkpointing). The mechanism
// is autograd/checkpoint.h, switched on per module by Module::set_recompute and per run of
// children by Sequential::set_recompute_segments; this file is the policy that sets them.
//
// The rule (pre-order walk; nothing inside a marked block is marked again):
//   1. residual blocks, by type name: BasicBlock, Bottleneck (ResNet), InvertedResidual
//      (MobileNetV2), each one block;
//   2. a Sequential whose children are all leaf layers (no children of their own) and include
//      a pooling layer (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d), i.e. a plain feature stack,
//      is cut into segments that end after each pooling layer; layers after the last pool form
//      one more segment. Classifier heads have no pooling layer and are left alone, as are a
//      model's stem layers outside such a Sequential (ResNet's conv1/bn1/relu/maxpool).
// In the zoo: lenet5 2, tinycnn 3, alexnet 3, alexnet_tv 3, vgg11 5, vgg16 5, resnet18 8,
// resnet34 16, resnet50 16, resnet18_cifar 8, mobilenet_v2 17 blocks.
// Marking changes no parameter, buffer or state_dict key; only how forward and backward run.
#pragma once
#include <cstdint>

#include "reckon/nn/module.h"

namespace reckon::nn {

// Marks root's blocks by the rule above; returns how many blocks (modules + segments) recompute.
int64_t enable_recompute(Module& root);
// Clears every mark under root (modules and Sequential segments).
void disable_recompute(Module& root);

}  // namespace reckon::nn
