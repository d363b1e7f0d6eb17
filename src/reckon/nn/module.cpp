#include "reckon/nn/module.h"

#include <unordered_set>

#include "reckon/autograd/checkpoint.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon::nn {

// ---- StateDict ----

void StateDict::insert(std::string key, Tensor t) {
  RK_CHECK(!contains(key), "[state_dict] duplicate key '{}'", key);
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(t));
}

void StateDict::set(const std::string& key, Tensor t) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(t);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(t));
}

const Tensor* StateDict::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(const std::string& key) const {
  const Tensor* t = find(key);
  RK_CHECK(t != nullptr, "[state_dict] no key '{}' ({} keys)", key, items_.size());
  return *t;
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> r;
  r.reserve(items_.size());
  for (const auto& [k, v] : items_) r.push_back(k);
  return r;
}

// ---- Module ----

Module::Module(std::string type_name, Device device)
    : type_name_(std::move(type_name)), device_(device) {}

Tensor Module::operator()(const Tensor& x) {
  ScopeGuard scope(name_);
  if (recompute_ && grad_enabled() && !recomputing())
    return checkpointed({this}, [this](const Tensor& in) { return forward_override_ ? forward_override_(in) : forward(in); },
                        x);
  return forward_override_ ? forward_override_(x) : forward(x);
}

Tensor Module::checkpointed(const std::vector<Module*>& modules, std::function<Tensor(const Tensor&)> fn,
                            const Tensor& x) {
  std::vector<Tensor> params;
  // Training modes as the forward sees them, set again for the rerun if changed since.
  auto modes = std::make_shared<std::vector<std::pair<Module*, bool>>>();
  for (Module* m : modules) {
    for (auto& [n, p] : m->named_parameters()) params.push_back(p);
    for (auto& [n, d] : m->named_modules()) modes->emplace_back(d, d->training_);
  }
  BlockFn block = [fn = std::move(fn), modes](const Tensor& in) {
    struct Modes {
      std::vector<std::pair<Module*, bool>> prev;
      ~Modes() {
        for (auto& [m, on] : prev) m->training_ = on;
      }
    } restore;
    for (auto& [m, on] : *modes)
      if (m->training_ != on) {
        restore.prev.emplace_back(m, m->training_);
        m->training_ = on;
      }
    return fn(in);
  };
  return checkpoint(std::move(block), x, params);
}

void Module::check_new_name(const std::string& name) const {
  RK_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "[{}] bad member name '{}': must be non-empty and hold no '.'", type_name_, name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, v] : list)
      if (n == name) return true;
    return false;
  };
  RK_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_),
           "[{}] '{}' is already a parameter, buffer or child", type_name_, name);
}

Tensor Module::add_parameter(const std::string& name, const Shape& shape, DType dtype) {
  TagGuard tag(Tag::param);
  return register_parameter(name, Tensor::empty(shape, dtype, device_));
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  RK_CHECK(t.defined(), "[{}] parameter '{}' is undefined", type_name_, name);
  t.set_requires_grad(true);
  t.set_name(name);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::add_buffer(const std::string& name, const Shape& shape, DType dtype) {
  TagGuard tag(Tag::param);
  return register_buffer(name, Tensor::zeros(shape, dtype, device_));
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  RK_CHECK(t.defined(), "[{}] buffer '{}' is undefined", type_name_, name);
  t.set_name(name);
  buffers_.emplace_back(name, t);
  return t;
}

void Module::attach(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  RK_CHECK(m != nullptr, "[{}] child '{}' is null", type_name_, name);
  m->name_ = name;
  children_.emplace_back(name, std::move(m));
  rename_tensors();
}

// Names tensors by their path from this module; rerun by each ancestor as the tree grows, so
// the root's names are the last written.
void Module::rename_tensors() {
  for (auto& [n, p] : named_parameters()) p.set_name(n);
  for (auto& [n, b] : named_buffers()) b.set_name(n);
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& [n, m] : children_)
    if (n == name) return m;
  throw Error(fmt::format("[{}] no child '{}'", type_name_, name));
}

Tensor Module::param(const std::string& name) const {
  for (const auto& [n, t] : params_)
    if (n == name) return t;
  throw Error(fmt::format("[{}] no parameter '{}'", type_name_, name));
}

Tensor Module::buffer(const std::string& name) const {
  for (const auto& [n, t] : buffers_)
    if (n == name) return t;
  throw Error(fmt::format("[{}] no buffer '{}'", type_name_, name));
}

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> r{{prefix, this}};
  for (auto& [n, m] : children_) {
    auto sub = m->named_modules(join(prefix, n));
    r.insert(r.end(), sub.begin(), sub.end());
  }
  return r;
}

