// Fast normalisation kernels, OpenMP loops the compiler vectorises:
//   batch norm: one thread per channel; sums in float along each contiguous (n, c) row and in
//     double across rows; mean, then variance around it, then y = x * scale + shift. Rows shorter
//     than 64 values (H x W of mobilenet's last blocks) go by blocks of channels instead, summed
//     position by position over the samples in double (batch_norm2d_short). Channels-last x: rows
//     of C values, each thread's share of the positions summed per channel in double
//     (batch_norm2d_nhwc), the same per-channel formulas.
//   local response norm: threads over (n, block of S positions); the channel window is summed
//     over a block held in registers/L1, s^-beta has exact fast paths for beta 0.75, 0.5, 1.
//   dropout: the counter-based mask of ops/norm.h, so it matches the reference bit for bit.
// Batch norm and dropout also take bf16/f16 (kernels/cpu/lowp.h): x, y, dy, dx and the mask in
// the low precision, batch norm's per-channel tensors in f32 (autocast's mixed batch norm);
// values are loaded to f32, every sum and formula is the f32 kernel's, outputs are rounded
// once. LRN is f32 only (autocast runs it in f32).
// Not oneDNN: its batch norm and LRN want blocked layouts (a reorder each way), and its LRN
// window for even sizes is not torch's.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/norm.h"

namespace reckon {

namespace {
constexpr int64_t kParallelMin = 1 << 15;

struct Ncs {
  int64_t n, c, s;
};
Ncs ncs(const Tensor& x) {
  int64_t n = x.size(0), c = x.size(1);
  return {n, c, n * c != 0 ? x.numel() / (n * c) : 0};
}
bool all_f32(std::span<const Tensor> in) {
  for (auto& t : in)
    if (t.defined() && t.dtype() != DType::f32) return false;
  return true;
}
const float* opt(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
// Batch norm's dtypes: the big tensors (in[big], out[0]) in one of f32/bf16/f16, returned; the
// per-channel ones f32. Anything else gives f64 (declined).
DType bn_dtype(std::span<const Tensor> in, std::span<const Tensor> out, size_t big) {
  const DType d = in[0].dtype();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && in[i].dtype() != (i < big ? d : DType::f32)) return DType::f64;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].defined() && out[i].dtype() != (i < 1 ? d : DType::f32)) return DType::f64;
  return d;
}
using lowp::load;
using lowp::store;

// Sum over the rows of channel c of f(i) where i indexes the row: float within a row (in the
// fixed order of lowp::sum16), double across.
template <class F>
double channel_sum(const Ncs& g, int64_t c, F&& f) {
  double total = 0;
  for (int64_t n = 0; n < g.n; ++n) {
    const int64_t base = (n * g.c + c) * g.s;
    total += double(lowp::sum16(g.s, [&](int64_t i) { return f(base + i); }));
  }
  return total;
}

// s^-beta for a block of s values.
struct NegPow {
  double beta;
  void operator()(const float* s, float* r, int64_t n) const {
    if (beta == 0.75) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float q = 1.f / std::sqrt(s[i]);
        r[i] = q * std::sqrt(q);
      }
    } else if (beta == 0.5) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) r[i] = 1.f / std::sqrt(s[i]);
    } else if (beta == 1.0) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) r[i] = 1.f / s[i];
    } else {
      const float b = float(-beta);
      for (int64_t i = 0; i < n; ++i) r[i] = std::pow(s[i], b);
    }
  }
};

// s = k + alpha / size * (sum of squares over the channel window of c), for positions
// [s0, s0 + len) of sample n.
inline void lrn_scale(const float* px, const Ncs& g, int64_t n, int64_t c, int64_t s0, int64_t len,
                      const LrnAttrs& a, float* s) {
  std::fill_n(s, len, 0.f);
  const int64_t lo = std::max<int64_t>(lrn_lo(c, a.size), 0), hi = std::min(lrn_hi(c, a.size), g.c - 1);
  for (int64_t cc = lo; cc <= hi; ++cc) {
    const float* xr = px + (n * g.c + cc) * g.s + s0;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) s[i] += xr[i] * xr[i];
  }
  const float scale = float(a.alpha / double(a.size)), k = float(a.k);
