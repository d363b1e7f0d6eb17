// What the inference engine works on: a forward graph and the data of its constant leaves (a
// model's parameters and buffers, and what the passes fold into new ones). A program is made by
// capturing a module's eval-mode forward on one batch; a module on the meta device gives a program
// without data, which the passes rewrite and the engine plans (the deployment ledger) but which
// does not run. The graph-editing helpers the passes share are here too.
// Not here: the passes (passes.h) or the runner (engine.h).
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include "reckon/graph/graph.h"
#include "reckon/nn/module.h"

namespace reckon::engine {

struct Program {
  graph::Graph graph;
  std::unordered_map<int, Tensor> constants;  // leaf value id -> its tensor (parameters, buffers, folded)
  int input = -1;                             // the input leaf ("x")
  // The program's one output value.
  int output() const { return graph.outputs.at(0); }
  bool is_constant(int v) const { return v >= 0 && constants.count(v) > 0; }
  // Whether the constants hold data (false: a program captured on the meta device).
  bool has_data() const;
};

// m's forward on a batch of `input_shape` (N, C, H, W ...) as a program: captured in eval mode
// with grad off (m's mode is restored after). Every leaf but the input must be one of m's
// tensors or a tensor the forward made outside any op; each becomes a constant.
// requires: m has one input and one output.
Program make_program(nn::Module& m, const Shape& input_shape);

// ---- graph editing (the passes) ----
// A node's attributes as its op's Attrs type, and a new node's attributes.
template <class A>
const A& attrs_of(const graph::Node& n) {
  return *static_cast<const A*>(n.attrs.get());
}
template <class A>
std::shared_ptr<void> make_attrs(A a) {
  return std::make_shared<A>(std::move(a));
}
// How many nodes read each value, plus one for each graph output it is.
std::vector<int> use_counts(const graph::Graph& g);
// Every read of value `from` (node inputs, graph outputs) reads `to` instead.
void replace_uses(graph::Graph& g, int from, int to);
// A new constant leaf holding t (named `name`), returned by id.
int add_constant(Program& p, const Tensor& t, const std::string& name);
// Recomputes node n's cost and checks its outputs' specs by calling its op on meta tensors of
// its inputs' specs (so a rewritten node is costed by its op's own definition).
void refresh_node(graph::Graph& g, graph::Node& n);
// Drops the nodes marked dead and every value nothing reads or writes any more, renumbering
// values (constants follow); the graph stays in its order.
void compact(Program& p, const std::vector<bool>& dead_nodes);

}  // namespace reckon::engine
