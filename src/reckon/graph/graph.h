// The graph IR: every op call as data. A Graph is the program a run executed, in the order it
// ran (so topologically ordered): Values (tensors, by spec) and Nodes (op calls, by op id, with
// their attributes as data, their input and output values, module scope and phase, what they
// saved, their cost and the kernel they chose). The dispatcher's record of a call (OpRecord) is
// what a Capture (capture.h) turns into a Node; the interpreter (interpreter.h) runs a graph again;
// the ledger, ONNX export and the inference engine read it.
// Not here: control flow (a captured graph is the branch that ran), or tensors' data (a graph
// captured on the meta device has none; values name the leaves a run binds).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/ops/op.h"

namespace reckon::graph {

// Where a value comes from: a leaf the run is given (input, parameter, buffer, optimizer state,
// or external: a tensor made outside any op), or the output of a node.
enum class ValueKind : uint8_t { input, parameter, buffer, state, external, computed };
std::string_view value_kind_name(ValueKind k);

struct Value {
  int id = -1;
  TensorSpec spec;
  ValueKind kind = ValueKind::computed;
  std::string name;       // leaves: "x", "features.0.weight", "optimizer.state.3.exp_avg"
  int producer = -1;      // computed: the node that wrote it, and which of its outputs
  int slot = 0;
  int alias_of = -1;      // written in place: the value whose storage this one overwrote
  Tag tag = Tag::temporary;  // the memory tag it was allocated under (a leaf: its storage's)
  bool is_leaf() const { return kind != ValueKind::computed; }
};

struct Node {
  int op = -1;                    // op id (ops/op_list.h)
  std::shared_ptr<void> attrs;    // the op's Attrs (op_info(op).copy_attrs)
  std::vector<int> inputs;        // value ids; -1 for an undefined (optional) input
  std::vector<int> outputs;       // value ids
  std::string scope;              // module path ("layer1.0.conv1"), "" at the root
  Phase phase = Phase::forward;
  bool in_backward_node = false;  // ran inside an autograd node's backward (OpRecord::backward)
  SavedSet saved;                 // what its autograd node kept (none without a node)
  uint32_t aliases = 0;           // bit i: output i is an input written in place
  DType autocast = DType::f32;    // the autocast dtype applied to the call (f32: none)
  Cost cost;
  std::string kernel;             // the kernel that ran or planned ("cpu", "plan", "none", ...)
  std::string impl;               // the implementation it chose, if it said
  KernelAlgo algo = KernelAlgo::none;
  double lane_use = 1.0;          // the share of the vector lanes its kernel filled (KernelCtx::lane_use)
  int64_t reorder_bytes = 0;      // bytes its kernel's layout conversions moved (KernelCtx::reorder_bytes)
  double work_share = 1.0;        // the share of its MACs its kernel computed (KernelCtx::work_share)
  int64_t unread_bytes = 0;       // counted bytes its kernel never read (KernelCtx::unread_bytes)
  int64_t workspace_bytes = 0;
  int64_t saved_bytes = 0;        // bytes newly kept for backward by its node
  std::string_view op_name() const;
};

class Graph {
 public:
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> outputs;  // the values a run returns (a forward's result, a step's loss)

  // Appends a value and returns its id.
  int add_value(Value v);
  const Value& value(int id) const;  // throws naming the id when out of range
  // The leaf values (in id order) and the id of the leaf named `name` (-1 if none).
  std::vector<int> leaves() const;
  int find_leaf(const std::string& name) const;
  // Checks the graph is well formed: every node's op exists, inputs come before use (leaves or
  // earlier nodes' outputs), producers match. Throws naming the first bad node or value.
  void validate() const;

  // One line per node ("%7 = conv2d(%x, %features.0.weight, -) {..} -> [8, 6, 28, 28] f32
  // @features.0 forward"), after a header of leaves; and the same as JSON, which from_json reads
  // back (to_json(from_json(j)) == j).
  std::string str() const;
  std::string to_json() const;
  static Graph from_json(const std::string& json);
};

// "%12" for a computed value, "%features.0.weight" for a named leaf.
std::string value_ref(const Graph& g, int id);

}  // namespace reckon::graph
