#include "reckon/autograd/engine.h"

#include <unordered_map>

#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon {

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  RK_CHECK(grads.empty() || grads.size() == roots.size(), "[backward] {} gradients for {} roots",
           grads.size(), roots.size());
  PhaseGuard phase(Phase::backward);  // every op from here on, the seed gradient's `full` included
  // Count, for every node reachable from the roots, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<Node*> stack;
  std::vector<std::shared_ptr<Node>> keep;  // nodes stay alive while the engine runs
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    RK_CHECK(r.defined() && r.requires_grad(),
             "[backward] the tensor does not require grad (no parameter reached it)");
    Edge e = gradient_edge(r);
    Tensor g;
    if (grads.empty()) {
      RK_CHECK(r.numel() == 1, "[backward] gradient can be implied only for one element, not {}",
               shape_str(r.shape()));
      g = full(r.shape(), 1.0, r.dtype(), r.device());
    } else {
      g = grads[i];
      RK_CHECK(g.shape() == r.shape(), "[backward] gradient {} for a tensor of shape {}",
               shape_str(g.shape()), shape_str(r.shape()));
    }
    Node* n = e.fn.get();
    if (!deps.count(n)) {
      deps[n] = 0;
      stack.push_back(n);
      keep.push_back(e.fn);
    }
    auto& buf = buffers[n];
    buf.resize(size_t(n->num_outputs));
    buf[size_t(e.input_nr)] = buf[size_t(e.input_nr)].defined() ? add(buf[size_t(e.input_nr)], g) : g;
  }
  std::vector<Node*> roots_nodes = stack;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next) {
      if (!e.fn) continue;
      auto it = deps.find(e.fn.get());
      if (it == deps.end()) {
        deps[e.fn.get()] = 1;
        stack.push_back(e.fn.get());
        keep.push_back(e.fn);
      } else {
        it->second++;
      }
    }
  }
  std::vector<Node*> ready;
  for (Node* n : roots_nodes)
    if (deps[n] == 0) ready.push_back(n);

  NoGrad no_grad;
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    std::vector<Tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(size_t(n->num_outputs));
    bool any = false;
    for (auto& g : in) any = any || g.defined();
    std::vector<Tensor> out;
    if (any) {  // a node no gradient reached contributes nothing: skip its backward
      set_scope_for_backward(&n->scope, true);
      try {
        out = n->apply(std::move(in));
      } catch (...) {
        set_scope_for_backward(nullptr, false);
        throw;
      }
      set_scope_for_backward(nullptr, false);
    }
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      auto& e = n->next[i];
      if (!e.fn) continue;
      if (i < out.size() && out[i].defined()) {
        auto& buf = buffers[e.fn.get()];
        buf.resize(size_t(e.fn->num_outputs));
        Tensor& slot = buf[size_t(e.input_nr)];
        slot = slot.defined() ? add(slot, out[i]) : std::move(out[i]);
      }
      if (--deps[e.fn.get()] == 0) ready.push_back(e.fn.get());
    }
  }
}

void Tensor::backward(const Tensor& grad_output) const {
  run_backward({*this}, grad_output.defined() ? std::vector<Tensor>{grad_output} : std::vector<Tensor>{});
}

}  // namespace reckon
