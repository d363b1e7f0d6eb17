#include "reckon/nn/graph_module.h"

#include <algorithm>

#include "reckon/graph/interpreter.h"
#include "reckon/ops/node.h"

namespace reckon::nn {

namespace {
// A module that only holds tensors: the path of a GraphModule's leaf names ("layer1.0.bn1").
class Holder : public Module {
 public:
  explicit Holder(Device d) : Module("(graph)", d) {}
  Tensor forward(const Tensor&) override {
    throw Error("[GraphModule] a holder of a graph's tensors has no forward of its own");
  }
  Tensor parameter(const std::string& name, const TensorSpec& s) { return add_parameter(name, s.shape, s.dtype); }
  Tensor buffer(const std::string& name, const TensorSpec& s) { return add_buffer(name, s.shape, s.dtype); }
  std::shared_ptr<Holder> child_holder(const std::string& name, Device d) {
    for (const auto& [n, c] : named_children())
      if (n == name) return std::static_pointer_cast<Holder>(c);
    return register_module(name, std::make_shared<Holder>(d));
  }
};
}  // namespace

void declare_module(graph::Capture& c, const Module& m) {
  for (const auto& [name, t] : m.named_parameters()) c.declare(t, graph::ValueKind::parameter, name);
  for (const auto& [name, t] : m.named_buffers()) c.declare(t, graph::ValueKind::buffer, name);
}

graph::Graph capture_forward(Module& m, const Tensor& x, bool grad) {
  graph::Capture c;
  declare_module(c, m);
  c.declare(x, graph::ValueKind::input, "x");
  Tensor y;
  if (grad) {
    y = m(x);
  } else {
    NoGrad no_grad;
    y = m(x);
  }
  c.mark_output(y);
  return c.finish();
}

TensorTree::TensorTree(std::string type_name, Device device)
    : Module(std::move(type_name), device), root_(std::make_shared<Holder>(device)) {}

std::string TensorTree::path_name(const std::string& name) {
  bool empty_part = name.empty() || name.front() == '.' || name.back() == '.' || name.find("..") != std::string::npos;
  if (!empty_part) return name;
  std::string n = name;
  std::replace(n.begin(), n.end(), '.', '_');
  return n.empty() ? "_" : n;
}

Tensor TensorTree::add_at_path(const std::string& raw, const TensorSpec& spec, bool parameter) {
  const std::string name = path_name(raw);
  Holder* at = static_cast<Holder*>(root_.get());
  std::shared_ptr<Holder> keep;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    keep = at->child_holder(name.substr(start, dot - start), device());
    at = keep.get();
    start = dot + 1;
  }
  const std::string leaf = name.substr(start);
  return parameter ? at->parameter(leaf, spec) : at->buffer(leaf, spec);
}

void TensorTree::adopt_tensors() {
  for (const auto& [name, child] : root_->named_children()) register_module(name, child);
  for (const auto& [name, t] : root_->local_parameters()) register_parameter(name, t);
  for (const auto& [name, t] : root_->local_buffers()) register_buffer(name, t);
  root_ = std::make_shared<Holder>(device());
}

GraphModule::GraphModule(std::shared_ptr<const graph::Graph> g, Device device)
    : TensorTree("GraphModule", device), graph_(std::move(g)) {
  RK_CHECK(graph_ != nullptr, "[GraphModule] no graph");
  RK_CHECK(!graph_->outputs.empty(), "[GraphModule] the graph has no output");
  for (int id : graph_->leaves()) {
    const graph::Value& v = graph_->value(id);
    if (v.kind == graph::ValueKind::input) {
      RK_CHECK(input_ < 0, "[GraphModule] the graph has two inputs (%{} and %{})", graph_->value(input_).name, v.name);
      input_ = id;
      continue;
    }
    RK_CHECK(v.kind == graph::ValueKind::parameter || v.kind == graph::ValueKind::buffer,
             "[GraphModule] the graph's leaf %{} is {} (only the input, parameters and buffers can be)",
             v.name.empty() ? std::to_string(id) : v.name, graph::value_kind_name(v.kind));
    RK_CHECK(!v.name.empty(), "[GraphModule] the graph's {} %{} has no name", graph::value_kind_name(v.kind), id);
    leaves_.emplace_back(id, add_at_path(v.name, v.spec, v.kind == graph::ValueKind::parameter));
  }
  RK_CHECK(input_ >= 0, "[GraphModule] the graph has no input leaf");
  adopt_tensors();
}

Tensor GraphModule::forward(const Tensor& x) {
  graph::RunOptions o;
  o.training = is_training() ? 1 : 0;
  o.fresh_random = is_training();
  auto out = graph::run(
      *graph_,
      [&](const graph::Value& v) -> Tensor {
        if (v.id == input_) return x;
        for (const auto& [id, t] : leaves_)
          if (id == v.id) return t;
        return Tensor();
      },
      o);
  return out[0];
}

}  // namespace reckon::nn
