// Reference convolution: direct loops over every (output, kernel tap), accumulating in
// double. Each tap counts as one MAC even where it falls on padding, as cost() declares.
#include "reckon/ops/conv.h"
#include "reckon/ops/dispatch.h"

namespace reckon {

namespace {
struct Geo {
  int64_t n, c, h, w, o, ho, wo, kh, kw, g, cg, og;
  int64_t sh, sw, ph, pw, dh, dw;
};
Geo geo(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a) {
  return {x[0], x[1], x[2], x[3], w[0], y[2], y[3], w[2], w[3], a.groups, w[1], w[0] / a.groups,
          a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.dilation[0], a.dilation[1]};
}
// Calls f(x_index, w_index, y_index) for every tap inside the input; returns taps visited.
template <class F>
int64_t for_each_tap(const Geo& q, F&& f) {
  int64_t taps = 0;
  for (int64_t n = 0; n < q.n; ++n)
    for (int64_t o = 0; o < q.o; ++o) {
      int64_t g = o / q.og;
      for (int64_t oh = 0; oh < q.ho; ++oh)
        for (int64_t ow = 0; ow < q.wo; ++ow) {
          int64_t yi = ((n * q.o + o) * q.ho + oh) * q.wo + ow;
          for (int64_t cg = 0; cg < q.cg; ++cg) {
            int64_t c = g * q.cg + cg;
            for (int64_t i = 0; i < q.kh; ++i)
              for (int64_t j = 0; j < q.kw; ++j) {
                ++taps;
                int64_t ih = oh * q.sh - q.ph + i * q.dh, iw = ow * q.sw - q.pw + j * q.dw;
                if (ih < 0 || ih >= q.h || iw < 0 || iw >= q.w) continue;
                f(((n * q.c + c) * q.h + ih) * q.w + iw, ((o * q.cg + cg) * q.kh + i) * q.kw + j, yi);
              }
          }
        }
    }
  return taps;
}
}  // namespace

void Conv2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  bool bias = in.size() > 2 && in[2].defined();
  Tensor& y = out[0];
  Geo q = geo(x.shape(), w.shape(), y.shape(), a);
  visit_float(y.dtype(), "conv2d", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    double* acc = ctx.scratch<double>(y.numel());
    ctx.count_macs(for_each_tap(q, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[size_t(yi)] += double(px[xi]) * double(pw[wi]);
    }));
    T* py = y.data<T>();
    int64_t hw = q.ho * q.wo;
    for (int64_t i = 0; i < y.numel(); ++i)
      py[i] = T(acc[size_t(i)] + (bias ? double(in[2].data<T>()[(i / hw) % q.o]) : 0.0));
  });
}

void Conv2dBackwardInput::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &w = in[1];
  Tensor& dx = out[0];
  Geo q = geo(a.x_shape, w.shape(), dy.shape(), a.conv);
  visit_float(dy.dtype(), "conv2d_backward_input", [&]<class T>() {
    const T* pdy = dy.data<T>();
    const T* pw = w.data<T>();
    double* acc = ctx.scratch<double>(dx.numel());
    ctx.count_macs(for_each_tap(q, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[size_t(xi)] += double(pdy[yi]) * double(pw[wi]);
    }));
    T* p = dx.data<T>();
    for (int64_t i = 0; i < dx.numel(); ++i) p[i] = T(acc[size_t(i)]);
  });
}

void Conv2dBackwardWeight::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &x = in[1];
  Tensor& dw = out[0];
  Geo q = geo(x.shape(), a.w_shape, dy.shape(), a.conv);
  visit_float(dy.dtype(), "conv2d_backward_weight", [&]<class T>() {
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    double* acc = ctx.scratch<double>(dw.numel());
    ctx.count_macs(for_each_tap(q, [&](int64_t xi, int64_t wi, int64_t yi) {
      acc[size_t(wi)] += double(pdy[yi]) * double(px[xi]);
    }));
    T* p = dw.data<T>();
    for (int64_t i = 0; i < dw.numel(); ++i) p[i] = T(acc[size_t(i)]);
    if (a.with_bias) {
      double* db = ctx.scratch<double>(q.o);
      int64_t hw = q.ho * q.wo;
      for (int64_t i = 0; i < dy.numel(); ++i) db[size_t((i / hw) % q.o)] += double(pdy[i]);
      T* pb = out[1].data<T>();
      for (int64_t o = 0; o < q.o; ++o) pb[o] = T(db[size_t(o)]);
    }
  });
}

}  // namespace reckon
