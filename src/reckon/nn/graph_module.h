// Graphs and modules: capturing a module's forward as a graph, and GraphModule, an nn::Module
// around a forward graph whose parameter and buffer leaves are its own parameters and buffers
// (under the same dotted names, so state_dict() and load_state_dict() work as for the module the
// graph came from). A graph built elsewhere (the ONNX importer) trains like a zoo model this way:
// forward replays the graph with grad on, so autograd records its backward as for eager code.
// Not here: graphs with several inputs or outputs (GraphModule takes the first of each).
#pragma once
#include <memory>

#include "reckon/graph/capture.h"
#include "reckon/graph/graph.h"
#include "reckon/nn/module.h"

namespace reckon::nn {

// Declares m's parameters and buffers to a capture, by their state_dict names and kinds (so a
// frozen parameter is still a parameter).
void declare_module(graph::Capture& c, const Module& m);

// m's forward on x as a graph (in m's current mode; grad off unless `grad`): x is the input leaf
// "x", m's tensors its parameter and buffer leaves, the result its output.
graph::Graph capture_forward(Module& m, const Tensor& x, bool grad = false);

// A module whose tensors are given by dotted names (a graph's leaves, an ONNX file's
// initializers): each is made in a holder submodule at its path, so state_dict() names them as
// given. A name with an empty component ("a..b", ".x") has its dots replaced by '_'.
class TensorTree : public Module {
 protected:
  TensorTree(std::string type_name, Device device);
  // A new parameter (or buffer) at `name`'s path; call adopt_tensors() after the last.
  Tensor add_at_path(const std::string& name, const TensorSpec& spec, bool parameter);
  // Attaches the holders made so far to this module (their tensors take their final names).
  void adopt_tensors();
  // The name add_at_path files `name` under.
  static std::string path_name(const std::string& name);

 private:
  std::shared_ptr<Module> root_;
};

class GraphModule : public TensorTree {
 public:
  // The graph's parameter and buffer leaves become this module's tensors on `device` (zeros until
  // loaded). requires: g has exactly one input leaf and at least one output.
  explicit GraphModule(std::shared_ptr<const graph::Graph> g, Device device = Device::cpu);
  // Replays the graph on x with this module's tensors; in training, batch norm and dropout run
  // in training mode (dropout with fresh masks), in eval as in eval.
  Tensor forward(const Tensor& x) override;
  const graph::Graph& graph() const { return *graph_; }

 private:
  std::shared_ptr<const graph::Graph> graph_;
  int input_ = -1;
  std::vector<std::pair<int, Tensor>> leaves_;  // value id -> this module's tensor
};

}  // namespace reckon::nn
