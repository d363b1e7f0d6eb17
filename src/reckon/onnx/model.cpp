#include "reckon/onnx/model.h"

#include "reckon/core/file.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "reckon/core/error.h"

namespace reckon::onnx {

namespace fs = std::filesystem;

std::optional<DType> dtype_of_onnx(int t) {
  switch (t) {
    case 1: return DType::f32;
    case 2: return DType::u8;
    case 3: return DType::i8;
    case 6: return DType::i32;
    case 7: return DType::i64;
    case 9: return DType::u8;  // bool, stored as bytes 0 and 1
    case 10: return DType::f16;
    case 11: return DType::f64;
    case 16: return DType::bf16;
    default: return std::nullopt;
  }
}

std::string Node::where() const {
  return name.empty() ? fmt::format("node #{} ({})", index, op_type) : fmt::format("node '{}' ({})", name, op_type);
}
const Attr* Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : &it->second;
}
int64_t Node::get_i(const std::string& n, int64_t def) const {
  const Attr* a = attr(n);
  return a ? a->i : def;
}
double Node::get_f(const std::string& n, double def) const {
  const Attr* a = attr(n);
  return a ? a->f : def;
}
std::string Node::get_s(const std::string& n, const std::string& def) const {
  const Attr* a = attr(n);
  return a ? a->s : def;
}
std::vector<int64_t> Node::get_ints(const std::string& n, std::vector<int64_t> def) const {
  const Attr* a = attr(n);
  if (!a) return def;
  // A window's sizes meet in sums and products ((k - 1) * d, (o - 1) * s, ...): bounded here,
  // once, so none of that arithmetic can wrap int64 whatever a file says.
  static const std::set<std::string> kWindow = {"kernel_shape", "strides", "dilations", "pads", "output_padding",
                                                "output_shape"};
  constexpr int64_t kMaxWindow = std::numeric_limits<int32_t>::max();
  if (kWindow.count(n))
    for (int64_t v : a->ints)
      RK_CHECK(v >= -kMaxWindow && v <= kMaxWindow, "{}: attribute '{}' holds {}, out of range (at most 2^31 - 1 in "
               "magnitude)", where(), n, v);
  return a->ints;
}
const Tensor* Model::initializer(const std::string& name) const {
  for (const auto& [n, t] : initializers)
    if (n == name) return &t;
  return nullptr;
}

namespace {

constexpr int64_t kMaxFileBytes = int64_t(std::numeric_limits<int32_t>::max());  // protobuf's limit
constexpr int64_t kMaxTensorBytes = int64_t(16) << 30;

std::string read_file(const std::string& path, int64_t limit, const std::string& what) {
  RegularFile f(path, "onnx");  // a FIFO or a directory is refused before anything blocks
  RK_CHECK(int64_t(f.size()) <= limit, "[onnx] {}: {} is {} bytes, over the {} bytes protobuf can parse (2 GiB); large "
           "models keep their weights as external data", path, what, f.size(), limit);
  return f.read_all();
}

Shape checked_dims(const google::protobuf::RepeatedField<int64_t>& d, const std::string& where) {
  Shape s(d.begin(), d.end());
  int64_t n = 1;
  for (int64_t x : s) {
    RK_CHECK(x >= 0, "[onnx] {}: negative dim {} in {}", where, x, fmt::join(s, "x"));
    RK_CHECK(x == 0 || n <= std::numeric_limits<int64_t>::max() / x, "[onnx] {}: dims {} overflow int64", where,
             fmt::join(s, "x"));
    n *= x;
  }
  return s;
}

// The bytes of an external-data tensor, from a file inside `dir`.
std::string external_bytes(const ::onnx::TensorProto& t, const std::string& where, const std::string& dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = std::stoll(kv.value());
    else if (kv.key() == "length") length = std::stoll(kv.value());
  }
  RK_CHECK(!dir.empty(), "[onnx] {}: external data, but the model was not read from a file", where);
  RK_CHECK(!location.empty(), "[onnx] {}: external data without a location", where);
  const fs::path loc(location);
  RK_CHECK(!loc.is_absolute(), "[onnx] {}: external data location '{}' is absolute (it must be relative to "
           "the model's directory)", where, location);
  for (const auto& part : loc)
    RK_CHECK(part != "..", "[onnx] {}: external data location '{}' leaves the model's directory", where, location);
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(dir), ec);
  const fs::path file = fs::weakly_canonical(base / loc, ec);
  const std::string b = base.string(), f = file.string();
  RK_CHECK(!ec && f.size() > b.size() && f.compare(0, b.size(), b) == 0 && (f[b.size()] == '/'),
           "[onnx] {}: external data location '{}' resolves outside the model's directory (through a link?)", where,
           location);
  RK_CHECK(offset >= 0, "[onnx] {}: external data offset {} is negative", where, offset);
  const std::string bytes = read_file(f, kMaxTensorBytes, "external data");
  const int64_t size = int64_t(bytes.size());
  if (length < 0) length = size - offset;
  RK_CHECK(offset <= size && length <= size - offset, "[onnx] {}: external data [{}, +{}) runs past the end of "
           "'{}' ({} bytes)", where, offset, length, location, size);
  return bytes.substr(size_t(offset), size_t(length));
}

