#include "reckon/graph/graph.h"
#include "reckon/core/json.h"

#include <nlohmann/json.hpp>

#include "reckon/ops/op_list.h"

namespace reckon::graph {

namespace {
using json = nlohmann::ordered_json;

constexpr const char* kKinds[] = {"input", "parameter", "buffer", "state", "external", "computed"};
constexpr Phase kPhases[] = {Phase::forward, Phase::backward, Phase::recompute, Phase::optimizer};

template <class E, size_t N>
E parse_name(const std::string& s, const char* const (&names)[N], const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return E(i);
  throw Error(fmt::format("[graph] unknown {} '{}'", what, s));
}

DType parse_dtype(const std::string& s) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::u8, DType::i32, DType::i64})
    if (dtype_name(d) == s) return d;
  throw Error(fmt::format("[graph] unknown dtype '{}'", s));
}

Phase parse_phase(const std::string& s) {
  for (Phase p : kPhases)
    if (phase_name(p) == s) return p;
  throw Error(fmt::format("[graph] unknown phase '{}'", s));
}

Tag parse_tag(const std::string& s) {
  for (int i = 0; i < kNumTags; ++i)
    if (tag_name(Tag(i)) == s) return Tag(i);
  throw Error(fmt::format("[graph] unknown memory tag '{}'", s));
}

std::string_view algo_name(KernelAlgo a) {
  return a == KernelAlgo::winograd ? "winograd" : a == KernelAlgo::direct ? "direct" : "";
}
KernelAlgo parse_algo(const std::string& s) {
  if (s == "winograd") return KernelAlgo::winograd;
  if (s == "direct") return KernelAlgo::direct;
  if (s.empty()) return KernelAlgo::none;
  throw Error(fmt::format("[graph] unknown kernel algorithm '{}'", s));
}

std::string spec_str(const TensorSpec& s) { return shape_str(s.shape) + " " + std::string(dtype_name(s.dtype)); }
}  // namespace

std::string_view value_kind_name(ValueKind k) { return kKinds[int(k)]; }

std::string_view Node::op_name() const { return op_info(op).name; }

int Graph::add_value(Value v) {
  v.id = int(values.size());
  values.push_back(std::move(v));
  return values.back().id;
}

const Value& Graph::value(int id) const {
  RK_CHECK(id >= 0 && size_t(id) < values.size(), "[graph] no value %{} (the graph has {})", id, values.size());
  return values[size_t(id)];
}

std::vector<int> Graph::leaves() const {
  std::vector<int> r;
  for (const auto& v : values)
    if (v.is_leaf()) r.push_back(v.id);
  return r;
}

int Graph::find_leaf(const std::string& name) const {
  for (const auto& v : values)
    if (v.is_leaf() && v.name == name) return v.id;
  return -1;
}

void Graph::validate() const {
  std::vector<bool> ready(values.size(), false);
  for (const auto& v : values) {
    RK_CHECK(v.id >= 0 && size_t(v.id) < values.size() && &values[size_t(v.id)] == &v, "[graph] value %{} is misplaced",
             v.id);
    if (v.is_leaf()) ready[size_t(v.id)] = true;
  }
  for (size_t n = 0; n < nodes.size(); ++n) {
    const Node& node = nodes[n];
    RK_CHECK(node.op >= 0 && node.op < kNumOps, "[graph] node {} has no op (id {})", n, node.op);
    for (int in : node.inputs) {
      if (in < 0) continue;
      RK_CHECK(size_t(in) < values.size() && ready[size_t(in)], "[graph] node {} ({}) reads %{} before it is written", n,
               node.op_name(), in);
    }
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int o = node.outputs[k];
      RK_CHECK(o >= 0 && size_t(o) < values.size(), "[graph] node {} ({}) writes no value %{}", n, node.op_name(), o);
      const Value& v = values[size_t(o)];
      RK_CHECK(v.producer == int(n) && v.slot == int(k), "[graph] value %{} does not name node {} output {} as its producer",
               o, n, k);
      ready[size_t(o)] = true;
    }
  }
  for (int o : outputs) RK_CHECK(o >= 0 && size_t(o) < values.size(), "[graph] output %{} is no value", o);
}

std::string value_ref(const Graph& g, int id) {
  if (id < 0) return "-";
  const Value& v = g.value(id);
  return v.is_leaf() && !v.name.empty() ? "%" + v.name : fmt::format("%{}", id);
}

std::string Graph::str() const {
  std::string o;
  o += fmt::format("graph: {} values ({} leaves), {} nodes\n", values.size(), leaves().size(), nodes.size());
  for (int id : leaves()) {
    const Value& v = values[size_t(id)];
    o += fmt::format("  {:<10} %{} {}\n", value_kind_name(v.kind), v.name.empty() ? std::to_string(id) : v.name,
                     spec_str(v.spec));
  }
  for (const Node& n : nodes) {
    std::string outs, ins;
    for (int id : n.outputs) outs += (outs.empty() ? "" : ", ") + value_ref(*this, id);
    for (int id : n.inputs) ins += (ins.empty() ? "" : ", ") + value_ref(*this, id);
    std::string specs;
    for (int id : n.outputs) specs += (specs.empty() ? "" : ", ") + spec_str(values[size_t(id)].spec);
    const std::string attrs = op_info(n.op).attrs_to_json(n.attrs.get());
    o += fmt::format("  {} = {}({}){} -> {}  @{} {}{}\n", outs, n.op_name(), ins, attrs == "{}" ? "" : " " + attrs, specs,
                     n.scope.empty() ? "(root)" : n.scope, phase_name(n.phase),
                     n.autocast != DType::f32 ? fmt::format(" autocast {}", dtype_name(n.autocast)) : "");
  }
  std::string outs;
  for (int id : outputs) outs += (outs.empty() ? "" : ", ") + value_ref(*this, id);
  o += "  return " + (outs.empty() ? std::string("(nothing)") : outs) + "\n";
  return o;
}

