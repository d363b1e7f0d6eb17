#include "reckon/engine/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"

namespace reckon::engine {

using graph::Node;

Tensor run_program(const Program& p, const Tensor& x, const std::function<void(int, const Tensor&)>& visit) {
  const graph::Graph& g = p.graph;
  std::vector<Tensor> vals(g.values.size());
  std::vector<int> left = use_counts(g);
  vals[size_t(p.input)] = x;
  for (const auto& [id, t] : p.constants) vals[size_t(id)] = t;
  NoGrad no_grad;
  for (const Node& n : g.nodes) {
    std::vector<Tensor> in;
    for (int v : n.inputs) in.push_back(v < 0 ? Tensor() : vals[size_t(v)]);
    std::vector<Tensor> out;
    try {
      out = op_info(n.op).call(in, n.attrs.get());
    } catch (const Error& e) {
      throw Error(fmt::format("[quantize] {} at '{}': {}", n.op_name(), n.scope, e.what()));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      vals[size_t(n.outputs[k])] = out[k];
      if (visit) visit(n.outputs[k], out[k]);
    }
    for (int v : n.inputs)
      if (v >= 0 && --left[size_t(v)] == 0 && !p.is_constant(v) && v != p.input) vals[size_t(v)] = Tensor();
  }
  return vals[size_t(p.output())];
}

double sqnr_db(const Tensor& exact, const Tensor& approx) {
  Tensor a = contiguous(cast(exact, DType::f64)), b = contiguous(cast(approx, DType::f64));
  const double *pa = a.data<double>(), *pb = b.data<double>();
  double s = 0, e = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    s += pa[i] * pa[i];
    e += (pa[i] - pb[i]) * (pa[i] - pb[i]);
  }
  if (e == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(std::max(s, 1e-300) / e);
}

// ---- observation ----
Calibrator::Calibrator(const Program& p, int bins) : Calibrator(p, bins, false) {}
Calibrator::Calibrator(const Program& p, int bins, bool assumed) : prog_(p), bins_(bins), obs_(p.graph.values.size()) {
  RK_CHECK(assumed || p.has_data(), "[quantize] calibration needs a program with data (not the meta device)");
  RK_CHECK(bins >= 256, "[quantize] a histogram needs at least 256 bins, got {}", bins);
}
Calibrator Calibrator::assumed(const Program& p) {
  Calibrator c(p, 2048, true);
  // The input signed, as a normalized image is (and as --measure's N(0, 1) batch is): a signed
  // input is quantized s8, a non-negative one u8, and oneDNN picks kernels (and scratchpads) by
  // the source type, so assuming [0, 1] planned another kernel than the one that runs.
  for (size_t v = 0; v < p.graph.values.size(); ++v)
    if (p.graph.values[v].spec.dtype == DType::f32) c.fix(int(v), int(v) == p.input ? -1.0 : 0.0, 1.0);
  c.batches_ = 1;
  return c;
}

namespace {
void observe_value(Observation& ob, const Tensor& t, int bins) {
  if (t.dtype() != DType::f32 || t.numel() == 0) return;
  Tensor c = contiguous(t);
  const float* p = c.data<float>();
  const int64_t n = c.numel();
  double lo = p[0], hi = p[0];
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    lo = std::min(lo, double(p[i]));
    hi = std::max(hi, double(p[i]));
  }
  if (!std::isfinite(lo)) lo = 0;
  if (!std::isfinite(hi)) hi = 0;
  if (ob.batches == 0) {
    ob.min = lo;
    ob.max = hi;
    ob.ema_min = lo;
    ob.ema_max = hi;
    ob.hist.assign(size_t(bins), 0.0);
  } else {
    ob.min = std::min(ob.min, lo);
    ob.max = std::max(ob.max, hi);
    ob.ema_min += 0.01 * (lo - ob.ema_min);
    ob.ema_max += 0.01 * (hi - ob.ema_max);
  }
  ++ob.batches;
  // The histogram of |x| over [0, range]; a wider batch widens the range and rebins what is there.
  const double absmax = std::max(std::abs(lo), std::abs(hi));
  if (absmax > ob.hist_range) {
    const double range = ob.hist_range == 0 ? absmax : std::max(absmax, ob.hist_range * 1.25);
    if (ob.hist_range > 0) {
      std::vector<double> h(size_t(bins), 0.0);
      for (int i = 0; i < bins; ++i) {
        const double centre = (i + 0.5) * ob.hist_range / bins;
        h[size_t(std::min(bins - 1, int(centre / range * bins)))] += ob.hist[size_t(i)];
      }
      ob.hist = std::move(h);
    }
    ob.hist_range = range;
  }
  if (ob.hist_range == 0) {
    ob.hist[0] += double(n);
    return;
  }
  const double k = bins / ob.hist_range;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    ob.hist[size_t(std::min<int64_t>(bins - 1, int64_t(std::abs(double(p[i])) * k)))] += 1;
  }
}
}  // namespace