#pragma omp simd
  for (int64_t i = 0; i < len; ++i) s[i] = k + scale * s[i];
}
}  // namespace

namespace {
// Batch norm's tensors as the kernels read them. The running stats are read in eval; in training
// they are written in place (outputs 3 and 4 are them) when given.
template <class T>
struct BnForward {
  BnForward(std::span<const Tensor> in, std::span<Tensor> out, const BatchNormAttrs& a)
      : x(in[0].data<T>()), w(opt(in[1])), b(opt(in[2])),
        rm(a.training ? (out.size() > 3 ? out[3].data<float>() : nullptr) : in[3].data<float>()),
        rv(a.training ? (out.size() > 3 ? out[4].data<float>() : nullptr) : in[4].data<float>()),
        y(out[0].data<T>()), sm(a.training ? out[1].data<float>() : nullptr),
        si(a.training ? out[2].data<float>() : nullptr) {}
  const T* x;
  const float *w, *b;
  float *rm, *rv;
  T* y;
  float *sm, *si;  // training: the saved mean and 1/std
};

// Channel c's y = x * scale + shift. In training from its mean and v, the sum over its M values of
// (x - float(mean))^2 (the saved statistics and the running ones written); in eval from the
// running statistics (mean and v unused).
template <class T>
std::pair<float, float> channel_scale_shift(const BnForward<T>& p, int64_t c, const BatchNormAttrs& a, int64_t M,
                                            double mean, double v) {
  double invstd;
  if (a.training) {
    // The float mean's rounding shifts the sum of squares by M * (mean - float(mean))^2.
    const double dm = mean - double(float(mean));
    v -= double(M) * dm * dm;
    invstd = 1.0 / std::sqrt(std::max(v, 0.0) / double(M) + a.eps);
    p.sm[c] = float(mean);
    p.si[c] = float(invstd);
    if (p.rm) {
      p.rm[c] = float((1.0 - a.momentum) * double(p.rm[c]) + a.momentum * mean);
      p.rv[c] = float((1.0 - a.momentum) * double(p.rv[c]) + a.momentum * std::max(v, 0.0) / double(M - 1));
    }
  } else {
    mean = double(p.rm[c]);
    invstd = 1.0 / std::sqrt(double(p.rv[c]) + a.eps);
  }
  const double w = p.w ? double(p.w[c]) : 1.0, b = p.b ? double(p.b[c]) : 0.0;
  return {float(invstd * w), float(b - mean * invstd * w)};
}

template <class T>
struct BnBackward {
  BnBackward(std::span<const Tensor> in, std::span<Tensor> out)
      : dy(in[0].data<T>()), x(in[1].data<T>()), w(opt(in[2])), mean(in[3].data<float>()), var(in[4].data<float>()),
        dx(out[0].data<T>()), dw(out[1].data<float>()), db(out[2].data<float>()) {}
  const T *dy, *x;
  const float *w, *mean, *var;  // var: the saved 1/std in training, the running variance in eval
  T* dx;
  float *dw, *db;
};

// Channel c's dx = (dy - gm - (x - mean) * k) * scale, from the sums over its M values of dy and of
// dy * (x - mean); writes its weight and bias gradients.
struct ChannelDx {
  float scale, gm, k;
};
template <class T>
ChannelDx channel_dx(const BnBackward<T>& p, int64_t c, const BatchNormAttrs& a, int64_t M, double sum_dy, double dot) {
  const double invstd = a.training ? double(p.var[c]) : 1.0 / std::sqrt(double(p.var[c]) + a.eps);
  const double w = p.w ? double(p.w[c]) : 1.0;
  p.dw[c] = float(dot * invstd);
  p.db[c] = float(sum_dy);
  return {float(invstd * w), a.training ? float(sum_dy / double(M)) : 0.f,
          a.training ? float(dot * invstd * invstd / double(M)) : 0.f};
}

// Batch norm over short rows (a sample's values of one channel: s = H x W below kShortRow, as in
// mobilenet_v2's last blocks at 1x1 to 4x4): the per-channel loops would run a loop of s values
// N x C times (960 channels at 1x1, batch 32: 2.5 ms a call, the step's largest layers). Here a
// block of channels [c0, c1) is one contiguous run of L = (c1 - c0) x s values per sample; sums run
// position by position over the samples in double (vectorised over the run), then per channel
// over its s positions; the outputs are one pass over each sample's run with the per-position
// scale and shift. The same code for every storage type, so bf16/f16 stay the f32 result rounded.
constexpr int64_t kShortRow = 64;
constexpr int64_t kShortRun = 4096;  // values per sample in one block: the accumulators stay in L1/L2

// The channel blocks of a short-row tensor, each [c0, c0 + cb) with cb x s <= kShortRun.
int64_t short_block_channels(const Ncs& g) { return std::max<int64_t>(1, kShortRun / std::max<int64_t>(g.s, 1)); }

// acc[j] = sum over samples of f(x value at position j of the block's run, j).
template <class T, class F>
void sum_over_samples(const T* p, const Ncs& g, int64_t c0, int64_t L, double* acc, F&& f) {
  std::fill_n(acc, L, 0.0);
  for (int64_t n = 0; n < g.n; ++n) {
    const T* r = p + (n * g.c + c0) * g.s;
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) acc[j] += double(f(load(r[j]), j));
  }
}
double channel_total(const double* acc, int64_t k, int64_t s) {
  double t = 0;
  for (int64_t i = 0; i < s; ++i) t += acc[k * s + i];
  return t;
}