std::string Graph::to_json() const {
  json j;
  j["format"] = "reckon-graph";
  j["version"] = 1;
  json vs = json::array();
  for (const Value& v : values) {
    json x = {{"id", v.id},
              {"kind", value_kind_name(v.kind)},
              {"shape", v.spec.shape},
              {"dtype", dtype_name(v.spec.dtype)},
              {"tag", tag_name(v.tag)}};
    if (!v.name.empty()) x["name"] = v.name;
    if (!v.is_leaf()) {
      x["producer"] = v.producer;
      x["slot"] = v.slot;
    }
    if (v.alias_of >= 0) x["alias_of"] = v.alias_of;
    vs.push_back(std::move(x));
  }
  j["values"] = std::move(vs);
  json ns = json::array();
  for (const Node& n : nodes) {
    json x = {{"op", n.op_name()},
              {"attrs", json::parse(op_info(n.op).attrs_to_json(n.attrs.get()))},
              {"inputs", n.inputs},
              {"outputs", n.outputs},
              {"scope", n.scope},
              {"phase", phase_name(n.phase)},
              {"in_backward_node", n.in_backward_node},
              {"saved", {n.saved.inputs, n.saved.outputs}},
              {"aliases", n.aliases},
              {"autocast", dtype_name(n.autocast)},
              {"cost", {{"macs", n.cost.macs}, {"flops", n.cost.flops}, {"bytes_read", n.cost.bytes_read},
                        {"bytes_written", n.cost.bytes_written}}},
              {"kernel", n.kernel},
              {"impl", n.impl},
              {"algo", algo_name(n.algo)},
              {"lane_use", n.lane_use},
              {"reorder_bytes", n.reorder_bytes},
              {"work_share", n.work_share},
              {"unread_bytes", n.unread_bytes},
              {"workspace_bytes", n.workspace_bytes},
              {"saved_bytes", n.saved_bytes}};
    ns.push_back(std::move(x));
  }
  j["nodes"] = std::move(ns);
  j["outputs"] = outputs;
  return j.dump();
}

Graph Graph::from_json(const std::string& text) {
  json j;
  j = parse_json(text, "[graph]");
  RK_CHECK(j.is_object() && j.value("format", "") == "reckon-graph", "[graph] not a reckon graph (no \"format\": \"reckon-graph\")");
  RK_CHECK(j.value("version", 0) == 1, "[graph] unknown graph version {}", j.value("version", 0));
  Graph g;
  try {
    for (const auto& x : j.at("values")) {
      Value v;
      v.kind = parse_name<ValueKind>(x.at("kind").get<std::string>(), kKinds, "value kind");
      v.spec.shape = x.at("shape").get<Shape>();
      v.spec.dtype = parse_dtype(x.at("dtype").get<std::string>());
      v.tag = parse_tag(x.at("tag").get<std::string>());
      v.name = x.value("name", "");
      v.producer = x.value("producer", -1);
      v.slot = x.value("slot", 0);
      v.alias_of = x.value("alias_of", -1);
      const int id = g.add_value(std::move(v));
      RK_CHECK(id == x.at("id").get<int>(), "[graph] value ids must be 0, 1, 2, ... in order; got {} at {}",
               x.at("id").get<int>(), id);
    }
    for (const auto& x : j.at("nodes")) {
      Node n;
      const std::string op = x.at("op").get<std::string>();
      n.op = op_id_of(op);
      RK_CHECK(n.op >= 0, "[graph] unknown op '{}'", op);
      n.attrs = op_info(n.op).attrs_from_json(x.at("attrs").dump());
      n.inputs = x.at("inputs").get<std::vector<int>>();
      n.outputs = x.at("outputs").get<std::vector<int>>();
      n.scope = x.at("scope").get<std::string>();
      n.phase = parse_phase(x.at("phase").get<std::string>());
      n.in_backward_node = x.at("in_backward_node").get<bool>();
      n.saved = {x.at("saved").at(0).get<uint32_t>(), x.at("saved").at(1).get<uint32_t>()};
      n.aliases = x.at("aliases").get<uint32_t>();
      n.autocast = parse_dtype(x.at("autocast").get<std::string>());
      const auto& c = x.at("cost");
      n.cost = {c.at("macs").get<int64_t>(), c.at("flops").get<int64_t>(), c.at("bytes_read").get<int64_t>(),
                c.at("bytes_written").get<int64_t>()};
      n.kernel = x.at("kernel").get<std::string>();
      n.impl = x.at("impl").get<std::string>();
      n.algo = parse_algo(x.at("algo").get<std::string>());
      n.lane_use = x.value("lane_use", 1.0);  // (absent from files written before it)
      n.reorder_bytes = x.value("reorder_bytes", int64_t(0));
      n.work_share = x.value("work_share", 1.0);
      n.unread_bytes = x.value("unread_bytes", int64_t(0));
      n.workspace_bytes = x.at("workspace_bytes").get<int64_t>();
      n.saved_bytes = x.at("saved_bytes").get<int64_t>();
      g.nodes.push_back(std::move(n));
    }
    g.outputs = j.at("outputs").get<std::vector<int>>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("[graph] malformed graph JSON: {}", e.what()));
  }
  g.validate();
  return g;
}

}  // namespace reckon::graph
