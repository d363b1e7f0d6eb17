// Quantization-aware training (qat.h).
#include "reckon/train/qat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "reckon/engine/quantize.h"
#include "reckon/graph/capture.h"
#include "reckon/nn/graph_module.h"
#include "reckon/nn/layers.h"
#include "reckon/ops/node.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"
#include "reckon/ops/quant.h"

namespace reckon::train {

namespace {
// A layer's input observer: the moving average of the batches' min and max.
struct Observer {
  bool seen = false;
  double min = 0, max = 0;
  void update(double lo, double hi) {
    if (!seen) {
      min = lo;
      max = hi;
      seen = true;
      return;
    }
    min += 0.01 * (lo - min);
    max += 0.01 * (hi - max);
  }
};

std::pair<double, double> min_max(const Tensor& x) {
  Tensor c = contiguous(x);
  const float* p = c.data<float>();
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (!std::isfinite(p[i])) continue;
    lo = std::min(lo, double(p[i]));
    hi = std::max(hi, double(p[i]));
  }
  if (!(lo <= hi)) lo = hi = 0;
  return {lo, hi};
}

// What the int8 program gives a value observed in [lo, hi] (a fixed range: threshold max |.|).
QuantizeAttrs act_attrs(double lo, double hi) {
  double t = std::max(std::abs(lo), std::abs(hi));
  if (!(t > 0) || !std::isfinite(t)) t = 1.0;  // as engine::threshold
  const auto [dt, scale] = engine::activation_qparams(lo, t);
  return {{scale}, {0}, 1, quant_dtype_name(dt)};
}

// ... and its weights.
QuantizeAttrs weight_attrs(const Tensor& w, bool per_channel) {
  std::vector<double> s = engine::weight_scales(w, per_channel);
  return {s, std::vector<int64_t>(s.size(), 0), 0, "s8"};
}
}  // namespace

struct Qat::State {
  // A quantization point: a value some conv/linear layers read, fake-quantized where it enters
  // the outermost module that is given it (a residual block, when its identity path reads it too).
  struct Point {
    std::string name;
    nn::Module* module = nullptr;
    Observer obs;
    bool averages = false;  // an average pool: its output is rounded to its input's scale again
    bool output = false;    // the module's output is the point (a residual the int8 program quantizes)
    std::string key;        // output points: "LAYER:out", LAYER the conv whose (folded) output it is
    QuantizeAttrs last;     // the attributes of the last fake quantization
  };
  struct Layer {
    std::string name;
    nn::Module* module = nullptr;
    nn::Conv2d* conv = nullptr;
    nn::Linear* linear = nullptr;
    nn::BatchNorm2d* bn = nullptr;  // folded with the conv
    std::string bn_name;
    int point = -1;
    bool own_point = false;  // the layer is its own input's point
  };
  std::vector<Point> points;
  std::vector<Layer> layers;
  std::vector<nn::BatchNorm2d*> folded_bns;
  bool per_channel = true, enabled = true, frozen = false;

  // A module's own forward, but a folded batch norm's with its running statistics once frozen.
  Tensor base(nn::Module* m, const Tensor& x) {
    if (frozen)
      for (nn::BatchNorm2d* bn : folded_bns)
        if (bn == m)
          return batch_norm2d(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, false, bn->momentum, bn->eps);
    return m->forward(x);
  }

  Tensor quantize_point(Point& P, const Tensor& x) {
    if (!enabled) return x;
    if (P.module->is_training() && !frozen) {
      NoGrad no_grad;
      auto [lo, hi] = min_max(x);
      P.obs.update(lo, hi);
    }
    double lo = P.obs.min, hi = P.obs.max;
    if (!P.obs.seen) {  // evaluated before any training batch: the batch's own range
      NoGrad no_grad;
      std::tie(lo, hi) = min_max(x);
    }
    P.last = act_attrs(lo, hi);
    return fake_quantize(x, P.last);
  }
  Tensor input(Layer& L, const Tensor& x) { return L.own_point ? quantize_point(points[size_t(L.point)], x) : x; }
  Tensor weight(const Tensor& w) {
    QuantizeAttrs a;
    {
      NoGrad no_grad;
      a = weight_attrs(w, per_channel);
    }
    return fake_quantize(w, a);
  }