void Calibrator::observe(const Tensor& x) {
  RK_CHECK(x.defined() && x.dtype() == DType::f32, "[quantize] calibration batches must be f32 tensors");
  observe_value(obs_[size_t(prog_.input)], x, bins_);
  run_program(prog_, x, [&](int v, const Tensor& t) { observe_value(obs_[size_t(v)], t, bins_); });
  ++batches_;
}

void Calibrator::fix(int v, double lo, double hi) {
  RK_CHECK(v >= 0 && size_t(v) < obs_.size(), "[quantize] no value {} to fix a range of", v);
  RK_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "[quantize] a fixed range [{}, {}] must be finite and ordered",
           lo, hi);
  Observation& ob = obs_[size_t(v)];
  ob.min = ob.ema_min = lo;
  ob.max = ob.ema_max = hi;
  ob.batches = std::max<int64_t>(ob.batches, 1);
  ob.fixed = true;
}

bool keeps_input_scale(const Node& n) {
  return n.op == op_id<MaxPool2d> || n.op == op_id<AvgPool2d> || n.op == op_id<AdaptiveAvgPool2d> ||
         (op_info(n.op).is_view && n.inputs.size() == 1);
}
int scale_source(const graph::Graph& g, int v) {
  while (g.value(v).producer >= 0) {
    const Node& src = g.nodes[size_t(g.value(v).producer)];
    if (!keeps_input_scale(src)) break;
    v = src.inputs[0];
  }
  return v;
}

int64_t fix_input_ranges(const Program& p, Calibrator& cal, const std::map<std::string, std::pair<double, double>>& ranges) {
  int64_t fixed = 0;
  for (const Node& n : p.graph.nodes) {
    const bool product = n.op == op_id<Conv2d> || n.op == op_id<FusedConv2d> || n.op == op_id<Linear> ||
                         n.op == op_id<FusedLinear>;
    if (!product) continue;
    auto out = ranges.find(n.scope + ":out");
    if (out != ranges.end()) {
      cal.fix(n.outputs[0], out->second.first, out->second.second);
      ++fixed;
    }
    auto it = ranges.find(n.scope);
    if (it == ranges.end()) continue;
    cal.fix(scale_source(p.graph, n.inputs[0]), it->second.first, it->second.second);
    ++fixed;
  }
  return fixed;
}

// ---- thresholds ----
void parse_method(const std::string& s, QuantOptions& o) {
  std::string m = s;
  if (m.rfind("percentile", 0) == 0) {
    if (m.size() > 10) {
      RK_CHECK(m[10] == '=', "--method {}: expected percentile or percentile=P", s);
      char* end = nullptr;
      const double p = std::strtod(m.c_str() + 11, &end);
      RK_CHECK(end && *end == '\0' && p > 50 && p <= 100, "--method {}: P must be a number in (50, 100]", s);
      o.percentile_p = p;
    }
    o.method = "percentile";
    return;
  }
  RK_CHECK(m == "minmax" || m == "moving-average" || m == "mse" || m == "entropy",
           "--method {}: unknown (known: minmax, moving-average, percentile[=P], mse, entropy)", s);
  o.method = m;
}

