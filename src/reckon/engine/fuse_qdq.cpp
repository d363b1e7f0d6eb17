// The fuse_qdq pass (passes.h): a model quantized in the QDQ format (ONNX Runtime's quantize_static,
// reckon quantize --out, any tool that writes QuantizeLinear/DequantizeLinear around float ops)
// says its int8 arithmetic as float ops between a dequantize and a quantize. This pass finds those
// patterns in the imported program and rewrites each into the int8 op that computes it (ops/quant.h),
// so the engine runs the file with oneDNN's int8 kernels instead of in f32:
//   DQ(xq) -> conv | linear (+ relu, clamp, + DQ(rq)) (w = DQ(wq s8), b = DQ(bq i32) or f32) [-> Q]
//                                              -> conv2d_int8 / linear_int8 (output u8/s8, or f32 with no Q)
//   DQ(xq) -> max pool | average pool | view -> Q (the same scale and zero point)  -> pool2d_int8 / the view
//   DQ(aq) + DQ(bq) (-> relu) -> Q                                                  -> add_int8
// Scales and zero points are the file's. The int8 ops' arithmetic is what ONNX Runtime's QLinearConv,
// QGemm and QLinearAdd compute, up to the rounding of the requantization (one step of an output, at a
// tie or where their fixed-point multipliers differ from a float's), which is as close as two int8
// engines get; a bias whose scale is not x_scale * w_scale (as ONNX Runtime writes it) is rescaled.
// What matches no pattern keeps running between its dequantize and quantize, in f32, exactly as the
// file says. A dequantize of a constant that no int8 op took (fold_constants leaves them for this
// pass) is folded here.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "reckon/engine/passes.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"

namespace reckon::engine {

namespace {
using graph::Graph;
using graph::Node;

bool is_q8(DType t) { return t == DType::u8 || t == DType::i8; }

// One per-tensor quantization read off a QuantizeLinear or DequantizeLinear node.
struct QParam {
  int q = -1;  // the 8-bit value
  DType dtype = DType::u8;
  double scale = 1;
  int64_t zp = 0;
  bool same(const QParam& o) const { return dtype == o.dtype && scale == o.scale && zp == o.zp; }
};

struct Fuser {
  Program& p;
  Graph& g;
  std::vector<int> uses;
  std::vector<std::vector<int>> readers;  // value -> nodes reading it
  std::vector<bool> dead;
  int rewrites = 0;

  explicit Fuser(Program& prog) : p(prog), g(prog.graph), uses(use_counts(prog.graph)), readers(g.values.size()),
                                  dead(g.nodes.size(), false) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int v : g.nodes[i].inputs)
        if (v >= 0) readers[size_t(v)].push_back(int(i));
  }

