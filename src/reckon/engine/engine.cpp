#include "reckon/engine/engine.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <cmath>
#include <optional>

#include "reckon/kernels/cpu/conv_small.h"
#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/kernels/cpu/dw_int8.h"
#include "reckon/kernels/cpu/post_ops.h"
#include "reckon/kernels/cpu/quant_dnnl.h"
#include "reckon/kernels/cpu/int8_exact.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"

namespace reckon::engine {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using graph::Node;
using dnnl_util::dt;

enum class Where : uint8_t { arena, constant, input, output };

// A value as the compiled program holds it: a layout and where its bytes are.
struct EVal {
  memory::desc md;
  Shape shape, strides;    // logical shape; strides (elements) when the layout is plain
  DType dtype = DType::f32;
  Where where = Where::arena;
  int buffer = -1;         // arena: its buffer
  int64_t elem_offset = 0; // a view: where it starts in its buffer, constant or input (elements)
  Tensor data;             // constant: the tensor holding it (plain or reordered)
  bool plain = true;       // md is row-major with `strides`
  bool view = false;       // shares another value's bytes
  bool conv_made = false;  // a convolution wrote it
};

struct Step {
  StepInfo info;
  bool dnnl_step = true;
  dnnl::primitive prim;
  std::vector<std::pair<int, int>> args;  // (DNNL_ARG_*, value)
  memory::desc scratch_md;
  int scratch_buffer = -1;
  // An op's own kernel.
  int op = -1;
  const void* attrs = nullptr;
  std::vector<int> ins, outs;
  std::vector<Tensor> tin, tout;
  bool use_ref = false;
  bool flat = false;  // its tensors are the values' bytes in their layouts, seen as 1-D (an elementwise kernel)
  // A product run by a kernel of reckon's own (conv_small's direct loops) on plain tensors, with
  // scratch that is a buffer of the arena (scratch_buffer); bound when the engine is built.
  std::function<void(std::span<const Tensor>, std::span<Tensor>, void*)> direct;
  void* scratch = nullptr;
  // Bound when the engine is built.
  std::unordered_map<int, memory> margs;
};

memory::dims dims_of(const Shape& s) { return s.empty() ? memory::dims{1} : memory::dims(s.begin(), s.end()); }
// A row-major (or strided) descriptor; the zero descriptor for a dtype oneDNN has not (i64):
// such values are read only by ops' own kernels.
memory::desc plain_md(const Shape& s, DType t, const Shape& strides = {}) {
  if (dt(t) == memory::data_type::undef) return memory::desc();
  Shape st = strides.empty() ? contiguous_strides(s) : strides;
  if (s.empty()) st = {1};
  return memory::desc(dims_of(s), dt(t), memory::dims(st.begin(), st.end()));
}
bool dense(const Shape& s, const Shape& strides) { return strides == contiguous_strides(s); }

// A post-op chain as oneDNN post-ops; false when a step has no oneDNN form.
bool append_post(dnnl::post_ops& po, const std::vector<PostOp>& post, size_t from = 0) {
  for (size_t i = from; i < post.size(); ++i) {
    const auto& p = post[i];
    const float a = float(p.alpha), b = float(p.beta);
    using alg = dnnl::algorithm;
    switch (post_kind("engine", p.kind)) {
      case PostKind::sum: po.append_sum(1.f); break;
      case PostKind::relu: po.append_eltwise(1.f, alg::eltwise_relu, a, 0.f); break;
      case PostKind::clamp: po.append_eltwise(1.f, alg::eltwise_clip, a, b); break;
      case PostKind::sigmoid: po.append_eltwise(1.f, alg::eltwise_logistic, 0.f, 0.f); break;
      case PostKind::tanh: po.append_eltwise(1.f, alg::eltwise_tanh, 0.f, 0.f); break;
      case PostKind::gelu: po.append_eltwise(1.f, alg::eltwise_gelu_erf, 0.f, 0.f); break;
      case PostKind::silu: po.append_eltwise(1.f, alg::eltwise_swish, 1.f, 0.f); break;
      case PostKind::hardswish:
        if (std::abs(p.alpha - 1.0 / 6.0) > 1e-12 || p.beta != 0.5) return false;
        po.append_eltwise(1.f, alg::eltwise_hardswish, 0.f, 0.f);
        break;
      case PostKind::affine: po.append_eltwise(1.f, alg::eltwise_linear, a, b); break;
      case PostKind::exp: po.append_eltwise(1.f, alg::eltwise_exp, 0.f, 0.f); break;
      case PostKind::log: po.append_eltwise(1.f, alg::eltwise_log, 0.f, 0.f); break;
      case PostKind::square: po.append_eltwise(1.f, alg::eltwise_square, 0.f, 0.f); break;
    }
  }
  return true;
}
// The first step of an elementwise chain as an eltwise primitive's algorithm.
bool eltwise_alg(const PostOp& p, dnnl::algorithm& alg, float& a, float& b) {
  using A = dnnl::algorithm;
  a = float(p.alpha);
  b = float(p.beta);
  switch (post_kind("engine", p.kind)) {
    case PostKind::relu: alg = A::eltwise_relu; b = 0; return true;
    case PostKind::clamp: alg = A::eltwise_clip; return true;
    case PostKind::sigmoid: alg = A::eltwise_logistic; return true;
    case PostKind::tanh: alg = A::eltwise_tanh; return true;
    case PostKind::gelu: alg = A::eltwise_gelu_erf; return true;
    case PostKind::silu: alg = A::eltwise_swish; a = 1.f; return true;
    case PostKind::hardswish:
      if (std::abs(p.alpha - 1.0 / 6.0) > 1e-12 || p.beta != 0.5) return false;
      alg = A::eltwise_hardswish;
      return true;
    case PostKind::affine: alg = A::eltwise_linear; return true;
    case PostKind::exp: alg = A::eltwise_exp; return true;
    case PostKind::log: alg = A::eltwise_log; return true;
    case PostKind::square: alg = A::eltwise_square; return true;
    case PostKind::sum: return false;
  }
  return false;
}

dnnl::primitive_attr attr_with(const dnnl::post_ops* po) {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (po) a.set_post_ops(*po);
  return a;
}

template <class F>
auto try_make(F&& f) -> std::optional<decltype(f())> {
  try {
    return f();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented || e.status == dnnl_invalid_arguments) return std::nullopt;
    throw;
  }
}

// The convolution attributes of a forward convolution node (conv2d, conv2d_fused, conv2d_int8).
const ConvAttrs* conv_attrs_of(const graph::Node& n) {
  if (n.op == op_id<Conv2d>) return &attrs_of<ConvAttrs>(n);
  if (n.op == op_id<FusedConv2d>) return &attrs_of<FusedConvAttrs>(n).conv;
  if (n.op == op_id<Conv2dInt8>) return &attrs_of<QuantConvAttrs>(n).conv;
  return nullptr;
}
std::string layout_name(const EVal& v) {
  if (v.plain) return v.shape.size() == 4 ? "nchw" : "plain";
  const auto& d = v.md.data;
  if (d.format_kind != dnnl_blocked) return "other";
  std::string s;
  const int nd = d.ndims;
  const char* letters = "abcdef";
  // Outer dims ordered by stride, then the inner blocks (oneDNN's own naming: aBcd8b = nChw8c).
  std::vector<int> order(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) order[size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return d.format_desc.blocking.strides[x] > d.format_desc.blocking.strides[y]; });
  std::vector<bool> blocked(static_cast<size_t>(nd), false);
  for (int i = 0; i < d.format_desc.blocking.inner_nblks; ++i) blocked[size_t(d.format_desc.blocking.inner_idxs[i])] = true;
  for (int i : order) s += blocked[size_t(i)] ? char(std::toupper(letters[i])) : letters[i];
  for (int i = 0; i < d.format_desc.blocking.inner_nblks; ++i)
    s += std::to_string(d.format_desc.blocking.inner_blks[i]) + letters[d.format_desc.blocking.inner_idxs[i]];
  return s;
}
}  // namespace

