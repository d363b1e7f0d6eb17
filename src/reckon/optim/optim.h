// Optimizers with PyTorch's update formulas (torch.optim.SGD, Adam, AdamW; single-tensor,
// non-amsgrad, non-maximize paths), one parameter group. Their state tensors (momentum
// buffers, Adam moments) are allocated on the parameter's device under Tag::optimizer the
// first time a parameter with a gradient is stepped, as PyTorch's lazy state (a `full` op, named
// "optimizer.state.<i>.<name>" as in state_dict()). Each parameter's update is one op
// (ops/update.h: sgd_update, adam_update) under no autograd in the optimizer phase, so the ledger
// times it from its declared cost and a captured step replays it; on the meta device it runs no
// kernel but the state is still allocated. Not here: parameter groups, amsgrad, closures,
// fused/foreach kernels.
#pragma once
#include <string>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/nn/module.h"

namespace reckon::optim {

class Optimizer {
 public:
  // requires: params are defined f32 leaves (undefined grads are skipped at step()).
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // set_to_none (PyTorch's default): drop the gradients; else fill them with 0.
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }

  // The per-parameter state as PyTorch's state_dict()["state"] flattened:
  // "state.<param index>.<name>" -> tensor (the live state tensors, not copies), e.g.
  // "state.0.momentum_buffer", "state.3.exp_avg", "state.3.exp_avg_sq", and for Adam(W)
  // "state.3.step" (a new f32 scalar on cpu, as PyTorch keeps it). Parameters not stepped yet
  // have no entries.
  nn::StateDict state_dict() const;
  // Restores what state_dict() wrote (allocating state as needed); throws naming a key of an
  // unknown parameter index or state name, or a shape mismatch.
  void load_state_dict(const nn::StateDict& dict);
  // Bytes of all state tensors (the `optimizer` tag's share of this optimizer).
  int64_t state_bytes() const;

 protected:
  struct ParamState {
    std::vector<std::pair<std::string, Tensor>> tensors;  // in creation order
    int64_t step = 0;                                     // Adam's per-parameter step count
    Tensor* find(const std::string& name);
  };
  // The state tensor `name` of parameter i, created (zeros, tagged optimizer, on the
  // parameter's device) when absent; created reports whether it was.
  Tensor& state(size_t i, const std::string& name, bool* created = nullptr);
  // The state names this optimizer uses (load_state_dict checks against them).
  virtual std::vector<std::string> state_names() const = 0;
  virtual bool has_step_count() const { return false; }

  std::vector<Tensor> params_;
  std::vector<ParamState> states_;
  double lr_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// torch.optim.SGD: g = grad + wd * p; with momentum, buf = g on the first step, then
// buf = momentum * buf + (1 - dampening) * g; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. State: "momentum_buffer" (only with momentum != 0).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& o = {});
  void step() override;
  SGDOptions options;

 protected:
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};
// AdamW's options: PyTorch's AdamW defaults (weight_decay 0.01).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// torch.optim.Adam (non-amsgrad): t += 1; g = grad + wd * p (Adam) or p *= 1 - lr * wd (AdamW);
// m = m + (1 - b1) (g - m); v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// State: "exp_avg", "exp_avg_sq" and the step count t.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& o = {});
  void step() override;
  AdamOptions options;

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled);
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool has_step_count() const override { return true; }
  bool decoupled_;
};

// torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr * wd before the update).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& o = {});
};

}  // namespace reckon::optim