template <class T>
void batch_norm2d_short(const BnForward<T>& p, const Ncs& g, const BatchNormAttrs& a) {
  const int64_t M = g.n * g.s, cb = short_block_channels(g), blocks = (g.c + cb - 1) / cb;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.s > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * cb, c1 = std::min(g.c, c0 + cb), L = (c1 - c0) * g.s;
    std::vector<double> acc(static_cast<size_t>(L)), mean(static_cast<size_t>(c1 - c0));
    std::vector<float> mean_at(static_cast<size_t>(L)), scale_at(static_cast<size_t>(L)), shift_at(static_cast<size_t>(L));
    if (a.training) {
      sum_over_samples(p.x, g, c0, L, acc.data(), [](float v, int64_t) { return v; });
      for (int64_t k = 0; k < c1 - c0; ++k) {
        mean[size_t(k)] = channel_total(acc.data(), k, g.s) / double(M);
        std::fill_n(mean_at.data() + k * g.s, g.s, float(mean[size_t(k)]));
      }
      const float* mf = mean_at.data();
      sum_over_samples(p.x, g, c0, L, acc.data(), [mf](float v, int64_t j) {
        const float d = v - mf[j];
        return d * d;
      });
    }
    for (int64_t k = 0; k < c1 - c0; ++k) {
      const auto [scale, shift] = channel_scale_shift(p, c0 + k, a, M, mean[size_t(k)],
                                                      a.training ? channel_total(acc.data(), k, g.s) : 0.0);
      std::fill_n(scale_at.data() + k * g.s, g.s, scale);
      std::fill_n(shift_at.data() + k * g.s, g.s, shift);
    }
    const float *sc = scale_at.data(), *sh = shift_at.data();
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c0) * g.s;
      const T* xr = p.x + base;
      T* yr = p.y + base;
#pragma omp simd
      for (int64_t j = 0; j < L; ++j) yr[j] = store<T>(load(xr[j]) * sc[j] + sh[j]);
    }
  }
}