struct Engine::Impl {
  Program prog;
  EngineOptions opt;
  std::vector<PassReport> reports;
  std::vector<EVal> vals;
  std::vector<Step> steps;
  std::vector<StepInfo> infos;
  std::vector<Buffer> buffers;
  int64_t arena = 0, weights = 0, values_total = 0;
  Tensor arena_t;
  std::vector<memory> mems;
  std::vector<int> stored;     // graph value -> the value holding it now
  std::vector<int> remaining;  // graph value -> reads still to come
  std::vector<std::pair<int, int>> copy_cache_key;  // (value, copy)
  std::vector<memory::desc> copy_cache_md;
  std::vector<int> shared_buffer;  // buffer -> 1 when a view reads it (never written in place)
  bool data = false;
  Shape in_shape, out_shape;
  int output_ev = -1;
  std::vector<int> input_evs;
  int cur_node = -1;

  int step_index() const { return int(steps.size()); }

  // ---- values ----
  int add_val(EVal v) {
    vals.push_back(std::move(v));
    return int(vals.size()) - 1;
  }
  int new_arena(const memory::desc& md, const Shape& shape, DType t) {
    EVal v;
    v.md = md;
    v.shape = shape;
    v.dtype = t;
    v.plain = md == plain_md(shape, t);
    v.strides = v.plain ? contiguous_strides(shape) : Shape{};
    Buffer b;
    b.bytes = md.is_zero() ? shape_numel(shape) * int64_t(dtype_size(t)) : int64_t(md.get_size());
    b.first = b.last = step_index();
    buffers.push_back(b);
    shared_buffer.push_back(0);
    v.buffer = int(buffers.size()) - 1;
    return add_val(std::move(v));
  }
  void read(int ev) {
    const EVal& v = vals[size_t(ev)];
    if (v.where == Where::arena) buffers[size_t(v.buffer)].last = std::max(buffers[size_t(v.buffer)].last, step_index());
  }
  void write(int ev) { read(ev); }

  // ---- steps ----
  Step& add_step(std::string name, std::string op, std::string kind) {
    Step s;
    s.info.name = std::move(name);
    s.info.op = std::move(op);
    s.info.kind = std::move(kind);
    s.info.node = cur_node;
    if (cur_node >= 0 && s.info.op.rfind("conv2d", 0) == 0) {
      const graph::Node& n = prog.graph.nodes[size_t(cur_node)];
      if (op_info(n.op).op_class == OpClass::conv && n.inputs.size() > 1 && !n.outputs.empty()) {
        const Shape &x = gval(n.inputs[0]).spec.shape, &w = gval(n.inputs[1]).spec.shape,
                    &y = gval(n.outputs[0]).spec.shape;
        if (w.size() == 4 && y.size() == 4) s.info.conv_width = std::min(w[0], w[1]), s.info.conv_out_hw = y[2] * y[3];
        const ConvAttrs* a = conv_attrs_of(n);
        if (a && x.size() == 4 && w.size() == 4 && y.size() == 4)
          conv_tap_shares(x, w, y, *a, s.info.conv_tap_share, s.info.conv_weight_share);
      }
    }
    steps.push_back(std::move(s));
    return steps.back();
  }
  // Records a primitive step over `args` (values read and written are kept alive until it runs).
  template <class PD>
  Step& add_dnnl(std::string name, std::string op, const PD& pd, std::vector<std::pair<int, int>> args) {
    for (auto& [arg, ev] : args) read(ev);
    Step& s = add_step(std::move(name), std::move(op), "onednn");
    s.info.impl = pd.impl_info_str();
    if (data) s.prim = dnnl::primitive(pd.get());
    s.args = std::move(args);
    s.scratch_md = pd.scratchpad_desc();
    add_scratch(s, int64_t(s.scratch_md.get_size()));
    return s;
  }
  // A buffer of the arena for the scratch of step s (the last added), alive during it only.
  void add_scratch(Step& s, int64_t bytes) {
    if (bytes <= 0) return;
    Buffer b;
    b.bytes = bytes;
    b.first = b.last = step_index() - 1;
    buffers.push_back(b);
    shared_buffer.push_back(0);
    s.scratch_buffer = int(buffers.size()) - 1;
    s.info.scratch_bytes = bytes;
  }

  // A copy of value ev in layout md (a reorder step; a constant is reordered now, once). Cached
  // unless `private_copy` (a copy the caller will write over).
  int as(int ev, const memory::desc& md, bool private_copy = false, bool for_conv = false) {
    if (vals[size_t(ev)].md == md && !private_copy) return ev;
    if (!private_copy)
      for (size_t i = 0; i < copy_cache_key.size(); ++i)
        if (copy_cache_key[i].first == ev && copy_cache_md[i] == md) return copy_cache_key[i].second;
    const EVal src = vals[size_t(ev)];
    int out;
    if (src.where == Where::constant) {
      EVal c;
      c.md = md;
      c.shape = src.shape;
      c.dtype = src.dtype;
      c.where = Where::constant;
      c.plain = md == plain_md(src.shape, src.dtype);
      c.strides = c.plain ? contiguous_strides(src.shape) : Shape{};
      TagGuard tag(Tag::param);
      const int64_t bytes = int64_t(md.get_size());
      c.data = Tensor::empty({bytes}, DType::u8, data ? Device::cpu : Device::meta);
      if (data) {
        memory from(src.md, dnnl_util::engine(), static_cast<char*>(src.data.raw_data()) +
                                                     src.elem_offset * int64_t(dtype_size(src.dtype)));
        memory to(md, dnnl_util::engine(), c.data.raw_data());
        dnnl::reorder(from, to).execute(dnnl_util::stream(), from, to);
        dnnl_util::stream().wait();
      }
      out = add_val(std::move(c));
    } else {
      out = new_arena(md, src.shape, src.dtype);
      auto pd = dnnl::reorder::primitive_desc(dnnl_util::engine(), src.md, dnnl_util::engine(), md, attr_with(nullptr));
      const std::string what = fmt::format("reorder {} -> {}", layout_name(src), layout_name(vals[size_t(out)]));
      Step& s = add_dnnl(cur_node >= 0 ? prog.graph.nodes[size_t(cur_node)].scope : "(input)", what, pd,
                         {{DNNL_ARG_FROM, ev}, {DNNL_ARG_TO, out}});
      s.info.kind = "reorder";
      s.info.node = -1;
      s.info.cost.bytes_read = int64_t(src.md.get_size());
      s.info.cost.bytes_written = int64_t(md.get_size());
      s.info.reorder_between_convs = for_conv && src.conv_made;
    }
    if (!private_copy) {
      copy_cache_key.push_back({ev, out});
      copy_cache_md.push_back(md);
    }
    return out;
  }
  int plain(int ev) { return as(ev, plain_md(vals[size_t(ev)].shape, vals[size_t(ev)].dtype)); }
  // Plain and in the arena or a constant (what an op's own kernel reads).
  int kernel_readable(int ev, bool strided_ok) {
    const EVal v = vals[size_t(ev)];  // a copy: new values move vals
    if (v.where == Where::input) {
      const int c = new_arena(plain_md(v.shape, v.dtype), v.shape, v.dtype);
      auto pd = dnnl::reorder::primitive_desc(dnnl_util::engine(), v.md, dnnl_util::engine(), vals[size_t(c)].md, attr_with(nullptr));
      Step& s = add_dnnl("(input)", "copy input", pd, {{DNNL_ARG_FROM, ev}, {DNNL_ARG_TO, c}});
      s.info.kind = "reorder";
      s.info.node = -1;
      s.info.cost.bytes_read = s.info.cost.bytes_written = int64_t(v.md.get_size());
      return c;
    }
    if (v.plain && (strided_ok || dense(v.shape, v.strides))) return ev;
    return plain(ev);
  }

  // Whether graph value gv, held as ev, is read for the last time by the current node (so its
  // buffer may take the node's output).
  bool dies_here(int gv, int ev, int reads_here = 1) const {
    const EVal& v = vals[size_t(ev)];
    if (v.where != Where::arena || v.view || shared_buffer[size_t(v.buffer)]) return false;
    if (stored[size_t(gv)] != ev || remaining[size_t(gv)] != reads_here) return false;
    for (int o : prog.graph.outputs)
      if (o == gv) return false;
    return true;
  }