Tensor tensor_from_proto(const ::onnx::TensorProto& t, const std::string& where, const std::string& dir) {
  const auto dt = dtype_of_onnx(t.data_type());
  RK_CHECK(dt.has_value(), "[onnx] {}: tensor element type {} is not supported (reckon has float32/64, "
           "float16, bfloat16, int8/32/64, uint8 and bool)", where, t.data_type());
  const Shape shape = checked_dims(t.dims(), where);
  int64_t n = shape_numel(shape);
  RK_CHECK(n <= kMaxTensorBytes / int64_t(dtype_size(*dt)), "[onnx] {}: {} elements is over reckon's 16 GiB "
           "limit for one tensor", where, n);
  Tensor out = Tensor::empty(shape, *dt, Device::cpu);
  const size_t bytes = size_t(n) * dtype_size(*dt);
  auto fill = [&](const void* src, size_t have) {
    RK_CHECK(have == bytes, "[onnx] {}: {} bytes of data for dims [{}] of {} ({} needed)", where, have,
             fmt::join(shape, ", "), dtype_name(*dt), bytes);
    if (bytes) std::memcpy(out.raw_data(), src, bytes);
  };
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
    const std::string b = external_bytes(t, where, dir);
    fill(b.data(), b.size());
  } else if (t.has_raw_data()) {
    fill(t.raw_data().data(), t.raw_data().size());
  } else {
    auto need = [&](int64_t have) {
      RK_CHECK(have == n, "[onnx] {}: {} values for dims [{}] ({} needed)", where, have, fmt::join(shape, ", "), n);
    };
    switch (*dt) {
      case DType::f32: need(t.float_data_size()); fill(t.float_data().data(), size_t(n) * 4); break;
      case DType::f64: need(t.double_data_size()); fill(t.double_data().data(), size_t(n) * 8); break;
      case DType::i64: need(t.int64_data_size()); fill(t.int64_data().data(), size_t(n) * 8); break;
      case DType::i32: need(t.int32_data_size()); fill(t.int32_data().data(), size_t(n) * 4); break;
      default: {  // int8, uint8, bool, float16, bfloat16: one value per int32_data entry
        need(t.int32_data_size());
        for (int64_t i = 0; i < n; ++i) {
          const int32_t v = t.int32_data(int(i));
          if (*dt == DType::f16 || *dt == DType::bf16) {
            const uint16_t bits = uint16_t(v);
            std::memcpy(static_cast<char*>(out.raw_data()) + 2 * i, &bits, 2);
          } else {
            const uint8_t byte = uint8_t(v);
            std::memcpy(static_cast<char*>(out.raw_data()) + i, &byte, 1);
          }
        }
      }
    }
  }
  return out;
}

ValueInfo value_info_of(const ::onnx::ValueInfoProto& v) {
  ValueInfo vi;
  vi.name = v.name();
  if (!v.type().has_tensor_type()) {
    vi.is_tensor = false;
    return vi;
  }
  const auto& tt = v.type().tensor_type();
  vi.elem_type = tt.elem_type();
  vi.dtype = dtype_of_onnx(tt.elem_type());
  if (tt.has_shape()) {
    vi.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      int64_t x = d.has_dim_value() ? d.dim_value() : -1;
      RK_CHECK(!d.has_dim_value() || x >= 0, "[onnx] value '{}': negative dim {}", v.name(), x);
      vi.dims.push_back(x);
    }
  }
  return vi;
}

}  // namespace

