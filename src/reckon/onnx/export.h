// ONNX export: a forward graph (graph/graph.h) written as an ONNX model, node by node through
// each op's own mapping (Op::onnx, ops/onnx_map.h). Parameter and buffer leaves keep their names
// as initializer names; the input leaf is "input", the graph's output "output". Before anything
// is written, a pre-flight lowers every node and collects each one that cannot be expressed at
// the chosen opset (with its layer and why); after, the ONNX library's checker and its strict
// shape inference run on the model, and only then is the file written (to a temporary name,
// renamed into place: a failed export leaves an older file as it was).
// Not here: training graphs (losses, backward and optimizer ops say they are not exportable),
// control flow, opsets outside 13..17.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "reckon/graph/graph.h"
#include "reckon/nn/module.h"

namespace reckon::onnx {

struct ExportOptions {
  int opset = 17;              // 13..17
  bool dynamic_batch = false;  // the input's and output's first dim is the symbol "batch"
};

struct ExportProblem {
  int node = -1;
  std::string scope, op, reason;
  std::string str() const;  // "layer features.3 (max_pool2d): ..."
};

// Every node of g that does not lower, in order (empty: g exports).
std::vector<ExportProblem> preflight(const graph::Graph& g, const ExportOptions& o = {});

// The model's bytes (a serialized, checked ModelProto). data(v) gives a parameter or buffer
// leaf's values (a cpu tensor of its spec). Throws listing the pre-flight's problems, or the
// checker's complaint.
std::string export_graph(const graph::Graph& g, const std::function<Tensor(const graph::Value&)>& data,
                         const ExportOptions& o = {});

// m's eval-mode forward on one batch of `input` (N, C, H, W), exported; m's own tensors are the
// initializers. m is left in the mode it was in.
std::string export_module(nn::Module& m, const Shape& input, const ExportOptions& o = {});

// Writes bytes to path through a temporary file in the same directory and a rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace reckon::onnx
