#include "reckon/engine/passes.h"

#include <fmt/format.h>

#include <cmath>

#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"

namespace reckon::engine {

namespace {
using graph::Graph;
using graph::Node;

int producer(const Graph& g, int v) { return v < 0 ? -1 : g.values[size_t(v)].producer; }
bool is_graph_output(const Graph& g, int v) {
  for (int o : g.outputs)
    if (o == v) return true;
  return false;
}

// A unary elementwise node as post-op steps (empty when it is not one).
std::vector<PostOp> as_post_ops(const Node& n) {
  auto unary = [&](const char* kind) {
    const auto& a = attrs_of<UnaryAttrs>(n);
    return std::vector<PostOp>{{kind, a.alpha, a.beta}};
  };
  if (n.op == op_id<Relu>) return {{"relu", 0, 0}};
  if (n.op == op_id<LeakyRelu>) return {{"relu", attrs_of<UnaryAttrs>(n).alpha, 0}};
  if (n.op == op_id<Relu6>) return {{"clamp", 0, 6}};
  if (n.op == op_id<Clamp>) return unary("clamp");
  if (n.op == op_id<Sigmoid>) return {{"sigmoid"}};
  if (n.op == op_id<Tanh>) return {{"tanh"}};
  if (n.op == op_id<Gelu>) return {{"gelu"}};
  if (n.op == op_id<Silu>) return {{"silu"}};
  if (n.op == op_id<Exp>) return {{"exp"}};
  if (n.op == op_id<Log>) return {{"log"}};
  if (n.op == op_id<Square>) return {{"square"}};
  if (n.op == op_id<Affine>) {
    const auto& a = attrs_of<Affine::Attrs>(n);
    return {{"affine", a.alpha, a.beta}};
  }
  if (n.op == op_id<FusedElementwise>) return attrs_of<PostOpsAttrs>(n).post;
  return {};
}
bool is_f32_value(const Graph& g, int v) { return v >= 0 && g.values[size_t(v)].spec.dtype == DType::f32; }

// n becomes elementwise_fused(x) with `post`.
void to_elementwise(Graph& g, Node& n, int x, std::vector<PostOp> post) {
  n.op = op_id<FusedElementwise>;
  n.attrs = make_attrs(PostOpsAttrs{std::move(post)});
  n.inputs = {x};
  refresh_node(g, n);
}

int64_t node_bytes(const Graph& g) {
  int64_t b = 0;
  for (const auto& n : g.nodes) b += n.cost.bytes_read + n.cost.bytes_written;
  return b;
}
int64_t node_flops(const Graph& g) {
  int64_t f = 0;
  for (const auto& n : g.nodes) f += 2 * n.cost.macs + n.cost.flops;
  return f;
}
}  // namespace

int fold_constants(Program& p) {
  Graph& g = p.graph;
  std::vector<bool> dead(g.nodes.size(), false);
  int n_folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    const OpInfo& info = op_info(n.op);
    if (info.random || n.aliases != 0 || n.inputs.empty()) continue;
    if (n.op == op_id<DequantizeLinear>) continue;  // a quantized weight or bias: fuse_qdq takes it as it is
    bool all_const = true;
    for (int v : n.inputs)
      if (v >= 0 && !p.is_constant(v)) all_const = false;
    if (!all_const) continue;
    std::vector<Tensor> in;
    for (int v : n.inputs) in.push_back(v < 0 ? Tensor() : p.constants.at(v));
    std::vector<Tensor> out;
    {
      NoGrad no_grad;
      TagGuard tag(Tag::param);
      out = info.call(in, n.attrs.get());
    }
    for (size_t k = 0; k < out.size(); ++k) {
      Tensor t = out[k].is_contiguous() ? out[k] : Tensor();
      if (!t.defined()) {  // a strided view of a constant: keep a dense copy
        NoGrad no_grad;
        TagGuard tag(Tag::param);
        t = op_info(op_id<Contiguous>).call({out[k]}, op_info(op_id<Contiguous>).copy_attrs(nullptr).get())[0];
      }
      const int c = add_constant(p, t.detach(), fmt::format("{}.{}(folded)", n.scope, n.op_name()));
      replace_uses(g, n.outputs[k], c);
    }
    dead[i] = true;
    ++n_folded;
  }
  if (n_folded) compact(p, dead);
  return n_folded;
}

