#include "reckon/graph/capture.h"

#include <optional>
#include <unordered_map>

#include "reckon/ops/op_list.h"

namespace reckon::graph {

namespace {
// A tensor's identity as data: its storage and its view of it.
struct ViewKey {
  const Storage* storage;
  int64_t offset;
  Shape shape, strides;
  DType dtype;
  bool operator==(const ViewKey&) const = default;
};
struct ViewHash {
  size_t operator()(const ViewKey& k) const {
    size_t h = std::hash<const void*>()(k.storage) ^ (std::hash<int64_t>()(k.offset) << 1) ^ size_t(k.dtype) * 31;
    for (auto d : k.shape) h = h * 1000003u ^ std::hash<int64_t>()(d);
    for (auto d : k.strides) h = h * 998244353u ^ std::hash<int64_t>()(d);
    return h;
  }
};
ViewKey key_of(const Tensor& t) { return {&t.storage(), t.offset(), t.shape(), t.strides(), t.dtype()}; }

ValueKind kind_by_tag(const Tensor& t) {
  switch (t.storage().tag()) {
    case Tag::param: return t.requires_grad() ? ValueKind::parameter : ValueKind::buffer;
    case Tag::optimizer: return ValueKind::state;
    case Tag::input: return ValueKind::input;
    default: return ValueKind::external;
  }
}
}  // namespace

struct Capture::State {
  Graph g;
  struct Entry {
    std::weak_ptr<Storage> storage;  // holds no data: only tells a live storage from a reused address
    int value;
  };
  std::unordered_map<ViewKey, Entry, ViewHash> values;
  std::optional<ObserveOps> observer;
  bool* keep = nullptr;                      // the Capture's keep_leaves_
  std::unordered_map<int, Tensor>* kept = nullptr;

  std::optional<int> find(const Tensor& t) const {
    auto it = values.find(key_of(t));
    if (it == values.end()) return std::nullopt;
    auto live = it->second.storage.lock();
    if (!live || live.get() != &t.storage()) return std::nullopt;  // a storage freed since, its address reused
    return it->second.value;
  }
  void bind(const Tensor& t, int value) { values[key_of(t)] = Entry{t.storage_ptr(), value}; }

  int value_for_input(const Tensor& t) {
    if (auto v = find(t)) return *v;
    Value v;
    v.spec = t.spec();
    v.tag = t.storage().tag();
    v.kind = kind_by_tag(t);
    v.name = t.name();
    const int id = g.add_value(std::move(v));
    bind(t, id);
    if (*keep) kept->emplace(id, t.detach());
    return id;
  }

  void on_record(const OpRecord& r) {
    Node n;
    n.op = r.op_id;
    n.attrs = op_info(r.op_id).copy_attrs(r.attrs);
    for (const Tensor& t : r.inputs) n.inputs.push_back(t.defined() ? value_for_input(t) : -1);
    n.scope = r.scope;
    n.phase = r.phase;
    n.in_backward_node = r.backward;
    n.saved = r.saved;
    n.aliases = r.aliases;
    n.autocast = r.autocast;
    n.cost = r.cost;
    n.kernel = std::string(r.kernel);
    n.impl = r.impl;
    n.algo = r.algo;
    n.lane_use = r.lane_use;
    n.reorder_bytes = r.reorder_bytes;
    n.work_share = r.work_share;
    n.unread_bytes = r.unread_bytes;
    n.workspace_bytes = r.workspace_bytes;
    n.saved_bytes = r.saved_bytes;
    const int node_index = int(g.nodes.size());
    for (size_t k = 0; k < r.outputs.size(); ++k) {
      const Tensor& t = r.outputs[k];
      Value v;
      v.spec = t.spec();
      v.producer = node_index;
      v.slot = int(k);
      if ((r.aliases >> k) & 1u) {
        v.alias_of = value_for_input(t);  // the input it overwrote (seen above)
        v.tag = t.storage().tag();
      } else {
        v.tag = r.out_tag;
      }
      const int id = g.add_value(std::move(v));
      n.outputs.push_back(id);
      bind(t, id);
    }
    g.nodes.push_back(std::move(n));
  }
};

Capture::Capture() : s_(std::make_unique<State>()) {
  s_->keep = &keep_leaves_;
  s_->kept = &leaf_tensors_;
  s_->observer.emplace([s = s_.get()](const OpRecord& r) { s->on_record(r); });
}

Capture::~Capture() = default;

void Capture::declare(const Tensor& t, ValueKind k, std::string name) {
  RK_CHECK(t.defined(), "[capture] declare: an undefined tensor ('{}')", name);
  RK_CHECK(k != ValueKind::computed, "[capture] declare: '{}' must be a leaf kind", name);
  RK_CHECK(!s_->find(t), "[capture] declare: '{}' is already a value of the graph", name);
  Value v;
  v.spec = t.spec();
  v.tag = t.storage().tag();
  v.kind = k;
  v.name = std::move(name);
  const int id = s_->g.add_value(std::move(v));
  s_->bind(t, id);
  if (keep_leaves_) leaf_tensors_.emplace(id, t.detach());
}

void Capture::mark_output(const Tensor& t) {
  RK_CHECK(t.defined(), "[capture] mark_output: an undefined tensor");
  auto v = s_->find(t);
  RK_CHECK(v.has_value(), "[capture] mark_output: the graph never saw {}", t.str());
  s_->g.outputs.push_back(*v);
}

int Capture::value_of(const Tensor& t) const {
  auto v = s_->find(t);
  return v ? *v : -1;
}

const Graph& Capture::graph() const { return s_->g; }

Graph Capture::finish() {
  s_->observer.reset();
  Graph g = std::move(s_->g);
  s_->g = Graph{};
  g.validate();
  return g;
}

}  // namespace reckon::graph
