// The small 28x28 models (Fashion-MNIST / MNIST sized). Both are FeaturesClassifier.
//
// tinycnn (reckon's own, 24,058 parameters at 1 channel, 10 classes):
//   features:   0 conv 16@3x3 p1 no bias, 1 BN, 2 ReLU, 3 maxpool 2        28 -> 14
//               4 conv 32@3x3 p1 no bias, 5 BN, 6 ReLU, 7 maxpool 2        14 -> 7
//               8 conv 64@3x3 p1 no bias, 9 BN, 10 ReLU, 11 adaptive avg pool 1x1
//   classifier: 0 Flatten, 1 Linear(64, classes)
//
// lenet5 (61,706 parameters at 1 channel, 10 classes): LeNet-5 as commonly run on 28x28:
//   features:   0 conv 6@5x5 p2, 1 ReLU, 2 maxpool 2 (28 -> 14), 3 conv 16@5x5 (-> 10),
//               4 ReLU, 5 maxpool 2 (-> 5)
//   classifier: 0 Flatten, 1 Linear(400, 120), 2 ReLU, 3 Linear(120, 84), 4 ReLU,
//               5 Linear(84, classes)
//   The 1998 paper's scaled tanh, trainable subsampling, sparse C3 table and RBF output are
//   replaced by ReLU, max pooling, a full C3 and a Linear layer. Default init throughout.
// The PyTorch twins are in scripts/torch_models.py.
#pragma once
#include "reckon/nn/models/common.h"

namespace reckon::nn {

// requires: cfg resolved (num_classes, in_channels > 0).
ModulePtr make_tinycnn(const ModelConfig& cfg);
ModulePtr make_lenet5(const ModelConfig& cfg);

}  // namespace reckon::nn