  Tensor conv_forward(Layer& L, const Tensor& x) {
    nn::Conv2d& c = *L.conv;
    const Conv2dArgs a = c.args();
    if (!enabled) return conv2d(x, c.weight, c.bias, a);
    const Tensor xq = input(L, x);
    if (!L.bn) return conv2d(xq, weight(c.weight), c.bias, a);
    // PyTorch's ConvBn fold: w * gamma / sqrt(running_var + eps), fake-quantized; the output
    // divided back by the same factor, then the bias, then the batch norm (its own module).
    const nn::BatchNorm2d& bn = *L.bn;
    const int64_t O = c.out_channels;
    Tensor inv_std = Tensor::empty({O}, DType::f32);
    {
      NoGrad no_grad;
      Tensor rv = contiguous(bn.running_var);
      for (int64_t o = 0; o < O; ++o)
        inv_std.data<float>()[o] = float(1.0 / std::sqrt(double(rv.data<float>()[o]) + bn.eps));
    }
    const Tensor factor = mul(bn.weight, inv_std);
    const Tensor wq = weight(mul(c.weight, reshape(factor, {O, 1, 1, 1})));
    Tensor y = div(conv2d(xq, wq, Tensor(), a), reshape(factor, {1, O, 1, 1}));
    if (c.bias.defined()) y = add(y, reshape(c.bias, {1, O, 1, 1}));
    return y;
  }
  Tensor linear_forward(Layer& L, const Tensor& x) {
    nn::Linear& l = *L.linear;
    if (!enabled) return linear(x, l.weight, l.bias);
    return linear(input(L, x), weight(l.weight), l.bias);
  }
};