namespace {
double bin_width(const Observation& ob) { return ob.hist_range / double(ob.hist.size()); }

double percentile_threshold(const Observation& ob, double p) {
  double total = 0;
  for (double c : ob.hist) total += c;
  const double want = total * p / 100.0;
  double acc = 0;
  for (size_t i = 0; i < ob.hist.size(); ++i) {
    acc += ob.hist[i];
    if (acc >= want) return (double(i) + 1) * bin_width(ob);
  }
  return ob.hist_range;
}

// Expected squared error of quantizing the histogram with threshold t and `levels` steps:
// rounding (step^2 / 12 per value inside) plus clipping (the distance past t).
double mse_threshold(const Observation& ob, int levels) {
  const size_t B = ob.hist.size();
  double best_t = ob.hist_range, best_e = std::numeric_limits<double>::infinity();
  const double w = bin_width(ob);
  for (size_t k = B / 32; k <= B; ++k) {
    const double t = double(k) * w, step = t / levels;
    double e = 0;
    for (size_t i = 0; i < B; ++i) {
      if (ob.hist[i] == 0) continue;
      const double c = (double(i) + 0.5) * w;
      e += ob.hist[i] * (c > t ? (c - t) * (c - t) : step * step / 12.0);
    }
    if (e < best_e) {
      best_e = e;
      best_t = t;
    }
  }
  return best_t;
}

// TensorRT's entropy calibration: the threshold whose `levels`-bin quantized distribution is
// closest (KL divergence) to the clipped reference distribution.
double entropy_threshold(const Observation& ob, int levels) {
  const int B = int(ob.hist.size());
  const int Q = levels + 1;
  if (B <= Q) return ob.hist_range;
  // The zero bin holds every value a relu clipped: a spike no threshold can fit, so it counts as
  // its neighbour does (as NVIDIA's pytorch-quantization does).
  std::vector<double> hist = ob.hist;
  hist[0] = hist[1];
  double best_kl = std::numeric_limits<double>::infinity();
  int best_i = B;
  std::vector<double> p, q;
  double tail = 0;
  for (int i = B - 1; i >= Q; --i) tail += hist[size_t(i)];
  for (int i = Q; i <= B; ++i) {
    if (i > Q) tail -= hist[size_t(i - 1)];
    p.assign(hist.begin(), hist.begin() + i);
    p[size_t(i - 1)] += tail;
    q.assign(size_t(i), 0.0);
    const double merged = double(i) / Q;
    for (int j = 0; j < Q; ++j) {
      const int s = int(std::floor(j * merged)), e = j == Q - 1 ? i : int(std::floor((j + 1) * merged));
      double total = 0;
      int nonzero = 0;
      for (int k = s; k < e; ++k) {
        total += hist[size_t(k)];
        nonzero += hist[size_t(k)] != 0;
      }
      if (nonzero == 0) continue;
      for (int k = s; k < e; ++k)
        if (hist[size_t(k)] != 0) q[size_t(k)] = total / nonzero;
    }
    double ps = 0, qs = 0;
    for (int k = 0; k < i; ++k) {
      ps += p[size_t(k)];
      qs += q[size_t(k)];
    }
    if (ps == 0 || qs == 0) continue;
    double kl = 0;
    for (int k = 0; k < i; ++k) {
      if (p[size_t(k)] == 0) continue;
      const double pk = p[size_t(k)] / ps, qk = std::max(q[size_t(k)] / qs, 1e-12);
      kl += pk * std::log(pk / qk);
    }
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return (double(best_i) + 0.5) * bin_width(ob);
}
}  // namespace

double threshold(const Observation& ob, const QuantOptions& o, int levels) {
  const double absmax = std::max(std::abs(ob.min), std::abs(ob.max));
  double t = absmax;
  if (ob.fixed) t = absmax;
  else if (o.method == "moving-average") t = std::max(std::abs(ob.ema_min), std::abs(ob.ema_max));
  else if (o.method == "percentile") t = percentile_threshold(ob, o.percentile_p);
  else if (o.method == "mse") t = mse_threshold(ob, levels);
  else if (o.method == "entropy") t = entropy_threshold(ob, levels);
  t = std::min(t, absmax);
  return t > 0 && std::isfinite(t) ? t : 1.0;
}

// ---- the rules ----
std::vector<double> weight_scales(const Tensor& w, bool per_channel) {
  Tensor c = contiguous(cast(w, DType::f32));
  const int64_t O = c.size(0), K = c.numel() / O;
  const float* p = c.data<float>();
  std::vector<double> s(per_channel ? size_t(O) : 1, 0.0);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) {
      double& m = s[per_channel ? size_t(o) : 0];
      m = std::max(m, double(std::abs(p[o * K + k])));
    }
  for (double& v : s) v = double(float(v > 0 ? v / 127.0 : 1.0));
  return s;
}

