// ONNX import: an ONNX graph run by reckon's own ops. Each ONNX node becomes calls of reckon's
// functional API (ops/functional.h), so shapes are inferred by reckon's ops, an imported model
// is accounted for (meta device), trained (autograd records it as eager code) and captured as a
// graph (nn::capture_forward) like a zoo model. Integer tensors (shapes, indices: what Shape,
// Gather, Unsqueeze, Concat compute before a Reshape) are computed on the host whatever the
// device, so a model whose shapes are computed at run time still runs on the meta device.
// OnnxModule is the nn::Module: float initializers become its parameters (buffers: batch norm's
// running statistics, scalars, and Constant nodes), under their ONNX names, so state_dict()
// and export keep them; an initializer read only as a shape, an axis list or a bound (Reshape's
// shape, Clip's min) stays a host constant.
// Operators: those listed by supported_ops(); every other one is an error naming the node, its
// op type and the opset. Not here: 1-D and 3-D convolution and pooling, Slice with steps, Pad
// other than constant, control flow, sequences.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reckon/nn/graph_module.h"
#include "reckon/nn/models/common.h"
#include "reckon/onnx/model.h"

namespace reckon::onnx {

// The ONNX operators the importer maps.
const std::vector<std::string>& supported_ops();

struct RunArgs {
  bool training = false;  // batch norm and dropout in training mode
  // Values by name: the graph's inputs and every float initializer (non-float ones and Constant
  // nodes come from the model itself unless given here).
  std::map<std::string, Tensor> values;
};
// Runs m's nodes in order; returns its outputs in order.
std::vector<Tensor> run(const Model& m, const RunArgs& a);

class OnnxModule : public nn::TensorTree {
 public:
  // Tensors made on `device`; on the cpu they hold the file's values (on meta, shapes only).
  // requires: m has one input (besides initializers).
  OnnxModule(std::shared_ptr<const Model> m, Device device = Device::cpu);
  Tensor forward(const Tensor& x) override;
  const Model& model() const { return *model_; }
  // The input's dims as the file gives them (-1 for a symbolic batch), and its output's.
  const ValueInfo& input() const { return model_->inputs[0]; }

 private:
  std::shared_ptr<const Model> model_;
  std::vector<std::pair<std::string, Tensor>> bound_;  // ONNX name -> this module's tensor
};

// ---- models by name or by file: what the commands call ----
bool is_onnx_path(const std::string& name);
// A zoo model by name, or an .onnx file (an OnnxModule). For a file, cfg.num_classes and
// cfg.in_channels, when given (non-zero), must equal what the file's input and output have.
std::shared_ptr<nn::Module> make_model(const std::string& name, const nn::ModelConfig& cfg = {});
// One sample's input (C, H, W): the zoo's default, or the file's input dims.
Shape model_input_shape(const std::string& name, const nn::ModelConfig& cfg = {});
// cfg with its 0s replaced: the zoo's defaults, or the file's.
nn::ModelConfig resolve_model_config(const std::string& name, const nn::ModelConfig& cfg = {});

}  // namespace reckon::onnx
