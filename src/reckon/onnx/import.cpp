#include "reckon/onnx/import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <set>

#include "reckon/kernels/broadcast.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op_list.h"
#include "reckon/ops/op.h"
#include "reckon/ops/shape_ops.h"

namespace reckon::onnx {

namespace {

using Ins = std::vector<Tensor>;
using Outs = std::vector<Tensor>;

struct Ctx {
  const Model& m;
  const Node& n;
  bool training;
  Device device;  // where float constants made by the importer go
  int64_t opset() const { return m.opset; }
};

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

bool is_int(DType t) { return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8; }
// An integer tensor computed on the host (shapes and indices). 8-bit integers are not: they are a
// quantized model's activations and weights (QDQ), computed by ops like any activation.
bool is_q8(DType t) { return t == DType::u8 || t == DType::i8; }
bool host_int(const Tensor& t) {
  return t.defined() && is_int(t.dtype()) && !is_q8(t.dtype()) && t.device() == Device::cpu;
}
// Any integer tensor on the host, 8-bit ones too: what elementwise integer arithmetic (Add, Clip, ...
// of ONNX's own integer node tests) computes on the host; a QDQ model does its 8-bit arithmetic
// between a DequantizeLinear and a QuantizeLinear, in float.
bool host_int_arith(const Tensor& t) { return t.defined() && is_int(t.dtype()) && t.device() == Device::cpu; }

// ---- host tensors (integers computed on the cpu, whatever the model's device) ----
std::vector<int64_t> ints_of(const Tensor& t, const std::string& what) {
  RK_CHECK(t.defined(), "{} is missing", what);
  RK_CHECK(t.device() == Device::cpu, "{} must be a constant (an initializer or computed from shapes), but it is a "
           "{} tensor computed at run time", what, device_name(t.device()));
  std::vector<int64_t> v;
  for (double d : t.to_vector()) v.push_back(int64_t(d));
  return v;
}
double scalar_of(const Tensor& t, const std::string& what) {
  RK_CHECK(t.device() == Device::cpu && t.numel() == 1, "{} must be a one-element constant, got {}", what, t.str());
  return t.get(0);
}
Tensor host(const std::vector<int64_t>& v, const Shape& shape, DType dt = DType::i64) {
  Tensor t = Tensor::empty(shape, dt, Device::cpu);
  for (size_t i = 0; i < v.size(); ++i) t.set(int64_t(i), double(v[i]));
  return t;
}
Tensor host1(const std::vector<int64_t>& v) { return host(v, {int64_t(v.size())}); }

// A host copy of t's elements (in logical order) with shape s and dtype `to`.
Tensor host_copy(const Tensor& t, const Shape& s, DType to) {
  Tensor y = Tensor::empty(s, to, Device::cpu);
  RK_CHECK(y.numel() == t.numel(), "cannot copy {} into [{}]", t.str(), fmt::join(s, ", "));
  for (int64_t i = 0; i < t.numel(); ++i) y.set(i, t.get(i));
  return y;
}
Tensor host_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f, DType out_dt) {
  Shape s = broadcast_shapes("onnx", a.shape(), b.shape());
  Tensor y = Tensor::empty(s, out_dt, Device::cpu);
  Tensor ac = contiguous(a), bc = contiguous(b);
  for_each_row(plan_broadcast(a.shape(), b.shape(), s),
               [&](int64_t oa, int64_t ob, int64_t oy, int64_t n, int64_t sa, int64_t sb) {
                 for (int64_t i = 0; i < n; ++i) y.set(oy + i, f(ac.get(oa + i * sa), bc.get(ob + i * sb)));
               });
  return y;
}
Tensor reshape_any(const Tensor& t, const Shape& s) {
  return host_int(t) ? host_copy(t, s, t.dtype()) : reshape(t, s);
}

// A float tensor like `like` (dtype, device) holding the host tensor t's values.
Tensor as_float_like(const Tensor& t, const Tensor& like) {
  if (!host_int(t)) return t;
  if (like.device() == Device::cpu) return host_copy(t, t.shape(), like.dtype());
  RK_CHECK(t.numel() == 1, "an integer tensor {} meets a float one on {}", t.str(), device_name(like.device()));
  return full(t.shape(), t.get(0), like.dtype(), like.device());
}

// Zero (or `value`) padding of x: pads = (begin_0, begin_1, ..., end_0, end_1, ...) over all dims.
Tensor pad_const(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  const int64_t r = x.dim();
  RK_CHECK(int64_t(pads.size()) == 2 * r, "pads has {} entries for a rank-{} input (needs {})", pads.size(), r, 2 * r);
  Tensor y = x;
  for (int64_t d = 0; d < r; ++d) {
    int64_t b = pads[size_t(d)], e = pads[size_t(d + r)];
    RK_CHECK(b >= 0 && e >= 0, "negative pads (cropping) are not supported, got {}", fmt::join(pads, ", "));
    if (b == 0 && e == 0) continue;
    std::vector<Tensor> parts;
    Shape s = y.shape();
    if (b > 0) {
      s[size_t(d)] = b;
      parts.push_back(full(s, value, y.dtype(), y.device()));
    }
    parts.push_back(y);
    if (e > 0) {
      s[size_t(d)] = e;
      parts.push_back(full(s, value, y.dtype(), y.device()));
    }
    y = concat(parts, d);
  }
  return y;
}

// A window's padding from pads / auto_pad: (begin, end) per spatial dim.
std::vector<std::pair<int64_t, int64_t>> window_pads(const Node& n, const Shape& x, const std::vector<int64_t>& k,
                                                     const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  const size_t sp = k.size();
  RK_CHECK(s.size() == sp && d.size() == sp && x.size() == sp + 2, "kernel_shape, strides and dilations need {} "
           "entries each for a rank-{} input", x.size() - 2, x.size());
  for (size_t i = 0; i < sp; ++i)
    RK_CHECK(k[i] >= 1 && s[i] >= 1 && d[i] >= 1, "kernel_shape, strides and dilations must be positive, got {}, {} "
             "and {}", fmt::join(k, "x"), fmt::join(s, "x"), fmt::join(d, "x"));
  std::vector<std::pair<int64_t, int64_t>> out(sp, {0, 0});
  const std::string ap = n.get_s("auto_pad", "NOTSET");
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    // Checked: the attributes are bounded at read (|v| < 2^31), but an input dim from the file
    // may be near 2^61 (an f32 tensor's bytes still fit), and (o - 1) s + (k - 1) d can pass 2^63.
    const std::string what = fmt::format("auto_pad {} of input {}", ap, shape_str(x));
    for (size_t i = 0; i < sp; ++i) {
      int64_t in = x[2 + i], o = in / s[i] + (in % s[i] != 0);
      int64_t extent = checked_add(checked_mul(o - 1, s[i], what), checked_mul(k[i] - 1, d[i], what), what);
      int64_t total = std::max<int64_t>(0, extent + 1 - in);
      int64_t small = total / 2;
      out[i] = ap == "SAME_UPPER" ? std::pair{small, total - small} : std::pair{total - small, small};
    }
  } else if (ap == "VALID") {
  } else {
    RK_CHECK(ap == "NOTSET", "auto_pad '{}' is not an ONNX value", ap);
    auto p = n.get_ints("pads", std::vector<int64_t>(2 * sp, 0));
    RK_CHECK(p.size() == 2 * sp, "pads has {} entries for {} spatial dims", p.size(), sp);
    for (size_t i = 0; i < sp; ++i) out[i] = {p[i], p[i + sp]};
  }
  return out;
}

// ---- the operators ----
using OpFn = std::function<Outs(Ctx&, Ins&)>;

Tensor in_at(const Ins& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }

Outs conv(Ctx& c, Ins& in);
Outs conv(Ctx& c, Ins& in) {
  if (in[0].dim() == 3 && in[1].dim() == 3) {  // 1-D: as (N, C, 1, L)
    Ins in2 = in;
    in2[0] = reshape(in[0], {in[0].size(0), in[0].size(1), 1, in[0].size(2)});
    in2[1] = reshape(in[1], {in[1].size(0), in[1].size(1), 1, in[1].size(2)});
    Node n = c.n;
    auto lift = [&](const char* name, int64_t def) {
      if (const Attr* a = n.attr(name)) {
        Attr b = *a;
        b.ints.insert(b.ints.begin(), def);
        if (std::string(name) == "pads") b.ints.insert(b.ints.begin() + 2, def);
        n.attrs[name] = b;
      }
    };
    lift("kernel_shape", 1), lift("strides", 1), lift("dilations", 1), lift("pads", 0);
    Ctx c2{c.m, n, c.training, c.device};
    Tensor y = conv(c2, in2)[0];
    return {reshape(y, {y.size(0), y.size(1), y.size(3)})};
  }
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  RK_CHECK(x.dim() == 4 && w.dim() == 4, "only 1-D and 2-D convolution are supported (x {}, weight {})", x.str(), w.str());
  auto k = c.n.get_ints("kernel_shape", {w.size(2), w.size(3)});
  RK_CHECK(k.size() == 2 && k[0] == w.size(2) && k[1] == w.size(3), "kernel_shape {} does not match the weight {}",
           fmt::join(k, "x"), w.str());
  auto s = c.n.get_ints("strides", {1, 1});
  auto d = c.n.get_ints("dilations", {1, 1});
  RK_CHECK(s.size() == 2 && d.size() == 2, "strides and dilations need 2 entries");
  auto p = window_pads(c.n, x.shape(), k, s, d);
  Tensor xp = x;
  Conv2dArgs a;
  a.stride = {s[0], s[1]};
  a.dilation = {d[0], d[1]};
  a.groups = c.n.get_i("group", 1);
  if (p[0].first == p[0].second && p[1].first == p[1].second) {
    a.padding = {p[0].first, p[1].first};
  } else {
    xp = pad_const(x, {0, 0, p[0].first, p[1].first, 0, 0, p[0].second, p[1].second}, 0.0);
  }
  return {conv2d(xp, w, in_at(in, 2), a)};
}


// One pooling over 2-D windows of x (N, C, H, W). Padding that PyTorch's rule (at most half the
// window) or symmetry does not allow is made explicit: -inf for max, zeros for average, where
// count_include_pad 0 then divides by the pooled count of ones instead. With `indices`, also
// ONNX's Indices (flat over the whole input; storage_order 1: column-major within a plane).
struct Window {
  std::vector<int64_t> k, s, d;
  std::vector<std::pair<int64_t, int64_t>> p;
};
Tensor pool2d(const Tensor& x, const Window& w, bool max, bool ceil_mode, bool include_pad, Tensor* indices,
              int64_t order) {
  bool explicit_pad = false;
  for (size_t i = 0; i < 2; ++i)
    explicit_pad |= w.p[i].first != w.p[i].second || 2 * w.p[i].first > w.d[i] * (w.k[i] - 1) + 1;
  PoolAttrs pa;
  pa.kernel = {w.k[0], w.k[1]};
  pa.stride = {w.s[0], w.s[1]};
  pa.dilation = {w.d[0], w.d[1]};
  pa.ceil_mode = ceil_mode;
  pa.count_include_pad = include_pad;
  const std::vector<int64_t> pads4{0, 0, w.p[0].first, w.p[1].first, 0, 0, w.p[0].second, w.p[1].second};
  Tensor xp = x;
  if (explicit_pad) {
    RK_CHECK(!ceil_mode, "ceil_mode with padding beyond half the window is not supported");
    xp = pad_const(x, pads4, max ? -std::numeric_limits<double>::infinity() : 0.0);
    pa.count_include_pad = true;
  } else {
    pa.padding = {w.p[0].first, w.p[1].first};
  }
  Tensor y;
  if (max && is_q8(x.dtype())) {  // a max of 8-bit values is the max of what they stand for
    RK_CHECK(!explicit_pad && !ceil_mode && !indices,
             "MaxPool of {} with asymmetric padding, ceil_mode or Indices is not supported", dtype_name(x.dtype()));
    return call1<Pool2dInt8>({x}, QuantPoolAttrs{pa, "max"});
  }
  if (max) {
    auto r = call<MaxPool2d>({xp}, pa);
    y = r[0];
    if (indices) {
      RK_CHECK(!explicit_pad && y.device() == Device::cpu, "MaxPool's Indices need the cpu and symmetric pads");
      const Tensor& idx = r[1];
      const int64_t H = x.size(2), W = x.size(3), plane = y.size(2) * y.size(3);
      Tensor out = Tensor::empty(y.shape(), DType::i64, Device::cpu);
      for (int64_t i = 0; i < idx.numel(); ++i) {
        const int64_t v = int64_t(idx.get(i)), h = v / W, ww = v % W, nc = i / plane;
        out.set(i, double(nc * H * W + (order == 1 ? ww * H + h : h * W + ww)));
      }
      *indices = out;
    }
  } else {
    y = call1<AvgPool2d>({xp}, pa);
    if (explicit_pad && !include_pad) {
      Tensor ones = pad_const(full(x.shape(), 1.0, x.dtype(), x.device()), pads4, 0.0);
      y = div(y, call1<AvgPool2d>({ones}, pa));
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    int64_t want = onnx_window_out(x.size(2 + int64_t(i)), w.k[i], w.s[i], w.p[i].first, w.p[i].second, w.d[i], ceil_mode);
    RK_CHECK(y.size(2 + int64_t(i)) == want, "ceil_mode gives {} outputs along dim {} in reckon (PyTorch's rule: the "
             "last window must start inside the input) but {} by ONNX's: not supported", y.size(2 + int64_t(i)),
             2 + i, want);
  }
  return y;
}

// Pooling over 1-D, 2-D or 3-D windows: 1-D runs as (N, C, 1, L); 3-D as two 2-D poolings, over
// (H, W) and then over D (a box's max or mean is the max or mean over D of those over H and W,
// padding included, since a box's taps inside the input are a product of ranges).
Outs pool(Ctx& c, Ins& in, bool max) {
  Tensor x = in[0];
  const int64_t sp = x.dim() - 2;
  RK_CHECK(sp >= 1 && sp <= 3, "only 1-D, 2-D and 3-D pooling are supported (x {})", x.str());
  const DType int_dtype = x.dtype();
  const bool was_int = host_int(x);
  RK_CHECK(!was_int || max, "AveragePool of integers is not supported");
  if (was_int) x = host_copy(x, x.shape(), DType::f32);
  Window w;
  w.k = c.n.get_ints("kernel_shape");
  RK_CHECK(int64_t(w.k.size()) == sp, "kernel_shape needs {} entries, got {}", sp, w.k.size());
  w.s = c.n.get_ints("strides", std::vector<int64_t>(size_t(sp), 1));
  w.d = c.n.get_ints("dilations", std::vector<int64_t>(size_t(sp), 1));
  RK_CHECK(int64_t(w.s.size()) == sp && int64_t(w.d.size()) == sp, "strides and dilations need {} entries", sp);
  w.p = window_pads(c.n, x.shape(), w.k, w.s, w.d);
  for (int64_t dd : w.d) RK_CHECK(max || dd == 1, "AveragePool with dilations is not supported");
  const int64_t order = c.n.get_i("storage_order", 0);
  const bool ceil_mode = c.n.get_i("ceil_mode", 0) != 0;
  const bool include_pad = c.n.get_i("count_include_pad", 0) != 0;
  const bool want_indices = max && c.n.outputs.size() > 1 && !c.n.outputs[1].empty();
  RK_CHECK(!want_indices || sp == 2, "MaxPool's Indices are supported for 2-D pooling only");
  Tensor y, idx;
  if (sp == 1) {
    Window w2{{1, w.k[0]}, {1, w.s[0]}, {1, w.d[0]}, {{0, 0}, w.p[0]}};
    y = pool2d(reshape(x, {x.size(0), x.size(1), 1, x.size(2)}), w2, max, ceil_mode, include_pad, nullptr, 0);
    y = reshape(y, {y.size(0), y.size(1), y.size(3)});
  } else if (sp == 2) {
    y = pool2d(x, w, max, ceil_mode, include_pad, want_indices ? &idx : nullptr, order);
  } else {
    const Shape xs = x.shape();
    Window hw{{w.k[1], w.k[2]}, {w.s[1], w.s[2]}, {w.d[1], w.d[2]}, {w.p[1], w.p[2]}};
    Tensor a = pool2d(reshape(contiguous(x), {xs[0], xs[1] * xs[2], xs[3], xs[4]}), hw, max, ceil_mode, include_pad,
                      nullptr, 0);
    const int64_t ho = a.size(2), wo = a.size(3);
    Window dw{{w.k[0], 1}, {w.s[0], 1}, {w.d[0], 1}, {w.p[0], {0, 0}}};
    Tensor b = pool2d(reshape(contiguous(a), {xs[0], xs[1], xs[2], ho * wo}), dw, max, ceil_mode, include_pad,
                      nullptr, 0);
    y = reshape(contiguous(b), {xs[0], xs[1], b.size(2), ho, wo});
  }
  if (was_int) y = host_copy(y, y.shape(), int_dtype);
  Outs out{y};
  if (want_indices) out.push_back(idx);
  return out;
}

// ConvTranspose: the gradient of a convolution with respect to its input (reckon's
// conv2d_backward_input), whose weight (C_in, C_out / group, kH, kW) is that convolution's. The
// full output is computed, then cropped by the pads; output_shape sets the pads as ONNX says.
// 1-D runs as (N, C, 1, L). Inference only: the op has no gradient of its own in reckon.
// 3-D ConvTranspose on the cpu, by its definition (plain loops; no fast kernel, no gradient):
// y[n, g Cog + co, i s + k d - pad] += x[n, g Cig + ci, i] w[g Cig + ci, co, k], per spatial dim.
// A ConvTranspose's full output along one dim, s (in - 1) + output_padding + (k - 1) d + 1,
// checked: a stride near 2^31 (the attributes' bound) on a long input passes 2^63.
int64_t transposed_extent(int64_t s, int64_t in, int64_t op, int64_t k, int64_t d, const std::string& what) {
  return checked_add(checked_add(checked_mul(s, in - 1, what), op + 1, what), checked_mul(k - 1, d, what), what);
}

Outs conv_transpose_3d(Ctx& c, const Tensor& x, const Tensor& w, const Tensor& bias) {
  RK_CHECK(x.device() == Device::cpu, "3-D ConvTranspose runs on the cpu only");
  auto get = [&](const char* n, int64_t def) {
    auto v = c.n.get_ints(n, std::vector<int64_t>(3, def));
    RK_CHECK(v.size() == 3, "{} needs 3 entries", n);
    return v;
  };
  auto s = get("strides", 1), d = get("dilations", 1), op = get("output_padding", 0);
  auto pads = c.n.get_ints("pads", std::vector<int64_t>(6, 0));
  RK_CHECK(pads.size() == 6 && c.n.get_s("auto_pad", "NOTSET") == "NOTSET" && c.n.get_ints("output_shape").empty(),
           "3-D ConvTranspose supports explicit pads only");
  const int64_t g = c.n.get_i("group", 1);
  RK_CHECK(g >= 1 && x.size(1) % g == 0 && w.size(0) == x.size(1) && w.dim() == 5, "group {} does not fit x {} and "
           "weight {}", g, x.str(), w.str());
  for (int i = 0; i < 3; ++i)
    RK_CHECK(s[size_t(i)] >= 1 && d[size_t(i)] >= 1 && op[size_t(i)] >= 0, "strides and dilations must be positive");
  const int64_t N = x.size(0), Ci = x.size(1), Cig = Ci / g, Cog = w.size(1);
  const int64_t Co = Cog * g;
  Shape ys{N, Co, 0, 0, 0};
  const std::string what = fmt::format("the output of x {} at strides {}", x.str(), fmt::join(s, "x"));
  for (int i = 0; i < 3; ++i)
    ys[size_t(2 + i)] =
        transposed_extent(s[size_t(i)], x.size(2 + i), op[size_t(i)], w.size(2 + i), d[size_t(i)], what) -
        pads[size_t(i)] - pads[size_t(i) + 3];
  Tensor xc = contiguous(cast(x, DType::f64)), wc = contiguous(cast(w, DType::f64));
  std::vector<double> y(size_t(shape_numel(ys)), 0.0);
  const double* px = xc.data<double>();
  const double* pw = wc.data<double>();
  const int64_t D = x.size(2), H = x.size(3), W = x.size(4), KD = w.size(2), KH = w.size(3), KW = w.size(4);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Ci; ++ci)
      for (int64_t co = 0; co < Cog; ++co)
        for (int64_t id = 0; id < D; ++id)
          for (int64_t ih = 0; ih < H; ++ih)
            for (int64_t iw = 0; iw < W; ++iw) {
              const double xv = px[(((n * Ci + ci) * D + id) * H + ih) * W + iw];
              for (int64_t kd = 0; kd < KD; ++kd)
                for (int64_t kh = 0; kh < KH; ++kh)
                  for (int64_t kw = 0; kw < KW; ++kw) {
                    const int64_t od = id * s[0] + kd * d[0] - pads[0], oh = ih * s[1] + kh * d[1] - pads[1],
                                  ow = iw * s[2] + kw * d[2] - pads[2];
                    if (od < 0 || oh < 0 || ow < 0 || od >= ys[2] || oh >= ys[3] || ow >= ys[4]) continue;
                    const int64_t oc = (ci / Cig) * Cog + co;
                    y[size_t((((n * Co + oc) * ys[2] + od) * ys[3] + oh) * ys[4] + ow)] +=
                        xv * pw[(((ci * Cog + co) * KD + kd) * KH + kh) * KW + kw];
                  }
            }
  Tensor out = cast(Tensor::from_vector(y, ys, DType::f64), x.dtype());
  if (bias.defined()) out = add(out, reshape(bias, {1, Co, 1, 1, 1}));
  return {out};
}

