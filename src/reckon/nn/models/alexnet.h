// AlexNet, two ways.
//
// alexnet: the ORIGINAL single-tower network (Krizhevsky, Sutskever, Hinton 2012) without the
// two-GPU channel grouping; 3x224x224 input (pad 2 makes 224 give the paper's 55x55):
//   features:   0 conv 96@11x11 s4 p2 (55x55), 1 ReLU, 2 LRN(5, 1e-4, 0.75, k=2),
//               3 maxpool 3 s2 (27x27), 4 conv 256@5x5 p2, 5 ReLU, 6 LRN, 7 maxpool 3 s2 (13x13),
//               8 conv 384@3x3 p1, 9 ReLU, 10 conv 384@3x3 p1, 11 ReLU, 12 conv 256@3x3 p1,
//               13 ReLU, 14 maxpool 3 s2 (6x6)
//   flatten (9216), classifier: 0 Dropout(0.5), 1 fc 4096, 2 ReLU, 3 Dropout(0.5), 4 fc 4096,
//               5 ReLU, 6 fc classes
//   1000 classes: 62,378,344 parameters; conv MACs per image 1,076,634,144. Default init.
//
// alexnet_tv: torchvision.models.alexnet (the "one weird trick" variant: 64/192/384/256/256
// channels, no LRN, AdaptiveAvgPool2d((6, 6)) before the classifier). 61,100,840 parameters
// at 1000 classes. Default init, as torchvision's.
#pragma once
#include "reckon/nn/models/common.h"

namespace reckon::nn {

ModulePtr make_alexnet(const ModelConfig& cfg);
ModulePtr make_alexnet_tv(const ModelConfig& cfg);

}  // namespace reckon::nn