int remove_identities(Program& p) {
  Graph& g = p.graph;
  const auto uses = use_counts(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int removed = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.inputs.empty() || n.inputs[0] < 0 || n.aliases != 0) continue;
    const auto& in = g.values[size_t(n.inputs[0])].spec;
    const auto& out = g.values[size_t(n.outputs[0])].spec;
    bool identity = false;
    if (n.op == op_id<Dropout>)
      identity = !attrs_of<DropoutAttrs>(n).training && (n.outputs.size() < 2 || uses[size_t(n.outputs[1])] == 0);
    else if (n.op == op_id<Cast>)
      identity = attrs_of<Cast::Attrs>(n).dtype == in.dtype;
    else if (n.op == op_id<Reshape>)
      identity = out.shape == in.shape;
    else if (n.op == op_id<Affine>)
      identity = attrs_of<Affine::Attrs>(n).alpha == 1.0 && attrs_of<Affine::Attrs>(n).beta == 0.0;
    if (!identity || in.dtype != out.dtype || in.shape != out.shape) continue;
    replace_uses(g, n.outputs[0], n.inputs[0]);
    dead[i] = true;
    ++removed;
  }
  if (removed) compact(p, dead);
  return removed;
}

int fold_batch_norm(Program& p) {
  Graph& g = p.graph;
  const auto uses = use_counts(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bn = g.nodes[i];
    if (bn.op != op_id<BatchNorm2d> || attrs_of<BatchNormAttrs>(bn).training) continue;
    const int x = bn.inputs[0];
    const int pi = producer(g, x);
    if (pi < 0 || dead[size_t(pi)] || uses[size_t(x)] != 1) continue;
    Node& layer = g.nodes[size_t(pi)];
    if (layer.op != op_id<Conv2d> && layer.op != op_id<Linear>) continue;
    const int w = layer.inputs[1], b = layer.inputs.size() > 2 ? layer.inputs[2] : -1;
    if (!p.is_constant(w) || (b >= 0 && !p.is_constant(b))) continue;
    auto in_or_none = [&](size_t k) { return k < bn.inputs.size() ? bn.inputs[k] : -1; };
    const int gamma = in_or_none(1), beta = in_or_none(2), mean = in_or_none(3), var = in_or_none(4);
    if (mean < 0 || var < 0) continue;
    bool all = true;
    for (int v : {gamma, beta, mean, var})
      if (v >= 0 && !p.is_constant(v)) all = false;
    if (!all) continue;
    const Tensor& wt = p.constants.at(w);
    const int64_t out_ch = wt.size(0), per = wt.numel() / std::max<int64_t>(out_ch, 1);
    if (p.constants.at(mean).numel() != out_ch) continue;
    Tensor nw, nb;
    if (!p.has_data()) {
      nw = Tensor::empty(wt.shape(), wt.dtype(), Device::meta);
      nb = Tensor::empty({out_ch}, wt.dtype(), Device::meta);
    } else {
      // In double: s = gamma / sqrt(var + eps); w' = w s (per output channel); b' = (b - mean) s + beta.
      const double eps = attrs_of<BatchNormAttrs>(bn).eps;
      auto vec = [&](int v, double dflt) {
        return v >= 0 ? p.constants.at(v).to_vector() : std::vector<double>(size_t(out_ch), dflt);
      };
      const auto gv = vec(gamma, 1.0), bev = vec(beta, 0.0), mv = vec(mean, 0.0), vv = vec(var, 1.0), bv = vec(b, 0.0);
      std::vector<double> wv = wt.to_vector();
      std::vector<double> nbv(static_cast<size_t>(out_ch));
      for (int64_t o = 0; o < out_ch; ++o) {
        const double s = gv[size_t(o)] / std::sqrt(vv[size_t(o)] + eps);
        for (int64_t k = 0; k < per; ++k) wv[size_t(o * per + k)] *= s;
        nbv[size_t(o)] = (bv[size_t(o)] - mv[size_t(o)]) * s + bev[size_t(o)];
      }
      TagGuard tag(Tag::param);
      nw = Tensor::from_vector(wv, wt.shape(), wt.dtype());
      nb = Tensor::from_vector(nbv, {out_ch}, wt.dtype());
    }
    layer.inputs.resize(std::max<size_t>(layer.inputs.size(), 3), -1);
    layer.inputs[1] = add_constant(p, nw, layer.scope + ".weight(bn folded)");
    layer.inputs[2] = add_constant(p, nb, layer.scope + ".bias(bn folded)");
    refresh_node(g, layer);
    replace_uses(g, bn.outputs[0], x);
    dead[i] = true;
    ++folded;
  }
  if (folded) compact(p, dead);
  return folded;
}