std::pair<DType, double> activation_qparams(double min, double threshold) {
  const bool u8 = min >= 0;
  return {u8 ? DType::u8 : DType::i8, double(float(threshold / (u8 ? 255.0 : 127.0)))};
}

// ---- the rewrite ----
namespace {
struct QParams {
  DType dtype = DType::f32;
  double scale = 0;
  int64_t zp = 0;
};

// quantize_bias, or (planning on the meta device) an int32 meta tensor of its shape.
Tensor bias_int32(const Tensor& b, double x_scale, const std::vector<double>& w_scale) {
  if (b.device() == Device::meta) return Tensor::empty(b.shape(), DType::i32, Device::meta);
  return quantize_bias(b, x_scale, w_scale);
}

bool int8_post(const std::vector<PostOp>& post) {
  for (const auto& p : post)
    if (p.kind != "relu" && p.kind != "clamp" && p.kind != "sum") return false;
  return true;
}

struct Rewriter {
  const Program& src;
  const Calibrator& cal;
  const QuantOptions& opt;
  QuantizedProgram out;
  std::vector<int> f32_of, q_of;  // source value -> new value (-1: not made)
  std::vector<QParams> qp;        // source value -> its quantization (when q_of is set)
  std::string scope;

  const graph::Graph& g() const { return src.graph; }
  graph::Graph& ng() { return out.program.graph; }

  int add_node(int op, std::shared_ptr<void> attrs, std::vector<int> inputs) {
    Node n;
    n.op = op;
    n.attrs = std::move(attrs);
    n.inputs = std::move(inputs);
    n.scope = scope;
    std::vector<Tensor> in;
    for (int v : n.inputs)
      in.push_back(v < 0 ? Tensor() : Tensor::empty(ng().value(v).spec.shape, ng().value(v).spec.dtype, Device::meta));
    std::vector<Tensor> res;
    {
      NoGrad no_grad;
      ObserveOps watch([&](const OpRecord& r) {
        if (r.op == op_info(op).name) n.cost = r.cost;
      });
      res = op_info(op).call(in, n.attrs.get());
    }
    n.kernel = "none";
    for (size_t k = 0; k < res.size(); ++k) {
      graph::Value v;
      v.spec = res[k].spec();
      v.producer = int(ng().nodes.size());
      v.slot = int(k);
      v.tag = Tag::activation;
      n.outputs.push_back(ng().add_value(std::move(v)));
    }
    ng().nodes.push_back(std::move(n));
    return ng().nodes.back().outputs[0];
  }
  int add_const(const Tensor& t, const std::string& name) { return add_constant(out.program, t, name); }

  // The quantization a value gets from its observation: u8 when it never went negative.
  QParams params_for(int v) const {
    const Observation& ob = cal.observations().at(size_t(v));
    RK_CHECK(ob.observed(), "[quantize] value {} was not observed: calibrate with at least one batch",
             graph::value_ref(g(), v));
    QParams q;
    std::tie(q.dtype, q.scale) = activation_qparams(ob.min, threshold(ob, opt, ob.min >= 0 ? 255 : 127));
    return q;
  }