Qat::Qat(nn::Module& m, const Shape& sample_shape, bool per_channel) : s_(std::make_shared<State>()) {
  s_->per_channel = per_channel;
  auto mods = m.named_modules();
  for (auto& [name, mod] : mods)
    RK_CHECK(!mod->has_forward_override(), "--qat: {} ({}) already runs a replaced forward", name, mod->type_name());
  // One eval-mode forward on zeros (no running statistic moves) shows which batch norm reads each
  // convolution's output (and nothing else does), and which tensor each module was given.
  std::map<std::string, std::string> bn_of;
  std::map<std::string, int> given, made;  // module -> the value its forward was given, and gave
  std::map<std::string, int> calls;
  graph::Graph g;
  {
    graph::Capture c;
    nn::declare_module(c, m);
    for (auto& [name, mod] : mods)
      // init-captures: clang 14 cannot capture structured bindings by name
      mod->set_forward_override([&given, &made, &calls, &c, n = name, md = mod](const Tensor& x) {
        given.emplace(n, c.value_of(x));
        Tensor y = md->forward(x);
        made.emplace(n, c.value_of(y));
        ++calls[n];
        return y;
      });
    const bool was_training = m.is_training();
    m.eval();
    Shape s{1};
    s.insert(s.end(), sample_shape.begin(), sample_shape.end());
    Tensor x = Tensor::zeros(s);
    c.declare(x, graph::ValueKind::input, "x");
    {
      NoGrad no_grad;
      c.mark_output(m(x));
    }
    m.train(was_training);
    for (auto& [name, mod] : mods) mod->set_forward_override({});
    g = c.finish();
  }
  std::vector<std::vector<int>> readers(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].inputs)
      if (v >= 0) readers[size_t(v)].push_back(int(i));
  std::map<std::string, int> input_of;  // conv/linear layer -> the value its op read
  for (const auto& n : g.nodes) {
    if ((n.op == op_id<Conv2d> || n.op == op_id<Linear>) && !input_of.count(n.scope)) input_of[n.scope] = n.inputs[0];
    if (n.op != op_id<Conv2d>) continue;
    const auto& r = readers[size_t(n.outputs[0])];
    if (r.size() != 1 || g.nodes[size_t(r[0])].op != op_id<BatchNorm2d>) continue;
    bn_of[n.scope] = g.nodes[size_t(r[0])].scope;
  }
  std::map<std::string, nn::Module*> by_name(mods.begin(), mods.end());
  auto ancestor = [](const std::string& a, const std::string& of) {
    return a.empty() || (of.size() > a.size() && of.compare(0, a.size(), a) == 0 && of[a.size()] == '.');
  };
  for (auto& [name, mod] : mods) {
    State::Layer L;
    L.name = name;
    L.module = mod;
    L.conv = dynamic_cast<nn::Conv2d*>(mod);
    L.linear = dynamic_cast<nn::Linear*>(mod);
    if (!L.conv && !L.linear) continue;
    if (L.conv && bn_of.count(name)) {
      L.bn = dynamic_cast<nn::BatchNorm2d*>(by_name.at(bn_of.at(name)));
      if (L.bn) L.bn_name = bn_of.at(name);
    }
    // Its input's point, as the int8 program has it: the value traced back through pooling and
    // views (which keep their input's scale), fake-quantized where it enters the outermost
    // module given it (a residual block, so that its identity path reads it quantized too);
    // the layer's own input when no module is given that value.
    std::string point = name;
    if (input_of.count(name)) {
      const int v = engine::scale_source(g, input_of.at(name));
      bool found = false;
      for (const auto& [other, gv] : given)
        if (gv == v && calls[other] == 1 && (!found || other.size() < point.size())) {
          point = other;
          found = true;
        }
    }
    auto it = std::find_if(s_->points.begin(), s_->points.end(), [&](const auto& P) { return P.name == point; });
    if (it == s_->points.end()) {
      nn::Module* pm = by_name.at(point);
      s_->points.push_back({point, pm, {}, dynamic_cast<nn::AvgPool2d*>(pm) || dynamic_cast<nn::AdaptiveAvgPool2d*>(pm), false, ""});
      it = s_->points.end() - 1;
    }
    L.point = int(it - s_->points.begin());
    L.own_point = point == name;
    s_->layers.push_back(std::move(L));
  }
  // Residual adds: the engine fuses an add into the later of its two operands' convolutions and
  // reads the earlier one as an 8-bit residual. When that earlier one is no layer's input (a
  // residual block's main path beside its downsample), it is quantized where a module gives it.
  for (const auto& n : g.nodes) {
    if (n.op != op_id<Add> || n.inputs.size() != 2) continue;
    const int pa = g.value(n.inputs[0]).producer, pb = g.value(n.inputs[1]).producer;
    if (pa < 0 || pb < 0) continue;
    const int r = pa < pb ? n.inputs[0] : n.inputs[1];
    bool is_point = false;
    for (const auto& P : s_->points) is_point |= given.count(P.name) && given.at(P.name) == r;
    if (is_point) continue;
    const graph::Node* prod = &g.nodes[size_t(g.value(r).producer)];
    if (prod->op == op_id<BatchNorm2d> && g.value(prod->inputs[0]).producer >= 0)
      prod = &g.nodes[size_t(g.value(prod->inputs[0]).producer)];
    if (prod->op != op_id<Conv2d> && prod->op != op_id<Linear>) continue;
    std::string inner;
    for (const auto& [name, mv] : made)
      if (mv == r && calls[name] == 1 && name.size() >= inner.size()) inner = name;
    if (inner.empty() || by_name.at(inner)->has_forward_override()) continue;
    if (std::any_of(s_->layers.begin(), s_->layers.end(), [&](const auto& L) { return L.name == inner; })) continue;
    s_->points.push_back({inner, by_name.at(inner), {}, false, true, prod->scope + ":out"});
  }
  RK_CHECK(!s_->layers.empty(), "--qat: the model has no Conv2d or Linear module to quantize (an imported ONNX "
                                "model is not made of modules)");
  // The vectors no longer grow: layers and points are addressed by index.
  State* st = s_.get();
  for (size_t i = 0; i < s_->layers.size(); ++i) {
    State::Layer& L = s_->layers[i];
    if (L.conv) L.module->set_forward_override([st, i](const Tensor& x) { return st->conv_forward(st->layers[i], x); });
    else L.module->set_forward_override([st, i](const Tensor& x) { return st->linear_forward(st->layers[i], x); });
  }
  for (size_t i = 0; i < s_->points.size(); ++i) {
    nn::Module* pm = s_->points[i].module;
    if (pm->has_forward_override()) continue;  // a layer quantizing its own input
    pm->set_forward_override([st, i, pm](const Tensor& x) {
      State::Point& P = st->points[i];
      if (P.output) return st->quantize_point(P, st->base(pm, x));
      Tensor y = st->base(pm, st->quantize_point(P, x));
      // The int8 pool averages 8-bit values into 8-bit values of the same scale.
      return st->enabled && P.averages ? fake_quantize(y, P.last) : y;
    });
  }
  for (auto& L : s_->layers)
    if (L.bn) s_->folded_bns.push_back(L.bn);
  for (nn::BatchNorm2d* bn : s_->folded_bns)
    if (!bn->has_forward_override()) bn->set_forward_override([st, bn](const Tensor& x) { return st->base(bn, x); });
}