  int64_t val_bytes(int ev) const {
    const EVal& v = vals[size_t(ev)];
    if (v.where == Where::arena && !v.view) return buffers[size_t(v.buffer)].bytes;
    return v.md.is_zero() ? shape_numel(v.shape) * int64_t(dtype_size(v.dtype)) : int64_t(v.md.get_size());
  }
  const graph::Value& gval(int gv) const { return prog.graph.values[size_t(gv)]; }
  int ev_of(int gv) const {
    RK_CHECK(gv >= 0 && stored[size_t(gv)] >= 0, "[engine] value %{} is read before it is made", gv);
    return stored[size_t(gv)];
  }
  int reads_of(const Node& n, int gv) const { return int(std::count(n.inputs.begin(), n.inputs.end(), gv)); }
  void set_out(const Node& n, int ev) { stored[size_t(n.outputs[0])] = ev; }

  // The output of a conv or linear step whose input is xin: a new buffer, or with a sum post-op
  // (residual r) the residual's own buffer when it dies here and is not also the input (oneDNN
  // does not take dst over src: conv(x) + x), else a private copy of the residual to sum into.
  int product_dst(const Node& n, int r, int xin, const memory::desc& dst, const Shape& ys, bool& in_place,
                  DType yt = DType::f32) {
    in_place = false;
    if (r < 0) return new_arena(dst, ys, yt);
    const int rv = ev_of(r);
    const bool shares_input = vals[size_t(xin)].where == Where::arena && vals[size_t(xin)].buffer == vals[size_t(rv)].buffer;
    // The residual in dst's layout and its own dtype (an int8 output may take the bytes of a
    // residual of the other 8-bit type: the sum post-op reads them as that type).
    memory::desc rmd = dst;
    rmd.data.data_type = memory::convert_to_c(dt(vals[size_t(rv)].dtype));
    int held;
    if (dies_here(r, rv, reads_of(n, r)) && vals[size_t(rv)].md == rmd && !shares_input) {
      in_place = true;
      held = rv;
    } else {
      held = as(rv, rmd, /*private_copy=*/true);
    }
    if (vals[size_t(held)].dtype == yt) return held;
    EVal y = vals[size_t(held)];  // the same buffer, seen as the output's dtype
    y.md = dst;
    y.dtype = yt;
    return add_val(std::move(y));
  }

