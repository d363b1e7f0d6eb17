// Quantization-aware training (`reckon train --qat`): the model's Conv2d and Linear layers run
// with fake quantization (ops/quant.h: fake_quantize, the straight-through gradient), in the
// arithmetic reckon's int8 program (engine/quantize.h) will run them with, so what the network
// learns to tolerate is what it is deployed with:
//  - weights: s8, symmetric, per output channel (or per tensor), scale max |w| / 127 of the
//    current weights at every step (what the quantizer computes from the final ones);
//  - each layer's input: u8 when its observed minimum is not negative, else s8, zero point 0,
//    threshold max(|min|, |max|) of a moving average of the batches' ranges (averaging constant
//    0.01, the first batch taken as it is: PyTorch's MovingAverageMinMaxObserver);
//  - a Conv2d whose output only a BatchNorm2d reads is folded with it as PyTorch's ConvBn QAT
//    modules do (torch.ao.nn.intrinsic.qat): the weight is scaled by gamma / sqrt(running_var +
//    eps) before it is fake-quantized, the convolution's output divided back (its bias added)
//    and the batch norm run after it, with batch statistics until the batch norms are frozen and
//    their running ones after (then the step is exactly the folded layer the engine runs).
// Freezing (freeze()): the observers stop updating and the batch norms use running statistics
// (PyTorch's disable_observer and freeze_bn_stats); the trainer does it after the first QAT
// epoch. The observed ranges, keyed by layer, carry over to the int8 program (input_ranges()),
// and their state goes into a checkpoint's training state (to_json/from_json) for --resume.
// Where the fake quantization sits, as the int8 program has it: a value some layers read is traced
// back through pooling and views and quantized where it enters the outermost module given it (a
// residual block's input, so its identity path reads it quantized too), or at the layer when no
// module is given it; an average pool's output is rounded to its input's scale again; the earlier
// operand of a residual add that is no layer's input (a block's main path beside its downsample)
// is quantized where its module gives it. On resnet18_cifar a frozen QAT forward is still about as
// far from the int8 program as fp32 is (tests/test_quant.cpp checks the networks without adds).
// Not here: the export (train/quantize.h, given input_ranges()), or models that are not made of
// nn::Conv2d / nn::Linear modules (an imported ONNX file: refused).
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reckon/nn/module.h"

namespace reckon::train {

class Qat {
 public:
  // Attaches fake quantization to m's Conv2d and Linear modules (a forward on a zero batch of
  // `sample_shape` (C, H, W) finds the batch norms to fold). Throws naming the model when it has
  // no such module.
  Qat(nn::Module& m, const Shape& sample_shape, bool per_channel = true);
  ~Qat();  // the modules run their own forward again
  Qat(const Qat&) = delete;
  Qat& operator=(const Qat&) = delete;

  // Fake quantization on (the default) or off (the model runs in f32: epochs before
  // --qat-start-epoch).
  void enable(bool on);
  bool enabled() const;
  // Observers stop and the batch norms use their running statistics from now on.
  void freeze();
  bool frozen() const;

  // Each layer's observed input range [min, max], by module path (layers not yet observed are
  // absent): engine::fix_input_ranges takes them.
  std::map<std::string, std::pair<double, double>> input_ranges() const;
  // "conv1+bn1", ...: the folded pairs.
  std::vector<std::string> folded() const;
  int64_t layers() const;

  nlohmann::json to_json() const;
  // Restores what to_json saved; throws naming `where` when it does not match this model.
  void from_json(const nlohmann::json& j, const std::string& where);

  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace reckon::train
