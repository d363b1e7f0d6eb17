#include "reckon/graph/interpreter.h"

#include "reckon/ops/autocast.h"
#include "reckon/ops/op_list.h"

namespace reckon::graph {

std::vector<Tensor> run(const Graph& g, const std::function<Tensor(const Value&)>& bind, const RunOptions& o) {
  const size_t nv = g.values.size();
  // The last node that reads each value; graph outputs are kept to the end.
  std::vector<int> last_use(nv, -1);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int in : g.nodes[n].inputs)
      if (in >= 0) last_use[size_t(in)] = int(n);
  for (int out : g.outputs) last_use[size_t(out)] = int(g.nodes.size());

  std::vector<Tensor> env(nv);
  auto leaf = [&](int id) -> Tensor& {
    Tensor& t = env[size_t(id)];
    if (!t.defined()) {
      const Value& v = g.values[size_t(id)];
      t = bind(v);
      RK_CHECK(t.defined(), "[graph] run: no tensor bound to the {} %{}", value_kind_name(v.kind),
               v.name.empty() ? std::to_string(id) : v.name);
      RK_CHECK(t.shape() == v.spec.shape && t.dtype() == v.spec.dtype, "[graph] run: %{} is bound to {} but the graph has {} {}",
               v.name.empty() ? std::to_string(id) : v.name, t.str(), shape_str(v.spec.shape), dtype_name(v.spec.dtype));
    }
    return t;
  };

  Autocast no_autocast(DType::f32);  // the captured casts are nodes
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    const OpInfo& info = op_info(node.op);
    std::vector<Tensor> in;
    in.reserve(node.inputs.size());
    for (int id : node.inputs) {
      if (id < 0) {
        in.emplace_back();
        continue;
      }
      const Value& v = g.values[size_t(id)];
      if (v.is_leaf()) {
        in.push_back(leaf(id));
      } else {
        RK_CHECK(env[size_t(id)].defined(), "[graph] run: node {} ({} @{}) reads %{}, which is not computed yet", n,
                 info.name, node.scope, id);
        in.push_back(env[size_t(id)]);
      }
    }
    const void* attrs = node.attrs.get();
    std::shared_ptr<void> changed;
    if ((o.fresh_random && info.reseed) || o.training >= 0) {
      changed = info.copy_attrs(attrs);
      bool any = false;
      if (o.training >= 0) any = info.set_training(changed.get(), o.training == 1);
      if (o.fresh_random && info.reseed) {
        info.reseed(changed.get());
        any = true;
      }
      if (any) attrs = changed.get();
    }
    std::vector<Tensor> out;
    {
      ScopeOverride scope(&node.scope, node.in_backward_node);
      PhaseGuard phase(node.phase);
      TagGuard tag(node.outputs.empty() ? Tag::temporary : g.values[size_t(node.outputs[0])].tag);
      try {
        out = info.call(std::move(in), attrs);
      } catch (const Error& e) {
        throw Error(fmt::format("[graph] run: node {} ({} @{}): {}", n, info.name, node.scope.empty() ? "(root)" : node.scope,
                                e.what()));
      }
    }
    // A node may give fewer outputs than captured (batch norm in eval has no batch statistics).
    for (size_t k = 0; k < node.outputs.size() && k < out.size(); ++k) env[size_t(node.outputs[k])] = std::move(out[k]);
    for (int id : node.inputs)
      if (id >= 0 && last_use[size_t(id)] == int(n)) env[size_t(id)] = Tensor();
    for (int id : node.outputs)
      if (last_use[size_t(id)] < 0) env[size_t(id)] = Tensor();  // never read: freed at once
  }
  std::vector<Tensor> r;
  for (int id : g.outputs) r.push_back(g.values[size_t(id)].is_leaf() ? leaf(id) : env[size_t(id)]);
  return r;
}

}  // namespace reckon::graph