  // ---- lowering, op by op: false = not lowered (the op's own kernel runs it) ----
  bool lower_conv(const Node& n, const ConvAttrs& a, const std::vector<PostOp>& post) {
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(post) ? n.inputs.at(3) : -1;
    if (!prog.is_constant(w) || (b >= 0 && !prog.is_constant(b)) || gval(x).spec.dtype != DType::f32) return false;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape, &ys = gval(n.outputs[0]).spec.shape;
    if (conv_small::applies(xs, ws, a, DType::f32)) return lower_conv_direct(n, a, post);
    memory::dims wd = dims_of(ws);
    tag wtag = tag::oihw;
    if (a.groups > 1) {
      wd = {a.groups, ws[0] / a.groups, ws[1], ws[2], ws[3]};
      wtag = tag::goihw;
    }
    memory::dims stride{a.stride[0], a.stride[1]}, dil{a.dilation[0] - 1, a.dilation[1] - 1},
        pad_l{a.padding[0], a.padding[1]}, pad_r(2);
    for (int i = 0; i < 2; ++i)
      pad_r[size_t(i)] = (ys[size_t(2 + i)] - 1) * a.stride[size_t(i)] + (ws[size_t(2 + i)] - 1) * a.dilation[size_t(i)] +
                         1 - xs[size_t(2 + i)] - a.padding[size_t(i)];
    const auto f = memory::data_type::f32;
    dnnl::post_ops po;
    if (!append_post(po, post)) return false;
    auto attr = attr_with(&po);
    const auto algo = a.algo == ConvAlgorithm::direct ? dnnl::algorithm::convolution_direct : dnnl::algorithm::convolution_auto;
    auto make = [&](const memory::desc& src) {
      auto d = b >= 0 ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algo, src,
                                                        memory::desc(wd, f, tag::any), memory::desc({ws[0]}, f, tag::a),
                                                        memory::desc(dims_of(ys), f, tag::any), stride, dil, pad_l, pad_r)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algo, src,
                                                        memory::desc(wd, f, tag::any), memory::desc(dims_of(ys), f, tag::any),
                                                        stride, dil, pad_l, pad_r);
      return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_util::engine());
    };
    // The layout the input already has, unless only a reference kernel or oneDNN's gemm-based one
    // takes it and a layout of its choosing gets a direct kernel: tinycnn's 16 -> 32 3x3 layers,
    // reading the NCHW that the direct first layer and a pool wrote, ran x64:gemm:jit at 33-50
    // G MAC/s, 0.88 and 0.58 ms of a 1.8 ms batch of 32 on a Xeon.
    const EVal& xv = vals[size_t(ev_of(x))];
    std::optional<dnnl::convolution_forward::primitive_desc> pd;
    const auto any_src = [&] { return make(memory::desc(dims_of(xs), f, tag::any)); };
    const auto is_ref = [](const auto& p) { return std::string(p.impl_info_str()).rfind("ref", 0) == 0; };
    const auto is_gemm = [](const auto& p) { return conv_impl_is_gemm(p.impl_info_str()); };
    // (A 1x1 convolution on NCHW is a plain matrix product under gemm: kept, no reorder.)
    const bool pointwise = ws[2] == 1 && ws[3] == 1 && a.stride[0] == 1 && a.stride[1] == 1;
    if (opt.blocked_layouts && xv.md.data.format_kind == dnnl_blocked) {
      pd = try_make([&] { return make(xv.md); });
      if (pd && (is_ref(*pd) || (is_gemm(*pd) && !pointwise))) {
        auto other = try_make(any_src);
        if (other && !is_ref(*other) && !is_gemm(*other)) pd = other;
        else if (is_ref(*pd)) pd.reset();
      }
    }
    if (!pd) pd = try_make(any_src);
    if (!pd) return false;
    const int xin = as(ev_of(x), pd->src_desc(), false, true);
    // Weights: the constant in its plain layout, reordered once into the primitive's.
    int wc = ev_of(w);
    if (a.groups > 1) {  // the same bytes seen as GOIHW
      EVal g = vals[size_t(wc)];
      g.md = memory::desc(wd, f, wtag);
      g.view = true;
      wc = add_val(std::move(g));
    }
    const int win = as(wc, pd->weights_desc());
    bool in_place = false;
    const int y = product_dst(n, r, xin, pd->dst_desc(), ys, in_place);
    vals[size_t(y)].conv_made = true;
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, xin}, {DNNL_ARG_WEIGHTS, win}, {DNNL_ARG_DST, y}};
    if (b >= 0) args.push_back({DNNL_ARG_BIAS, ev_of(b)});
    std::string op = "conv2d";
    if (a.groups > 1) op += a.groups == ws[0] && ws[1] == 1 ? "(depthwise)" : fmt::format("(groups {})", a.groups);
    if (b >= 0) op += "+bias";
    if (!post.empty()) op += "+" + post_ops_str(post);
    Step& s = add_dnnl(n.scope, op, *pd, std::move(args));
    s.info.in_place = in_place;
    set_out(n, opt.blocked_layouts ? y : plain(y));
    return true;
  }

  bool lower_linear(const Node& n, const std::vector<PostOp>& post) {
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(post) ? n.inputs.at(3) : -1;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape;
    if (xs.size() != 2 || !prog.is_constant(w) || (b >= 0 && !prog.is_constant(b)) || gval(x).spec.dtype != DType::f32)
      return false;
    const auto f = memory::data_type::f32;
    dnnl::post_ops po;
    if (!append_post(po, post)) return false;
    auto attr = attr_with(&po);
    const memory::dims yd{xs[0], ws[0]};
    auto pd = try_make([&] {
      auto d = b >= 0 ? dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, plain_md(xs, DType::f32),
                                                          memory::desc(dims_of(ws), f, tag::any),
                                                          memory::desc({ws[0]}, f, tag::a), memory::desc(yd, f, tag::nc))
                      : dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, plain_md(xs, DType::f32),
                                                          memory::desc(dims_of(ws), f, tag::any), memory::desc(yd, f, tag::nc));
      return dnnl::inner_product_forward::primitive_desc(d, attr, dnnl_util::engine());
    });
    if (!pd) return false;
    const int xin = as(ev_of(x), pd->src_desc());
    const int win = as(ev_of(w), pd->weights_desc());
    bool in_place = false;
    const int y = product_dst(n, r, xin, pd->dst_desc(), {xs[0], ws[0]}, in_place);
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, xin}, {DNNL_ARG_WEIGHTS, win}, {DNNL_ARG_DST, y}};
    if (b >= 0) args.push_back({DNNL_ARG_BIAS, ev_of(b)});
    std::string op = "linear";
    if (b >= 0) op += "+bias";
    if (!post.empty()) op += "+" + post_ops_str(post);
    Step& s = add_dnnl(n.scope, op, *pd, std::move(args));
    s.info.in_place = in_place;
    set_out(n, y);
    return true;
  }

  // A direct step: fn on plain tensors (ins made readable so, -1 for none), one plain output, with
  // scratch_bytes of the arena (known now: the same size function the kernel's eager call asks).
  void add_direct(const Node& n, std::string op, std::vector<int> ins, int y, int64_t scratch_bytes, double lane_use,
                  std::function<void(std::span<const Tensor>, std::span<Tensor>, void*)> fn) {
    for (int& ev : ins)
      if (ev >= 0) {
        ev = kernel_readable(ev, false);
        read(ev);
      }
    Step& s = add_step(n.scope, std::move(op), "direct");
    s.dnnl_step = false;
    s.ins = std::move(ins);
    s.outs = {y};
    s.direct = std::move(fn);
    s.info.impl = "reckon direct (few channels)";
    s.info.lane_use = lane_use;
    add_scratch(s, scratch_bytes);
    set_out(n, y);
  }

  // A convolution of few channels (conv_small::applies: a first layer, LeNet-5's): the direct loops on
  // NCHW, where oneDNN would pad the channels to a vector's 16 and reorder around them.
  bool lower_conv_direct(const Node& n, const ConvAttrs& a, const std::vector<PostOp>& post) {
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(post) ? n.inputs.at(3) : -1;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape, &ys = gval(n.outputs[0]).spec.shape;
    const int T = omp_get_max_threads();
    const int y = new_arena(plain_md(ys, DType::f32), ys, DType::f32);
    std::string op = "conv2d direct";
    if (b >= 0) op += "+bias";
    if (!post.empty()) op += "+" + post_ops_str(post);
    add_direct(n, op, {ev_of(x), ev_of(w), b >= 0 ? ev_of(b) : -1, r >= 0 ? ev_of(r) : -1}, y,
               conv_small::forward_scratch_bytes(xs, ws, ys, a, T), conv_small::forward_lane_use(xs, ws, a),
               [a, post, T](std::span<const Tensor> in, std::span<Tensor> out, void* scratch) {
                 conv_small::forward(in[0], in[1], in[2].defined() ? &in[2] : nullptr, out[0], a, scratch, T);
                 if (post.empty()) return;
                 float* py = out[0].data<float>();
                 apply_post_ops("conv2d_fused", py, py, in[3].defined() ? in[3].data<float>() : nullptr, out[0].numel(), post);
               });
    return true;
  }

  // An int8 convolution (ops/quant.h): oneDNN's int8 primitive in the layout the input has,
  // its s8 weights reordered once (with the compensation an s8 input needs), the int32 bias as
  // given, the requantization, activation and residual add as output scales and post-ops.
  bool lower_conv_int8(const Node& n) {
    const auto& a = attrs_of<QuantConvAttrs>(n);
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(a.q.post) ? n.inputs.at(3) : -1;
    if (!prog.is_constant(w) || (b >= 0 && !prog.is_constant(b))) return false;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape, &ys = gval(n.outputs[0]).spec.shape;
    const DType xt = gval(x).spec.dtype, yt = gval(n.outputs[0]).spec.dtype;
    if (conv_small::first_layer(xs, ws, a.conv)) {  // a first layer: the direct loops (exact on any cpu)
      const int T = omp_get_max_threads();
      const int y = new_arena(plain_md(ys, yt), ys, yt);
      std::string op = fmt::format("conv2d int8 direct {}->{}", quant_dtype_name(xt), quant_dtype_name(yt));
      if (b >= 0) op += "+bias";
      if (!a.q.post.empty()) op += "+" + post_ops_str(a.q.post);
      add_direct(n, op, {ev_of(x), ev_of(w), b >= 0 ? ev_of(b) : -1, r >= 0 ? ev_of(r) : -1}, y,
                 conv_small::forward_int8_scratch_bytes(xs, ws, ys, a.conv, T),
                 conv_small::forward_lane_use(xs, ws, a.conv),
                 [a, T](std::span<const Tensor> in, std::span<Tensor> out, void* scratch) {
                   conv_small::forward_int8(in[0], in[1], in[2].defined() ? &in[2] : nullptr,
                                            in[3].defined() ? &in[3] : nullptr, out[0], a, scratch, T);
                 });
      steps.back().info.int8_in_f32 = true;
      return true;
    }
    if (!int8_exact::dnnl_is_exact()) return false;  // the op's exact kernel (int8_exact.h)
    if (dw_int8::applies(xs, ws, a, xt, yt) && r < 0) return lower_conv_int8_depthwise(n, a);
    auto attr = dnnl_util::quant_attr(a.q, ws[0]);
    if (!attr) return false;
    const auto g = dnnl_util::quant_conv_geo(xs, ws, ys, a.conv);
    const EVal& xv = vals[size_t(ev_of(x))];
    std::optional<dnnl::convolution_forward::primitive_desc> pd;
    if (opt.blocked_layouts && xv.md.data.format_kind == dnnl_blocked && !xv.plain)
      pd = try_make([&] { return dnnl_util::quant_conv_pd(xv.md, g, yt, b >= 0, *attr); });
    if (!pd) pd = try_make([&] { return dnnl_util::quant_conv_pd(memory::desc(g.x, dt(xt), tag::any), g, yt, b >= 0, *attr); });
    if (!pd) return false;
    const int xin = as(ev_of(x), pd->src_desc(), false, true);
    int wc = ev_of(w);
    if (a.conv.groups > 1) {
      EVal gv = vals[size_t(wc)];
      gv.md = memory::desc(g.w, memory::data_type::s8, g.w_tag);
      gv.view = true;
      wc = add_val(std::move(gv));
    }
    const int win = as(wc, pd->weights_desc());
    bool in_place = false;
    const int y = product_dst(n, r, xin, pd->dst_desc(), ys, in_place, yt);
    vals[size_t(y)].conv_made = true;
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, xin}, {DNNL_ARG_WEIGHTS, win}, {DNNL_ARG_DST, y}};
    if (b >= 0) args.push_back({DNNL_ARG_BIAS, ev_of(b)});
    std::string op = fmt::format("conv2d int8 {}->{}", quant_dtype_name(xt), quant_dtype_name(yt));
    if (a.conv.groups > 1) op += a.conv.groups == ws[0] && ws[1] == 1 ? "(depthwise)" : fmt::format("(groups {})", a.conv.groups);
    if (b >= 0) op += "+bias";
    if (!a.q.post.empty()) op += "+" + post_ops_str(a.q.post);
    Step& s = add_dnnl(n.scope, op, *pd, std::move(args));
    s.info.in_place = in_place;
    set_out(n, opt.blocked_layouts ? y : plain(y));
    return true;
  }

  // A depthwise int8 convolution (dw_int8.h): reckon's VNNI kernel on channels-last bytes, its
  // weights packed once into a constant of their own.
  bool lower_conv_int8_depthwise(const Node& n, const QuantConvAttrs& a) {
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape, &ys = gval(n.outputs[0]).spec.shape;
    const DType xt = gval(x).spec.dtype, yt = gval(n.outputs[0]).spec.dtype;
    const EVal &wv = vals[size_t(ev_of(w))], *bv = b >= 0 ? &vals[size_t(ev_of(b))] : nullptr;
    if (!wv.plain || (bv && !bv->plain)) return false;
    EVal pk;
    pk.where = Where::constant;
    pk.dtype = DType::u8;
    pk.shape = {dw_int8::packed_bytes(xs[1])};
    pk.strides = {1};
    pk.md = plain_md(pk.shape, DType::u8);
    {
      TagGuard tag(Tag::param);
      pk.data = Tensor::empty(pk.shape, DType::u8, data ? Device::cpu : Device::meta);
    }
    if (data)
      dw_int8::pack(wv.data.data<int8_t>() + wv.elem_offset, bv ? bv->data.data<int32_t>() + bv->elem_offset : nullptr,
                    xs[1], ws[2], ws[3], a, xt, pk.data.raw_data());
    const int packed = add_val(std::move(pk));
    const int xin = as(ev_of(x), memory::desc(dims_of(xs), dt(xt), tag::acdb), false, true);
    read(xin);
    const int y = new_arena(memory::desc(dims_of(ys), dt(yt), tag::acdb), ys, yt);
    vals[size_t(y)].conv_made = true;
    std::string op = fmt::format("conv2d int8 {}->{}(depthwise)", quant_dtype_name(xt), quant_dtype_name(yt));
    if (b >= 0) op += "+bias";
    if (!a.q.post.empty()) op += "+" + post_ops_str(a.q.post);
    Step& s = add_step(n.scope, std::move(op), "direct");
    s.dnnl_step = false;
    s.flat = true;
    s.ins = {xin, packed};
    s.outs = {y};
    s.info.impl = "reckon int8 depthwise (avx512_vnni)";
    s.info.lane_use = dw_int8::lane_use(xs[1], ws[2], ws[3], a.conv.stride[1]);
    s.direct = [xs, ys, KH = ws[2], a, xt, yt](std::span<const Tensor> in, std::span<Tensor> out, void*) {
      dw_int8::forward(in[0].raw_data(), out[0].raw_data(), in[1].raw_data(), xs, ys, KH, a, xt, yt);
    };
    set_out(n, opt.blocked_layouts ? y : plain(y));
    return true;
  }

  bool lower_linear_int8(const Node& n) {
    if (!int8_exact::dnnl_is_exact()) return false;  // the op's exact kernel (int8_exact.h)
    const auto& q = attrs_of<QuantLinearAttrs>(n);
    const int x = n.inputs[0], w = n.inputs[1];
    const int b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(q.post) ? n.inputs.at(3) : -1;
    const Shape &xs = gval(x).spec.shape, &ws = gval(w).spec.shape;
    if (!prog.is_constant(w) || (b >= 0 && !prog.is_constant(b))) return false;
    const DType xt = gval(x).spec.dtype, yt = gval(n.outputs[0]).spec.dtype;
    auto attr = dnnl_util::quant_attr(q, ws[0]);
    if (!attr) return false;
    auto pd = try_make([&] { return dnnl_util::quant_linear_pd(plain_md(xs, xt), ws, yt, b >= 0, *attr); });
    if (!pd) return false;
    const int xin = as(ev_of(x), pd->src_desc());
    const int win = as(ev_of(w), pd->weights_desc());
    bool in_place = false;
    const int y = product_dst(n, r, xin, pd->dst_desc(), {xs[0], ws[0]}, in_place, yt);
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, xin}, {DNNL_ARG_WEIGHTS, win}, {DNNL_ARG_DST, y}};
    if (b >= 0) args.push_back({DNNL_ARG_BIAS, ev_of(b)});
    std::string op = fmt::format("linear int8 {}->{}", quant_dtype_name(xt), quant_dtype_name(yt));
    if (b >= 0) op += "+bias";
    if (!q.post.empty()) op += "+" + post_ops_str(q.post);
    Step& s = add_dnnl(n.scope, op, *pd, std::move(args));
    s.info.in_place = in_place;
    set_out(n, y);
    return true;
  }

  // add_int8 (ops/quant.h): its own kernel over the bytes of the layout its inputs share (an
  // elementwise op does not mind how they are laid out), as long as the layout has no padding.
  // The output is a buffer of its own: the kernel's loops assume it overlaps neither input.
  bool lower_add_int8(const Node& n) {
    const int a = n.inputs[0], b = n.inputs[1];
    const Shape& ys = gval(n.outputs[0]).spec.shape;
    const DType yt = gval(n.outputs[0]).spec.dtype;
    const int ae = ev_of(a);
    memory::desc md = vals[size_t(ae)].md;
    if (md.is_zero() || int64_t(md.get_size()) != shape_numel(ys)) return false;  // blocks padded: plain views
    md.data.data_type = memory::convert_to_c(dt(gval(b).spec.dtype));
    const int be = as(ev_of(b), md);
    md.data.data_type = memory::convert_to_c(dt(yt));
    const int y = new_arena(md, ys, yt);
    read(ae);
    read(be);
    Step& s = add_step(n.scope, fmt::format("add int8 {}+{}->{}", quant_dtype_name(gval(a).spec.dtype),
                                            quant_dtype_name(gval(b).spec.dtype), quant_dtype_name(yt)),
                       "kernel");
    s.dnnl_step = false;
    s.flat = true;
    s.op = n.op;
    s.attrs = n.attrs.get();
    s.ins = {ae, be};
    s.outs = {y};
    s.info.impl = "reckon cpu kernel (any layout)";
    set_out(n, y);
    return true;
  }

  // An output in the input's layout: the input's own buffer when it dies here.
  int same_layout_out(const Node& n, int gv_in, const memory::desc& md, bool& in_place) {
    const int ev = ev_of(gv_in);
    in_place = dies_here(gv_in, ev, reads_of(n, gv_in)) && vals[size_t(ev)].md == md;
    return in_place ? ev : new_arena(md, gval(n.outputs[0]).spec.shape, gval(n.outputs[0]).spec.dtype);
  }

  bool lower_pool(const Node& n, dnnl::algorithm alg, std::array<int64_t, 2> k, std::array<int64_t, 2> st,
                  std::array<int64_t, 2> pad, std::array<int64_t, 2> dil, const std::string& op) {
    const int x = n.inputs[0];
    const DType xt = gval(x).spec.dtype;
    if ((xt != DType::f32 && xt != DType::u8 && xt != DType::i8) || gval(x).spec.shape.size() != 4) return false;
    const Shape &xs = gval(x).spec.shape, &ys = gval(n.outputs[0]).spec.shape;
    memory::dims pad_r(2);
    for (int i = 0; i < 2; ++i)
      pad_r[size_t(i)] = (ys[size_t(2 + i)] - 1) * st[size_t(i)] + (k[size_t(i)] - 1) * dil[size_t(i)] + 1 -
                         xs[size_t(2 + i)] - pad[size_t(i)];
    const int xe = ev_of(x);
    auto make = [&](const memory::desc& src) {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src,
                                       memory::desc(dims_of(ys), dt(xt), tag::any), {st[0], st[1]},
                                       {k[0], k[1]}, {dil[0] - 1, dil[1] - 1}, {pad[0], pad[1]}, pad_r);
      return dnnl::pooling_v2_forward::primitive_desc(d, attr_with(nullptr), dnnl_util::engine());
    };
    auto pd = try_make([&] { return make(vals[size_t(xe)].md); });
    int xin = xe;
    if (!pd) {
      xin = plain(xe);
      pd = try_make([&] { return make(vals[size_t(xin)].md); });
    }
    if (!pd) return false;
    const int y = new_arena(pd->dst_desc(), ys, xt);
    add_dnnl(n.scope, op, *pd, {{DNNL_ARG_SRC, xin}, {DNNL_ARG_DST, y}});
    set_out(n, opt.blocked_layouts ? y : plain(y));
    return true;
  }

  bool lower_batch_norm(const Node& n) {
    const auto& a = attrs_of<BatchNormAttrs>(n);
    if (a.training || n.inputs.size() < 5) return false;
    const int x = n.inputs[0];
    for (size_t i = 1; i < 5; ++i)
      if (n.inputs[i] >= 0 && !prog.is_constant(n.inputs[i])) return false;
    if (n.inputs[3] < 0 || n.inputs[4] < 0 || gval(x).spec.dtype != DType::f32) return false;
    const int64_t c = gval(x).spec.shape.at(1);
    auto constant_or = [&](int gv, double v) {
      if (gv >= 0) return ev_of(gv);
      EVal e;
      e.md = plain_md({c}, DType::f32);
      e.shape = {c};
      e.strides = {1};
      e.where = Where::constant;
      TagGuard tag(Tag::param);
      e.data = data ? Tensor::full({c}, v) : Tensor::empty({c}, DType::f32, Device::meta);
      return add_val(std::move(e));
    };
    const int scale = constant_or(n.inputs[1], 1.0), shift = constant_or(n.inputs[2], 0.0);
    const int xe = ev_of(x);
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    auto pd = try_make([&] {
      dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, vals[size_t(xe)].md, float(a.eps), flags);
      return dnnl::batch_normalization_forward::primitive_desc(d, attr_with(nullptr), dnnl_util::engine());
    });
    if (!pd) return false;
    bool in_place = false;
    const int y = same_layout_out(n, x, pd->dst_desc(), in_place);
    Step& s = add_dnnl(n.scope, "batch_norm2d", *pd,
                       {{DNNL_ARG_SRC, xe}, {DNNL_ARG_MEAN, ev_of(n.inputs[3])}, {DNNL_ARG_VARIANCE, ev_of(n.inputs[4])},
                        {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}, {DNNL_ARG_DST, y}});
    s.info.in_place = in_place;
    set_out(n, y);
    return true;
  }

  bool lower_eltwise(const Node& n, const std::vector<PostOp>& post, const std::string& op) {
    const int x = n.inputs[0];
    if (post.empty() || gval(x).spec.dtype != DType::f32) return false;
    dnnl::algorithm alg;
    float a, b;
    if (!eltwise_alg(post[0], alg, a, b)) return false;
    dnnl::post_ops po;
    if (!append_post(po, post, 1)) return false;
    const int xe = ev_of(x);
    auto pd = try_make([&] {
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, vals[size_t(xe)].md, a, b);
      return dnnl::eltwise_forward::primitive_desc(d, attr_with(post.size() > 1 ? &po : nullptr), dnnl_util::engine());
    });
    if (!pd) return false;
    bool in_place = false;
    const int y = same_layout_out(n, x, pd->dst_desc(), in_place);
    Step& s = add_dnnl(n.scope, op, *pd, {{DNNL_ARG_SRC, xe}, {DNNL_ARG_DST, y}});
    s.info.in_place = in_place;
    set_out(n, y);
    return true;
  }

  // A value seen with more leading 1 dims (the same bytes): broadcasting operands.
  int with_rank(int ev, size_t rank) {
    const EVal& v = vals[size_t(ev)];
    if (v.shape.size() == rank) return ev;
    EVal u = v;
    Shape s(rank - v.shape.size(), 1);
    s.insert(s.end(), v.shape.begin(), v.shape.end());
    u.shape = s;
    u.strides = contiguous_strides(s);
    u.md = plain_md(s, v.dtype);
    u.view = true;
    if (u.where == Where::arena) shared_buffer[size_t(u.buffer)] = 1;
    return add_val(std::move(u));
  }

  bool lower_binary(const Node& n, dnnl::algorithm alg, bool commutative, const std::string& op) {
    int a = n.inputs[0], b = n.inputs[1];
    const Shape& ys = gval(n.outputs[0]).spec.shape;
    if (gval(a).spec.dtype != DType::f32 || ys.empty()) return false;
    if (gval(a).spec.shape != ys) {
      if (!commutative || gval(b).spec.shape != ys) return false;
      std::swap(a, b);
    }
    const int ae = ev_of(a);
    int be = ev_of(b);
    if (gval(b).spec.shape != ys) be = with_rank(plain(be), ys.size());
    auto make = [&](const memory::desc& m1) {
      return try_make([&] {
        dnnl::binary::desc d(alg, vals[size_t(ae)].md, m1, vals[size_t(ae)].md);
        return dnnl::binary::primitive_desc(d, attr_with(nullptr), dnnl_util::engine());
      });
    };
    auto pd = make(vals[size_t(be)].md);
    if (!pd && gval(b).spec.shape == ys) {
      be = as(be, vals[size_t(ae)].md);
      pd = make(vals[size_t(be)].md);
    }
    if (!pd) return false;
    bool in_place = false;
    const int y = same_layout_out(n, a, pd->dst_desc(), in_place);
    Step& s = add_dnnl(n.scope, op, *pd, {{DNNL_ARG_SRC_0, ae}, {DNNL_ARG_SRC_1, be}, {DNNL_ARG_DST, y}});
    s.info.in_place = in_place;
    set_out(n, y);
    return true;
  }

  bool lower_lrn(const Node& n) {
    const auto& a = attrs_of<LrnAttrs>(n);
    const int x = n.inputs[0];
    if (a.size % 2 == 0 || gval(x).spec.dtype != DType::f32 || gval(x).spec.shape.size() != 4) return false;
    const int xe = ev_of(x);
    auto pd = try_make([&] {
      dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels,
                                vals[size_t(xe)].md, a.size, float(a.alpha), float(a.beta), float(a.k));
      return dnnl::lrn_forward::primitive_desc(d, attr_with(nullptr), dnnl_util::engine());
    });
    if (!pd) return false;
    const int y = new_arena(pd->dst_desc(), gval(n.outputs[0]).spec.shape, DType::f32);
    add_dnnl(n.scope, "local_response_norm", *pd, {{DNNL_ARG_SRC, xe}, {DNNL_ARG_DST, y}});
    set_out(n, y);
    return true;
  }

  bool lower_concat(const Node& n) {
    const Shape& ys = gval(n.outputs[0]).spec.shape;
    int64_t dim = attrs_of<Concat::Attrs>(n).dim;
    if (dim < 0) dim += int64_t(ys.size());
    std::vector<memory::desc> mds;
    std::vector<int> evs;
    for (int gv : n.inputs) {
      if (gv < 0 || gval(gv).spec.dtype != DType::f32 || gval(gv).spec.shape.size() != ys.size()) return false;
      int ev = ev_of(gv);
      // oneDNN 2.6's concat gave wrong values for a strided slice next to a blocked input
      // (shufflenet): slices are made dense first.
      if (vals[size_t(ev)].plain && !dense(vals[size_t(ev)].shape, vals[size_t(ev)].strides)) ev = plain(ev);
      evs.push_back(ev);
      mds.push_back(vals[size_t(ev)].md);
    }
    if (ys.empty() || evs.empty()) return false;
    auto pd = try_make([&] { return dnnl::concat::primitive_desc(int(dim), mds, dnnl_util::engine(), attr_with(nullptr)); });
    if (!pd) return false;
    const int y = new_arena(pd->dst_desc(), ys, DType::f32);
    std::vector<std::pair<int, int>> args;
    for (size_t i = 0; i < evs.size(); ++i) args.push_back({DNNL_ARG_MULTIPLE_SRC + int(i), evs[i]});
    args.push_back({DNNL_ARG_DST, y});
    add_dnnl(n.scope, "concat", *pd, std::move(args));
    set_out(n, y);
    return true;
  }

  // A view op (reshape, permute, narrow, expand): a value over the same bytes, no step.
  void lower_view(const Node& n) {
    const int base = kernel_readable(ev_of(n.inputs[0]), true);
    const EVal& b = vals[size_t(base)];
    // The op's own view function, on a meta tensor laid out as the base, gives shape and strides.
    Tensor m = Tensor::empty({1}, b.dtype, Device::meta);
    Tensor bm = make_view(m, b.shape, b.strides, b.elem_offset);
    Tensor v;
    {
      NoGrad no_grad;
      v = op_info(n.op).call({bm}, n.attrs.get())[0];
    }
    EVal e = b;
    e.shape = v.shape();
    e.strides = v.strides();
    e.elem_offset = v.offset();
    e.md = plain_md(e.shape, e.dtype, e.strides);
    e.plain = true;
    e.view = true;
    if (e.where == Where::arena) shared_buffer[size_t(e.buffer)] = 1;
    read(base);
    set_out(n, add_val(std::move(e)));
  }

  // Any other op: its own kernel (cpu, else reference) on plain views of the arena.
  void lower_kernel(const Node& n) {
    const OpInfo& info = op_info(n.op);
    RK_CHECK(n.aliases == 0, "[engine] {} at '{}' writes its input in place: not in a forward program", n.op_name(),
             n.scope);
    std::vector<int> ins;
    for (int gv : n.inputs) ins.push_back(gv < 0 ? -1 : kernel_readable(ev_of(gv), info.takes_strided));
    for (int ev : ins)
      if (ev >= 0) read(ev);
    std::vector<int> outs;
    for (int gv : n.outputs) {
      const auto& s = gval(gv).spec;
      outs.push_back(new_arena(plain_md(s.shape, s.dtype), s.shape, s.dtype));
    }
    Step& s = add_step(n.scope, std::string(n.op_name()), "kernel");
    s.dnnl_step = false;
    s.op = n.op;
    s.attrs = n.attrs.get();
    s.ins = ins;
    s.outs = outs;
    s.info.impl = info.has_cpu_kernel ? "reckon cpu kernel" : "reckon reference kernel";
    for (size_t k = 0; k < n.outputs.size(); ++k) stored[size_t(n.outputs[k])] = outs[k];
  }

  void lower(const Node& n) {
    const int id = n.op;
    bool done = false;
    auto unary = [&](std::vector<PostOp> post) { return lower_eltwise(n, post, std::string(n.op_name())); };
    auto ua = [&]() -> const UnaryAttrs& { return attrs_of<UnaryAttrs>(n); };
    if (id == op_id<Conv2d>) done = lower_conv(n, attrs_of<ConvAttrs>(n), {});
    else if (id == op_id<FusedConv2d>) done = lower_conv(n, attrs_of<FusedConvAttrs>(n).conv, attrs_of<FusedConvAttrs>(n).post);
    else if (id == op_id<Linear>) done = lower_linear(n, {});
    else if (id == op_id<FusedLinear>) done = lower_linear(n, attrs_of<PostOpsAttrs>(n).post);
    else if (id == op_id<Conv2dInt8>) done = lower_conv_int8(n);
    else if (id == op_id<LinearInt8>) done = lower_linear_int8(n);
    else if (id == op_id<AddInt8>) done = lower_add_int8(n);
    else if (id == op_id<Pool2dInt8> && vals[size_t(ev_of(n.inputs[0]))].plain) {
      // NCHW 8-bit values (a direct convolution's): the op's own kernel (oneDNN has only a
      // reference implementation for u8 in this layout: 18 ms for LeNet-5's first pool at batch 256)
    } else if (id == op_id<Pool2dInt8>) {
      const auto& a = attrs_of<QuantPoolAttrs>(n);
      const auto alg = a.mode == "max" ? dnnl::algorithm::pooling_max
                       : a.pool.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                  : dnnl::algorithm::pooling_avg_exclude_padding;
      done = lower_pool(n, alg, a.pool.kernel, a.pool.stride, a.pool.padding,
                        a.mode == "max" ? a.pool.dilation : std::array<int64_t, 2>{1, 1}, "pool2d int8 " + a.mode);
    }
    else if (id == op_id<MaxPool2d>) {
      const auto& a = attrs_of<PoolAttrs>(n);
      done = lower_pool(n, dnnl::algorithm::pooling_max, a.kernel, a.stride, a.padding, a.dilation, "max_pool2d");
    } else if (id == op_id<AvgPool2d>) {
      const auto& a = attrs_of<PoolAttrs>(n);
      if (!a.ceil_mode)
        done = lower_pool(n, a.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                 : dnnl::algorithm::pooling_avg_exclude_padding,
                          a.kernel, a.stride, a.padding, {1, 1}, "avg_pool2d");
    } else if (id == op_id<AdaptiveAvgPool2d>) {
      const auto& o = attrs_of<AdaptiveAvgPool2d::Attrs>(n).output_size;
      const Shape& xs = gval(n.inputs[0]).spec.shape;
      if (xs.size() == 4 && o[0] > 0 && o[1] > 0 && xs[2] % o[0] == 0 && xs[3] % o[1] == 0) {
        const std::array<int64_t, 2> k{xs[2] / o[0], xs[3] / o[1]};
        done = lower_pool(n, dnnl::algorithm::pooling_avg_exclude_padding, k, k, {0, 0}, {1, 1}, "adaptive_avg_pool2d");
      }
    } else if (id == op_id<BatchNorm2d>) done = lower_batch_norm(n);
    else if (id == op_id<LocalResponseNorm>) done = lower_lrn(n);
    else if (id == op_id<Concat>) done = lower_concat(n);
    else if (id == op_id<Add>) done = lower_binary(n, dnnl::algorithm::binary_add, true, "add");
    else if (id == op_id<Mul>) done = lower_binary(n, dnnl::algorithm::binary_mul, true, "mul");
    else if (id == op_id<Sub>) done = lower_binary(n, dnnl::algorithm::binary_sub, false, "sub");
    else if (id == op_id<Div>) done = lower_binary(n, dnnl::algorithm::binary_div, false, "div");
    else if (id == op_id<Relu>) done = unary({{"relu"}});
    else if (id == op_id<LeakyRelu>) done = unary({{"relu", ua().alpha}});
    else if (id == op_id<Relu6>) done = unary({{"clamp", 0, 6}});
    else if (id == op_id<Clamp>) done = unary({{"clamp", ua().alpha, ua().beta}});
    else if (id == op_id<Sigmoid>) done = unary({{"sigmoid"}});
    else if (id == op_id<Tanh>) done = unary({{"tanh"}});
    else if (id == op_id<Gelu>) done = unary({{"gelu"}});
    else if (id == op_id<Silu>) done = unary({{"silu"}});
    else if (id == op_id<Affine>)
      done = unary({{"affine", attrs_of<Affine::Attrs>(n).alpha, attrs_of<Affine::Attrs>(n).beta}});
    else if (id == op_id<FusedElementwise>)
      done = lower_eltwise(n, attrs_of<PostOpsAttrs>(n).post, "elementwise " + post_ops_str(attrs_of<PostOpsAttrs>(n).post));
    else if (op_info(id).is_view && n.inputs.size() == 1 && n.outputs.size() == 1) {
      lower_view(n);
      done = true;
    }
    if (!done) lower_kernel(n);
  }

  void compile() {
    const graph::Graph& g = prog.graph;
    data = prog.has_data();
    stored.assign(g.values.size(), -1);
    remaining = use_counts(g);
    in_shape = g.value(prog.input).spec.shape;
    const int out_gv = prog.output();
    out_shape = g.value(out_gv).spec.shape;
    RK_CHECK(g.value(prog.input).spec.dtype == DType::f32 && g.value(out_gv).spec.dtype == DType::f32,
             "[engine] runs f32 programs: the input is {} and the output {}", dtype_name(g.value(prog.input).spec.dtype),
             dtype_name(g.value(out_gv).spec.dtype));
    // Leaves: the input (bound per run) and the constants (plain, as given).
    {
      EVal x;
      x.md = plain_md(in_shape, DType::f32);
      x.shape = in_shape;
      x.strides = contiguous_strides(in_shape);
      x.where = Where::input;
      stored[size_t(prog.input)] = add_val(std::move(x));
    }
    for (const auto& [id, t] : prog.constants) {
      RK_CHECK(!data || t.is_contiguous(), "[engine] constant %{} is not dense", id);
      EVal c;
      c.shape = t.shape();
      c.dtype = t.dtype();
      c.strides = contiguous_strides(c.shape);
      c.md = plain_md(c.shape, c.dtype);
      c.where = Where::constant;
      c.data = t;
      c.elem_offset = 0;
      stored[size_t(id)] = add_val(std::move(c));
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      cur_node = int(i);
      const Node& n = g.nodes[i];
      try {
        lower(n);
      } catch (const dnnl::error& e) {
        throw Error(fmt::format("[engine] oneDNN could not build {} at '{}': {}", n.op_name(), n.scope, e.what()));
      }
      for (int v : n.inputs)
        if (v >= 0) --remaining[size_t(v)];
    }
    cur_node = -1;
    // The output: plain, then copied into the caller's tensor.
    const int o = plain(ev_of(out_gv));
    EVal ov;
    ov.md = plain_md(out_shape, DType::f32);
    ov.shape = out_shape;
    ov.strides = contiguous_strides(out_shape);
    ov.where = Where::output;
    output_ev = add_val(std::move(ov));
    {
      auto pd = dnnl::reorder::primitive_desc(dnnl_util::engine(), vals[size_t(o)].md, dnnl_util::engine(),
                                              vals[size_t(output_ev)].md, attr_with(nullptr));
      Step& s = add_dnnl("(output)", "output copy", pd, {{DNNL_ARG_FROM, o}, {DNNL_ARG_TO, output_ev}});
      s.info.kind = "reorder";
      s.info.node = -1;
      s.info.cost.bytes_read = s.info.cost.bytes_written = int64_t(vals[size_t(o)].md.get_size());
    }
    // The plan.
    for (const auto& b : buffers) values_total += b.bytes;
    arena = plan_arena(buffers);
    // What each step moves, and where its output lies.
    for (auto& s : steps) {
      if (s.info.node >= 0) s.info.cost = g.nodes[size_t(s.info.node)].cost;
      auto account = [&](int ev, bool is_out) {
        const EVal& v = vals[size_t(ev)];
        const int64_t bytes = val_bytes(ev);
        s.info.bytes_moved += bytes;
        if (v.where == Where::constant) s.info.weight_bytes += bytes;
        if (is_out) {
          s.info.out_bytes = bytes;
          s.info.out_offset = v.where == Where::arena ? buffers[size_t(v.buffer)].offset : -1;
        }
      };
      if (s.dnnl_step) {
        for (auto& [arg, ev] : s.args) account(ev, arg == DNNL_ARG_DST || arg == DNNL_ARG_TO);
      } else {
        for (int ev : s.ins)
          if (ev >= 0) account(ev, false);
        for (int ev : s.outs) account(ev, ev == s.outs[0]);
      }
    }
    {
      std::vector<bool> seen(vals.size(), false);
      for (auto& s : steps) {
        auto note = [&](int ev) {
          if (ev >= 0 && vals[size_t(ev)].where == Where::constant && !seen[size_t(ev)]) {
            seen[size_t(ev)] = true;
            weights += val_bytes(ev);
          }
        };
        for (auto& [arg, ev] : s.args) note(ev);
        for (int ev : s.ins) note(ev);
      }
    }
    for (const auto& s : steps) infos.push_back(s.info);
    if (data) bind();
  }

  // Allocates the arena and binds every step to its bytes.
  void bind() {
    {
      TagGuard tag(Tag::activation);
      if (arena > 0) arena_t = Tensor::empty({arena}, DType::u8);
    }
    char* base = arena > 0 ? static_cast<char*>(arena_t.raw_data()) : nullptr;
    mems.resize(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      const EVal& v = vals[i];
      const int64_t off = v.elem_offset * int64_t(dtype_size(v.dtype));
      void* p = nullptr;
      if (v.where == Where::arena) p = base + buffers[size_t(v.buffer)].offset + off;
      else if (v.where == Where::constant) p = static_cast<char*>(v.data.raw_data()) + off;
      else if (v.where == Where::input) input_evs.push_back(int(i));
      if (!v.md.is_zero()) mems[i] = memory(v.md, dnnl_util::engine(), p);
    }
    auto tensor_of = [&](int ev, bool flat) {
      const EVal& v = vals[size_t(ev)];
      if (v.where == Where::constant && !v.view && v.data.dtype() == v.dtype && !flat) return v.data;
      auto impl = std::make_shared<TensorImpl>();
      if (v.where == Where::arena) {
        impl->storage = arena_t.storage_ptr();
        impl->offset = (buffers[size_t(v.buffer)].offset) / int64_t(dtype_size(v.dtype)) + v.elem_offset;
      } else {
        impl->storage = v.data.storage_ptr();
        impl->offset = v.data.offset() + v.elem_offset;
      }
      impl->shape = flat ? Shape{val_bytes(ev) / int64_t(dtype_size(v.dtype))} : v.shape;
      impl->strides = flat ? Shape{1} : v.strides;
      impl->dtype = v.dtype;
      return Tensor(impl);
    };
    for (auto& s : steps) {
      if (s.dnnl_step) {
        for (auto& [arg, ev] : s.args) s.margs.emplace(arg, mems[size_t(ev)]);
        if (s.scratch_buffer >= 0)
          s.margs.emplace(DNNL_ARG_SCRATCHPAD, memory(s.scratch_md, dnnl_util::engine(),
                                                     base + buffers[size_t(s.scratch_buffer)].offset));
      } else {
        for (int ev : s.ins) s.tin.push_back(ev < 0 ? Tensor() : tensor_of(ev, s.flat));
        for (int ev : s.outs) s.tout.push_back(tensor_of(ev, s.flat));
        if (s.scratch_buffer >= 0) s.scratch = base + buffers[size_t(s.scratch_buffer)].offset;
      }
    }
  }

  void run_step(Step& s) {
    if (s.dnnl_step) {
      s.prim.execute(dnnl_util::stream(), s.margs);
      return;
    }
    dnnl_util::stream().wait();
    if (s.direct) {
      s.direct(s.tin, s.tout, s.scratch);
      return;
    }
    KernelCtx ctx;
    const auto& table = kernel_table();
    if (!s.use_ref && table.cpu[size_t(s.op)]) {
      if (table.cpu[size_t(s.op)](ctx, s.tin, s.tout, s.attrs).ok) return;
      s.use_ref = true;
    }
    table.ref[size_t(s.op)](ctx, s.tin, s.tout, s.attrs);
  }

  void bind_io(const Tensor& x, Tensor& y) {
    RK_CHECK(data, "[engine] the program has no data (built on the meta device): it plans but does not run");
    RK_CHECK(x.defined() && x.device() == Device::cpu && x.dtype() == DType::f32 && x.shape() == in_shape && x.is_contiguous(),
             "[engine] the input must be a dense f32 cpu tensor of shape {}, got {}", shape_str(in_shape),
             x.defined() ? x.str() : "none");
    RK_CHECK(y.defined() && y.device() == Device::cpu && y.dtype() == DType::f32 && y.shape() == out_shape && y.is_contiguous(),
             "[engine] the output must be a dense f32 cpu tensor of shape {}, got {}", shape_str(out_shape),
             y.defined() ? y.str() : "none");
    for (int ev : input_evs)
      mems[size_t(ev)].set_data_handle(static_cast<char*>(x.raw_data()) +
                                       vals[size_t(ev)].elem_offset * int64_t(dtype_size(DType::f32)));
    mems[size_t(output_ev)].set_data_handle(y.raw_data());
  }
};

