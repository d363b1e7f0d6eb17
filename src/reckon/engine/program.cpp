#include "reckon/engine/program.h"

#include <fmt/format.h>

#include "reckon/graph/capture.h"
#include "reckon/nn/graph_module.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"

namespace reckon::engine {

bool Program::has_data() const {
  for (const auto& [id, t] : constants)
    if (t.is_meta()) return false;
  return true;
}

Program make_program(nn::Module& m, const Shape& input_shape) {
  const bool was_training = m.is_training();
  m.eval();
  Program p;
  try {
    graph::Capture c;
    c.keep_leaf_tensors();
    nn::declare_module(c, m);
    Tensor x = m.device() == Device::meta ? Tensor::empty(input_shape, DType::f32, Device::meta)
                                          : Tensor::zeros(input_shape, DType::f32, m.device());
    c.declare(x, graph::ValueKind::input, "x");
    Tensor y;
    {
      NoGrad no_grad;
      y = m(x);
    }
    c.mark_output(y);
    auto kept = c.leaf_tensors();
    p.graph = c.finish();
    p.input = c.value_of(x);
    for (int id : p.graph.leaves())
      if (id != p.input) {
        auto it = kept.find(id);
        RK_CHECK(it != kept.end(), "[engine] leaf %{} of the forward has no data", id);
        p.constants.emplace(id, it->second);
      }
  } catch (...) {
    m.train(was_training);
    throw;
  }
  m.train(was_training);
  RK_CHECK(p.graph.outputs.size() == 1, "[engine] the forward must have one output, it has {}", p.graph.outputs.size());
  return p;
}

std::vector<int> use_counts(const graph::Graph& g) {
  std::vector<int> n(g.values.size(), 0);
  for (const auto& node : g.nodes)
    for (int v : node.inputs)
      if (v >= 0) ++n[size_t(v)];
  for (int o : g.outputs) ++n[size_t(o)];
  return n;
}

void replace_uses(graph::Graph& g, int from, int to) {
  for (auto& node : g.nodes)
    for (int& v : node.inputs)
      if (v == from) v = to;
  for (int& o : g.outputs)
    if (o == from) o = to;
}

int add_constant(Program& p, const Tensor& t, const std::string& name) {
  graph::Value v;
  v.spec = t.spec();
  v.kind = graph::ValueKind::buffer;
  v.name = name;
  v.tag = Tag::param;
  const int id = p.graph.add_value(std::move(v));
  p.constants.emplace(id, t);
  return id;
}

void refresh_node(graph::Graph& g, graph::Node& n) {
  std::vector<Tensor> in;
  for (int v : n.inputs)
    in.push_back(v < 0 ? Tensor() : Tensor::empty(g.value(v).spec.shape, g.value(v).spec.dtype, Device::meta));
  bool got = false;
  Cost cost;
  std::vector<Tensor> out;
  {
    NoGrad no_grad;
    ObserveOps watch([&](const OpRecord& r) {
      if (!got) cost = r.cost;
      got = true;
    });
    out = op_info(n.op).call(in, n.attrs.get());
  }
  RK_CHECK(out.size() == n.outputs.size(), "[engine] {} at {} gives {} outputs, the graph has {}", n.op_name(),
           n.scope, out.size(), n.outputs.size());
  for (size_t k = 0; k < out.size(); ++k) {
    auto& v = g.values[size_t(n.outputs[k])];
    RK_CHECK(out[k].shape() == v.spec.shape && out[k].dtype() == v.spec.dtype,
             "[engine] {} at {}: a rewrite changed output {} from {} to {}", n.op_name(), n.scope, k,
             shape_str(v.spec.shape), shape_str(out[k].shape()));
  }
  n.cost = cost;
  n.kernel = "none";
  n.impl.clear();
}

void compact(Program& p, const std::vector<bool>& dead) {
  const graph::Graph& g = p.graph;
  std::vector<bool> used(g.values.size(), false);
  used[size_t(p.input)] = true;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (i < dead.size() && dead[i]) continue;
    for (int v : g.nodes[i].inputs)
      if (v >= 0) used[size_t(v)] = true;
    for (int v : g.nodes[i].outputs) used[size_t(v)] = true;
  }
  for (int o : g.outputs) used[size_t(o)] = true;
  std::vector<int> remap(g.values.size(), -1);
  graph::Graph out;
  for (const auto& v : g.values)
    if (used[size_t(v.id)]) {
      graph::Value nv = v;
      nv.producer = -1;
      remap[size_t(v.id)] = out.add_value(std::move(nv));
    }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (i < dead.size() && dead[i]) continue;
    graph::Node n = g.nodes[i];
    for (int& v : n.inputs)
      if (v >= 0) v = remap[size_t(v)];
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      int& v = n.outputs[k];
      v = remap[size_t(v)];
      out.values[size_t(v)].producer = int(out.nodes.size());
      out.values[size_t(v)].slot = int(k);
      if (out.values[size_t(v)].alias_of >= 0) out.values[size_t(v)].alias_of = remap[size_t(out.values[size_t(v)].alias_of)];
    }
    out.nodes.push_back(std::move(n));
  }
  for (int o : g.outputs) out.outputs.push_back(remap[size_t(o)]);
  std::unordered_map<int, Tensor> constants;
  for (auto& [id, t] : p.constants)
    if (remap[size_t(id)] >= 0) constants.emplace(remap[size_t(id)], t);
  p.input = remap[size_t(p.input)];
  p.graph = std::move(out);
  p.constants = std::move(constants);
  p.graph.validate();
}

}  // namespace reckon::engine