Model parse(const std::string& bytes, const std::string& name, const std::string& dir) {
  ::onnx::ModelProto p;
  RK_CHECK(p.ParseFromString(bytes), "[onnx] {}: not a valid ONNX model (protobuf could not parse its {} bytes: "
           "truncated, or not a ModelProto)", name, bytes.size());
  RK_CHECK(p.has_graph(), "[onnx] {}: the model has no graph", name);
  Model m;
  m.path = name;
  m.ir_version = p.ir_version();
  m.producer = p.producer_name();
  m.opset = -1;
  for (const auto& o : p.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") m.opset = o.version();
  RK_CHECK(m.opset >= 0, "[onnx] {}: no opset for ONNX's default domain", name);
  RK_CHECK(m.opset >= 1 && m.opset <= 17, "[onnx] {}: opset {} is not supported (reckon reads opsets 1 to 17)",
           name, m.opset);
  const auto& g = p.graph();
  std::set<std::string> defined;
  std::map<std::string, int> producer;  // value -> node index, for every node output
  for (int i = 0; i < g.initializer_size(); ++i) {
    const auto& t = g.initializer(i);
    const std::string where = fmt::format("{}: initializer '{}'", name, t.name());
    RK_CHECK(!t.name().empty(), "[onnx] {}: initializer #{} has no name", name, i);
    RK_CHECK(defined.insert(t.name()).second, "[onnx] {}: two initializers named '{}'", name, t.name());
    m.initializers.emplace_back(t.name(), tensor_from_proto(t, where, dir));
  }
  RK_CHECK(g.sparse_initializer_size() == 0, "[onnx] {}: sparse initializers are not supported", name);
  for (const auto& in : g.input()) {
    if (defined.count(in.name())) continue;  // an initializer listed as an input too (older exporters)
    m.inputs.push_back(value_info_of(in));
    defined.insert(in.name());
  }
  for (const auto& v : g.value_info()) m.value_info[v.name()] = value_info_of(v);
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output())
      if (!o.empty()) {
        auto [it, fresh] = producer.emplace(o, i);
        RK_CHECK(fresh && !defined.count(o), "[onnx] {}: value '{}' is written twice (by node #{} and #{}, or as an "
                 "input or initializer)", name, o, fresh ? -1 : it->second, i);
      }
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& np = g.node(i);
    Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.index = i;
    RK_CHECK(np.domain().empty() || np.domain() == "ai.onnx", "[onnx] {}: {}: domain '{}' is not supported (reckon "
             "reads ONNX's default domain)", name, n.where(), np.domain());
    for (const auto& in : np.input()) {
      if (!in.empty() && !defined.count(in)) {
        auto it = producer.find(in);
        RK_CHECK(it == producer.end(), "[onnx] {}: {} reads '{}', which node #{} writes later: the graph has a cycle "
                 "or is not in topological order", name, n.where(), in, it == producer.end() ? -1 : it->second);
        throw Error(fmt::format("[onnx] {}: {} reads '{}', which is no input, initializer or node output (a dangling "
                                "input)", name, n.where(), in));
      }
      n.inputs.push_back(in);
    }
    for (const auto& o : np.output()) {
      n.outputs.push_back(o);
      if (!o.empty()) defined.insert(o);
    }
    for (const auto& a : np.attribute()) {
      Attr at;
      using AP = ::onnx::AttributeProto;
      switch (a.type()) {
        case AP::INT: at.kind = Attr::Kind::i; at.i = a.i(); break;
        case AP::FLOAT: at.kind = Attr::Kind::f; at.f = a.f(); break;
        case AP::STRING: at.kind = Attr::Kind::s; at.s = a.s(); break;
        case AP::INTS: at.kind = Attr::Kind::ints; at.ints.assign(a.ints().begin(), a.ints().end()); break;
        case AP::FLOATS: at.kind = Attr::Kind::floats; at.floats.assign(a.floats().begin(), a.floats().end()); break;
        case AP::TENSOR:
          at.kind = Attr::Kind::tensor;
          at.t = tensor_from_proto(a.t(), fmt::format("{}: {} attribute '{}'", name, n.where(), a.name()), dir);
          break;
        default: at.kind = Attr::Kind::other;
      }
      n.attrs[a.name()] = std::move(at);
    }
    m.nodes.push_back(std::move(n));
  }
  for (const auto& o : g.output()) {
    RK_CHECK(defined.count(o.name()), "[onnx] {}: graph output '{}' is never written", name, o.name());
    m.outputs.push_back(value_info_of(o));
  }
  RK_CHECK(!m.outputs.empty(), "[onnx] {}: the graph has no output", name);
  return m;
}

Model load(const std::string& path) {
  const std::string bytes = read_file(path, kMaxFileBytes, "the model");
  return parse(bytes, path, fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
}

Tensor load_tensor_file(const std::string& path) {
  const std::string bytes = read_file(path, kMaxFileBytes, "the tensor");
  ::onnx::TensorProto t;
  RK_CHECK(t.ParseFromString(bytes), "[onnx] {}: not a TensorProto", path);
  return tensor_from_proto(t, path, fs::path(path).parent_path().string());
}

}  // namespace reckon::onnx