Outs conv_transpose(Ctx& c, Ins& in) {
  Tensor x = in[0], w = in[1];
  const int64_t sp = x.dim() - 2;
  if (sp == 3) return conv_transpose_3d(c, x, w, in_at(in, 2));
  RK_CHECK((sp == 1 || sp == 2) && w.dim() == x.dim(), "only 1-D, 2-D and 3-D ConvTranspose are supported (x {}, weight {})",
           x.str(), w.str());
  if (sp == 1) {
    x = reshape(x, {x.size(0), x.size(1), 1, x.size(2)});
    w = reshape(w, {w.size(0), w.size(1), 1, w.size(2)});
  }
  auto lift = [&](std::vector<int64_t> v, int64_t def) {
    if (v.empty()) v.assign(size_t(sp), def);
    RK_CHECK(int64_t(v.size()) == sp, "an attribute has {} entries for {} spatial dims", v.size(), sp);
    if (sp == 1) v.insert(v.begin(), def);
    return v;
  };
  auto s = lift(c.n.get_ints("strides"), 1), d = lift(c.n.get_ints("dilations"), 1);
  auto op = lift(c.n.get_ints("output_padding"), 0);
  const int64_t g = c.n.get_i("group", 1);
  RK_CHECK(g >= 1 && x.size(1) % g == 0 && w.size(0) == x.size(1), "group {} does not fit x {} and weight {}", g,
           x.str(), w.str());
  for (int i = 0; i < 2; ++i)
    RK_CHECK(s[size_t(i)] >= 1 && d[size_t(i)] >= 1 && op[size_t(i)] >= 0, "strides and dilations must be positive");
  std::vector<int64_t> k{w.size(2), w.size(3)};
  std::vector<int64_t> pb(2, 0), pe(2, 0);
  const std::string ap = c.n.get_s("auto_pad", "NOTSET");
  auto os = c.n.get_ints("output_shape");
  const std::string what = fmt::format("the output of x {} at strides {}", x.str(), fmt::join(s, "x"));
  for (int i = 0; i < 2; ++i) {
    const int64_t full_size =
        transposed_extent(s[size_t(i)], x.size(2 + i), op[size_t(i)], k[size_t(i)], d[size_t(i)], what);
    int64_t total = 0;
    const bool computed = !os.empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER";
    if (!os.empty()) {
      auto o = lift(os, 1);
      total = full_size - o[size_t(i)];
    } else if (computed) {
      total = full_size - checked_mul(x.size(2 + i), s[size_t(i)], what);
    }
    if (computed && total < 0) {  // an output larger than the full one: zero rows at the end
      pe[size_t(i)] = total;
    } else if (computed) {
      const bool upper = ap == "SAME_UPPER";
      pb[size_t(i)] = upper ? total / 2 : total - total / 2;
      pe[size_t(i)] = upper ? total - total / 2 : total / 2;
    } else if (ap == "NOTSET") {
      auto p = c.n.get_ints("pads");
      if (!p.empty()) {
        RK_CHECK(int64_t(p.size()) == 2 * sp, "pads has {} entries for {} spatial dims", p.size(), sp);
        if (sp == 1) p = {0, p[0], 0, p[1]};
        pb[size_t(i)] = p[size_t(i)];
        pe[size_t(i)] = p[size_t(i) + 2];
      }
    }
  }
  Conv2dBackwardInput::Attrs a;
  a.conv.stride = {s[0], s[1]};
  a.conv.dilation = {d[0], d[1]};
  a.conv.groups = g;
  a.x_shape = {x.size(0), w.size(1) * g, 0, 0};
  for (int i = 0; i < 2; ++i)
    a.x_shape[size_t(2 + i)] = s[size_t(i)] * (x.size(2 + i) - 1) + op[size_t(i)] + (k[size_t(i)] - 1) * d[size_t(i)] + 1;
  // output_padding rows lie past the last window: a zero pad of x's gradient image there.
  Shape no_op = a.x_shape;
  for (int i = 0; i < 2; ++i) no_op[size_t(2 + i)] -= op[size_t(i)];
  a.x_shape = no_op;
  Tensor y = call1<Conv2dBackwardInput>({x, w}, a);
  if (op[0] || op[1]) y = pad_const(y, {0, 0, 0, 0, 0, 0, op[0], op[1]}, 0.0);
  // Negative pads (an output_shape past the full output) extend it with rows no window reaches.
  std::vector<int64_t> grow(8, 0);
  for (int i = 0; i < 2; ++i) {
    grow[size_t(2 + i)] = std::max<int64_t>(0, -pb[size_t(i)]);
    grow[size_t(6 + i)] = std::max<int64_t>(0, -pe[size_t(i)]);
  }
  if (std::any_of(grow.begin(), grow.end(), [](int64_t v) { return v > 0; })) y = pad_const(y, grow, 0.0);
  for (int i = 0; i < 2; ++i) {
    const int64_t b = std::max<int64_t>(0, pb[size_t(i)]), e = std::max<int64_t>(0, pe[size_t(i)]);
    RK_CHECK(b + e < y.size(2 + i), "pads {} and {} do not fit an output of {}", b, e, y.size(2 + i));
    y = narrow(y, 2 + i, b, y.size(2 + i) - b - e);
  }
  if (in_at(in, 2).defined()) y = add(y, reshape(in[2], {1, in[2].size(0), 1, 1}));
  if (sp == 1) y = reshape(contiguous(y), {y.size(0), y.size(1), y.size(3)});
  return {y};
}

