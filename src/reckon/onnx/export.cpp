#include "reckon/onnx/export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "reckon/nn/graph_module.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"

namespace reckon::onnx {

std::string ExportProblem::str() const {
  return fmt::format("layer {} ({}): {}", scope.empty() ? "(root)" : scope, op, reason);
}

namespace {

// Checks only: names are made up, nothing is kept.
class DrySink : public OnnxSink {
 public:
  std::vector<std::string> node(std::string_view, std::vector<std::string>, std::vector<OnnxAttr>, int n) override {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(fmt::format("v{}", k_++));
    return out;
  }
  std::string const_i64(const std::vector<int64_t>&) override { return fmt::format("c{}", k_++); }
  std::string const_f32(float) override { return fmt::format("c{}", k_++); }
  std::string const_f32s(const std::vector<float>&) override { return fmt::format("c{}", k_++); }
  std::string const_raw(int, const Shape&, const void*, size_t) override { return fmt::format("c{}", k_++); }

 private:
  int k_ = 0;
};

// Appends to a GraphProto. Constants are initializers named "reckon_const_<k>" (skipping names
// the graph already has); Identity nodes are elided (their output is their input), so an
// imported and re-exported graph has the same nodes.
class ProtoSink : public OnnxSink {
 public:
  ProtoSink(::onnx::GraphProto& g, std::set<std::string>& taken) : g_(g), taken_(taken) {}
  std::string scope;  // the current reckon node's module path, for node names

  std::vector<std::string> node(std::string_view type, std::vector<std::string> inputs, std::vector<OnnxAttr> attrs,
                                int n) override {
    if (type == "Identity" && n == 1 && inputs.size() == 1) return {inputs[0]};
    auto* p = g_.add_node();
    p->set_op_type(std::string(type));
    p->set_name(fmt::format("/{}/{}_{}", scope, type, g_.node_size() - 1));
    for (auto& i : inputs) p->add_input(i);
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(fresh(fmt::format("/{}/{}_{}_output_{}", scope, type, g_.node_size() - 1, i)));
      p->add_output(out.back());
    }
    for (auto& a : attrs) {
      auto* pa = p->add_attribute();
      pa->set_name(a.name);
      using AP = ::onnx::AttributeProto;
      std::visit(
          [&](const auto& v) {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, int64_t>) {
              pa->set_type(AP::INT);
              pa->set_i(v);
            } else if constexpr (std::is_same_v<V, double>) {
              pa->set_type(AP::FLOAT);
              pa->set_f(float(v));
            } else if constexpr (std::is_same_v<V, std::string>) {
              pa->set_type(AP::STRING);
              pa->set_s(v);
            } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
              pa->set_type(AP::INTS);
              for (int64_t x : v) pa->add_ints(x);
            } else {
              pa->set_type(AP::FLOATS);
              for (double x : v) pa->add_floats(float(x));
            }
          },
          a.value);
    }
    return out;
  }
  std::string const_i64(const std::vector<int64_t>& v) override {
    auto* t = init(7, {int64_t(v.size())});
    t->set_raw_data(v.data(), v.size() * 8);
    return t->name();
  }
  std::string const_f32(float v) override {
    auto* t = init(1, {});
    t->set_raw_data(&v, 4);
    return t->name();
  }
  std::string const_f32s(const std::vector<float>& v) override {
    auto* t = init(1, {int64_t(v.size())});
    t->set_raw_data(v.data(), v.size() * 4);
    return t->name();
  }
  std::string const_raw(int type, const Shape& dims, const void* data, size_t bytes) override {
    auto* t = init(type, dims);
    t->set_raw_data(data, bytes);
    return t->name();
  }
  std::string fresh(std::string base) {
    std::string n = base;
    for (int k = 1; taken_.count(n); ++k) n = fmt::format("{}_{}", base, k);
    taken_.insert(n);
    return n;
  }

 private:
  ::onnx::TensorProto* init(int type, const Shape& dims) {
    auto* t = g_.add_initializer();
    std::string n;
    do n = fmt::format("reckon_const_{}", k_++);
    while (taken_.count(n));
    taken_.insert(n);
    t->set_name(n);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  ::onnx::GraphProto& g_;
  std::set<std::string>& taken_;
  int k_ = 0;
};

