// Capture: while a Capture lives, every op call on this thread is appended to its graph as a
// node, as well as running as usual (eager on the cpu, planned on the meta device). It watches
// the dispatcher's records and holds no tensor, so it changes neither the memory accounts nor
// what is freed when.
//
// Values are tensors as the ops see them: a tensor is identified by its storage and view
// (offset, shape, strides, dtype), so a detached handle of a value (what autograd saves and
// backward reads, what recomputation reruns on) is that value. An in-place op's outputs are new
// values that alias their inputs (a later reader sees the latest). Leaves are the tensors
// declared (in the order declared: a module's state_dict order), then each tensor an op reads
// that the graph has not seen, by its own name and memory tag (param: parameter or buffer,
// optimizer: state, input: input, else external).
// Not here: several threads (a capture sees its own thread's calls).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "reckon/graph/graph.h"

namespace reckon::graph {

class Capture {
 public:
  Capture();
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Makes t a leaf of kind k named `name` (before any op reads it; throws if the graph has it).
  void declare(const Tensor& t, ValueKind k, std::string name);
  // Marks t's current value as an output of the graph (throws if the graph never saw t).
  void mark_output(const Tensor& t);
  // Keeps a handle on each leaf's tensor from now on (declared or first read), so a caller can
  // bind the graph's leaves to data after the run (the inference engine reads a forward's
  // constants so). Off by default: a capture then holds no tensor.
  void keep_leaf_tensors() { keep_leaves_ = true; }
  // The leaves' tensors kept so far, by value id (empty unless keep_leaf_tensors()).
  const std::unordered_map<int, Tensor>& leaf_tensors() const { return leaf_tensors_; }
  // The id of t's current value, -1 when the graph has not seen it.
  int value_of(const Tensor& t) const;
  const Graph& graph() const;
  // Stops capturing and hands the graph over (validated).
  Graph finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
  bool keep_leaves_ = false;
  std::unordered_map<int, Tensor> leaf_tensors_;
};

}  // namespace reckon::graph