std::vector<int64_t> axes_of(Ctx& c, Ins& in, size_t input_index, int64_t from_opset) {
  if (c.opset() >= from_opset) {
    Tensor t = in_at(in, input_index);
    return t.defined() ? ints_of(t, "axes") : std::vector<int64_t>{};
  }
  return c.n.get_ints("axes");
}

Outs reduce(Ctx& c, Ins& in, bool is_mean, int64_t axes_input_from) {
  const Tensor& x = in[0];
  auto axes = axes_of(c, in, 1, axes_input_from);
  const bool keep = c.n.get_i("keepdims", 1) != 0;
  if (axes.empty() && c.n.get_i("noop_with_empty_axes", 0) != 0) return {x};
  for (auto& a : axes) a = normalize_dim(c.n.op_type, a, x.dim());
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  if (axes.empty())
    for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
  return {is_mean ? mean(x, axes, keep) : sum(x, axes, keep)};
}

Outs softmax_like(Ctx& c, Ins& in, bool log) {
  const Tensor& x = in[0];
  int64_t axis = normalize_dim(c.n.op_type, c.n.get_i("axis", c.opset() >= 13 ? -1 : 1), x.dim());
  if (c.opset() >= 13 || axis == x.dim() - 1) return {log ? log_softmax(x, axis) : softmax(x, axis)};
  // Before opset 13: over the input coerced to 2-D at axis.
  int64_t rows = 1;
  for (int64_t i = 0; i < axis; ++i) rows *= x.size(i);
  Tensor x2 = reshape(x, {rows, x.numel() / std::max<int64_t>(rows, 1)});
  Tensor y = log ? log_softmax(x2, 1) : softmax(x2, 1);
  return {reshape(y, x.shape())};
}

Outs binary(Ctx& c, Ins& in, char op) {
  Tensor a = in[0], b = in[1];
  if (host_int_arith(a) && host_int_arith(b)) {
    auto f = [op](double x, double y) {
      switch (op) {
        case '+': return x + y;
        case '-': return x - y;
        case '*': return x * y;
        default: return y == 0 ? 0.0 : std::trunc(x / y);
      }
    };
    return {host_binary(a, b, f, a.dtype())};
  }
  a = as_float_like(a, b);
  b = as_float_like(b, a);
  switch (op) {
    case '+': return {add(a, b)};
    case '-': return {sub(a, b)};
    case '*': return {mul(a, b)};
    default: return {div(a, b)};
  }
}

Outs gemm(Ctx& c, Ins& in) {
  const bool ta = c.n.get_i("transA", 0) != 0, tb = c.n.get_i("transB", 0) != 0;
  const double alpha = c.n.get_f("alpha", 1.0), beta = c.n.get_f("beta", 1.0);
  Tensor a = in[0], b = in[1], bias = in_at(in, 2);
  RK_CHECK(a.dim() == 2 && b.dim() == 2, "Gemm needs 2-D A and B, got {} and {}", a.str(), b.str());
  const int64_t n = tb ? b.size(0) : b.size(1);
  if (!ta && tb && alpha == 1.0 && beta == 1.0 && (!bias.defined() || (bias.dim() == 1 && bias.size(0) == n)))
    return {linear(a, b, bias)};
  Tensor y = scale(matmul(a, b, ta, tb), alpha);
  if (bias.defined() && beta != 0.0) y = add(y, scale(bias, beta));
  return {y};
}

Outs matmul_op(Ctx&, Ins& in) {
  Tensor a = in[0], b = in[1];
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = reshape(a, {1, a.size(0)});
  if (b1) b = reshape(b, {b.size(0), 1});
  if (b.dim() > 2 || a.dim() > 2) {
    Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
    if (!(b.dim() == 2 && a.dim() > 2) && ba != bb) {
      Shape batch = broadcast_shapes("MatMul", ba, bb);
      Shape sa = batch, sb = batch;
      sa.insert(sa.end(), a.shape().end() - 2, a.shape().end());
      sb.insert(sb.end(), b.shape().end() - 2, b.shape().end());
      a = contiguous(expand(a, sa));
      b = contiguous(expand(b, sb));
    }
  }
  Tensor y = matmul(a, b);
  Shape s = y.shape();
  if (a1) s.erase(s.end() - 2);
  if (b1) s.erase(s.end() - 1);
  return {s == y.shape() ? y : reshape(y, s)};
}

Outs clip(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  if (c.opset() >= 11) {
    if (in_at(in, 1).defined()) lo = scalar_of(in[1], "Clip's min");
    if (in_at(in, 2).defined()) hi = scalar_of(in[2], "Clip's max");
  } else {
    lo = c.n.get_f("min", lo);
    hi = c.n.get_f("max", hi);
  }
  if (host_int_arith(x)) {
    Tensor xc = contiguous(x), y = Tensor::empty(x.shape(), x.dtype(), Device::cpu);
    for (int64_t i = 0; i < x.numel(); ++i) y.set(i, std::clamp(xc.get(i), lo, hi));
    return {y};
  }
  if (lo == 0.0 && hi == 6.0) return {relu6(x)};
  return {clamp(x, lo, hi)};
}

Outs reshape_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  auto s = ints_of(in[1], "Reshape's shape");
  const bool allowzero = c.n.get_i("allowzero", 0) != 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == 0 && !allowzero) {
      RK_CHECK(int64_t(i) < x.dim(), "shape entry {} is 0 (copy) but the input has rank {}", i, x.dim());
      s[i] = x.size(int64_t(i));
    }
  if (host_int(x)) return {host_copy(x, resolve_reshape(x.shape(), x.numel(), s), x.dtype())};
  return {reshape(x, s)};
}