void set_type(::onnx::ValueInfoProto* v, const std::string& name, const TensorSpec& s, bool dynamic_batch) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx_dtype(s.dtype));
  auto* sh = tt->mutable_shape();
  for (size_t i = 0; i < s.shape.size(); ++i) {
    auto* d = sh->add_dim();
    if (i == 0 && dynamic_batch)
      d->set_dim_param("batch");
    else
      d->set_dim_value(s.shape[i]);
  }
}

// Lowers node n of g through `sink`, with `names` the ONNX names of the values so far.
std::vector<std::string> lower(const graph::Graph& g, const graph::Node& n, OnnxSink& sink,
                               const std::vector<std::string>& names) {
  const OpInfo& info = op_info(n.op);
  if (!info.to_onnx) throw OnnxUnsupported(fmt::format("[{}] is not exportable: {}", info.name, info.not_exportable));
  OnnxArgs a{sink, {}, {}, {}};
  for (int id : n.inputs) {
    a.in.push_back(id < 0 ? std::string() : names[size_t(id)]);
    a.in_specs.push_back(id < 0 ? TensorSpec{} : g.value(id).spec);
  }
  for (int id : n.outputs) a.out_specs.push_back(g.value(id).spec);
  for (const TensorSpec& s : a.in_specs)
    // (8-bit and i32 tensors are an int8 program's, in the QDQ format; bf16 and f16 are autocast's)
    if (!s.shape.empty() && (s.dtype == DType::bf16 || s.dtype == DType::f16))
      throw OnnxUnsupported(fmt::format("[{}] on {} (export writes float32 graphs: export without --precision)",
                                        info.name, dtype_name(s.dtype)));
  std::vector<std::string> out = info.to_onnx(a, n.attrs.get());
  RK_CHECK(out.size() == n.outputs.size(), "[onnx] export: {}'s mapping gave {} outputs for {}", info.name,
           out.size(), n.outputs.size());
  return out;
}

void check_opset(const ExportOptions& o) {
  RK_CHECK(o.opset >= 13 && o.opset <= 17, "[export] --opset {} is not supported: reckon writes opsets 13 to 17",
           o.opset);
}

}  // namespace

std::vector<ExportProblem> preflight(const graph::Graph& g, const ExportOptions& o) {
  check_opset(o);
  std::vector<ExportProblem> problems;
  DrySink sink;
  sink.opset = o.opset;
  sink.dynamic_batch = o.dynamic_batch;
  std::vector<std::string> names(g.values.size(), "x");
  int inputs = 0;
  for (const graph::Value& v : g.values)
    if (v.kind == graph::ValueKind::input) ++inputs;
    else if (v.is_leaf() && v.kind != graph::ValueKind::parameter && v.kind != graph::ValueKind::buffer)
      problems.push_back({-1, "", "(leaf)", fmt::format("the graph reads {} '{}', which is no input, parameter or "
                                                        "buffer", graph::value_kind_name(v.kind), v.name)});
  if (inputs != 1) problems.push_back({-1, "", "(graph)", fmt::format("the graph has {} inputs (export takes one)", inputs)});
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    try {
      lower(g, n, sink, names);
    } catch (const Error& e) {
      problems.push_back({int(i), n.scope, std::string(n.op_name()), e.what()});
    }
  }
  return problems;
}

