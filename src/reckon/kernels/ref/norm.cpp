// Reference normalisation kernels: plain loops in double, the spec of ops/norm.h.
// x is viewed as (N, C, S); element (n, c, s) is at (n * C + c) * S + s.
#include <cmath>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/norm.h"

namespace reckon {

namespace {
struct Ncs {
  int64_t n, c, s;
};
Ncs ncs(const Tensor& x) {
  int64_t n = x.size(0), c = x.size(1);
  return {n, c, n * c != 0 ? x.numel() / (n * c) : 0};
}
template <class T>
const T* opt(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
}  // namespace

void BatchNorm2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Ncs g = ncs(x);
  const int64_t M = g.n * g.s;
  visit_float(x.dtype(), "batch_norm2d", [&]<class T>() {
    const T* px = x.data<T>();
    const T* pw = opt<T>(in[1]);
    const T* pb = opt<T>(in[2]);
    // The running stats: read in eval; in training written in place (outputs 3 and 4 are them).
    T* rm = a.training ? (out.size() > 3 ? out[3].data<T>() : nullptr) : in[3].data<T>();
    T* rv = a.training ? (out.size() > 3 ? out[4].data<T>() : nullptr) : in[4].data<T>();
    T* py = out[0].data<T>();
    for (int64_t c = 0; c < g.c; ++c) {
      double mean, invstd;
      if (a.training) {
        double s = 0;
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t i = 0; i < g.s; ++i) s += double(px[(n * g.c + c) * g.s + i]);
        mean = s / double(M);
        double v = 0;
        for (int64_t n = 0; n < g.n; ++n)
          for (int64_t i = 0; i < g.s; ++i) {
            double d = double(px[(n * g.c + c) * g.s + i]) - mean;
            v += d * d;
          }
        double var = v / double(M);
        invstd = 1.0 / std::sqrt(var + a.eps);
        out[1].data<T>()[c] = T(mean);
        out[2].data<T>()[c] = T(invstd);
        if (rm) {
          rm[c] = T((1.0 - a.momentum) * double(rm[c]) + a.momentum * mean);
          rv[c] = T((1.0 - a.momentum) * double(rv[c]) + a.momentum * v / double(M - 1));
        }
      } else {
        mean = double(rm[c]);
        invstd = 1.0 / std::sqrt(double(rv[c]) + a.eps);
      }
      double w = pw ? double(pw[c]) : 1.0, b = pb ? double(pb[c]) : 0.0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < g.s; ++i) {
          int64_t k = (n * g.c + c) * g.s + i;
          py[k] = T((double(px[k]) - mean) * invstd * w + b);
        }
    }
  });
}

void BatchNorm2dBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &x = in[1];
  const Ncs g = ncs(x);
  const int64_t M = g.n * g.s;
  visit_float(x.dtype(), "batch_norm2d_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    const T* pw = opt<T>(in[2]);
    const T* pm = in[3].data<T>();
    const T* pv = in[4].data<T>();
    T* pdx = out[0].data<T>();
    for (int64_t c = 0; c < g.c; ++c) {
      double mean = double(pm[c]);
      double invstd = a.training ? double(pv[c]) : 1.0 / std::sqrt(double(pv[c]) + a.eps);
      double sum_dy = 0, dot = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < g.s; ++i) {
          int64_t k = (n * g.c + c) * g.s + i;
          sum_dy += double(pdy[k]);
          dot += double(pdy[k]) * (double(px[k]) - mean);
        }
      double w = pw ? double(pw[c]) : 1.0;
      out[1].data<T>()[c] = T(dot * invstd);
      out[2].data<T>()[c] = T(sum_dy);
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t i = 0; i < g.s; ++i) {
          int64_t k = (n * g.c + c) * g.s + i;
          double d = double(pdy[k]);
          if (a.training) {
            double xhat = (double(px[k]) - mean) * invstd;
            d = d - sum_dy / double(M) - xhat * dot * invstd / double(M);
          }
          pdx[k] = T(d * invstd * w);
        }
    }
  });
}

void LocalResponseNorm::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const Ncs g = ncs(x);
  visit_float(x.dtype(), "local_response_norm", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out[0].data<T>();
    int64_t taps = 0;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t i = 0; i < g.s; ++i) {
          double acc = 0;
          for (int64_t cc = lrn_lo(c, a.size); cc <= lrn_hi(c, a.size); ++cc) {
            ++taps;
            if (cc < 0 || cc >= g.c) continue;
            double v = double(px[(n * g.c + cc) * g.s + i]);
            acc += v * v;
          }
          double s = a.k + a.alpha / double(a.size) * acc;
          int64_t k = (n * g.c + c) * g.s + i;
          py[k] = T(double(px[k]) * std::pow(s, -a.beta));
        }
    ctx.count_macs(taps);
  });
}

void LocalResponseNormBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out,
                                    const Attrs& a) {
  const Tensor &dy = in[0], &x = in[1];
  const Ncs g = ncs(x);
  visit_float(x.dtype(), "local_response_norm_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    T* pdx = out[0].data<T>();
    int64_t taps = 0;
    // s of every element, as forward computed it.
    double* s = ctx.scratch<double>(x.numel());
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t i = 0; i < g.s; ++i) {
          double acc = 0;
          for (int64_t cc = lrn_lo(c, a.size); cc <= lrn_hi(c, a.size); ++cc) {
            ++taps;
            if (cc < 0 || cc >= g.c) continue;
            double v = double(px[(n * g.c + cc) * g.s + i]);
            acc += v * v;
          }
          s[size_t((n * g.c + c) * g.s + i)] = a.k + a.alpha / double(a.size) * acc;
        }
    const double coef = 2.0 * a.alpha * a.beta / double(a.size);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t j = 0; j < g.c; ++j)
        for (int64_t i = 0; i < g.s; ++i) {
          // Channels c whose window [c - size/2, c + (size-1)/2] holds j.
          double t = 0;
          for (int64_t c = j - (a.size - 1) / 2; c <= j + a.size / 2; ++c) {
            ++taps;
            if (c < 0 || c >= g.c) continue;
            int64_t k = (n * g.c + c) * g.s + i;
            t += double(pdy[k]) * double(px[k]) * std::pow(s[size_t(k)], -a.beta - 1.0);
          }
          int64_t k = (n * g.c + j) * g.s + i;
          pdx[k] = T(double(pdy[k]) * std::pow(s[size_t(k)], -a.beta) - coef * double(px[k]) * t);
        }
    ctx.count_macs(taps);
  });
}

void Dropout::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const bool random = a.training && a.p > 0.0 && a.p < 1.0;
  const uint64_t seed = a.seed;
  const double scale = !a.training ? 1.0 : (a.p < 1.0 ? 1.0 / (1.0 - a.p) : 0.0);
  visit_float(x.dtype(), "dropout", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out[0].data<T>();
    T* pm = out[1].data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool keep = random ? dropout_keep(seed, i, a.p) : a.p < 1.0 || !a.training;
      pm[i] = keep ? T(scale) : T(0);
      py[i] = px[i] * pm[i];
    }
  });
}

}  // namespace reckon