  int get_f32(int v) {
    if (v < 0) return -1;
    if (f32_of[size_t(v)] >= 0) return f32_of[size_t(v)];
    if (src.is_constant(v)) return f32_of[size_t(v)] = add_const(src.constants.at(v), g().value(v).name);
    RK_CHECK(q_of[size_t(v)] >= 0, "[quantize] value {} is read before it is made", graph::value_ref(g(), v));
    const QParams& q = qp[size_t(v)];
    const int r = add_node(op_id<DequantizeLinear>, make_attrs(QuantizeAttrs{{q.scale}, {q.zp}, 1, quant_dtype_name(q.dtype)}),
                           {q_of[size_t(v)]});
    ++out.dequantize_steps;
    f32_of[size_t(v)] = r;
    return r;
  }
  int get_q(int v, const QParams* want = nullptr) {
    if (q_of[size_t(v)] >= 0 && (!want || (qp[size_t(v)].dtype == want->dtype && qp[size_t(v)].scale == want->scale)))
      return q_of[size_t(v)];
    const QParams q = want ? *want : params_for(v);
    const int x = get_f32(v);
    const int r = add_node(op_id<QuantizeLinear>, make_attrs(QuantizeAttrs{{q.scale}, {q.zp}, 1, quant_dtype_name(q.dtype)}), {x});
    ++out.quantize_steps;
    if (!want || q_of[size_t(v)] < 0) {
      q_of[size_t(v)] = r;
      qp[size_t(v)] = q;
    }
    return r;
  }
  void set_q(int v, int nv, const QParams& q) {
    q_of[size_t(v)] = nv;
    qp[size_t(v)] = q;
  }

  bool kept(const Node& n) const {
    return std::find(opt.keep_fp32.begin(), opt.keep_fp32.end(), n.scope) != opt.keep_fp32.end();
  }

  // s8 weights, symmetric, per output channel (dim 0) or per tensor; their scales.
  std::pair<Tensor, std::vector<double>> quantize_weights(const Tensor& w) {
    if (w.device() == Device::meta)  // planning: the weights' shape and type, placeholder scales
      return {Tensor::empty(w.shape(), DType::i8, Device::meta), std::vector<double>(opt.per_channel ? size_t(w.size(0)) : 1, 1.0)};
    Tensor c = contiguous(cast(w, DType::f32));
    const int64_t O = c.size(0), K = c.numel() / O;
    const float* p = c.data<float>();
    const std::vector<double> s = weight_scales(c, opt.per_channel);
    Tensor q = Tensor::empty(c.shape(), DType::i8);
    int8_t* pq = q.data<int8_t>();
    for (int64_t o = 0; o < O; ++o) {
      const float sc = float(s[opt.per_channel ? size_t(o) : 0]);
      for (int64_t k = 0; k < K; ++k) pq[o * K + k] = int8_t(round_saturate(p[o * K + k] / sc, -127.f, 127.f));
    }
    return {q, s};
  }

  // Whether an int8 op could read value v (a quantizable product, a pool, a view or an output).
  bool int8_reader(const Node& n) const {
    const int id = n.op;
    if (kept(n)) return false;
    return id == op_id<Conv2d> || id == op_id<FusedConv2d> || id == op_id<Linear> || id == op_id<FusedLinear> ||
           keeps_input_scale(n);
  }
  std::vector<std::vector<int>> readers;  // source value -> nodes reading it
  bool read_by_int8(int v) const {
    for (int ni : readers[size_t(v)])
      if (int8_reader(g().nodes[size_t(ni)])) return true;
    return false;
  }