std::string export_graph(const graph::Graph& g, const std::function<Tensor(const graph::Value&)>& data,
                         const ExportOptions& o) {
  const auto problems = preflight(g, o);
  if (!problems.empty()) {
    std::string msg = fmt::format("[export] {} of {} nodes do not lower to ONNX opset {}:", problems.size(),
                                  g.nodes.size(), o.opset);
    for (const auto& p : problems) msg += "\n  " + p.str();
    throw Error(msg);
  }
  ::onnx::ModelProto m;
  m.set_ir_version(8);  // what opsets 13..17 need at most (ONNX 1.12 reads up to 8)
  m.set_producer_name("reckon");
  m.set_producer_version("0.1");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(o.opset);
  auto* gp = m.mutable_graph();
  gp->set_name("reckon");

  std::set<std::string> taken{"input", "output"};
  for (const graph::Value& v : g.values)
    if (v.is_leaf()) taken.insert(v.name);
  std::vector<std::string> names(g.values.size());
  // Which leaves a node reads (only those become initializers).
  std::vector<bool> read(g.values.size(), false);
  for (const graph::Node& n : g.nodes)
    for (int id : n.inputs)
      if (id >= 0) read[size_t(id)] = true;
  for (int id : g.outputs) read[size_t(id)] = true;
  for (const graph::Value& v : g.values) {
    if (v.kind == graph::ValueKind::input) {
      names[size_t(v.id)] = "input";
      set_type(gp->add_input(), "input", v.spec, o.dynamic_batch);
    } else if (v.is_leaf() && read[size_t(v.id)]) {
      names[size_t(v.id)] = v.name;
      Tensor t = contiguous(data(v));
      RK_CHECK(t.defined() && t.shape() == v.spec.shape && t.dtype() == v.spec.dtype && !t.is_meta(),
               "[export] no data for '{}' ({} {})", v.name, shape_str(v.spec.shape), dtype_name(v.spec.dtype));
      auto* tp = gp->add_initializer();
      tp->set_name(v.name);
      tp->set_data_type(onnx_dtype(v.spec.dtype));
      for (int64_t d : v.spec.shape) tp->add_dims(d);
      tp->set_raw_data(t.raw_data(), size_t(t.nbytes()));
    }
  }
  ProtoSink sink(*gp, taken);
  sink.opset = o.opset;
  sink.dynamic_batch = o.dynamic_batch;
  for (const graph::Node& n : g.nodes) {
    sink.scope = n.scope;
    std::vector<std::string> out = lower(g, n, sink, names);
    for (size_t i = 0; i < out.size(); ++i) names[size_t(n.outputs[i])] = out[i];
  }
  RK_CHECK(g.outputs.size() == 1, "[export] the graph has {} outputs (export writes one)", g.outputs.size());
  const int out_id = g.outputs[0];
  const std::string produced = names[size_t(out_id)];
  RK_CHECK(!produced.empty(), "[export] the graph's output was not lowered");
  bool renamed = false;
  for (auto& node : *gp->mutable_node())
    for (auto& s : *node.mutable_output())
      if (s == produced) s = "output", renamed = true;
  if (renamed) {
    for (auto& node : *gp->mutable_node())
      for (auto& s : *node.mutable_input())
        if (s == produced) s = "output";
  } else {  // the output is a leaf or the input itself
    auto* id = gp->add_node();
    id->set_op_type("Identity");
    id->add_input(produced);
    id->add_output("output");
  }
  set_type(gp->add_output(), "output", g.value(out_id).spec, o.dynamic_batch);

  try {
    ::onnx::checker::check_model(m);
    ::onnx::ModelProto inferred = m;
    ::onnx::shape_inference::InferShapes(inferred, ::onnx::OpSchemaRegistry::Instance(),
                                         ::onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    throw Error(fmt::format("[export] the ONNX checker rejects the model: {}", e.what()));
  }
  std::string bytes;
  RK_CHECK(m.SerializeToString(&bytes), "[export] the model could not be serialized (over protobuf's 2 GiB?)");
  return bytes;
}

std::string export_module(nn::Module& m, const Shape& input, const ExportOptions& o) {
  RK_CHECK(input.size() == 4 && shape_numel(input) > 0, "[export] the input must be (N, C, H, W), got {}",
           shape_str(input));
  const bool was_training = m.is_training();
  m.eval();
  graph::Graph g;
  try {
    Tensor x;
    {
      TagGuard tag(Tag::input);
      x = Tensor::zeros(input, DType::f32, m.device());
    }
    g = nn::capture_forward(m, x);
  } catch (...) {
    m.train(was_training);
    throw;
  }
  m.train(was_training);
  const nn::StateDict sd = m.state_dict();
  return export_graph(g, [&](const graph::Value& v) -> Tensor {
    const Tensor* t = sd.find(v.name);
    return t ? *t : Tensor();
  }, o);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path tmp = p.parent_path() / fmt::format(".{}.tmp{}", p.filename().string(), int(::getpid()));
  {
    // Errors name the file asked for (the temporary beside it is the writer's business).
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    RK_CHECK(f.good(), "[export] cannot write {}: {}", path, std::strerror(errno));
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.flush();
    if (!f.good()) {
      const int err = errno;
      f.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error(fmt::format("[export] writing {} failed: {}", path, std::strerror(err)));
    }
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(fmt::format("[export] cannot move the model into place at {}: {}", path, ec.message()));
  }
}

}  // namespace reckon::onnx