Engine::Engine(Program p, const EngineOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->opt = o;
  impl_->prog = std::move(p);
  impl_->reports = run_passes(impl_->prog, o.passes);
  impl_->compile();
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

void Engine::run(const Tensor& x, Tensor& y) {
  impl_->bind_io(x, y);
  for (auto& s : impl_->steps) impl_->run_step(s);
  dnnl_util::stream().wait();
}
Tensor Engine::run(const Tensor& x) {
  Tensor y = Tensor::empty(impl_->out_shape);
  run(x, y);
  return y;
}
std::vector<double> Engine::run_timed(const Tensor& x, Tensor& y) {
  impl_->bind_io(x, y);
  std::vector<double> t;
  t.reserve(impl_->steps.size());
  for (auto& s : impl_->steps) {
    const auto t0 = std::chrono::steady_clock::now();
    impl_->run_step(s);
    dnnl_util::stream().wait();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return t;
}

const std::vector<StepInfo>& Engine::steps() const { return impl_->infos; }
const std::vector<PassReport>& Engine::passes() const { return impl_->reports; }
const Program& Engine::program() const { return impl_->prog; }
const Shape& Engine::input_shape() const { return impl_->in_shape; }
const Shape& Engine::output_shape() const { return impl_->out_shape; }
int64_t Engine::arena_bytes() const { return impl_->arena; }
int64_t Engine::weight_bytes() const { return impl_->weights; }
int64_t Engine::values_bytes() const { return impl_->values_total; }
bool Engine::can_run() const { return impl_->data; }
bool Engine::blocked_layouts() const { return impl_->opt.blocked_layouts; }
int Engine::reorders() const {
  int n = 0;
  for (const auto& s : impl_->infos)
    if (s.kind == "reorder" && s.name != "(output)") ++n;
  return n;
}

int64_t plan_arena(std::vector<Buffer>& buffers, int64_t align) {
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  int64_t total = 0;
  for (size_t i : order) {
    Buffer& b = buffers[i];
    if (b.bytes <= 0) {
      b.offset = 0;
      continue;
    }
    // Placed buffers alive at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t j : placed) {
      const Buffer& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) busy.push_back({o.offset, o.offset + o.bytes});
    }
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + b.bytes <= lo) break;
      at = std::max(at, (hi + align - 1) / align * align);
    }
    b.offset = at;
    total = std::max(total, at + b.bytes);
    placed.push_back(i);
  }
  return (total + align - 1) / align * align;
}

}  // namespace reckon::engine