int fuse_elementwise(Program& p) {
  Graph& g = p.graph;
  auto uses = use_counts(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  // A single-reader, non-output value made by a live node of op `op`: that node, or null.
  auto only_reader_of = [&](int v, int op) -> Node* {
    const int pi = producer(g, v);
    if (pi < 0 || dead[size_t(pi)] || uses[size_t(v)] != 1 || is_graph_output(g, v)) return nullptr;
    Node& n = g.nodes[size_t(pi)];
    return n.op == op ? &n : nullptr;
  };
  // Patterns first: x * sigmoid(x) -> silu, x * clamp(a x + b, 0, 1) -> hardswish.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.op != op_id<Mul> || !is_f32_value(g, n.outputs[0])) continue;
    for (int side = 0; side < 2; ++side) {
      const int x = n.inputs[size_t(side)], other = n.inputs[size_t(1 - side)];
      if (g.values[size_t(x)].spec.shape != g.values[size_t(n.outputs[0])].spec.shape) continue;
      if (Node* s = only_reader_of(other, op_id<Sigmoid>); s && s->inputs[0] == x) {
        dead[size_t(producer(g, other))] = true;
        to_elementwise(g, n, x, {{"silu"}});
        ++fused;
        break;
      }
      if (Node* c = only_reader_of(other, op_id<Clamp>)) {
        const auto& ca = attrs_of<UnaryAttrs>(*c);
        Node* a = only_reader_of(c->inputs[0], op_id<Affine>);
        if (ca.alpha == 0.0 && ca.beta == 1.0 && a && a->inputs[0] == x) {
          const auto aa = attrs_of<Affine::Attrs>(*a);
          dead[size_t(producer(g, c->inputs[0]))] = true;
          dead[size_t(producer(g, other))] = true;
          to_elementwise(g, n, x, {{"hardswish", aa.alpha, aa.beta}});
          ++fused;
          break;
        }
      }
    }
  }
  // Reads by live nodes only (the patterns left dead ones).
  uses.assign(g.values.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead[i])
      for (int v : g.nodes[i].inputs)
        if (v >= 0) ++uses[size_t(v)];
  for (int o : g.outputs) ++uses[size_t(o)];
  // Chains: an elementwise node whose input is the only output of another merges with it.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (dead[i]) continue;
    auto mine = as_post_ops(n);
    if (mine.empty() || !is_f32_value(g, n.outputs[0])) continue;
    const int x = n.inputs[0];
    const int pi = producer(g, x);
    if (pi < 0 || dead[size_t(pi)] || uses[size_t(x)] != 1 || is_graph_output(g, x)) continue;
    auto theirs = as_post_ops(g.nodes[size_t(pi)]);
    if (theirs.empty()) continue;
    theirs.insert(theirs.end(), mine.begin(), mine.end());
    const int src = g.nodes[size_t(pi)].inputs[0];
    dead[size_t(pi)] = true;
    to_elementwise(g, n, src, std::move(theirs));
    ++fused;
  }
  if (fused) compact(p, dead);
  return fused;
}