Qat::~Qat() {
  for (auto& P : s_->points) P.module->set_forward_override({});
  for (auto& L : s_->layers) L.module->set_forward_override({});
  for (nn::BatchNorm2d* bn : s_->folded_bns) bn->set_forward_override({});
}

void Qat::enable(bool on) { s_->enabled = on; }
bool Qat::enabled() const { return s_->enabled; }

void Qat::freeze() { s_->frozen = true; }
bool Qat::frozen() const { return s_->frozen; }

std::map<std::string, std::pair<double, double>> Qat::input_ranges() const {
  std::map<std::string, std::pair<double, double>> r;
  for (const auto& L : s_->layers) {
    const Observer& o = s_->points[size_t(L.point)].obs;
    if (o.seen) r[L.name] = {o.min, o.max};
  }
  for (const auto& P : s_->points)
    if (P.output && P.obs.seen) r[P.key] = {P.obs.min, P.obs.max};
  return r;
}

std::vector<std::string> Qat::folded() const {
  std::vector<std::string> r;
  for (const auto& L : s_->layers)
    if (L.bn) r.push_back(L.name + "+" + L.bn_name);
  return r;
}
int64_t Qat::layers() const { return int64_t(s_->layers.size()); }

nlohmann::json Qat::to_json() const {
  nlohmann::json obs = nlohmann::json::object();
  for (const auto& P : s_->points)
    if (P.obs.seen) obs[P.name.empty() ? "(root)" : P.name] = {P.obs.min, P.obs.max};
  return {{"frozen", s_->frozen}, {"observers", obs}};
}

void Qat::from_json(const nlohmann::json& j, const std::string& where) {
  try {
    for (auto& [name, v] : j.at("observers").items()) {
      const std::string key = name == "(root)" ? "" : name;
      auto it = std::find_if(s_->points.begin(), s_->points.end(), [&](const auto& P) { return P.name == key; });
      RK_CHECK(it != s_->points.end(), "{}: QAT observer '{}' names no quantization point of this model", where, name);
      const double lo = v.at(0).get<double>(), hi = v.at(1).get<double>();
      RK_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "{}: QAT observer '{}' has the range [{}, {}]", where,
               name, lo, hi);
      it->obs = {true, lo, hi};
    }
    if (j.at("frozen").get<bool>()) freeze();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: the QAT state is malformed ({})", where, e.what()));
  }
}

}  // namespace reckon::train
