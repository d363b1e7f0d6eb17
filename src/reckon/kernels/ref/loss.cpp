// Reference softmax and loss kernels: one row at a time, in double, the spec of ops/loss.h.
#include <cmath>
#include <limits>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/loss.h"

namespace reckon {

namespace {
// Calls f(base) for each row of a softmax geometry: the row's elements are base + j * inner.
template <class F>
void for_each_softmax_row(const RowGeo& g, F&& f) {
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.inner; ++i) f(o * g.len * g.inner + i);
}
// Max (NaN if any element is NaN) and log-sum-exp around it of one row.
template <class T>
void row_max_lse(const T* x, int64_t len, int64_t stride, double& m, double& lse) {
  m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    double v = double(x[j * stride]);
    if (v > m || std::isnan(v)) m = v;
  }
  double s = 0;
  for (int64_t j = 0; j < len; ++j) s += std::exp(double(x[j * stride]) - m);
  lse = std::log(s);
}
int64_t count_targets(const int64_t* t, int64_t n, int64_t ignore_index) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) k += t[i] != ignore_index;
  return k;
}
// Per-row gradient scale of a reduced loss.
template <class T>
double row_grad(const T* dy, int64_t i, Reduction r, int64_t count) {
  switch (r) {
    case Reduction::none: return double(dy[i]);
    case Reduction::sum: return double(dy[0]);
    case Reduction::mean: return double(dy[0]) / double(count);
  }
  return 0;
}
// Writes per-row losses reduced as r (mean over count rows).
template <class T>
void reduce_rows(const double* l, int64_t n, Reduction r, int64_t count, T* out) {
  if (r == Reduction::none) {
    for (int64_t i = 0; i < n; ++i) out[i] = T(l[i]);
    return;
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += l[i];
  out[0] = T(r == Reduction::sum ? s : s / double(count));  // 0 / 0 = NaN when all are ignored
}
}  // namespace

void Softmax::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const RowGeo g = softmax_geo(kName, in[0].shape(), a.dim);
  visit_float(in[0].dtype(), "softmax", [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    for_each_softmax_row(g, [&](int64_t b) {
      double m, lse;
      row_max_lse(x + b, g.len, g.inner, m, lse);
      double s = std::exp(lse);
      for (int64_t j = 0; j < g.len; ++j) y[b + j * g.inner] = T(std::exp(double(x[b + j * g.inner]) - m) / s);
    });
  });
}

void LogSoftmax::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const RowGeo g = softmax_geo(kName, in[0].shape(), a.dim);
  visit_float(in[0].dtype(), "log_softmax", [&]<class T>() {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    for_each_softmax_row(g, [&](int64_t b) {
      double m, lse;
      row_max_lse(x + b, g.len, g.inner, m, lse);
      for (int64_t j = 0; j < g.len; ++j) y[b + j * g.inner] = T(double(x[b + j * g.inner]) - m - lse);
    });
  });
}

void SoftmaxBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const RowGeo g = softmax_geo(kName, in[1].shape(), a.dim);
  visit_float(in[1].dtype(), "softmax_backward", [&]<class T>() {
    const T* dy = in[0].data<T>();
    const T* y = in[1].data<T>();
    T* dx = out[0].data<T>();
    for_each_softmax_row(g, [&](int64_t b) {
      double dot = 0;
      for (int64_t j = 0; j < g.len; ++j) dot += double(dy[b + j * g.inner]) * double(y[b + j * g.inner]);
      for (int64_t j = 0; j < g.len; ++j) {
        int64_t k = b + j * g.inner;
        dx[k] = T(double(y[k]) * (double(dy[k]) - dot));
      }
    });
  });
}

void LogSoftmaxBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const RowGeo g = softmax_geo(kName, in[1].shape(), a.dim);
  visit_float(in[1].dtype(), "log_softmax_backward", [&]<class T>() {
    const T* dy = in[0].data<T>();
    const T* y = in[1].data<T>();
    T* dx = out[0].data<T>();
    for_each_softmax_row(g, [&](int64_t b) {
      double s = 0;
      for (int64_t j = 0; j < g.len; ++j) s += double(dy[b + j * g.inner]);
      for (int64_t j = 0; j < g.len; ++j) {
        int64_t k = b + j * g.inner;
        dx[k] = T(double(dy[k]) - std::exp(double(y[k])) * s);
      }
    });
  });
}

void CrossEntropy::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &x = in[0], &target = in[1];
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t* t = target.data<int64_t>();
  const double eps = a.label_smoothing;
  visit_float(x.dtype(), "cross_entropy", [&]<class T>() {
    const T* px = x.data<T>();
    T* lp = out[1].data<T>();
    double* loss = ctx.scratch<double>(N);
    for (int64_t i = 0; i < N; ++i) {
      double m, lse;
      row_max_lse(px + i * C, C, 1, m, lse);
      double all = 0;
      for (int64_t c = 0; c < C; ++c) {
        double v = double(px[i * C + c]) - m - lse;
        lp[i * C + c] = T(v);
        all += v;
      }
      if (t[i] == a.ignore_index) continue;
      double nll = -(double(px[i * C + t[i]]) - m - lse);
      loss[size_t(i)] = (1.0 - eps) * nll + eps / double(C) * -all;
    }
    reduce_rows(loss, N, a.reduction, count_targets(t, N, a.ignore_index), out[0].data<T>());
  });
}

void CrossEntropyBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &logp = in[1], &target = in[2];
  const int64_t N = logp.size(0), C = logp.size(1);
  const int64_t* t = target.data<int64_t>();
  const double eps = a.label_smoothing;
  const int64_t count = count_targets(t, N, a.ignore_index);
  visit_float(logp.dtype(), "cross_entropy_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    const T* lp = logp.data<T>();
    T* dx = out[0].data<T>();
    for (int64_t i = 0; i < N; ++i) {
      bool ignored = t[i] == a.ignore_index;
      RK_CHECK(ignored || (t[i] >= 0 && t[i] < C), "[cross_entropy_backward] target {} out of range for {} classes at index {}",
               t[i], C, i);
      double g = ignored ? 0.0 : row_grad(pdy, i, a.reduction, count);
      for (int64_t c = 0; c < C; ++c) {
        double want = eps / double(C) + (c == t[i] ? 1.0 - eps : 0.0);
        dx[i * C + c] = ignored ? T(0) : T(g * (std::exp(double(lp[i * C + c])) - want));
      }
    }
  });
}

void NllLoss::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &logp = in[0], &target = in[1];
  const int64_t N = logp.size(0), C = logp.size(1);
  const int64_t* t = target.data<int64_t>();
  visit_float(logp.dtype(), "nll_loss", [&]<class T>() {
    const T* lp = logp.data<T>();
    double* loss = ctx.scratch<double>(N);
    for (int64_t i = 0; i < N; ++i)
      if (t[i] != a.ignore_index) loss[size_t(i)] = -double(lp[i * C + t[i]]);
    reduce_rows(loss, N, a.reduction, count_targets(t, N, a.ignore_index), out[0].data<T>());
  });
}

void NllLossBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &target = in[1];
  const int64_t N = target.size(0), C = a.classes;
  const int64_t* t = target.data<int64_t>();
  const int64_t count = count_targets(t, N, a.nll.ignore_index);
  visit_float(dy.dtype(), "nll_loss_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    T* dx = out[0].data<T>();
    for (int64_t i = 0; i < N * C; ++i) dx[i] = T(0);
    for (int64_t i = 0; i < N; ++i) {
      if (t[i] == a.nll.ignore_index) continue;
      RK_CHECK(t[i] >= 0 && t[i] < C, "[nll_loss_backward] target {} out of range for {} classes at index {}", t[i], C, i);
      dx[i * C + t[i]] = T(-row_grad(pdy, i, a.nll.reduction, count));
    }
  });
}

}  // namespace reckon