  bool product(const Node& n, size_t ni) {
    const int id = n.op;
    const bool conv = id == op_id<Conv2d> || id == op_id<FusedConv2d>;
    const bool lin = id == op_id<Linear> || id == op_id<FusedLinear>;
    if ((!conv && !lin) || kept(n)) return false;
    std::vector<PostOp> post;
    if (id == op_id<FusedConv2d>) post = attrs_of<FusedConvAttrs>(n).post;
    if (id == op_id<FusedLinear>) post = attrs_of<PostOpsAttrs>(n).post;
    if (!int8_post(post)) return false;
    const int x = n.inputs[0], w = n.inputs[1], b = n.inputs.size() > 2 ? n.inputs[2] : -1;
    const int r = has_sum(post) ? n.inputs.at(3) : -1;
    if (!src.is_constant(w) || (b >= 0 && !src.is_constant(b))) return false;
    if (g().value(x).spec.shape.size() != (conv ? 4u : 2u)) return false;
    const int y = n.outputs[0];
    const bool y_is_output = std::find(g().outputs.begin(), g().outputs.end(), y) != g().outputs.end();
    const bool y_q = !y_is_output && read_by_int8(y);
    if (r >= 0 && !y_q) return false;  // a residual sum needs a quantized output
    const int xq = get_q(x);
    const QParams xp = qp[size_t(x)];
    auto [wq, ws] = quantize_weights(src.constants.at(w));
    QuantLinearAttrs q;
    q.x_scale = xp.scale;
    q.x_zero_point = xp.zp;
    q.w_scale = ws;
    q.post = post;
    QParams yp;
    if (y_q) {
      yp = params_for(y);
      q.y_scale = yp.scale;
      q.y_dtype = quant_dtype_name(yp.dtype);
    } else {
      q.y_dtype = "f32";
    }
    std::vector<int> ins{xq, add_const(wq, g().value(w).name + ".int8")};
    ins.push_back(b >= 0 ? add_const(bias_int32(src.constants.at(b), xp.scale, ws), g().value(b).name + ".int32") : -1);
    if (r >= 0) {
      const int rq = get_q(r);
      q.r_scale = qp[size_t(r)].scale;
      q.r_dtype = quant_dtype_name(qp[size_t(r)].dtype);
      ins.push_back(rq);
    }
    int nv;
    std::string opname;
    if (conv) {
      const ConvAttrs& ca = id == op_id<Conv2d> ? attrs_of<ConvAttrs>(n) : attrs_of<FusedConvAttrs>(n).conv;
      nv = add_node(op_id<Conv2dInt8>, make_attrs(QuantConvAttrs{ca, q}), ins);
      opname = "conv2d_int8";
    } else {
      nv = add_node(op_id<LinearInt8>, make_attrs(q), ins);
      opname = "linear_int8";
    }
    if (y_q) set_q(y, nv, yp);
    else f32_of[size_t(y)] = nv;
    QuantLayer L;
    L.name = n.scope;
    L.op = opname + (post.empty() ? "" : "+" + post_ops_str(post));
    L.fp32_output = y;
    L.int8_output = nv;
    L.x_dtype = quant_dtype_name(xp.dtype);
    L.y_dtype = q.y_dtype;
    L.x_scale = xp.scale;
    L.y_scale = y_q ? yp.scale : 0;
    L.w_scale_min = *std::min_element(ws.begin(), ws.end());
    L.w_scale_max = *std::max_element(ws.begin(), ws.end());
    const Observation& ob = cal.observations()[size_t(y)];
    L.y_min = ob.min;
    L.y_max = ob.max;
    L.y_threshold = y_q ? yp.scale * (yp.dtype == DType::u8 ? 255 : 127) : 0;
    out.layers.push_back(L);
    (void)ni;
    return true;
  }