// QuantizeLinear / DequantizeLinear (the QDQ format: ONNX Runtime's quantize_static, reckon's own
// int8 export): scale and zero point must be constants; per-axis parameters along `axis`.
QuantizeAttrs qdq_attrs(Ctx& c, Ins& in, DType default_zp_type) {
  QuantizeAttrs a;
  RK_CHECK(in_at(in, 1).defined(), "{} needs a scale", c.n.op_type);
  const Tensor& sc = in[1];
  RK_CHECK(sc.dim() <= 1, "{}'s scale must be a scalar or 1-D tensor, got {}", c.n.op_type, sc.str());
  a.scale.clear();
  // A float initializer is a module tensor: on the meta device (a model planned, not run) its
  // values are unknown and only its shape matters.
  const std::vector<double> scales = sc.is_meta() ? std::vector<double>(size_t(sc.numel()), 1.0) : sc.to_vector();
  for (double v : scales) {
    RK_CHECK(std::isfinite(v) && v > 0, "{}'s scale {} is not a finite positive number", c.n.op_type, v);
    a.scale.push_back(v);
  }
  a.zero_point.assign(a.scale.size(), 0);
  a.dtype = default_zp_type == DType::i8 ? "s8" : "u8";
  if (in_at(in, 2).defined()) {
    const Tensor& zp = in[2];
    RK_CHECK(zp.numel() == int64_t(a.scale.size()), "{}'s zero point must have the scale's shape, got {}",
             c.n.op_type, zp.str());
    RK_CHECK(zp.dtype() == DType::u8 || zp.dtype() == DType::i8 || zp.dtype() == DType::i32,
             "{}'s zero point is {}: u8, s8 or (dequantize) i32 are supported", c.n.op_type, dtype_name(zp.dtype()));
    if (!zp.is_meta()) {
      auto v = zp.to_vector();
      for (size_t i = 0; i < v.size(); ++i) a.zero_point[i] = int64_t(v[i]);
    }
    a.dtype = zp.dtype() == DType::i8 ? "s8" : "u8";
  }
  a.axis = c.n.get_i("axis", 1);
  if (a.axis < 0) a.axis += in[0].dim();
  return a;
}
Outs quantize_linear_op(Ctx& c, Ins& in) {
  QuantizeAttrs a = qdq_attrs(c, in, DType::u8);
  RK_CHECK(in[0].dtype() == DType::f32, "QuantizeLinear of {} is not supported (float32 only)", dtype_name(in[0].dtype()));
  return {call1<QuantizeLinear>({in[0]}, a)};
}
Outs dequantize_linear_op(Ctx& c, Ins& in) {
  QuantizeAttrs a = qdq_attrs(c, in, in[0].dtype());
  // An integer initializer (a weight, a bias) lives on the host: dequantized there, it is a float
  // constant of the model, on the model's device (the meta device: its shape only).
  // (On the meta device the constant is a meta tensor of its shape and dtype, so the program keeps
  // the dequantize node that the engine's fuse_qdq pass reads the int8 layer from.)
  if (in[0].device() != c.device && c.device == Device::meta)
    return {call1<DequantizeLinear>({Tensor::empty(in[0].shape(), in[0].dtype(), Device::meta)}, a)};
  RK_CHECK(in[0].device() == c.device || c.device == Device::cpu,
           "DequantizeLinear of a constant for the {} device is not supported", device_name(c.device));
  return {call1<DequantizeLinear>({in[0]}, a)};
}

Outs flatten_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  int64_t axis = c.n.get_i("axis", 1);
  if (axis < 0) axis += x.dim();
  RK_CHECK(axis >= 0 && axis <= x.dim(), "axis {} is out of range for rank {}", c.n.get_i("axis", 1), x.dim());
  int64_t rows = 1;
  for (int64_t i = 0; i < axis; ++i) rows *= x.size(i);
  return {reshape_any(x, {rows, rows ? x.numel() / rows : 0})};
}

Outs unsqueeze(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  auto axes = axes_of(c, in, 1, 13);
  const int64_t r = x.dim() + int64_t(axes.size());
  for (auto& a : axes) a = normalize_dim(c.n.op_type, a, r);
  std::sort(axes.begin(), axes.end());
  RK_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), "axes repeat an axis");
  Shape s;
  size_t j = 0, k = 0;
  for (int64_t i = 0; i < r; ++i)
    if (k < axes.size() && axes[k] == i) s.push_back(1), ++k;
    else s.push_back(x.size(int64_t(j++)));
  return {reshape_any(x, s)};
}

Outs squeeze(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  auto axes = axes_of(c, in, 1, 13);
  for (auto& a : axes) a = normalize_dim(c.n.op_type, a, x.dim());
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool drop = axes.empty() ? x.size(i) == 1 : std::find(axes.begin(), axes.end(), i) != axes.end();
    RK_CHECK(!drop || x.size(i) == 1, "cannot squeeze dim {} of size {}", i, x.size(i));
    if (!drop) s.push_back(x.size(i));
  }
  return {reshape_any(x, s)};
}

Outs concat_op(Ctx& c, Ins& in) {
  RK_CHECK(!in.empty(), "Concat needs an input");
  RK_CHECK(in[0].dim() >= 1, "Concat of scalars");
  const int64_t axis = normalize_dim(c.n.op_type, c.n.get_i("axis", 0), in[0].dim());
  bool all_host = std::all_of(in.begin(), in.end(), [](const Tensor& t) { return host_int(t); });
  if (!all_host) return {concat(in, axis)};
  Shape s = in[0].shape();
  s[size_t(axis)] = 0;
  for (const Tensor& t : in) {
    bool fits = t.dim() == in[0].dim();
    for (int64_t i = 0; fits && i < t.dim(); ++i) fits = i == axis || t.size(i) == in[0].size(i);
    RK_CHECK(fits, "Concat of {} and {} along axis {}", in[0].str(), t.str(), axis);
    s[size_t(axis)] += t.size(axis);
  }
  Tensor y = Tensor::empty(s, in[0].dtype(), Device::cpu);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[size_t(i)];
  for (int64_t i = axis + 1; i < int64_t(s.size()); ++i) inner *= s[size_t(i)];
  int64_t off = 0;
  for (const Tensor& t : in) {
    Tensor tc = contiguous(t);
    const int64_t len = t.size(axis);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < len * inner; ++i)
        y.set((o * s[size_t(axis)] + off) * inner + i, tc.get(o * len * inner + i));
    off += len;
  }
  return {y};
}

// [start, end) of Slice along a dim of size `dim`, as ONNX clamps them (step 1).
std::pair<int64_t, int64_t> slice_range(int64_t start, int64_t end, int64_t dim) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  start = std::clamp<int64_t>(start, 0, dim);
  end = std::clamp<int64_t>(end, 0, dim);
  return {start, std::max(start, end)};
}

Outs slice_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() >= 10) {
    starts = ints_of(in[1], "Slice's starts");
    ends = ints_of(in[2], "Slice's ends");
    if (in_at(in, 3).defined()) axes = ints_of(in[3], "Slice's axes");
    if (in_at(in, 4).defined()) steps = ints_of(in[4], "Slice's steps");
  } else {
    starts = c.n.get_ints("starts");
    ends = c.n.get_ints("ends");
    axes = c.n.get_ints("axes");
  }
  RK_CHECK(starts.size() == ends.size(), "starts has {} entries and ends {}", starts.size(), ends.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  RK_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "starts, ends, axes and steps differ in length");
  RK_CHECK(!starts.empty(), "Slice without starts and ends");
  if (host_int(x) && x.dim() == 1) {  // shapes: any step
    RK_CHECK(starts.size() == 1 && (axes[0] == 0 || axes[0] == -1), "Slice of a 1-D integer tensor takes one axis, 0");
    const int64_t n = x.size(0);
    int64_t st = steps[0], b = starts[0], e = ends[0];
    RK_CHECK(st != 0, "Slice's step is 0");
    if (b < 0) b += n;
    if (e < 0) e += n;
    std::vector<int64_t> v, src = ints_of(x, "x");
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, n), e = std::clamp<int64_t>(e, 0, n);
      for (int64_t i = b; i < e; i += st) v.push_back(src[size_t(i)]);
    } else {
      b = std::clamp<int64_t>(b, -1, n - 1), e = std::clamp<int64_t>(e, -1, n - 1);
      for (int64_t i = b; i > e; i += st) v.push_back(src[size_t(i)]);
    }
    return {host(v, {int64_t(v.size())}, x.dtype())};
  }
  Tensor y = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t ax = normalize_dim(c.n.op_type, axes[i], x.dim()), st = steps[i], n = y.size(ax);
    RK_CHECK(st != 0, "Slice's step is 0");
    if (st == 1) {
      auto [b, e] = slice_range(starts[i], ends[i], n);
      y = narrow(y, ax, b, e - b);
      continue;
    }
    int64_t b = starts[i] < 0 ? starts[i] + n : starts[i], e = ends[i] < 0 ? ends[i] + n : ends[i];
    std::vector<Tensor> parts;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, n), e = std::clamp<int64_t>(e, 0, n);
      for (int64_t j = b; j < e; j += st) parts.push_back(narrow(y, ax, j, 1));
    } else {
      b = std::clamp<int64_t>(b, -1, n - 1), e = std::clamp<int64_t>(e, -1, n - 1);
      for (int64_t j = b; j > e; j += st) parts.push_back(narrow(y, ax, j, 1));
    }
    RK_CHECK(!parts.empty(), "Slice selects nothing along axis {} (empty results are not supported)", ax);
    y = parts.size() == 1 ? parts[0] : concat(parts, ax);
  }
  return {y};
}