template <class T>
void batch_norm2d_backward_short(const BnBackward<T>& p, const Ncs& g, const BatchNormAttrs& a) {
  const int64_t M = g.n * g.s, cb = short_block_channels(g), blocks = (g.c + cb - 1) / cb;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.s > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * cb, c1 = std::min(g.c, c0 + cb), L = (c1 - c0) * g.s;
    std::vector<double> acc_dy(static_cast<size_t>(L), 0.0), acc_dot(static_cast<size_t>(L), 0.0);
    std::vector<float> mean_at(static_cast<size_t>(L)), gm_at(static_cast<size_t>(L)), k_at(static_cast<size_t>(L)),
        scale_at(static_cast<size_t>(L));
    for (int64_t k = 0; k < c1 - c0; ++k) std::fill_n(mean_at.data() + k * g.s, g.s, p.mean[c0 + k]);
    const float* mf = mean_at.data();
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c0) * g.s;
      const T* dr = p.dy + base;
      const T* xr = p.x + base;
      double* ad = acc_dy.data();
      double* ax = acc_dot.data();
#pragma omp simd
      for (int64_t j = 0; j < L; ++j) {
        const float d = load(dr[j]);
        ad[j] += double(d);
        ax[j] += double(d * (load(xr[j]) - mf[j]));
      }
    }
    for (int64_t k = 0; k < c1 - c0; ++k) {
      const ChannelDx cd = channel_dx(p, c0 + k, a, M, channel_total(acc_dy.data(), k, g.s),
                                      channel_total(acc_dot.data(), k, g.s));
      std::fill_n(scale_at.data() + k * g.s, g.s, cd.scale);
      std::fill_n(gm_at.data() + k * g.s, g.s, cd.gm);
      std::fill_n(k_at.data() + k * g.s, g.s, cd.k);
    }
    const float *sc = scale_at.data(), *gm = gm_at.data(), *kk = k_at.data();
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c0) * g.s;
      const T* dr = p.dy + base;
      const T* xr = p.x + base;
      T* o = p.dx + base;
#pragma omp simd
      for (int64_t j = 0; j < L; ++j) o[j] = store<T>((load(dr[j]) - gm[j] - (load(xr[j]) - mf[j]) * kk[j]) * sc[j]);
    }
  }
}

template <class T>
void batch_norm2d(std::span<const Tensor> in, std::span<Tensor> out, const BatchNormAttrs& a) {
  const Ncs g = ncs(in[0]);
  const BnForward<T> p(in, out, a);
  if (g.s < kShortRow) return batch_norm2d_short<T>(p, g, a);
  const int64_t M = g.n * g.s;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.s > kParallelMin)
  for (int64_t c = 0; c < g.c; ++c) {
    double mean = 0, v = 0;
    if (a.training) {
      mean = channel_sum(g, c, [&](int64_t k) { return load(p.x[k]); }) / double(M);
      const float mf = float(mean);
      v = channel_sum(g, c, [&](int64_t k) {
        float d = load(p.x[k]) - mf;
        return d * d;
      });
    }
    // (Plain floats, not a structured binding: clang's OpenMP cannot capture one in the simd loop.)
    const std::pair<float, float> ss = channel_scale_shift(p, c, a, M, mean, v);
    const float scale = ss.first, shift = ss.second;
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c) * g.s;
      const T* xr = p.x + base;
      T* yr = p.y + base;
#pragma omp simd
      for (int64_t i = 0; i < g.s; ++i) yr[i] = store<T>(load(xr[i]) * scale + shift);
    }
  }
}

// Channels-last (NHWC) batch norm: the M = N x H x W positions are rows of C values, so every pass
// runs along rows with the channels in the vector lanes. Sums: each thread takes a static share
// of the rows and sums them per channel in double; the shares are added in thread order. Then the
// f32 formulas of the NCHW kernels (channel_scale_shift, channel_dx), so the results agree with
// them to the sums' rounding.
struct Rows {
  int64_t m, c;  // positions, channels
};
Rows rows(const Tensor& x) { return {x.size(0) * x.size(2) * x.size(3), x.size(1)}; }

