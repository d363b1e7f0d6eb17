// The autograd graph's node types. They live with the dispatcher because the dispatcher is
// what builds the graph; the engine that runs it is autograd/engine.h.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

struct Node;
struct Edge {
  std::shared_ptr<Node> fn;  // null: this input needs no gradient
  int input_nr = 0;          // which output slot of fn the gradient is for
};

struct Node {
  virtual ~Node() = default;
  // Gradients of this node's inputs from gradients of its outputs (undefined = zero).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Drops what was saved for backward (called as soon as the node has run).
  virtual void release() {}
  virtual std::string_view name() const = 0;
  std::vector<Edge> next;  // one per input
  int num_outputs = 1;
  std::string scope;       // module path at creation, for the ledger
};

// The leaf's node: adds the incoming gradient into tensor.grad (tagged `grad`).
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> v) : leaf(std::move(v)) { num_outputs = 1; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string_view name() const override { return "accumulate_grad"; }
  std::shared_ptr<TensorImpl> leaf;
};

// The edge a gradient for tensor t flows into (null fn if t needs none).
Edge gradient_edge(const Tensor& t);

// A tensor kept for backward: holds the data without its grad_fn (no cycles) and accounts
// the storage as an activation while kept.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  SavedTensor(SavedTensor&& o) noexcept : t_(std::move(o.t_)) { o.t_ = Tensor(); }
  SavedTensor& operator=(SavedTensor&& o) noexcept;
  ~SavedTensor() { reset(); }
  const Tensor& get() const { return t_; }
  void reset();

 private:
  Tensor t_;
};

// Grad mode (thread-local). NoGrad: ops record no graph while it lives.
bool grad_enabled();
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool prev_;
};
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();

 private:
  bool prev_;
};

}  // namespace reckon