Outs split_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  const int64_t axis = normalize_dim(c.n.op_type, c.n.get_i("axis", 0), x.dim());
  std::vector<int64_t> sizes;
  if (c.opset() >= 13 && in_at(in, 1).defined()) sizes = ints_of(in[1], "Split's split");
  else if (c.opset() < 13) sizes = c.n.get_ints("split");
  const int64_t n = int64_t(c.n.outputs.size());
  RK_CHECK(n >= 1, "Split has no outputs");
  if (sizes.empty()) {
    RK_CHECK(x.size(axis) % n == 0, "dim {} of size {} does not split into {} equal parts", axis, x.size(axis), n);
    sizes.assign(size_t(n), x.size(axis) / n);
  }
  RK_CHECK(int64_t(sizes.size()) == n, "split has {} sizes for {} outputs", sizes.size(), n);
  Outs out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, axis, at, s));
    at += s;
  }
  RK_CHECK(at == x.size(axis), "split sizes sum to {} but dim {} is {}", at, axis, x.size(axis));
  return out;
}

Outs gather(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  const Tensor& idx_t = in[1];
  RK_CHECK(x.dim() >= 1, "Gather of a scalar");
  const int64_t axis = normalize_dim(c.n.op_type, c.n.get_i("axis", 0), x.dim());
  auto idx = ints_of(idx_t, "Gather's indices");
  const int64_t dim = x.size(axis);
  for (auto& i : idx) {
    RK_CHECK(i >= -dim && i < dim, "index {} is out of range for dim {} of size {}", i, axis, dim);
    if (i < 0) i += dim;
  }
  Shape s(x.shape().begin(), x.shape().begin() + axis);
  s.insert(s.end(), idx_t.shape().begin(), idx_t.shape().end());
  s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
  if (host_int(x)) {
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.size(i);
    for (int64_t i = axis + 1; i < x.dim(); ++i) inner *= x.size(i);
    Tensor xc = contiguous(x);
    Tensor y = Tensor::empty(s, x.dtype(), Device::cpu);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j : idx)
        for (int64_t i = 0; i < inner; ++i) y.set(k++, xc.get((o * dim + j) * inner + i));
    return {y};
  }
  std::vector<Tensor> parts;
  for (int64_t j : idx) parts.push_back(narrow(x, axis, j, 1));
  RK_CHECK(!parts.empty(), "Gather with no indices is not supported");
  Tensor y = parts.size() == 1 ? parts[0] : concat(parts, axis);
  return {reshape(contiguous(y), s)};
}

Outs pad_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  const std::string mode = c.n.get_s("mode", "constant");
  RK_CHECK(mode == "constant" || mode == "reflect" || mode == "edge", "Pad mode '{}' is not an ONNX mode", mode);
  std::vector<int64_t> pads;
  double value = 0.0;
  if (c.opset() >= 11) {
    pads = ints_of(in[1], "Pad's pads");
    if (in_at(in, 2).defined()) value = scalar_of(in[2], "Pad's constant_value");
    RK_CHECK(!in_at(in, 3).defined(), "Pad's axes input is not supported");
  } else {
    pads = c.n.get_ints("pads");
    value = c.n.get_f("value", 0.0);
  }
  if (mode == "constant") return {pad_const(x, pads, value)};
  // reflect and edge: the border rows, gathered with narrow and joined.
  const int64_t r = x.dim();
  RK_CHECK(int64_t(pads.size()) == 2 * r, "pads has {} entries for a rank-{} input", pads.size(), r);
  Tensor y = x;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t b = pads[size_t(d)], e = pads[size_t(d + r)], n = y.size(d);
    if (b == 0 && e == 0) continue;
    RK_CHECK(b >= 0 && e >= 0, "negative pads are not supported");
    RK_CHECK(mode == "edge" || (b < n && e < n), "reflect pads {} and {} need a dim larger than {}", b, e, n);
    std::vector<Tensor> parts;
    for (int64_t i = b; i >= 1; --i) parts.push_back(narrow(y, d, mode == "edge" ? 0 : i, 1));
    parts.push_back(y);
    for (int64_t i = 1; i <= e; ++i) parts.push_back(narrow(y, d, mode == "edge" ? n - 1 : n - 1 - i, 1));
    y = concat(parts, d);
  }
  return {y};
}

Tensor constant_value(Ctx& c) {
  const Node& n = c.n;
  if (const Attr* a = n.attr("value")) return a->t;
  if (const Attr* a = n.attr("value_float")) return Tensor::from_vector({a->f}, {}, DType::f32);
  if (const Attr* a = n.attr("value_floats"))
    return Tensor::from_vector(a->floats, {int64_t(a->floats.size())}, DType::f32);
  if (const Attr* a = n.attr("value_int")) return host({a->i}, {});
  if (const Attr* a = n.attr("value_ints")) return host1(a->ints);
  fail("Constant without a value, value_float(s) or value_int(s) attribute (sparse and string values are not "
       "supported)");
}

Outs batch_norm(Ctx& c, Ins& in) {
  bool training = c.training;
  if (c.opset() >= 14) training = c.n.get_i("training_mode", 0) != 0 || c.training;
  const double m = c.n.get_f("momentum", 0.9);
  Outs stats;
  const bool want_stats = training && c.n.outputs.size() > 1;
  if (want_stats) {
    // ONNX's training outputs: running = running * momentum + batch * (1 - momentum), with the
    // biased batch variance (reckon's own in-place update is PyTorch's, with the unbiased one).
    // Statistics take no gradient (as in PyTorch's and ONNX Runtime's training): computed with
    // autograd on, each of these ops kept its input alive for a backward nobody runs, a second
    // copy of every batch norm's input in a training step's saved memory.
    NoGrad no_grad;
    std::vector<int64_t> dims{0};
    for (int64_t i = 2; i < in[0].dim(); ++i) dims.push_back(i);
    Tensor mu = mean(in[0], dims, true);
    Tensor var = mean(square(sub(in[0], mu)), dims);
    mu = reshape(mu, {in[0].size(1)});
    stats = {add(scale(in[3], m), scale(mu, 1.0 - m)), add(scale(in[4], m), scale(var, 1.0 - m))};
  }
  Tensor y = batch_norm2d(in[0], in[1], in[2], in[3], in[4], training, 1.0 - m, c.n.get_f("epsilon", 1e-5));
  Outs out{y};
  for (size_t i = 1; i < c.n.outputs.size(); ++i)
    out.push_back(want_stats && i <= 2 ? stats[i - 1] : i == 1 ? in[3] : i == 2 ? in[4] : Tensor());
  return out;
}

Outs dropout_op(Ctx& c, Ins& in) {
  double ratio = 0.5;
  bool training = c.training;
  if (c.opset() >= 12) {
    if (in_at(in, 1).defined()) ratio = scalar_of(in[1], "Dropout's ratio");
    if (in_at(in, 2).defined()) training = training || scalar_of(in[2], "Dropout's training_mode") != 0;
  } else {
    ratio = c.n.get_f("ratio", 0.5);
  }
  Outs out{training && ratio > 0.0 ? dropout(in[0], ratio, true) : in[0]};
  if (c.n.outputs.size() > 1 && !c.n.outputs[1].empty()) {
    RK_CHECK(!training || ratio == 0.0, "Dropout's mask output in training mode is not supported");
    out.push_back(host(std::vector<int64_t>(size_t(in[0].numel()), 1), in[0].shape(), DType::u8));
  }
  return out;
}

Outs cast_op(Ctx& c, Ins& in) {
  const Tensor& x = in[0];
  const auto to = dtype_of_onnx(int(c.n.get_i("to", 0)));
  RK_CHECK(to.has_value(), "Cast to element type {} is not supported", c.n.get_i("to", 0));
  if (x.dtype() == *to) return {x};
  if (is_floating(x.dtype()) && is_floating(*to)) return {cast(x, *to)};
  RK_CHECK(x.device() == Device::cpu, "Cast between {} and {} on {} is not supported (only on constants)",
           dtype_name(x.dtype()), dtype_name(*to), device_name(x.device()));
  Tensor xc = contiguous(x);
  Tensor y = Tensor::empty(x.shape(), *to, Device::cpu);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = xc.get(i);
    y.set(i, is_int(*to) ? (*to == DType::u8 && c.n.get_i("to", 0) == 9 ? double(v != 0) : std::trunc(v)) : v);
  }
  return {y};
}