// acc[c] = sum over rows r of f(r, c), in double; f returns float.
template <class F>
void row_sums(const Rows& g, double* acc, F&& f) {
  const int nt = g.m * g.c > kParallelMin ? omp_get_max_threads() : 1;
  // Each thread's slice a cache line apart from the next (the vector is not line-aligned): every
  // row writes all of a slice, and a line two threads write bounces between their cores.
  const int64_t stride = KernelCtx::per_thread<double>(g.c) + 8;
  std::vector<double> part(static_cast<size_t>(nt * stride), 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t r0 = g.m * t / n, r1 = g.m * (t + 1) / n;
    double* pa = part.data() + int64_t(t) * stride;
    for (int64_t r = r0; r < r1; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < g.c; ++c) pa[c] += double(f(r, c));
    }
  }
  std::fill_n(acc, g.c, 0.0);
  for (int t = 0; t < nt; ++t)
    for (int64_t c = 0; c < g.c; ++c) acc[c] += part[size_t(t * stride + c)];
}

template <class T>
void batch_norm2d_nhwc(std::span<const Tensor> in, std::span<Tensor> out, const BatchNormAttrs& a) {
  const Rows g = rows(in[0]);
  const BnForward<T> p(in, out, a);
  std::vector<double> sum(static_cast<size_t>(g.c), 0.0), sq(static_cast<size_t>(g.c), 0.0);
  std::vector<float> mf(static_cast<size_t>(g.c)), scale(static_cast<size_t>(g.c)), shift(static_cast<size_t>(g.c));
  const T* x = p.x;
  const int64_t C = g.c;
  if (a.training) {
    row_sums(g, sum.data(), [x, C](int64_t r, int64_t c) { return load(x[r * C + c]); });
    for (int64_t c = 0; c < C; ++c) mf[size_t(c)] = float(sum[size_t(c)] / double(g.m));
    const float* m = mf.data();
    row_sums(g, sq.data(), [x, C, m](int64_t r, int64_t c) {
      const float d = load(x[r * C + c]) - m[c];
      return d * d;
    });
  }
  for (int64_t c = 0; c < C; ++c) {
    const std::pair<float, float> ss = channel_scale_shift(p, c, a, g.m, sum[size_t(c)] / double(g.m), sq[size_t(c)]);
    scale[size_t(c)] = ss.first;
    shift[size_t(c)] = ss.second;
  }
  const float *sc = scale.data(), *sh = shift.data();
  T* y = p.y;
#pragma omp parallel for schedule(static) if (g.m * g.c > kParallelMin)
  for (int64_t r = 0; r < g.m; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = store<T>(load(xr[c]) * sc[c] + sh[c]);
  }
}

template <class T>
void batch_norm2d_backward_nhwc(std::span<const Tensor> in, std::span<Tensor> out, const BatchNormAttrs& a) {
  const Rows g = rows(in[1]);
  const BnBackward<T> p(in, out);
  const int64_t C = g.c;
  std::vector<double> sum_dy(static_cast<size_t>(C)), dot(static_cast<size_t>(C));
  std::vector<float> scale(static_cast<size_t>(C)), gm(static_cast<size_t>(C)), k(static_cast<size_t>(C));
  const T *dy = p.dy, *x = p.x;
  const float* mean = p.mean;
  row_sums(g, sum_dy.data(), [dy, C](int64_t r, int64_t c) { return load(dy[r * C + c]); });
  row_sums(g, dot.data(), [dy, x, mean, C](int64_t r, int64_t c) {
    return load(dy[r * C + c]) * (load(x[r * C + c]) - mean[c]);
  });
  for (int64_t c = 0; c < C; ++c) {
    const ChannelDx cd = channel_dx(p, c, a, g.m, sum_dy[size_t(c)], dot[size_t(c)]);
    scale[size_t(c)] = cd.scale;
    gm[size_t(c)] = cd.gm;
    k[size_t(c)] = cd.k;
  }
  const float *sc = scale.data(), *g_m = gm.data(), *kk = k.data();
  T* dx = p.dx;
#pragma omp parallel for schedule(static) if (g.m * g.c > kParallelMin)
  for (int64_t r = 0; r < g.m; ++r) {
    const T* dr = dy + r * C;
    const T* xr = x + r * C;
    T* o = dx + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = store<T>((load(dr[c]) - g_m[c] - (load(xr[c]) - mean[c]) * kk[c]) * sc[c]);
  }
}
}  // namespace

