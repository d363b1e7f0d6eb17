// An ONNX file, read and checked: the graph's nodes, inputs, outputs and initializers, with no
// protobuf in view. load() refuses, with one line naming the file and the node or field, what
// would make the importer crash or read out of bounds: a file that is not a ModelProto (or is
// truncated), one over protobuf's 2 GiB, an opset outside 7..17 or an operator domain other than
// ONNX's own, a node that reads a value no one wrote (dangling) or that a later node writes (a
// cycle, or nodes out of topological order), two writers of one name, dims that are negative or
// whose product overflows, tensor data shorter than its dims, and external data whose location
// is absolute or leaves the model's directory (the path traversal the ONNX library itself has
// had CVEs for), or whose offset and length run past the data file.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon::onnx {

struct Attr {
  enum class Kind { i, f, s, ints, floats, tensor, other } kind = Kind::other;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  Tensor t;  // a tensor attribute (Constant's value), on the cpu
};

struct Node {
  std::string name, op_type;
  std::vector<std::string> inputs;   // "" for an omitted optional input
  std::vector<std::string> outputs;  // "" for an omitted optional output
  std::map<std::string, Attr> attrs;
  int index = 0;  // its position in the file
  // "node 'conv1' (Conv)" or "node #3 (Conv)" when it has no name: how errors name it.
  std::string where() const;
  const Attr* attr(const std::string& n) const;
  int64_t get_i(const std::string& n, int64_t def) const;
  double get_f(const std::string& n, double def) const;
  std::string get_s(const std::string& n, const std::string& def) const;
  std::vector<int64_t> get_ints(const std::string& n, std::vector<int64_t> def = {}) const;
};

// A graph input or output: its element type (if a tensor) and dims (-1 for a symbolic one).
struct ValueInfo {
  std::string name;
  std::optional<DType> dtype;   // empty for a type reckon has no dtype for (or a non-tensor)
  int elem_type = 0;            // ONNX's TensorProto.DataType
  bool is_tensor = true;        // false: a sequence, map or optional
  std::vector<int64_t> dims;    // -1: symbolic or unknown
  bool has_shape = false;
};

struct Model {
  std::string path;
  int64_t ir_version = 0;
  int64_t opset = 0;            // the default domain's
  std::string producer;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;   // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::map<std::string, ValueInfo> value_info;
  std::vector<std::pair<std::string, Tensor>> initializers;  // in file order, on the cpu
  const Tensor* initializer(const std::string& name) const;  // null when none has the name
};

// Reads `path` (throws reckon::Error naming the file and what is wrong).
Model load(const std::string& path);
// The same for bytes already in memory; `name` is what errors call them, `dir` where external
// data would be looked for ("" refuses external data).
Model parse(const std::string& bytes, const std::string& name, const std::string& dir);

// A TensorProto file (ONNX's node tests keep their inputs and outputs so) as a cpu tensor.
Tensor load_tensor_file(const std::string& path);

// reckon's dtype of an ONNX element type, if it has one.
std::optional<DType> dtype_of_onnx(int elem_type);

}  // namespace reckon::onnx