const std::map<std::string, OpFn>& ops() {
  static const std::map<std::string, OpFn> t = {
      {"Conv", conv},
      {"ConvTranspose", conv_transpose},
      {"MaxPool", [](Ctx& c, Ins& in) { return pool(c, in, true); }},
      {"AveragePool", [](Ctx& c, Ins& in) { return pool(c, in, false); }},
      {"GlobalAveragePool",
       [](Ctx&, Ins& in) {
         RK_CHECK(in[0].dim() == 4, "only 2-D pooling is supported (x {})", in[0].str());
         return Outs{adaptive_avg_pool2d(in[0], {1, 1})};
       }},
      {"Gemm", gemm},
      {"MatMul", matmul_op},
      {"Add", [](Ctx& c, Ins& in) { return binary(c, in, '+'); }},
      {"Sub", [](Ctx& c, Ins& in) { return binary(c, in, '-'); }},
      {"Mul", [](Ctx& c, Ins& in) { return binary(c, in, '*'); }},
      {"Div", [](Ctx& c, Ins& in) { return binary(c, in, '/'); }},
      {"Relu", [](Ctx&, Ins& in) { return Outs{relu(in[0])}; }},
      {"LeakyRelu", [](Ctx& c, Ins& in) { return Outs{leaky_relu(in[0], c.n.get_f("alpha", 0.01))}; }},
      {"Clip", clip},
      {"Sigmoid", [](Ctx&, Ins& in) { return Outs{sigmoid(in[0])}; }},
      {"HardSigmoid",
       [](Ctx& c, Ins& in) { return Outs{hardsigmoid(in[0], c.n.get_f("alpha", 0.2), c.n.get_f("beta", 0.5))}; }},
      {"HardSwish", [](Ctx&, Ins& in) { return Outs{hardswish(in[0])}; }},
      {"Tanh", [](Ctx&, Ins& in) { return Outs{tanh(in[0])}; }},
      {"Exp", [](Ctx&, Ins& in) { return Outs{exp(in[0])}; }},
      {"Log", [](Ctx&, Ins& in) { return Outs{log(in[0])}; }},
      {"Neg", [](Ctx&, Ins& in) { return Outs{neg(in[0])}; }},
      {"Softmax", [](Ctx& c, Ins& in) { return softmax_like(c, in, false); }},
      {"LogSoftmax", [](Ctx& c, Ins& in) { return softmax_like(c, in, true); }},
      {"ReduceMean", [](Ctx& c, Ins& in) { return reduce(c, in, true, 18); }},
      {"ReduceSum", [](Ctx& c, Ins& in) { return reduce(c, in, false, 13); }},
      {"Flatten", flatten_op},
      {"QuantizeLinear", quantize_linear_op},
      {"DequantizeLinear", dequantize_linear_op},
      {"Reshape", reshape_op},
      {"Shape",
       [](Ctx& c, Ins& in) {
         const int64_t r = in[0].dim();
         int64_t b = c.n.get_i("start", 0), e = c.n.get_i("end", r);
         auto [s, t] = slice_range(b, e, r);
         std::vector<int64_t> d(in[0].shape().begin() + s, in[0].shape().begin() + t);
         return Outs{host1(d)};
       }},
      {"Gather", gather},
      {"Unsqueeze", unsqueeze},
      {"Squeeze", squeeze},
      {"Concat", concat_op},
      {"Split", split_op},
      {"Slice", slice_op},
      {"Transpose",
       [](Ctx& c, Ins& in) {
         std::vector<int64_t> perm;
         for (int64_t i = in[0].dim() - 1; i >= 0; --i) perm.push_back(i);
         perm = c.n.get_ints("perm", perm);
         RK_CHECK(!host_int(in[0]) || in[0].dim() <= 1, "Transpose of an integer tensor is not supported");
         return Outs{permute(in[0], perm)};
       }},
      {"Pad", pad_op},
      {"Constant", [](Ctx& c, Ins&) { return Outs{constant_value(c)}; }},
      {"Identity", [](Ctx&, Ins& in) { return Outs{in[0]}; }},
      {"Dropout", dropout_op},
      {"BatchNormalization", batch_norm},
      {"LRN",
       [](Ctx& c, Ins& in) {
         const int64_t size = c.n.get_i("size", 0);
         RK_CHECK(size > 0, "LRN needs a positive size, got {}", size);
         RK_CHECK(size % 2 == 1, "LRN with an even size ({}) centres its window differently from torch: not supported",
                  size);
         return Outs{local_response_norm(in[0], size, c.n.get_f("alpha", 1e-4), c.n.get_f("beta", 0.75),
                                         c.n.get_f("bias", 1.0))};
       }},
      {"Cast", cast_op},
      {"Expand",
       [](Ctx&, Ins& in) {
         auto s = ints_of(in[1], "Expand's shape");
         Shape out = broadcast_shapes("Expand", in[0].shape(), s);
         if (host_int(in[0])) return Outs{host_binary(in[0], host(std::vector<int64_t>(size_t(shape_numel(out)), 0), out),
                                                      [](double a, double) { return a; }, in[0].dtype())};
         return Outs{contiguous(expand(in[0], out))};
       }},
      {"ConstantOfShape",
       [](Ctx& c, Ins& in) {
         auto s = ints_of(in[0], "ConstantOfShape's shape");
         int64_t n = 1;
         for (int64_t d : s) {
           RK_CHECK(d >= 0 && (d == 0 || n <= (int64_t(1) << 32) / d), "shape [{}] is negative or over 2^32 elements",
                    fmt::join(s, ", "));
           n *= d;
         }
         Tensor v = c.n.attr("value") ? c.n.attr("value")->t : Tensor::from_vector({0.0}, {1}, DType::f32);
         RK_CHECK(v.numel() == 1, "ConstantOfShape's value must have one element");
         if (is_int(v.dtype())) return Outs{host(std::vector<int64_t>(size_t(shape_numel(s)), int64_t(v.get(0))), s, v.dtype())};
         return Outs{full(s, v.get(0), v.dtype(), c.device)};
       }},
  };
  return t;
}

// The inputs an operator cannot do without (at this opset).
int min_inputs(const std::string& op, int64_t opset) {
  static const std::map<std::string, int> t = {
      {"Conv", 2}, {"ConvTranspose", 2}, {"Gemm", 2}, {"MatMul", 2}, {"Add", 2}, {"Sub", 2}, {"Mul", 2},
      {"Div", 2}, {"Gather", 2}, {"Expand", 2}, {"BatchNormalization", 5}, {"Constant", 0}};
  if (op == "Reshape") return opset >= 5 ? 2 : 1;
  if (op == "Slice") return opset >= 10 ? 3 : 1;
  if (op == "Pad") return opset >= 11 ? 2 : 1;
  if (op == "Unsqueeze") return opset >= 13 ? 2 : 1;
  auto it = t.find(op);
  return it == t.end() ? 1 : it->second;
}

// Inputs that are read as constants (shapes, axes, bounds), per operator: an initializer read
// only there stays on the host instead of becoming a module tensor.
bool static_input(const std::string& op, size_t i) {
  static const std::map<std::string, std::set<size_t>> t = {
      {"Reshape", {1}}, {"Expand", {1}},    {"Slice", {1, 2, 3, 4}}, {"Pad", {1, 2, 3}}, {"Clip", {1, 2}},
      {"Split", {1}},   {"Squeeze", {1}},   {"Unsqueeze", {1}},      {"ReduceSum", {1}}, {"ReduceMean", {1}},
      {"Gather", {1}},  {"ConstantOfShape", {0}}, {"Dropout", {1, 2}}};
  auto it = t.find(op);
  return it != t.end() && it->second.count(i);
}

// "layer1.0.conv1" from "/layer1/layer1.0/conv1/Conv" (torch's names) or "/layer1.0.conv1/Conv_3" (reckon's).
std::string scope_of(const std::string& node_name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= node_name.size()) {
    size_t slash = node_name.find('/', start);
    if (slash == std::string::npos) slash = node_name.size();
    if (slash > start) parts.push_back(node_name.substr(start, slash - start));
    start = slash + 1;
  }
  if (parts.size() < 2) return "";
  parts.pop_back();  // the node itself
  std::string path;
  for (const auto& p : parts)
    path = path.empty() || p.rfind(path + ".", 0) == 0 ? p : path + "." + p;
  return path;
}

}  // namespace

const std::vector<std::string>& supported_ops() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> names;
    for (const auto& [k, f] : ops()) names.push_back(k);
    return names;
  }();
  return v;
}

