#include "reckon/autograd/checkpoint.h"

#include <algorithm>
#include <array>

#include "reckon/autograd/engine.h"
#include "reckon/ops/autocast.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon {

namespace {

// The name to push so that the scope stack's top becomes `full` again (ScopeGuard pushes a
// name relative to the current top).
std::string relative_scope(const std::string& full) {
  const std::string& outer = current_scope();
  if (outer.empty() || full == outer) return full == outer ? std::string() : full;
  if (full.size() > outer.size() && full.compare(0, outer.size(), outer) == 0 && full[outer.size()] == '.')
    return full.substr(outer.size() + 1);
  return full;  // not expressible: the rerun's scopes get `outer.` in front (see the header)
}

struct RecomputeNode final : Node {
  BlockFn fn;
  SavedTensor x;
  bool x_requires_grad = false;
  AutocastState autocast;
  std::array<uint64_t, 4> rng{};  // the default generator before the forward
  bool released = false;

  std::string_view name() const override { return "checkpoint"; }
  void release() override {
    x.reset();
    fn = nullptr;
    released = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    RK_CHECK(!released, "[checkpoint] {}: backward through a recomputed block a second time needs retain_graph",
             scope.empty() ? "(model)" : scope);
    Tensor dy = std::move(grad_outputs[0]);
    if (!dy.defined()) return {Tensor()};
    // Leave the engine's per-node state while the block runs forward again; whatever happens,
    // the engine gets it back, and the generator continues from where backward found it.
    struct Restore {
      const std::string* scope;
      std::array<uint64_t, 4> rng;
      ~Restore() {
        default_generator().set_state(rng);
        set_scope_for_backward(scope, true);
      }
    } restore{&scope, default_generator().state()};
    set_scope_for_backward(nullptr, false);

    Tensor x_leaf = x.get().detach();
    if (x_requires_grad) x_leaf.set_requires_grad(true);
    Tensor y;
    {
      EnableGrad grad_on;
      Recomputing rerun;
      Autocast ac(autocast);
      ScopeGuard sg(relative_scope(scope));
      default_generator().set_state(rng);
      y = fn(x_leaf);
    }
    // Outside the rerun's guards: the nested engine's ops are ordinary backward ops. y and dy
    // are handed over as temporaries; the engine's run_backward takes const references, so
    // they stay alive until it returns (an rvalue overload could drop them once seeded).
    if (y.requires_grad())
      run_backward(std::vector<Tensor>{std::move(y)}, std::vector<Tensor>{std::move(dy)});
    y = Tensor();
    dy = Tensor();
    if (!x_requires_grad) return {Tensor()};
    Tensor dx = x_leaf.grad();
    x_leaf.set_grad(Tensor());
    // AccumulateGrad tagged it `grad`; here it is a gradient in flight, as any node's output.
    if (dx.defined() && dx.storage().tag() == Tag::grad) dx.storage().retag(Tag::temporary);
    return {dx};
  }
};

}  // namespace

Tensor checkpoint(BlockFn fn, const Tensor& x, const std::vector<Tensor>& params) {
  RK_CHECK(fn != nullptr, "[checkpoint] no block function");
  const bool needs_node =
      grad_enabled() && !recomputing() &&
      (x.requires_grad() || std::any_of(params.begin(), params.end(), [](const Tensor& p) { return p.requires_grad(); }));
  if (!needs_node) return fn(x);

  auto node = std::make_shared<RecomputeNode>();
  node->scope = current_scope();
  node->autocast = autocast_state();
  node->rng = default_generator().state();
  Tensor y;
  {
    NoGrad no_grad;
    y = fn(x);
  }
  RK_CHECK(y.defined(), "[checkpoint] {}: the block returned an undefined tensor",
           node->scope.empty() ? "(model)" : node->scope);
  if (!is_floating(y.dtype())) return y;  // nothing to differentiate
  node->x = SavedTensor(x);
  node->x_requires_grad = x.requires_grad();
  node->next.push_back(gradient_edge(x));
  node->num_outputs = 1;
  node->fn = std::move(fn);
  // A new handle: y may be x itself or a view of it, whose own grad_fn must stay.
  Tensor out = y.detach();
  auto& im = out.impl();
  im.requires_grad = true;
  im.grad_fn = node;
  im.output_nr = 0;
  return out;
}

}  // namespace reckon
