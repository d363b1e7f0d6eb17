#include "reckon/optim/optim.h"

#include <cmath>

#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/node.h"
#include "reckon/ops/update.h"

namespace reckon::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  RK_CHECK(lr >= 0.0, "[optim] invalid learning rate {}", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    RK_CHECK(p.defined(), "[optim] parameter {} is undefined", i);
    RK_CHECK(p.is_leaf(), "[optim] parameter {} ('{}') is not a leaf tensor", i, p.name());
    RK_CHECK(p.dtype() == DType::f32, "[optim] parameter {} ('{}') is {}; the optimizers update f32 tensors", i,
             p.name(), dtype_name(p.dtype()));
    RK_CHECK(p.is_contiguous(), "[optim] parameter {} ('{}') is not contiguous", i, p.name());
  }
  states_.resize(params_.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      fill_(p.grad(), 0.0);
  }
}

Tensor* Optimizer::ParamState::find(const std::string& name) {
  for (auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

Tensor& Optimizer::state(size_t i, const std::string& name, bool* created) {
  ParamState& st = states_[i];
  Tensor* t = st.find(name);
  if (created) *created = (t == nullptr);
  if (t) return *t;
  TagGuard tag(Tag::optimizer);
  const Tensor& p = params_[i];
  st.tensors.emplace_back(name, full(p.shape(), 0.0, p.dtype(), p.device()));
  st.tensors.back().second.set_name(fmt::format("optimizer.state.{}.{}", i, name));
  return st.tensors.back().second;
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict d;
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& st = states_[i];
    if (has_step_count() && (st.step > 0 || !st.tensors.empty())) {
      TagGuard tag(Tag::optimizer);
      d.insert(fmt::format("state.{}.step", i), Tensor::full({}, double(st.step), DType::f32));
    }
    for (const auto& [n, t] : st.tensors) d.insert(fmt::format("state.{}.{}", i, n), t);
  }
  return d;
}

void Optimizer::load_state_dict(const nn::StateDict& dict) {
  auto names = state_names();
  for (const auto& [key, t] : dict) {
    // "state.<i>.<name>"
    size_t dot1 = key.find('.'), dot2 = key.find('.', dot1 == std::string::npos ? 0 : dot1 + 1);
    RK_CHECK(key.rfind("state.", 0) == 0 && dot2 != std::string::npos,
             "[optim] load_state_dict: key '{}' is not 'state.<param index>.<name>'", key);
    size_t i = 0;
    try {
      i = std::stoul(key.substr(dot1 + 1, dot2 - dot1 - 1));
    } catch (const std::exception&) {
      throw Error(fmt::format("[optim] load_state_dict: key '{}' has no parameter index", key));
    }
    std::string name = key.substr(dot2 + 1);
    RK_CHECK(i < params_.size(), "[optim] load_state_dict: key '{}' is for parameter {} but there are {}", key, i,
             params_.size());
    if (name == "step" && has_step_count()) {
      states_[i].step = int64_t(std::llround(t.item()));
      continue;
    }
    bool known = false;
    for (const auto& n : names) known = known || n == name;
    RK_CHECK(known, "[optim] load_state_dict: unknown state '{}' in key '{}'", name, key);
    Tensor& dst = state(i, name);
    RK_CHECK(t.shape() == dst.shape(), "[optim] load_state_dict: '{}' has shape {} but parameter {} ('{}') has {}",
             key, shape_str(t.shape()), i, params_[i].name(), shape_str(dst.shape()));
    copy_(dst, t);
  }
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& st : states_)
    for (const auto& [name, t] : st.tensors) n += t.nbytes();
  return n;
}

namespace {
// The gradient of p as a contiguous f32 tensor of p's shape.
Tensor checked_grad(const Tensor& p, size_t i) {
  Tensor g = p.grad();
  RK_CHECK(g.shape() == p.shape() && g.dtype() == DType::f32,
           "[optim] parameter {} ('{}') {} has a gradient {}", i, p.name(), p.str(), g.str());
  return g.is_contiguous() ? g : contiguous(g);
}
}  // namespace

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params), o.lr), options(o) {
  RK_CHECK(o.momentum >= 0.0 && o.weight_decay >= 0.0, "[SGD] invalid momentum {} or weight_decay {}", o.momentum,
           o.weight_decay);
  RK_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "[SGD] nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  NoGrad no_grad;
  PhaseGuard phase(Phase::optimizer);
  SgdAttrs a{.lr = lr_,
             .weight_decay = options.weight_decay,
             .momentum = options.momentum,
             .dampening = options.dampening,
             .nesterov = options.nesterov};
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = checked_grad(p, i);
    bool first = false;
    Tensor buf = a.momentum != 0.0 ? state(i, "momentum_buffer", &first) : Tensor();
    a.first = first;
    call<SgdUpdate>({p, g, buf}, a);
  }
}

// ---- Adam, AdamW ----

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o) : Adam(std::move(params), o, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options(o), decoupled_(decoupled) {
  RK_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0,
           "[{}] invalid betas ({}, {})", decoupled ? "AdamW" : "Adam", o.beta1, o.beta2);
  RK_CHECK(o.eps >= 0.0 && o.weight_decay >= 0.0, "[{}] invalid eps {} or weight_decay {}",
           decoupled ? "AdamW" : "Adam", o.eps, o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : Adam(std::move(params), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

void Adam::step() {
  NoGrad no_grad;
  PhaseGuard phase(Phase::optimizer);
  AdamAttrs a{.lr = lr_,
              .beta1 = options.beta1,
              .beta2 = options.beta2,
              .eps = options.eps,
              .weight_decay = options.weight_decay,
              .decoupled = decoupled_};
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = checked_grad(p, i);
    Tensor m = state(i, "exp_avg");
    Tensor v = state(i, "exp_avg_sq");
    a.step = ++states_[i].step;
    call<AdamUpdate>({p, g, m, v}, a);
  }
}

}  // namespace reckon::optim