  const Node* producer_node(int v) const {
    if (v < 0 || g.values[size_t(v)].producer < 0) return nullptr;
    return &g.nodes[size_t(g.values[size_t(v)].producer)];
  }
  bool is_output(int v) const { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); }

  // Value v as a per-tensor dequantize of an 8-bit value made it.
  std::optional<QParam> dequantized(int v) const {
    const Node* d = producer_node(v);
    if (!d || d->op != op_id<DequantizeLinear> || d->inputs.empty() || d->inputs[0] < 0) return std::nullopt;
    const auto& a = attrs_of<QuantizeAttrs>(*d);
    const DType t = g.values[size_t(d->inputs[0])].spec.dtype;
    if (a.scale.size() != 1 || !is_q8(t)) return std::nullopt;
    return QParam{d->inputs[0], t, a.scale[0], a.zero_point[0]};
  }
  // The one per-tensor quantize to 8 bits that reads v when nothing else does: (node, its output).
  std::optional<std::pair<int, QParam>> quantized_once(int v) const {
    if (uses[size_t(v)] != 1 || is_output(v) || readers[size_t(v)].size() != 1) return std::nullopt;
    const int qi = readers[size_t(v)][0];
    const Node& q = g.nodes[size_t(qi)];
    if (dead[size_t(qi)] || q.op != op_id<QuantizeLinear>) return std::nullopt;
    const auto& a = attrs_of<QuantizeAttrs>(q);
    const DType t = g.values[size_t(q.outputs[0])].spec.dtype;
    if (a.scale.size() != 1 || !is_q8(t)) return std::nullopt;
    return std::pair{qi, QParam{q.outputs[0], t, a.scale[0], a.zero_point[0]}};
  }
  // A constant dequantized along axis 0 (or per tensor) with zero points 0: (its integers, its scales).
  std::optional<std::pair<int, std::vector<double>>> dequantized_constant(int v, DType t) const {
    const Node* d = producer_node(v);
    if (!d || d->op != op_id<DequantizeLinear> || d->inputs.empty() || !p.is_constant(d->inputs[0])) return std::nullopt;
    const auto& a = attrs_of<QuantizeAttrs>(*d);
    if (g.values[size_t(d->inputs[0])].spec.dtype != t || (a.scale.size() > 1 && a.axis != 0)) return std::nullopt;
    for (int64_t z : a.zero_point)
      if (z != 0) return std::nullopt;
    return std::pair{d->inputs[0], a.scale};
  }

  // Node n writes what node qi wrote (qi dies): the value and its producer follow.
  void take_output(Node& n, int ni, int qi) {
    const int y = n.outputs[0], q = g.nodes[size_t(qi)].outputs[0];
    g.values[size_t(y)].producer = -1;
    n.outputs[0] = q;
    g.values[size_t(q)].producer = ni;
    g.values[size_t(q)].slot = 0;
    dead[size_t(qi)] = true;
  }

  // The int32 bias of an int8 product (-1 without one), at scale x_scale * w_scale[o]; nullopt when
  // the bias is not a constant.
  std::optional<int> int32_bias(int b, double x_scale, const std::vector<double>& w_scale) {
    if (b < 0) return -1;
    const auto& bv = g.values[size_t(b)];
    const int64_t O = bv.spec.shape.empty() ? 1 : bv.spec.shape[0];
    if (bv.spec.shape.size() != 1 || (w_scale.size() != 1 && int64_t(w_scale.size()) != O)) return std::nullopt;
    auto ws = [&](int64_t o) { return w_scale[w_scale.size() == 1 ? 0 : size_t(o)]; };
    std::vector<double> full;  // w_scale per output channel
    for (int64_t o = 0; o < O; ++o) full.push_back(ws(o));
    const std::string name = bv.name.empty() ? "bias" : bv.name;
    if (auto dq = dequantized_constant(b, DType::i32)) {
      const auto& [bq, bs] = *dq;
      bool same = true;
      for (int64_t o = 0; o < O; ++o) {
        const double want = x_scale * ws(o), have = bs[bs.size() == 1 ? 0 : size_t(o)];
        same = same && std::abs(have - want) <= 1e-5 * want;
      }
      if (same) return bq;
      const Tensor& t = p.constants.at(bq);
      if (t.device() == Device::meta) return add_constant(p, Tensor::empty({O}, DType::i32, Device::meta), name + ".int32");
      Tensor f = Tensor::empty({O});
      for (int64_t o = 0; o < O; ++o)
        f.data<float>()[o] = float(double(t.data<int32_t>()[o]) * bs[bs.size() == 1 ? 0 : size_t(o)]);
      return add_constant(p, quantize_bias(f, x_scale, full), name + ".int32");
    }
    if (!p.is_constant(b) || bv.spec.dtype != DType::f32) return std::nullopt;
    const Tensor& t = p.constants.at(b);
    if (t.device() == Device::meta) return add_constant(p, Tensor::empty({O}, DType::i32, Device::meta), name + ".int32");
    return add_constant(p, quantize_bias(contiguous(t), x_scale, full), name + ".int32");
  }

  // conv / linear between dequantizes and a quantize -> conv2d_int8 / linear_int8.
  bool product(Node& n, int ni) {
    const bool conv = n.op == op_id<Conv2d> || n.op == op_id<FusedConv2d>;
    const bool lin = n.op == op_id<Linear> || n.op == op_id<FusedLinear>;
    if (!conv && !lin) return false;
    std::vector<PostOp> post;
    if (n.op == op_id<FusedConv2d>) post = attrs_of<FusedConvAttrs>(n).post;
    if (n.op == op_id<FusedLinear>) post = attrs_of<PostOpsAttrs>(n).post;
    for (const auto& s : post)
      if (s.kind != "relu" && s.kind != "clamp" && s.kind != "sum") return false;
    const auto x = dequantized(n.inputs[0]);
    const auto w = dequantized_constant(n.inputs[1], DType::i8);
    if (!x || !w) return false;
    const auto& [wq, ws] = *w;
    if (ws.size() != 1 && int64_t(ws.size()) != g.values[size_t(wq)].spec.shape[0]) return false;
    std::optional<QParam> r;
    if (has_sum(post)) {
      r = dequantized(n.inputs.at(3));
      if (!r || r->zp != 0) return false;  // the sum post-op adds a residual with zero point 0
    }
    const auto yq = quantized_once(n.outputs[0]);
    if (r && !yq) return false;  // a sum needs a quantized output
    const auto bias = int32_bias(n.inputs.size() > 2 ? n.inputs[2] : -1, x->scale, ws);
    if (!bias) return false;
    QuantLinearAttrs q;
    q.x_scale = x->scale;
    q.x_zero_point = x->zp;
    q.w_scale = ws;
    q.post = post;
    if (yq) {
      q.y_scale = yq->second.scale;
      q.y_zero_point = yq->second.zp;
      q.y_dtype = quant_dtype_name(yq->second.dtype);
    } else {
      q.y_dtype = "f32";
    }
    std::vector<int> ins{x->q, wq, *bias};
    if (r) {
      q.r_scale = r->scale;
      q.r_dtype = quant_dtype_name(r->dtype);
      ins.push_back(r->q);
    }
    if (conv) {
      const ConvAttrs ca = n.op == op_id<Conv2d> ? attrs_of<ConvAttrs>(n) : attrs_of<FusedConvAttrs>(n).conv;
      n.op = op_id<Conv2dInt8>;
      n.attrs = make_attrs(QuantConvAttrs{ca, q});
    } else {
      n.op = op_id<LinearInt8>;
      n.attrs = make_attrs(q);
    }
    n.inputs = ins;
    if (yq) take_output(n, ni, yq->first);
    refresh_node(g, n);
    return true;
  }

  // Pooling or a view between a dequantize and a quantize of the same parameters: on the 8-bit
  // values themselves (a max, an average and a view commute with the affine map).
  bool follower(Node& n, int ni) {
    if (n.inputs.empty() || n.outputs.empty()) return false;
    const bool view = op_info(n.op).is_view && n.inputs.size() == 1 && n.outputs.size() == 1;
    const bool pool = n.op == op_id<MaxPool2d> || n.op == op_id<AvgPool2d> || n.op == op_id<AdaptiveAvgPool2d>;
    if (!view && !pool) return false;
    for (size_t k = 1; k < n.outputs.size(); ++k)  // a max pool's indices must be unread
      if (uses[size_t(n.outputs[k])] > 0) return false;
    const auto x = dequantized(n.inputs[0]);
    if (!x) return false;
    const auto yq = quantized_once(n.outputs[0]);
    if (!yq || !yq->second.same(*x)) return false;
    if (view) {
      n.inputs = {x->q};
    } else {
      QuantPoolAttrs a;
      if (n.op == op_id<AdaptiveAvgPool2d>) {
        const auto& o = attrs_of<AdaptiveAvgPool2d::Attrs>(n).output_size;
        const Shape& xs = g.values[size_t(n.inputs[0])].spec.shape;
        if (xs.size() != 4 || o[0] <= 0 || o[1] <= 0 || xs[2] % o[0] || xs[3] % o[1]) return false;
        a.pool.kernel = {xs[2] / o[0], xs[3] / o[1]};
        a.pool.stride = a.pool.kernel;
        a.pool.padding = {0, 0};
        a.mode = "avg";
      } else {
        a.pool = attrs_of<PoolAttrs>(n);
        a.mode = n.op == op_id<MaxPool2d> ? "max" : "avg";
        if (a.pool.ceil_mode) return false;
      }
      n.op = op_id<Pool2dInt8>;
      n.attrs = make_attrs(a);
      n.inputs = {x->q};
      for (size_t k = 1; k < n.outputs.size(); ++k) g.values[size_t(n.outputs[k])].producer = -1;
      n.outputs.resize(1);
    }
    take_output(n, ni, yq->first);
    refresh_node(g, n);
    return true;
  }

  // DQ(a) + DQ(b) [-> relu] -> Q: add_int8.
  bool add(Node& n, int ni) {
    if (n.op != op_id<Add> || n.inputs.size() != 2) return false;
    const auto a = dequantized(n.inputs[0]), b = dequantized(n.inputs[1]);
    if (!a || !b || g.values[size_t(a->q)].spec.shape != g.values[size_t(b->q)].spec.shape) return false;
    if (g.values[size_t(a->q)].spec.shape != g.values[size_t(n.outputs[0])].spec.shape) return false;
    int out = n.outputs[0], relu_node = -1;
    if (uses[size_t(out)] == 1 && !is_output(out) && readers[size_t(out)].size() == 1) {
      const Node& c = g.nodes[size_t(readers[size_t(out)][0])];
      if (c.op == op_id<Relu>) {
        relu_node = readers[size_t(out)][0];
        out = c.outputs[0];
      }
    }
    const auto yq = quantized_once(out);
    if (!yq) return false;
    QuantAddAttrs q{a->scale, b->scale, yq->second.scale, a->zp, b->zp, yq->second.zp,
                    quant_dtype_name(yq->second.dtype), relu_node >= 0};
    n.op = op_id<AddInt8>;
    n.attrs = make_attrs(q);
    n.inputs = {a->q, b->q};
    if (relu_node >= 0) dead[size_t(relu_node)] = true;
    take_output(n, ni, yq->first);
    refresh_node(g, n);
    return true;
  }

  // A dequantize of a constant that no int8 op took: a float constant now.
  void fold_dequantized_constants() {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& n = g.nodes[i];
      if (dead[i] || n.op != op_id<DequantizeLinear> || !p.is_constant(n.inputs[0])) continue;
      bool read = is_output(n.outputs[0]);
      for (size_t j = 0; j < g.nodes.size() && !read; ++j)
        if (!dead[j])
          for (int v : g.nodes[j].inputs) read = read || v == n.outputs[0];
      dead[i] = true;
      if (!read) continue;
      Tensor t;
      {
        NoGrad no_grad;
        TagGuard tag(Tag::param);
        t = op_info(n.op).call({p.constants.at(n.inputs[0])}, n.attrs.get())[0];
      }
      replace_uses(g, n.outputs[0], add_constant(p, t.detach(), fmt::format("{}.dequantize_linear(folded)", n.scope)));
    }
  }

  int run() {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (dead[i]) continue;
      Node& n = g.nodes[i];
      if (product(n, int(i)) || follower(n, int(i)) || add(n, int(i))) ++rewrites;
    }
    fold_dequantized_constants();
    compact(p, dead);
    return rewrites;
  }
};
}  // namespace

int fuse_qdq(Program& p) {
  bool any = false;
  for (const auto& n : p.graph.nodes) any = any || n.op == op_id<DequantizeLinear>;
  if (!any) return 0;
  return Fuser(p).run();
}

}  // namespace reckon::engine