int fuse_post_ops(Program& p) {
  Graph& g = p.graph;
  const auto uses = use_counts(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (dead[i]) continue;
    const bool conv = n.op == op_id<Conv2d> || n.op == op_id<FusedConv2d>;
    const bool linear = n.op == op_id<Linear> || n.op == op_id<FusedLinear>;
    if ((!conv && !linear) || !is_f32_value(g, n.outputs[0])) continue;
    std::vector<PostOp> post;
    if (n.op == op_id<FusedConv2d>) post = attrs_of<FusedConvAttrs>(n).post;
    if (n.op == op_id<FusedLinear>) post = attrs_of<PostOpsAttrs>(n).post;
    std::vector<int> inputs = n.inputs;
    inputs.resize(std::max<size_t>(inputs.size(), 3), -1);
    int out = n.outputs[0];
    int absorbed = 0;
    for (;;) {
      if (uses[size_t(out)] != 1 || is_graph_output(g, out)) break;
      // The one reader of `out` (a live node after n).
      int ci = -1;
      for (size_t j = i + 1; j < g.nodes.size() && ci < 0; ++j)
        if (!dead[j])
          for (int v : g.nodes[j].inputs)
            if (v == out) ci = int(j);
      if (ci < 0) break;
      Node& c = g.nodes[size_t(ci)];
      auto steps = as_post_ops(c);
      if (!steps.empty()) {
        post.insert(post.end(), steps.begin(), steps.end());
      } else if (c.op == op_id<Add> && !has_sum(post)) {
        const int other = c.inputs[0] == out ? c.inputs[1] : c.inputs[0];
        if (other == out) break;
        const auto &so = g.values[size_t(other)].spec, &sy = g.values[size_t(out)].spec;
        if (so.shape != sy.shape || so.dtype != sy.dtype) break;
        // The residual must exist where the fused op runs (n's place): made before n, or a leaf.
        const int op_of_other = producer(g, other);
        if (op_of_other > int(i)) break;
        post.push_back({"sum"});
        inputs.resize(3);
        inputs.push_back(other);
      } else {
        break;
      }
      dead[size_t(ci)] = true;
      out = c.outputs[0];
      ++absorbed;
    }
    if (!absorbed) continue;
    if (conv) {
      ConvAttrs ca = n.op == op_id<Conv2d> ? attrs_of<ConvAttrs>(n) : attrs_of<FusedConvAttrs>(n).conv;
      n.op = op_id<FusedConv2d>;
      n.attrs = make_attrs(FusedConvAttrs{ca, post});
    } else {
      n.op = op_id<FusedLinear>;
      n.attrs = make_attrs(PostOpsAttrs{post});
    }
    if (!has_sum(post)) inputs.resize(3);
    n.inputs = inputs;
    g.values[size_t(n.outputs[0])].producer = -1;
    n.outputs[0] = out;
    g.values[size_t(out)].producer = int(i);
    g.values[size_t(out)].slot = 0;
    refresh_node(g, n);
    fused += absorbed;
  }
  if (fused) compact(p, dead);
  return fused;
}

int eliminate_dead_values(Program& p) {
  Graph& g = p.graph;
  auto uses = use_counts(g);
  std::vector<bool> dead(g.nodes.size(), false);
  int removed = 0;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (n.aliases != 0) continue;  // a write is its own reason
    bool read = false;
    for (int v : n.outputs) read = read || uses[size_t(v)] > 0;
    if (read) continue;
    dead[i] = true;
    ++removed;
    for (int v : n.inputs)
      if (v >= 0) --uses[size_t(v)];
  }
  compact(p, dead);
  return removed;
}

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> v = {
      {"fold_constants", fold_constants},     {"remove_identities", remove_identities},
      {"fold_batch_norm", fold_batch_norm},   {"fuse_elementwise", fuse_elementwise},
      {"fuse_post_ops", fuse_post_ops},       {"fuse_qdq", fuse_qdq},
      {"eliminate_dead_values", eliminate_dead_values},
  };
  return v;
}

std::vector<std::string> pass_names() {
  std::vector<std::string> n;
  for (const auto& p : all_passes()) n.push_back(p.name);
  return n;
}

std::vector<PassReport> run_passes(Program& p, const std::vector<std::string>& names) {
  bool all = false;
  for (const auto& n : names) {
    if (n == "all") {
      all = true;
      continue;
    }
    bool known = false;
    for (const auto& pi : all_passes()) known = known || n == pi.name;
    RK_CHECK(known, "[engine] unknown pass '{}' (known: all, {})", n, fmt::join(pass_names(), ", "));
  }
  std::vector<PassReport> reports;
  for (const auto& pi : all_passes()) {
    if (!all && std::find(names.begin(), names.end(), pi.name) == names.end()) continue;
    PassReport r;
    r.name = pi.name;
    r.nodes_before = int(p.graph.nodes.size());
    r.bytes_before = node_bytes(p.graph);
    r.flops_before = node_flops(p.graph);
    r.rewrites = pi.run(p);
    r.nodes_after = int(p.graph.nodes.size());
    r.bytes_after = node_bytes(p.graph);
    r.flops_after = node_flops(p.graph);
    reports.push_back(r);
  }
  return reports;
}

}  // namespace reckon::engine
