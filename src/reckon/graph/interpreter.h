// The graph interpreter: runs a graph's nodes in order through the dispatcher (call by op id,
// with each node's own attributes), so a replay takes the same kernels, costs and memory tags as
// the run it was captured from, and a graph built elsewhere (the ONNX importer) runs like code.
// Each node runs under its captured scope and phase with autocast off (the casts a captured run
// made are nodes of their own), and each value is freed after its last reader, so the memory
// timeline follows the captured one. Grad mode is the caller's: replaying a forward graph with
// grad on records autograd nodes as eager code does (GraphModule trains so); a whole training
// step replays with grad off (its backward and optimizer ops are nodes already).
// Not here: a schedule other than the captured order, or several threads.
#pragma once
#include <functional>
#include <vector>

#include "reckon/graph/graph.h"

namespace reckon::graph {

struct RunOptions {
  // Random ops (dropout) draw a new seed from default_generator() instead of the captured one.
  bool fresh_random = false;
  // -1: as captured; 0 or 1: the value of every node's "training" attribute (batch norm,
  // dropout), as Module::train/eval does to a module.
  int training = -1;
};

// bind(v) gives the tensor for leaf value v (called once per leaf the graph reads). Returns the
// graph's outputs. Throws naming the node (op, scope) where a call failed or a leaf was not bound.
std::vector<Tensor> run(const Graph& g, const std::function<Tensor(const Value&)>& bind, const RunOptions& o = {});

}  // namespace reckon::graph