namespace {
using Named = std::vector<std::pair<std::string, Tensor>>;
// Pre-order walk over (module, own tensors) with dedup by tensor identity.
template <class Get>
void collect(const Module& m, const std::string& prefix, Get get, Named& out,
             std::unordered_set<const TensorImpl*>& seen) {
  for (const auto& [n, t] : get(m))
    if (seen.insert(t.impl_ptr().get()).second) out.emplace_back(join(prefix, n), t);
  for (const auto& [n, c] : m.named_children()) collect(*c, join(prefix, n), get, out, seen);
}
}  // namespace

Named Module::named_parameters() const {
  Named r;
  std::unordered_set<const TensorImpl*> seen;
  collect(*this, "", [](const Module& m) -> const Named& { return m.local_parameters(); }, r, seen);
  return r;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> r;
  for (auto& [n, p] : named_parameters()) r.push_back(p);
  return r;
}

Named Module::named_buffers() const {
  Named r;
  std::unordered_set<const TensorImpl*> seen;
  collect(*this, "", [](const Module& m) -> const Named& { return m.local_buffers(); }, r, seen);
  return r;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, t] : params_) out.insert(join(prefix, n), t.detach());
  for (const auto& [n, t] : buffers_) out.insert(join(prefix, n), t.detach());
  for (const auto& [n, c] : children_) c->collect_state(join(prefix, n), out);
}

StateDict Module::state_dict() const {
  StateDict d;
  collect_state("", d);
  return d;
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict own = state_dict();
  LoadResult r;
  std::vector<std::string> errors;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (dst, src)
  for (const auto& [key, dst] : own) {
    const Tensor* src = dict.find(key);
    if (!src) {
      r.missing_keys.push_back(key);
      continue;
    }
    if (!src->defined() || src->shape() != dst.shape()) {
      errors.push_back(fmt::format("size mismatch for '{}': the dict has {}, the model has {}", key,
                                   src->defined() ? shape_str(src->shape()) : "an undefined tensor",
                                   shape_str(dst.shape())));
      continue;
    }
    if (src->is_meta() && !dst.is_meta()) {
      errors.push_back(fmt::format("'{}' in the dict is a meta tensor (no data) but the model's is on {}", key,
                                   device_name(dst.device())));
      continue;
    }
    copies.emplace_back(dst, *src);
  }
  for (const auto& [key, t] : dict)
    if (!own.contains(key)) r.unexpected_keys.push_back(key);
  if (strict) {
    for (const auto& k : r.missing_keys) errors.push_back(fmt::format("missing key '{}'", k));
    for (const auto& k : r.unexpected_keys) errors.push_back(fmt::format("unexpected key '{}'", k));
  }
  if (!errors.empty()) {
    std::string msg = fmt::format("[load_state_dict] {} error(s) loading into {}:", errors.size(), type_name_);
    for (const auto& e : errors) msg += "\n  " + e;
    throw Error(msg);
  }
  // A meta model takes the shapes only: there is nothing to write into.
  for (const auto& [dst, src] : copies)
    if (!dst.is_meta()) copy_(dst, src);
  return r;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [n, p] : named_parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      fill_(p.grad(), 0.0);
  }
}

void Module::repr_into(std::string& out, int indent) const {
  out += type_name_ + "(" + extra_repr();
  if (children_.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  std::string pad(size_t(indent + 2), ' ');
  for (const auto& [n, c] : children_) {
    out += pad + "(" + n + "): ";
    c->repr_into(out, indent + 2);
    out += "\n";
  }
  out += std::string(size_t(indent), ' ') + ")";
}

std::string Module::repr() const {
  std::string s;
  repr_into(s, 0);
  return s;
}

Module& Module::requires_grad_(bool on) {
  for (auto& [n, p] : named_parameters()) p.set_requires_grad(on);
  return *this;
}

int64_t freeze(Module& m, const std::vector<std::string>& prefixes, const std::string& flag) {
  const auto params = m.named_parameters();
  int64_t frozen = 0;
  for (const auto& prefix : prefixes) {
    RK_CHECK(!prefix.empty(), "{}: an empty prefix", flag);
    int64_t hit = 0;
    for (const auto& [name, p] : params)
      if (name == prefix || name.rfind(prefix + ".", 0) == 0) {
        if (p.requires_grad()) ++frozen;
        Tensor(p).set_requires_grad(false);
        ++hit;
      }
    RK_CHECK(hit > 0, "{}: '{}' names no parameter of {} (parameters are named like '{}')", flag, prefix, m.type_name(),
             params.empty() ? std::string("-") : params.front().first);
  }
  return frozen;
}

}  // namespace reckon::nn