Support BatchNorm2d::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const bool nhwc = channels_last(in, a);
  return lowp::visit(bn_dtype(in, out, 1), [&]<class T>() {
    if (nhwc)
      batch_norm2d_nhwc<T>(in, out, a);
    else
      batch_norm2d<T>(in, out, a);
    return Support::yes();
  });
}

namespace {
template <class T>
void batch_norm2d_backward(std::span<const Tensor> in, std::span<Tensor> out, const BatchNormAttrs& a) {
  const Ncs g = ncs(in[1]);
  const BnBackward<T> p(in, out);
  if (g.s < kShortRow) return batch_norm2d_backward_short<T>(p, g, a);
  const int64_t M = g.n * g.s;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.s > kParallelMin)
  for (int64_t c = 0; c < g.c; ++c) {
    const float mean = p.mean[c];
    double sum_dy = 0, dot = 0;
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c) * g.s;
      const T* dr = p.dy + base;
      const T* xr = p.x + base;
      sum_dy += double(lowp::sum16(g.s, [&](int64_t i) { return load(dr[i]); }));
      dot += double(lowp::sum16(g.s, [&](int64_t i) { return load(dr[i]) * (load(xr[i]) - mean); }));
    }
    const ChannelDx cd = channel_dx(p, c, a, M, sum_dy, dot);
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t base = (n * g.c + c) * g.s;
      const T* dr = p.dy + base;
      const T* xr = p.x + base;
      T* o = p.dx + base;
#pragma omp simd
      for (int64_t i = 0; i < g.s; ++i) o[i] = store<T>((load(dr[i]) - cd.gm - (load(xr[i]) - mean) * cd.k) * cd.scale);
    }
  }
}
}  // namespace

Support BatchNorm2dBackward::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const bool nhwc = channels_last(in, a);
  return lowp::visit(bn_dtype(in, out, 2), [&]<class T>() {
    if (nhwc)
      batch_norm2d_backward_nhwc<T>(in, out, a);
    else
      batch_norm2d_backward<T>(in, out, a);
    return Support::yes();
  });
}

Support LocalResponseNorm::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (!all_f32(in)) return Support::no("dtype is not f32");
  const Tensor& x = in[0];
  const Ncs g = ncs(x);
  constexpr int64_t L = 256;
  const int64_t blocks = (g.s + L - 1) / L;
  const float* px = x.data<float>();
  float* py = out[0].data<float>();
  const NegPow negpow{a.beta};
#pragma omp parallel for schedule(static) if (x.numel() * a.size > kParallelMin)
  for (int64_t t = 0; t < g.n * blocks; ++t) {
    const int64_t n = t / blocks, s0 = (t % blocks) * L, len = std::min(L, g.s - s0);
    alignas(64) float s[L], r[L];
    for (int64_t c = 0; c < g.c; ++c) {
      lrn_scale(px, g, n, c, s0, len, a, s);
      negpow(s, r, len);
      const float* xr = px + (n * g.c + c) * g.s + s0;
      float* yr = py + (n * g.c + c) * g.s + s0;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] * r[i];
    }
  }
  return Support::yes();
}