std::vector<Tensor> run(const Model& m, const RunArgs& a) {
  std::map<std::string, Tensor> env;
  // The last node that reads each value (outputs are kept).
  std::map<std::string, size_t> last;
  for (size_t i = 0; i < m.nodes.size(); ++i)
    for (const auto& in : m.nodes[i].inputs) last[in] = i;
  for (const auto& o : m.outputs) last[o.name] = m.nodes.size();
  Device device = Device::cpu;
  for (const auto& [name, t] : a.values)
    if (t.defined() && !is_int(t.dtype())) device = t.device();
  auto lookup = [&](const std::string& name) -> Tensor {
    if (name.empty()) return Tensor();
    if (auto it = env.find(name); it != env.end()) return it->second;
    if (auto it = a.values.find(name); it != a.values.end()) return it->second;
    if (const Tensor* t = m.initializer(name)) return *t;
    return Tensor();
  };
  for (const ValueInfo& in : m.inputs)
    RK_CHECK(a.values.count(in.name), "[onnx] {}: no value for the graph input '{}'", m.path, in.name);
  const auto& table = ops();
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const Node& n = m.nodes[i];
    auto it = table.find(n.op_type);
    RK_CHECK(it != table.end(), "[onnx] {}: {}, opset {}: operator {} is not supported by reckon (it maps {})", m.path,
             n.where(), m.opset, n.op_type, fmt::join(supported_ops(), ", "));
    const int need = min_inputs(n.op_type, m.opset);
    RK_CHECK(int(n.inputs.size()) >= need, "[onnx] {}: {}, opset {}: needs at least {} inputs, has {}", m.path,
             n.where(), m.opset, need, n.inputs.size());
    Ins in;
    for (const auto& name : n.inputs) {
      in.push_back(lookup(name));
      RK_CHECK(name.empty() || in.back().defined(), "[onnx] {}: {} reads '{}', which was not computed", m.path,
               n.where(), name);
    }
    Outs out;
    if (n.op_type == "Constant" && !n.outputs.empty() && a.values.count(n.outputs[0])) {
      out = {a.values.at(n.outputs[0])};
    } else {
      Ctx c{m, n, a.training, device};
      try {
        RK_CHECK(!in.empty() || n.op_type == "Constant", "no inputs");
        ScopeGuard scope(scope_of(n.name));
        out = it->second(c, in);
      } catch (const Error& e) {
        throw Error(fmt::format("[onnx] {}: {}, opset {}: {}", m.path, n.where(), m.opset, e.what()));
      }
    }
    for (size_t k = 0; k < n.outputs.size() && k < out.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      env[n.outputs[k]] = out[k];
      // reckon's shape against the file's value_info (or the graph output's), where it has one.
      auto vi = m.value_info.find(n.outputs[k]);
      const ValueInfo* info = vi != m.value_info.end() ? &vi->second : nullptr;
      for (const ValueInfo& o : m.outputs)
        if (o.name == n.outputs[k]) info = &o;
      if (info && info->has_shape && out[k].defined()) {
        bool same = int64_t(info->dims.size()) == out[k].dim();
        for (size_t j = 0; same && j < info->dims.size(); ++j)
          same = info->dims[j] < 0 || info->dims[j] == out[k].size(int64_t(j));
        RK_CHECK(same, "[onnx] {}: {}, opset {}: output '{}' is [{}] by reckon's shape inference but the file says "
                 "[{}]", m.path, n.where(), m.opset, n.outputs[k], fmt::join(out[k].shape(), ", "),
                 fmt::join(info->dims, ", "));
      }
    }
    // Free what no later node reads (the memory timeline follows the file's order).
    for (const auto& name : n.inputs)
      if (auto l = last.find(name); l != last.end() && l->second == i) env.erase(name);
  }
  std::vector<Tensor> outs;
  for (const auto& o : m.outputs) {
    Tensor t = lookup(o.name);
    RK_CHECK(t.defined(), "[onnx] {}: graph output '{}' was not computed", m.path, o.name);
    outs.push_back(t);
  }
  return outs;
}

// ---- OnnxModule ----
OnnxModule::OnnxModule(std::shared_ptr<const Model> m, Device device)
    : TensorTree("OnnxModule", device), model_(std::move(m)) {
  RK_CHECK(model_ != nullptr, "[onnx] no model");
  RK_CHECK(model_->inputs.size() == 1, "[onnx] {}: the graph has {} inputs (a model takes one image batch)",
           model_->path, model_->inputs.size());
  // How each float initializer is read: as data (a parameter), as batch norm's statistics or a
  // scalar (a buffer), or only as a constant (stays on the host).
  std::set<std::string> data_use, stats_use;
  for (const Node& n : model_->nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty() || static_input(n.op_type, i)) continue;
      (n.op_type == "BatchNormalization" && i >= 3 ? stats_use : data_use).insert(n.inputs[i]);
    }
  std::vector<Tensor> sources;  // the file's value of each bound_ entry
  auto adopt = [&](const std::string& name, const Tensor& t, bool parameter) {
    bound_.emplace_back(name, add_at_path(name, t.spec(), parameter));
    sources.push_back(t);
  };
  for (const auto& [name, t] : model_->initializers) {
    if (!is_floating(t.dtype())) continue;
    if (!data_use.count(name) && !stats_use.count(name)) continue;
    adopt(name, t, data_use.count(name) && !stats_use.count(name) && t.numel() > 1);
  }
  for (const Node& n : model_->nodes)  // float Constant nodes: buffers
    if (n.op_type == "Constant" && n.outputs.size() == 1) {
      const Attr* v = n.attr("value");
      if (v && v->t.defined() && is_floating(v->t.dtype()) && data_use.count(n.outputs[0]))
        adopt(n.outputs[0], v->t, false);
    }
  adopt_tensors();
  // The file's values, into this module's tensors.
  if (device == Device::cpu) {
    NoGrad no_grad;
    for (size_t k = 0; k < bound_.size(); ++k) copy_(bound_[k].second, sources[k]);
  }
}

Tensor OnnxModule::forward(const Tensor& x) {
  const ValueInfo& in = input();
  if (in.has_shape) {
    RK_CHECK(x.dim() == int64_t(in.dims.size()), "[onnx] {}: input '{}' has rank {} but x is {}", model_->path, in.name,
             in.dims.size(), x.str());
    for (size_t i = 0; i < in.dims.size(); ++i)
      RK_CHECK(in.dims[i] < 0 || in.dims[i] == x.size(int64_t(i)), "[onnx] {}: input '{}' has dims [{}] but x is {}",
               model_->path, in.name, fmt::join(in.dims, ", "), x.str());
  }
  RunArgs a;
  a.training = is_training();
  a.values[in.name] = x;
  for (const auto& [name, t] : bound_) a.values[name] = t;
  return run(*model_, a)[0];
}

// ---- models by name or file ----
bool is_onnx_path(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".onnx") == 0;
}

namespace {
// A file is read once per process while it stays the same (its size and time of change): the
// commands ask for its dims and its model several times.
std::shared_ptr<const Model> cached_model(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto time = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  const std::string key = fmt::format("{}\n{}\n{}", path, ec ? 0 : size, ec ? 0 : time);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto m = std::make_shared<const Model>(load(path));
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = m;
  return m;
}
// (C, H, W) and classes of a file's model.
std::pair<Shape, int64_t> file_dims(const std::string& path) {
  auto m = cached_model(path);
  RK_CHECK(m->inputs.size() == 1, "[onnx] {}: the graph has {} inputs (a model takes one image batch)", path,
           m->inputs.size());
  const ValueInfo& in = m->inputs[0];
  RK_CHECK(in.has_shape && in.dims.size() == 4 && in.dims[1] > 0 && in.dims[2] > 0 && in.dims[3] > 0,
           "[onnx] {}: input '{}' must be (N, C, H, W) with C, H and W fixed, got [{}]", path, in.name,
           fmt::join(in.dims, ", "));
  const ValueInfo& out = m->outputs[0];
  int64_t classes = out.has_shape && out.dims.size() == 2 ? out.dims[1] : -1;
  return {{in.dims[1], in.dims[2], in.dims[3]}, classes};
}
}  // namespace

nn::ModelConfig resolve_model_config(const std::string& name, const nn::ModelConfig& cfg) {
  if (!is_onnx_path(name)) return nn::resolve_model_config(name, cfg);
  auto [chw, classes] = file_dims(name);
  nn::ModelConfig r = cfg;
  RK_CHECK(cfg.in_channels == 0 || cfg.in_channels == chw[0], "[onnx] {}: the model takes {} channels, not {}", name,
           chw[0], cfg.in_channels);
  RK_CHECK(cfg.num_classes == 0 || classes < 0 || cfg.num_classes == classes,
           "[onnx] {}: the model has {} outputs, but {} classes were asked for", name, classes, cfg.num_classes);
  r.in_channels = chw[0];
  r.num_classes = classes > 0 ? classes : cfg.num_classes;
  return r;
}

std::shared_ptr<nn::Module> make_model(const std::string& name, const nn::ModelConfig& cfg) {
  if (!is_onnx_path(name)) return nn::make_model(name, cfg);
  onnx::resolve_model_config(name, cfg);  // checks channels and classes
  return std::make_shared<OnnxModule>(cached_model(name), cfg.device);
}

Shape model_input_shape(const std::string& name, const nn::ModelConfig& cfg) {
  if (!is_onnx_path(name)) return nn::model_input_shape(name, cfg);
  return file_dims(name).first;
}

}  // namespace reckon::onnx
