// nn::Module: a named tree of layers holding parameters and buffers, PyTorch-like.
// Names are PyTorch's dotted paths ("features.0.weight", "layer1.0.bn1.running_mean") so a
// state_dict moves between reckon and PyTorch unchanged. A module built on the meta device
// allocates its parameters there: shapes and accounts with no data, which is how the ledger
// runs a model dry. This is not a graph capture: forward() is plain C++ calling ops.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon::nn {

// name -> tensor in insertion order, with lookup. What state_dict() returns and
// load_state_dict() reads; the optimizer's state uses it too.
class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;
  // requires: key not present yet.
  void insert(std::string key, Tensor t);
  // Inserts or replaces.
  void set(const std::string& key, Tensor t);
  const Tensor* find(const std::string& key) const;  // null when absent
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  const Tensor& at(const std::string& key) const;    // throws naming the key
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in items_
};

// What load_state_dict(strict = false) could not match.
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module
};

class Module {
 public:
  // type_name: the class name shown by repr() and the ledger ("Conv2d").
  explicit Module(std::string type_name, Device device = Device::cpu);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Runs forward(x) inside a ScopeGuard with this module's name, so the ops it calls record
  // the module path ("features.0") as their scope. With recompute() on, grad enabled and x or
  // one of the module's parameters requiring grad, forward runs through checkpoint()
  // (autograd/checkpoint.h): nothing inside is saved for backward, and backward runs forward
  // again (in the training modes the modules had at the forward) before its own backward.
  Tensor operator()(const Tensor& x);
  virtual Tensor forward(const Tensor& x) = 0;
  // A replacement for forward() that operator() calls while one is set (quantization-aware
  // training runs a convolution with fake-quantized weights so: train/qat.h); empty: none.
  using ForwardFn = std::function<Tensor(const Tensor&)>;
  void set_forward_override(ForwardFn f) { forward_override_ = std::move(f); }
  bool has_forward_override() const { return bool(forward_override_); }

  // Recomputation of this module as one block (not recursive; nn::enable_recompute in
  // nn/recompute.h picks the blocks of a model). Changes no parameter or buffer.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  // ---- the tree ----
  const std::string& name() const { return name_; }   // as the parent knows it; "" at the root
  const std::string& type_name() const { return type_name_; }
  Device device() const { return device_; }
  // Direct children in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module ("" or prefix) and all descendants, pre-order, with dotted names.
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  std::shared_ptr<Module> child(const std::string& name) const;  // throws if absent

  // ---- parameters and buffers ----
  // Recursive, registration order, PyTorch's dotted names; a tensor registered twice (shared)
  // is listed once, under its first name.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // This module's own (not recursive).
  const std::vector<std::pair<std::string, Tensor>>& local_parameters() const { return params_; }
  const std::vector<std::pair<std::string, Tensor>>& local_buffers() const { return buffers_; }
  Tensor param(const std::string& name) const;   // own parameter; throws if absent
  Tensor buffer(const std::string& name) const;  // own buffer; throws if absent
  int64_t num_parameters() const;                // elements of all parameters

  // PyTorch's order: for each module (pre-order) its parameters then its buffers. The tensors
  // are detached handles on the module's own storage (writing them writes the module).
  StateDict state_dict() const;
  // Copies every matching entry into the module's tensors (values converted to their dtype).
  // A shape mismatch (or a meta tensor loaded into real data) is always an error; with strict,
  // so is a missing or unexpected key. All problems are reported in one reckon::Error naming
  // each key and the shapes, and then nothing is copied.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

  // ---- modes and gradients ----
  void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // set_to_none: drop the .grad tensors (their memory goes back); else fill them with 0.
  void zero_grad(bool set_to_none = true);
  // Whether this module's parameters (recursively) are trained: requires_grad_(false) freezes
  // them (torch's Module.requires_grad_). Returns *this.
  Module& requires_grad_(bool on = true);

  // PyTorch-style printout of the tree.
  std::string repr() const;
  virtual std::string extra_repr() const { return ""; }

 protected:
  // Registration (names must be unique among this module's params, buffers and children).
  // A parameter is allocated on device() under TagGuard(Tag::param), requires grad and is
  // named with its qualified path (renamed when this module is registered in a parent).
  Tensor add_parameter(const std::string& name, const Shape& shape, DType dtype = DType::f32);
  Tensor register_parameter(const std::string& name, Tensor t);
  // Buffers are allocated under Tag::param too (they live as long as the parameters).
  Tensor add_buffer(const std::string& name, const Shape& shape, DType dtype = DType::f32);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    attach(name, m);
    return m;
  }
  void attach(const std::string& name, std::shared_ptr<Module> m);
  // fn(x) as one recomputed block made of `modules` (run inside the caller's scope): their
  // parameters decide whether a node is needed, and their (and their descendants') training
  // modes at this call are set again while backward reruns fn.
  static Tensor checkpointed(const std::vector<Module*>& modules, std::function<Tensor(const Tensor&)> fn,
                             const Tensor& x);

 private:
  void check_new_name(const std::string& name) const;
  void collect_state(const std::string& prefix, StateDict& out) const;
  void repr_into(std::string& out, int indent) const;
  void rename_tensors();

  std::string type_name_;
  std::string name_;
  Device device_;
  bool training_ = true;
  bool recompute_ = false;
  ForwardFn forward_override_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

using ModulePtr = std::shared_ptr<Module>;

// Freezes the parameters of m named by `prefixes`: each a parameter's state_dict name or a module
// path ("features", "layer4.1"), which freezes everything under it. Returns how many parameter
// tensors were frozen. Throws naming `flag` and the prefix when a prefix names nothing.
int64_t freeze(Module& m, const std::vector<std::string>& prefixes, const std::string& flag = "[freeze]");

}  // namespace reckon::nn