  // Pools and views of a value held in 8 bits stay in 8 bits with its scale.
  bool follower(const Node& n) {
    const int x = n.inputs.empty() ? -1 : n.inputs[0];
    if (x < 0 || q_of[size_t(x)] < 0 || kept(n)) return false;
    const QParams xp = qp[size_t(x)];
    const int id = n.op;
    int nv = -1;
    if (id == op_id<MaxPool2d> || id == op_id<AvgPool2d>) {
      const auto& a = attrs_of<PoolAttrs>(n);
      if (a.ceil_mode) return false;
      // max pool's indices output must be unread
      for (size_t k = 1; k < n.outputs.size(); ++k)
        if (!readers[size_t(n.outputs[k])].empty()) return false;
      nv = add_node(op_id<Pool2dInt8>, make_attrs(QuantPoolAttrs{a, id == op_id<MaxPool2d> ? "max" : "avg"}), {q_of[size_t(x)]});
    } else if (id == op_id<AdaptiveAvgPool2d>) {
      const auto& o = attrs_of<AdaptiveAvgPool2d::Attrs>(n).output_size;
      const Shape& xs = g().value(x).spec.shape;
      if (xs.size() != 4 || o[0] <= 0 || o[1] <= 0 || xs[2] % o[0] || xs[3] % o[1]) return false;
      PoolAttrs a;
      a.kernel = {xs[2] / o[0], xs[3] / o[1]};
      a.stride = a.kernel;
      a.padding = {0, 0};
      nv = add_node(op_id<Pool2dInt8>, make_attrs(QuantPoolAttrs{a, "avg"}), {q_of[size_t(x)]});
    } else if (op_info(id).is_view && n.inputs.size() == 1 && n.outputs.size() == 1) {
      nv = add_node(id, op_info(id).copy_attrs(n.attrs.get()), {q_of[size_t(x)]});
    } else {
      return false;
    }
    set_q(n.outputs[0], nv, xp);
    return true;
  }

  void copy_f32(const Node& n) {
    std::vector<int> ins;
    for (int v : n.inputs) ins.push_back(get_f32(v));
    Node c = n;
    c.inputs = ins;
    c.outputs.clear();
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      graph::Value v = g().value(n.outputs[k]);
      v.producer = int(ng().nodes.size());
      v.slot = int(k);
      const int id = ng().add_value(std::move(v));
      c.outputs.push_back(id);
      f32_of[size_t(n.outputs[k])] = id;
    }
    ng().nodes.push_back(std::move(c));
    out.kept_fp32.push_back(fmt::format("{} ({})", n.scope.empty() ? "(root)" : n.scope, n.op_name()));
  }

  void run() {
    const size_t V = g().values.size();
    f32_of.assign(V, -1);
    q_of.assign(V, -1);
    qp.assign(V, {});
    readers.assign(V, {});
    for (size_t i = 0; i < g().nodes.size(); ++i)
      for (int v : g().nodes[i].inputs)
        if (v >= 0) readers[size_t(v)].push_back(int(i));
    // Leaves: the input and the constants an f32 op may read (made on first use).
    {
      graph::Value x = g().value(src.input);
      out.program.input = ng().add_value(std::move(x));
      f32_of[size_t(src.input)] = out.program.input;
    }
    for (size_t i = 0; i < g().nodes.size(); ++i) {
      const Node& n = g().nodes[i];
      scope = n.scope;
      if (product(n, i) || follower(n)) continue;
      copy_f32(n);
    }
    for (int o : g().outputs) ng().outputs.push_back(get_f32(o));
    // the map of every source value
    out.value_map.assign(V, -1);
    out.value_scale.assign(V, 0);
    out.value_zero_point.assign(V, 0);
    for (size_t v = 0; v < V; ++v) {
      if (q_of[v] >= 0) {
        out.value_map[v] = q_of[v];
        out.value_scale[v] = qp[v].scale;
        out.value_zero_point[v] = qp[v].zp;
      } else {
        out.value_map[v] = f32_of[v];
      }
    }
    ng().validate();
  }
};
}  // namespace

QuantizedProgram quantize_program(const Program& p, const Calibrator& cal, const QuantOptions& o) {
  RK_CHECK(cal.batches() > 0, "[quantize] no calibration batch was observed");
  RK_CHECK(cal.observations().size() == p.graph.values.size(), "[quantize] the calibration was made on another program");
  Rewriter r{p, cal, o, {}, {}, {}, {}, {}, {}};
  r.run();
  return std::move(r.out);
}

}  // namespace reckon::engine