Support LocalResponseNormBackward::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out,
                                       const Attrs& a) {
  if (!all_f32(in)) return Support::no("dtype is not f32");
  const Tensor &dy = in[0], &x = in[1];
  const Ncs g = ncs(x);
  constexpr int64_t L = 64;
  const int64_t blocks = (g.s + L - 1) / L;
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = out[0].data<float>();
  const NegPow negpow{a.beta};
  const float coef = float(2.0 * a.alpha * a.beta / double(a.size));
  // Per thread: P = s^-beta and T = dy x s^(-beta-1) for every channel of one block.
  const int threads = omp_get_max_threads();
  Tensor hold = ctx.workspace(int64_t(threads) * 2 * g.c * L * int64_t(sizeof(float)));
  float* ws = static_cast<float*>(hold.raw_data());
#pragma omp parallel for schedule(static) if (x.numel() * a.size > kParallelMin)
  for (int64_t t = 0; t < g.n * blocks; ++t) {
    const int64_t n = t / blocks, s0 = (t % blocks) * L, len = std::min(L, g.s - s0);
    float* P = ws + int64_t(omp_get_thread_num()) * 2 * g.c * L;
    float* T = P + g.c * L;
    alignas(64) float s[L];
    for (int64_t c = 0; c < g.c; ++c) {
      lrn_scale(px, g, n, c, s0, len, a, s);
      float* pc = P + c * L;
      float* tc = T + c * L;
      negpow(s, pc, len);
      const float* xr = px + (n * g.c + c) * g.s + s0;
      const float* dr = pdy + (n * g.c + c) * g.s + s0;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) tc[i] = dr[i] * xr[i] * pc[i] / s[i];
    }
    for (int64_t j = 0; j < g.c; ++j) {
      const int64_t lo = std::max<int64_t>(j - (a.size - 1) / 2, 0), hi = std::min(j + a.size / 2, g.c - 1);
      alignas(64) float acc[L];
      std::fill_n(acc, len, 0.f);
      for (int64_t c = lo; c <= hi; ++c) {
        const float* tc = T + c * L;
#pragma omp simd
        for (int64_t i = 0; i < len; ++i) acc[i] += tc[i];
      }
      const int64_t base = (n * g.c + j) * g.s + s0;
      const float* xr = px + base;
      const float* dr = pdy + base;
      const float* pj = P + j * L;
      float* o = pdx + base;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) o[i] = dr[i] * pj[i] - coef * xr[i] * acc[i];
    }
  }
  return Support::yes();
}

namespace {
template <class T>
void dropout(const Tensor& x, std::span<Tensor> out, const DropoutAttrs& a) {
  // The same mask as the reference: the call's seed.
  const bool random = a.training && a.p > 0.0 && a.p < 1.0;
  const uint64_t seed = a.seed;
  const float scale = float(!a.training ? 1.0 : (a.p < 1.0 ? 1.0 / (1.0 - a.p) : 0.0));
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  T* pm = out[1].data<T>();
  const int64_t n = x.numel();
  const double p = a.p;
  if (!random) {
    const float m = (a.p < 1.0 || !a.training) ? scale : 0.f;
#pragma omp parallel for simd if (parallel: n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      pm[i] = store<T>(m);
      py[i] = store<T>(load(px[i]) * m);
    }
    return;
  }
#pragma omp parallel for simd if (parallel: n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    float m = dropout_keep(seed, i, p) ? scale : 0.f;
    pm[i] = store<T>(m);
    py[i] = store<T>(load(px[i]) * m);
  }
}
}  // namespace

Support Dropout::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const DType d = in[0].dtype();
  if (out[0].dtype() != d || out[1].dtype() != d) return Support::no("y or mask differ from x in dtype");
  return lowp::visit(d, [&]<class T>() {
    dropout<T>(in[0], out, a);
    return Support::yes();
  });
}

}  // namespace reckon
