// Direct NCHW convolution for small layers: few input channels, at most 16 outputs, stride 1,
// narrow maps (the first layers of MNIST/CIFAR-sized networks: LeNet-5's 1->6 and 6->16).
// oneDNN's jit kernels want channels in blocks of 16, so a 1- or 6-channel tensor is padded to
// 16 and reordered in and out, which here takes longer than the convolution itself (lenet5 at
// batch 256: 1.6 ms of reorders and 3.9 ms of convolutions a step, on 2 threads). These loops
// read and write the user's NCHW tensors. AVX-512 only (applies() is false elsewhere): rows are
// at most 64 wide, so a row is 1-4 vectors held in registers while every tap is added in.
//   forward:         y[o, oh, :]  = b[o] + sum over (c, kh, kw) of w[o, c, kh, kw] * xpad[c, oh + kh, kw :]
//   backward data:   dx[c, ih, :] = sum over (o, kh, kw) of w[o, c, kh, kw] * dypad[o, ih + ph - kh, pw - kw :]
//   backward weight: dw[o, c, kh, kw] = sum over (n, oh) of dy[n, o, oh, :] . xpad[n, c, oh + kh, kw :],
//                    a vector of partial sums per tap and thread, summed at the end in a fixed
//                    order (the same result for the same thread count)
// Layers of 12-16 outputs (LeNet-5's conv2: 16 outputs, 10-wide rows) put the output channels
// in the lanes instead for the forward and backward-weight passes (forward_o_lanes,
// backward_weight_o_lanes): a row of 10 would leave 6 of 16 lanes idle. lenet5 at batch 256 on
// 2 threads: 8.6 -> 6.9 ms a training step with them.
// Images are split over threads; each thread pads its image into its own zeroed buffer, so
// padding costs no branch. Every buffer comes from the kernel context: the meta device plans it.
#include <omp.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "reckon/kernels/cpu/conv_small.h"

#include <vector>

#include <dnnl.hpp>

namespace reckon {
bool conv_small_direct_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<int> g_bf16_slower_pin{-1};  // pin_cpu_bf16_slower_than_f32: -1 none, else 0 or 1
}  // namespace

void pin_cpu_bf16_slower_than_f32(std::optional<bool> slower) { g_bf16_slower_pin = slower ? int(*slower) : -1; }

bool cpu_bf16_slower_than_f32() {
  if (const int pin = g_bf16_slower_pin; pin >= 0) return pin == 1;
  static const bool slower = [] {
    // AMX as oneDNN will use it (the kernel must have enabled it, and ONEDNN_MAX_CPU_ISA may cap it).
    if (dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx) return false;
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return true;
    const bool avx512_bf16 = (a >> 5) & 1u;  // CPUID.(7,1):EAX[5]
    __builtin_cpu_init();
    return !(avx512_bf16 && __builtin_cpu_is("amd"));
#else
    return true;
#endif
  }();
  return slower;
}
}  // namespace reckon

namespace reckon::conv_small {

bool applies(const Shape& x, const Shape& w, const ConvAttrs& a, DType t) {
#if defined(__AVX512F__)
  if (t != DType::f32 || a.groups != 1 || x.size() != 4 || w.size() != 4) return false;
  if (a.stride[0] != 1 || a.stride[1] != 1 || a.dilation[0] != 1 || a.dilation[1] != 1) return false;
  if (a.padding[0] >= w[2] || a.padding[1] >= w[3]) return false;
  const int64_t C = x[1], O = w[0];
  return C < 16 && O <= 16 && C * w[2] * w[3] <= 256 && x[3] + 2 * a.padding[1] <= 64;
#else
  (void)x, (void)w, (void)a, (void)t;
  return false;
#endif
}

bool first_layer(const Shape& x, const Shape& w, const ConvAttrs& a) {
  return applies(x, w, a, DType::f32) && few_channel_first_layer(x, w, a);
}

namespace {
double in_vectors(int64_t useful, int64_t n) { return n > 0 ? double(useful) / double(16 * ((n + 15) / 16)) : 1.0; }
int64_t out_width(const Shape& x, const Shape& w, const ConvAttrs& a) { return x[3] + 2 * a.padding[1] - w[3] + 1; }
}  // namespace
double forward_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a) {
  if (output_channel_lanes(w)) return in_vectors(w[0], w[0]);
  const int64_t wo = out_width(x, w, a);
  return in_vectors(wo, wo);
}
bool backward_input_image_lanes(const Shape& x, const Shape& w, const ConvAttrs& a) {
  const int64_t HO = x[2] + 2 * a.padding[0] - w[2] + 1;
  return x[0] >= kImageLanesMin * omp_get_max_threads() &&
         w[0] * HO * out_width(x, w, a) + x[1] * x[2] * x[3] <= kImageLanesMaxFloats;
}
double backward_input_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a) {
  if (backward_input_image_lanes(x, w, a)) return in_vectors(x[0], x[0]);
  return in_vectors(out_width(x, w, a), x[3]);
}
double backward_weight_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a) {
  return output_channel_lanes(w) ? forward_lane_use(x, w, a) : in_vectors(out_width(x, w, a), out_width(x, w, a));
}

#if defined(__AVX512F__)
namespace {
struct Geo {
  int64_t N, C, H, W, O, KH, KW, HO, WO, ph, pw;
};
Geo geo(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], a.padding[0], a.padding[1]};
}
int threads() { return omp_get_max_threads(); }

// Copies planes of h x w into a zeroed buffer of planes of hp x wp at offset (top, left): the
// border stays zero.
void pad_planes(const float* src, int64_t planes, int64_t h, int64_t w, float* dst, int64_t hp, int64_t wp,
                int64_t top, int64_t left) {
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < h; ++i)
      std::memcpy(dst + (p * hp + top + i) * wp + left, src + (p * h + i) * w, size_t(w) * sizeof(float));
}

__mmask16 tail_mask(int64_t n) {  // the valid lanes of a row's last vector
  const int64_t r = n - 16 * ((n - 1) / 16);
  return r >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << r) - 1);
}

// OB output rows of n <= 16 * NCH values each, row r at out + r * os: out_r[0:n] = init_r + sum
// over planes p, rows k and taps j of wt_r(p, k, j) * in(p, k)[step * j : + n], where
// in(p, k) = base + p * ps + k * rs and wt_r(p, k, j) = wbase[r * wos + p * wps + k * kws + j].
// The OB rows share every input load and keep OB * NCH independent sums in registers (one
// chain of fused multiply-adds would wait on its own latency). Forward rows are output channels;
// backward-data rows are input channels and walk their taps backwards (step -1).
// With R = 2 the same for two neighbouring image rows at once: the second reads its input at
// base + rrs and writes at out + ors, with the same weights, so each weight broadcast feeds
// 2 * NCH multiply-adds (LeNet-5's backward-data rows are 14 wide, one vector: with R = 1, six
// sums and seven loads for six multiply-adds).
struct RowSpec {
  const float* base;
  int64_t planes, ps, rows, rs, taps, step;
  const float* wbase;
  int64_t wos, wps, kws;
  int64_t rrs = 0;  // R = 2: the second image row's input, from the first's
};
template <int NCH, int OB, int R>
void rows(const RowSpec& spec, const float* init, float* out, int64_t os, int64_t ors, int64_t n) {
  // Locals, not the struct: GCC keeps the sums in registers only when nothing it stores could
  // alias what the loop reads.
  const float* const base = spec.base;
  const float* const wbase = spec.wbase;
  const int64_t planes = spec.planes, ps = spec.ps, nrows = spec.rows, rs = spec.rs, taps = spec.taps;
  const int64_t step = spec.step, wos = spec.wos, wps = spec.wps, kws = spec.kws, rrs = spec.rrs;
  const __mmask16 last = tail_mask(n);
  __m512 acc[R * OB * NCH];  // [image row][output row][vector]
#pragma GCC unroll 32
  for (int i = 0; i < R * OB * NCH; ++i) acc[i] = _mm512_set1_ps(init ? init[(i / NCH) % OB] : 0.0f);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t k = 0; k < nrows; ++k) {
      const float* in = base + p * ps + k * rs;
      const float* wt = wbase + p * wps + k * kws;
      for (int64_t j = 0; j < taps; ++j) {
        const float* v = in + step * j;
        __m512 x[R * NCH];
#pragma GCC unroll 8
        for (int q = 0; q < R * NCH; ++q)
          x[q] = _mm512_maskz_loadu_ps(q % NCH == NCH - 1 ? last : __mmask16(0xFFFF), v + (q / NCH) * rrs + 16 * (q % NCH));
#pragma GCC unroll 8
        for (int o = 0; o < OB; ++o) {
          const __m512 wv = _mm512_set1_ps(wt[o * wos + j]);
#pragma GCC unroll 2
          for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
            for (int q = 0; q < NCH; ++q)
              acc[(r * OB + o) * NCH + q] = _mm512_fmadd_ps(wv, x[r * NCH + q], acc[(r * OB + o) * NCH + q]);
        }
      }
    }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int o = 0; o < OB; ++o)
#pragma GCC unroll 4
      for (int q = 0; q < NCH; ++q)
        _mm512_mask_storeu_ps(out + r * ors + o * os + 16 * q, q == NCH - 1 ? last : __mmask16(0xFFFF),
                              acc[(r * OB + o) * NCH + q]);
}
// At most 24 sums in registers: OB rows a call.
template <int NCH, int R>
constexpr int kRowsBlock = R == 1 ? (NCH == 1 ? 8 : NCH == 2 ? 6 : 4) : (NCH == 1 ? 8 : 6);  // R = 2: NCH <= 2
template <int NCH, int R, int K = kRowsBlock<NCH, R>>
void rows_blocked(RowSpec r, const float* init, float* out, int64_t os, int64_t ors, int64_t outs, int64_t n) {
  if constexpr (K >= 1) {
    for (; outs >= K; outs -= K) {
      rows<NCH, K, R>(r, init, out, os, ors, n);
      r.wbase += K * r.wos;
      out += K * os;
      if (init) init += K;
    }
    if (outs > 0) rows_blocked<NCH, R, K - 1>(r, init, out, os, ors, outs, n);
  }
}
// All `outs` rows of one image row.
void one_row(const RowSpec& r, const float* init, float* out, int64_t os, int64_t outs, int64_t n) {
  switch ((n + 15) / 16) {
    case 1: return rows_blocked<1, 1>(r, init, out, os, 0, outs, n);
    case 2: return rows_blocked<2, 1>(r, init, out, os, 0, outs, n);
    case 3: return rows_blocked<3, 1>(r, init, out, os, 0, outs, n);
    default: return rows_blocked<4, 1>(r, init, out, os, 0, outs, n);
  }
}
// All `outs` rows (see rows()) of one image row, or of two (pair: r.rrs and ors set). Rows of 3
// or 4 vectors go one image row at a time (two would need more than the 32 registers).
void run_rows(const RowSpec& r, const float* init, float* out, int64_t os, int64_t outs, int64_t n, bool pair = false,
              int64_t ors = 0) {
  if (pair && n <= 16) return rows_blocked<1, 2>(r, init, out, os, ors, outs, n);
  if (pair && n <= 32) return rows_blocked<2, 2>(r, init, out, os, ors, outs, n);
  one_row(r, init, out, os, outs, n);
  if (!pair) return;
  RowSpec second = r;
  second.base += r.rrs;
  one_row(second, init, out + ors, os, outs, n);
}

// For KW neighbouring taps j: acc[j][0:16] += sum over rows k of dy(k)[0:n] * x(k)[j : j + n]
// (n <= 16 * NCH; lanes past n read as zero). The taps share the dy loads and are KW
// independent sums.
template <int NCH, int KW>
void dot_rows(const float* dy, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n, float* acc) {
  const __mmask16 last = tail_mask(n);
  __m512 s[KW];
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j) s[j] = _mm512_loadu_ps(acc + 16 * j);
  for (int64_t k = 0; k < nrows; ++k) {
    const float *d = dy + k * dys, *v = x + k * xs;
#pragma GCC unroll 4
    for (int q = 0; q < NCH; ++q) {
      const __mmask16 m = q == NCH - 1 ? last : __mmask16(0xFFFF);
      const __m512 dv = _mm512_maskz_loadu_ps(m, d + 16 * q);
#pragma GCC unroll 8
      for (int j = 0; j < KW; ++j) s[j] = _mm512_fmadd_ps(dv, _mm512_maskz_loadu_ps(m, v + j + 16 * q), s[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j) _mm512_storeu_ps(acc + 16 * j, s[j]);
}
template <int NCH, int K = 8>
void dot_rows_kw(const float* dy, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n, int64_t kw,
                 float* acc) {
  if constexpr (K >= 1) {
    for (; kw >= K; kw -= K, x += K, acc += 16 * K) dot_rows<NCH, K>(dy, dys, x, xs, nrows, n, acc);
    if (kw > 0) dot_rows_kw<NCH, K - 1>(dy, dys, x, xs, nrows, n, kw, acc);
  }
}
// kw taps in a row of the kernel (see dot_rows()).
void run_dot_rows(const float* dy, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n, int64_t kw,
                  float* acc) {
  switch ((n + 15) / 16) {
    case 1: return dot_rows_kw<1>(dy, dys, x, xs, nrows, n, kw, acc);
    case 2: return dot_rows_kw<2>(dy, dys, x, xs, nrows, n, kw, acc);
    case 3: return dot_rows_kw<3>(dy, dys, x, xs, nrows, n, kw, acc);
    default: return dot_rows_kw<4>(dy, dys, x, xs, nrows, n, kw, acc);
  }
}

// dot_rows for OB output channels at once (backward weights of layers under 12 outputs): each x
// load serves OB channels' dy, so a tap costs one load per OB fused multiply-adds rather than
// one per one. dy of channel o at dy + o * dy_o, its sums at acc + o * acc_o. OB * KW + OB + 1
// registers: OB = 4 up to KW = 6, 3 for 7 and 8. (Blocks of 3 + 3 for LeNet-5's 6 channels
// measured the same as 4 + 2.)
template <int NCH, int KW, int OB>
void dot_rows_ob(const float* dy, int64_t dy_o, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n,
                 float* acc, int64_t acc_o) {
  const __mmask16 last = tail_mask(n);
  __m512 s[OB][KW];
#pragma GCC unroll 4
  for (int o = 0; o < OB; ++o)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) s[o][j] = _mm512_loadu_ps(acc + o * acc_o + 16 * j);
  for (int64_t k = 0; k < nrows; ++k) {
    const float *d = dy + k * dys, *v = x + k * xs;
#pragma GCC unroll 4
    for (int q = 0; q < NCH; ++q) {
      const __mmask16 m = q == NCH - 1 ? last : __mmask16(0xFFFF);
      __m512 dv[OB];
#pragma GCC unroll 4
      for (int o = 0; o < OB; ++o) dv[o] = _mm512_maskz_loadu_ps(m, d + o * dy_o + 16 * q);
#pragma GCC unroll 8
      for (int j = 0; j < KW; ++j) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, v + j + 16 * q);
#pragma GCC unroll 4
        for (int o = 0; o < OB; ++o) s[o][j] = _mm512_fmadd_ps(dv[o], xv, s[o][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int o = 0; o < OB; ++o)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) _mm512_storeu_ps(acc + o * acc_o + 16 * j, s[o][j]);
}
// kw taps of a kernel row for `outs` output channels (see dot_rows_ob), blocks of 8 taps and of
// OB channels, the remainders by smaller instances.
template <int NCH, int K = 8>
void dot_rows_ob_kw(const float* dy, int64_t dy_o, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n,
                    int64_t kw, float* acc, int64_t acc_o, int64_t outs) {
  if constexpr (K >= 1) {
    constexpr int OB = K <= 6 ? 4 : 3;
    for (; kw >= K; kw -= K, x += K, acc += 16 * K) {
      int64_t o = 0;
      for (; o + OB <= outs; o += OB) dot_rows_ob<NCH, K, OB>(dy + o * dy_o, dy_o, dys, x, xs, nrows, n, acc + o * acc_o, acc_o);
      for (; o + 2 <= outs; o += 2) dot_rows_ob<NCH, K, 2>(dy + o * dy_o, dy_o, dys, x, xs, nrows, n, acc + o * acc_o, acc_o);
      for (; o < outs; ++o) dot_rows<NCH, K>(dy + o * dy_o, dys, x, xs, nrows, n, acc + o * acc_o);
    }
    if (kw > 0) dot_rows_ob_kw<NCH, K - 1>(dy, dy_o, dys, x, xs, nrows, n, kw, acc, acc_o, outs);
  }
}
void run_dot_rows_ob(const float* dy, int64_t dy_o, int64_t dys, const float* x, int64_t xs, int64_t nrows, int64_t n,
                     int64_t kw, float* acc, int64_t acc_o, int64_t outs) {
  switch ((n + 15) / 16) {
    case 1: return dot_rows_ob_kw<1>(dy, dy_o, dys, x, xs, nrows, n, kw, acc, acc_o, outs);
    case 2: return dot_rows_ob_kw<2>(dy, dy_o, dys, x, xs, nrows, n, kw, acc, acc_o, outs);
    case 3: return dot_rows_ob_kw<3>(dy, dy_o, dys, x, xs, nrows, n, kw, acc, acc_o, outs);
    default: return dot_rows_ob_kw<4>(dy, dy_o, dys, x, xs, nrows, n, kw, acc, acc_o, outs);
  }
}
}  // namespace

namespace {
// Forward with the output channels in the lanes, for layers of 12-16 outputs with short rows
// (LeNet-5's conv2: 10-wide rows in 16 lanes): P neighbouring output pixels of a row are P
// vectors over o; each tap loads its weights for all o once (wT, [C][KH][KW][16], lanes past O
// zero) and adds them times each pixel's input. The P x 16 block is written back to NCHW.
template <int P>
void pixels_o_lanes(const float* xp, int64_t Hp, int64_t Wp, int64_t C, int64_t KH, int64_t KW, const float* wT,
                    const float* bias16, int64_t O, float* y, int64_t plane) {
  __m512 acc[P];
  const __m512 b = _mm512_loadu_ps(bias16);
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = b;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t kh = 0; kh < KH; ++kh) {
      const float* xr = xp + (c * Hp + kh) * Wp;
      const float* wr = wT + (c * KH + kh) * KW * 16;
      for (int64_t kw = 0; kw < KW; ++kw) {
        const __m512 wv = _mm512_loadu_ps(wr + kw * 16);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xr[p + kw]), acc[p]);
      }
    }
  alignas(64) float tmp[P][16];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) _mm512_store_ps(tmp[p], acc[p]);
  for (int64_t o = 0; o < O; ++o)
    for (int p = 0; p < P; ++p) y[o * plane + p] = tmp[p][o];
}
template <int P = 12>
void row_o_lanes(const float* xp, int64_t Hp, int64_t Wp, int64_t C, int64_t KH, int64_t KW, const float* wT,
                 const float* bias16, int64_t O, float* y, int64_t plane, int64_t n) {
  if constexpr (P >= 1) {
    for (; n >= P; n -= P, xp += P, y += P) pixels_o_lanes<P>(xp, Hp, Wp, C, KH, KW, wT, bias16, O, y, plane);
    if (n > 0) row_o_lanes<P - 1>(xp, Hp, Wp, C, KH, KW, wT, bias16, O, y, plane, n);
  }
}

// The forward on raw NCHW pointers with its scratch given: the transposed weights and bias (for the
// output-channel-lanes layout), then T padded images (one per thread, zeroed here).
int64_t weights_t_floats(const Geo& g) { return g.O >= kOutputLanesMin ? (g.C * g.KH * g.KW + 1) * 16 : 0; }
int64_t padded_floats(const Geo& g) { return g.C * (g.H + 2 * g.ph) * (g.W + 2 * g.pw); }
int64_t forward_scratch_floats(const Geo& g, int T) { return weights_t_floats(g) + T * padded_floats(g); }
// wT for the output-channel-lanes layout (O >= 12): [taps][16], then the bias; lanes past O zero.
void transpose_weights(const Geo& g, const float* pw, const float* pb, float* wT) {
  const int64_t taps = g.C * g.KH * g.KW;
  std::fill_n(wT, (taps + 1) * 16, 0.0f);
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t i = 0; i < taps; ++i) wT[i * 16 + o] = pw[o * taps + i];
  if (pb)
    for (int64_t o = 0; o < g.O; ++o) wT[taps * 16 + o] = pb[o];
}
// One image's outputs y (O, HO, WO) from its padded input xp (C, Hp, Wp).
void image_forward(const Geo& g, const float* xp, const float* pw, const float* wT, const float* pb, float* y) {
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, plane = g.HO * g.WO;
  if (g.O >= kOutputLanesMin) {  // output channels in the lanes (see pixels_o_lanes)
    const int64_t taps = g.C * g.KH * g.KW;
    for (int64_t oh = 0; oh < g.HO; ++oh)
      row_o_lanes(xp + oh * Wp, Hp, Wp, g.C, g.KH, g.KW, wT, wT + taps * 16, g.O, y + oh * g.WO, plane, g.WO);
    return;
  }
  for (int64_t oh = 0; oh < g.HO; oh += 2) {
    // Kernel rows kh in [k0, k1] read a row of x (0 <= oh + kh - ph < H), the others its padding
    // (every kh reads inside xp). Two output rows at a time: the union of their ranges.
    const bool pair = oh + 1 < g.HO;
    const int64_t k0 = std::max<int64_t>(0, g.ph - oh - (pair ? 1 : 0)), k1 = std::min(g.KH - 1, g.H - 1 + g.ph - oh);
    RowSpec r{xp + (oh + k0) * Wp, g.C, Hp * Wp, std::max<int64_t>(0, k1 - k0 + 1), Wp, g.KW, 1, pw + k0 * g.KW,
              g.C * g.KH * g.KW, g.KH * g.KW, g.KW, Wp};
    run_rows(r, pb, y + oh * g.WO, plane, g.O, g.WO, pair, g.WO);
  }
}
void forward_raw(const Geo& g, const float* px, const float* pw, const float* pb, float* py, float* scratch, int T) {
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, per = padded_floats(g);
  const int nt = std::max(1, std::min(T, threads()));
  float* wT = scratch;
  float* pads = scratch + weights_t_floats(g);
  std::fill_n(pads, nt * per, 0.0f);
  if (g.O >= kOutputLanesMin) transpose_weights(g, pw, pb, wT);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t n = 0; n < g.N; ++n) {
    float* xp = pads + omp_get_thread_num() * per;
    pad_planes(px + n * g.C * g.H * g.W, g.C, g.H, g.W, xp, Hp, Wp, g.ph, g.pw);
    image_forward(g, xp, pw, wT, pb, py + n * g.O * g.HO * g.WO);
  }
}

// The loops around the int8 forward, as functions of restrict pointers so that they vectorise (in
// place, GCC kept them scalar for fear of aliasing).
template <class X>
void widen(const X* __restrict src, float* __restrict dst, int64_t n, float zp) {
  for (int64_t j = 0; j < n; ++j) dst[j] = float(src[j]) - zp;
}
template <class Y>
void store_q8(const float* __restrict v, Y* __restrict y, int64_t n, float lo, float hi, float zp) {
  for (int64_t i = 0; i < n; ++i) y[i] = Y(int32_t(__builtin_rintf(std::min(std::max(v[i], lo), hi)) + zp));
}

// conv2d_int8: f32 weights, then per thread a padded image and its f32 sums.
int64_t forward_int8_scratch_floats(const Geo& g, int T) {
  return g.O * g.C * g.KH * g.KW + weights_t_floats(g) + T * (padded_floats(g) + g.O * g.HO * g.WO);
}
}  // namespace

int64_t forward_scratch_bytes(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, int threads) {
  return forward_scratch_floats(geo(x, w, y, a), threads) * int64_t(sizeof(float));
}
void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const ConvAttrs& a, void* scratch,
             int threads) {
  forward_raw(geo(x.shape(), w.shape(), y.shape(), a), x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr,
              y.data<float>(), static_cast<float*>(scratch), threads);
}
void forward(KernelCtx& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const ConvAttrs& a) {
  const int T = threads();
  const Tensor scratch = ctx.workspace(forward_scratch_bytes(x.shape(), w.shape(), y.shape(), a, T));
  if (ctx.planning()) return;
  forward(x, w, b, y, a, scratch.raw_data(), T);
}

int64_t forward_int8_scratch_bytes(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, int threads) {
  return forward_int8_scratch_floats(geo(x, w, y, a), threads) * int64_t(sizeof(float));
}

// The integers as f32 (exact), the direct loops (every partial sum an integer below 2^24: exact),
// then the requantization of kernels/ref/requant.h, step for step, one vectorised loop each; an
// image at a time per thread, so its f32 sums never leave the cache.
void forward_int8(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* r, Tensor& y, const QuantConvAttrs& a,
                  void* scratch, int threads) {
  const Geo g = geo(x.shape(), w.shape(), y.shape(), a.conv);
  const QuantLinearAttrs& q = a.q;
  const int64_t taps = g.C * g.KH * g.KW, in_img = g.C * g.H * g.W, plane = g.HO * g.WO, out_img = g.O * plane;
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, per = padded_floats(g);
  float* wf = static_cast<float*>(scratch);
  float* wT = wf + g.O * taps;
  float* bufs = wT + weights_t_floats(g);
  const int nt = std::max(1, std::min(threads, omp_get_max_threads()));
  const int8_t* pw = w.data<int8_t>();
  for (int64_t i = 0; i < g.O * taps; ++i) wf[i] = float(pw[i]);
  if (g.O >= kOutputLanesMin) transpose_weights(g, wf, nullptr, wT);
  const DType yt = y.dtype();
  const float zp = yt == DType::f32 ? 0.f : float(q.y_zero_point);
  const float lo = yt == DType::f32 ? 0.f : float(quant_min(yt)) - zp, hi = yt == DType::f32 ? 0.f : float(quant_max(yt)) - zp;
  std::vector<float> m(size_t(g.O)), bias(size_t(g.O), 0.f);
  for (int64_t o = 0; o < g.O; ++o) {
    m[size_t(o)] = quant_multiplier(q, o);
    if (b) bias[size_t(o)] = float(b->data<int32_t>()[o]);
  }
  const std::vector<PostOp> post = quant_scaled_post(q);
  std::vector<int> kinds;  // 0 relu, 1 clamp, 2 sum
  for (const auto& p : post) kinds.push_back(p.kind == "relu" ? 0 : p.kind == "clamp" ? 1 : 2);
  const float xzp = float(q.x_zero_point);
#pragma omp parallel num_threads(nt)
  {
    float* xp = bufs + omp_get_thread_num() * (per + out_img);
    float* acc = xp + per;
    std::fill_n(xp, per, 0.0f);  // the border stays zero: padding contributes nothing, as in the reference
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      visit_q8(x.dtype(), "conv2d_int8", [&]<class X>() {
        const X* px = x.data<X>() + n * in_img;
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t i = 0; i < g.H; ++i) widen(px + (c * g.H + i) * g.W, xp + (c * Hp + g.ph + i) * Wp + g.pw, g.W, xzp);
      });
      image_forward(g, xp, wf, wT, nullptr, acc);
      for (int64_t o = 0; o < g.O; ++o) {
        float* __restrict v = acc + o * plane;
        const float bo = bias[size_t(o)], mo = m[size_t(o)];
        for (int64_t i = 0; i < plane; ++i) v[i] = (v[i] + bo) * mo;
        for (size_t k = 0; k < post.size(); ++k) {
          const float al = float(post[k].alpha), be = float(post[k].beta);
          if (kinds[k] == 0) {
            for (int64_t i = 0; i < plane; ++i) v[i] = v[i] > 0.f ? v[i] : v[i] * al;
          } else if (kinds[k] == 1) {
            for (int64_t i = 0; i < plane; ++i) v[i] = std::min(std::max(v[i], al), be);
          } else {  // sum: the residual as stored
            visit_q8(r->dtype(), "conv2d_int8", [&]<class R>() {
              const R* __restrict pr = r->data<R>() + n * out_img + o * plane;
              for (int64_t i = 0; i < plane; ++i) v[i] = std::fma(al, float(pr[i]), v[i]);
            });
          }
        }
      }
      if (yt == DType::f32) {
        std::copy_n(acc, out_img, y.data<float>() + n * out_img);
        continue;
      }
      visit_q8(yt, "conv2d_int8", [&]<class Y>() { store_q8(acc, y.data<Y>() + n * out_img, out_img, lo, hi, zp); });
    }
  }
}

namespace {
// GCC 12 warns inside its own shuffle intrinsics (their undefined source operand, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 rows of at most 16 floats, row i at src + i * ss, to columns: dst[j * 16 + i] = src[i * ss + j]
// for j < cols. Rows from `rows` on read as zero; the destination's 16 lanes are all written.
void transpose_in(const float* src, int64_t ss, int rows, int cols, float* dst) {
  const __mmask16 m = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(m, src + i * ss) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
      t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xDD);
    }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)
    if (j < cols) _mm512_storeu_ps(dst + j * 16, r[j]);
}
// The inverse for the valid part: dst[i * ds + j] = src[j * 16 + i] for i < rows, j < cols.
void transpose_out(const float* src, int cols, float* dst, int64_t ds, int rows) {
  alignas(64) float buf[16 * 16];
  transpose_in(src, 16, cols, 16, buf);  // buf[i * 16 + j] = src[j * 16 + i]
  const __mmask16 m = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  for (int i = 0; i < rows; ++i) _mm512_mask_storeu_ps(dst + i * ds, m, _mm512_load_ps(buf + i * 16));
}
#pragma GCC diagnostic pop

// Backward data with 16 images in the vector lanes, for batches that give every thread a group of
// 16 (LeNet-5's conv2 at batch 64 and 256): a row-wise pass adds every kernel column over the
// whole row of dx, where only 10 of its 14 pixels (WO of W) meet a pixel of dy, in 14 of 16 lanes.
// Here each dx pixel sums exactly the taps that reach it, each tap one load of dy (16 images) and
// one multiply-add per input channel with the weight broadcast: nothing idles but the lanes of
// a last, partial group. dy and dx are transposed to and from [plane][16 images] per group.
// dxT(c, ih, iw) = sum over o and the (kh, kw) with oh = ih + ph - kh, ow = iw + pw - kw inside dy
// of wT[o][kh][kw][c] * dyT(o, oh, ow); CB channels from c0.
template <int CB>
void pixel_image_lanes(const Geo& g, const float* dyT, const float* wT, int64_t c0, int64_t ih, int64_t iw, float* dxT) {
  const int64_t kh0 = std::max<int64_t>(0, ih + g.ph - g.HO + 1), kh1 = std::min(g.KH - 1, ih + g.ph);
  const int64_t kw0 = std::max<int64_t>(0, iw + g.pw - g.WO + 1), kw1 = std::min(g.KW - 1, iw + g.pw);
  const int64_t C = g.C, KH = g.KH, KW = g.KW, HO = g.HO, WO = g.WO;
  __m512 acc[CB];
#pragma GCC unroll 8
  for (int c = 0; c < CB; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t kh = kh0; kh <= kh1; ++kh) {
      const float* d = dyT + ((o * HO + ih + g.ph - kh) * WO + iw + g.pw) * 16;
      const float* wr = wT + (o * KH + kh) * KW * C + c0;
      for (int64_t kw = kw0; kw <= kw1; ++kw) {
        const __m512 dv = _mm512_loadu_ps(d - kw * 16);
#pragma GCC unroll 8
        for (int c = 0; c < CB; ++c) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(wr[kw * C + c]), dv, acc[c]);
      }
    }
  const int64_t plane = g.H * g.W * 16;
#pragma GCC unroll 8
  for (int c = 0; c < CB; ++c) _mm512_storeu_ps(dxT + (c0 + c) * plane + (ih * g.W + iw) * 16, acc[c]);
}
void image_lanes_pixel(const Geo& g, const float* dyT, const float* wT, int64_t ih, int64_t iw, float* dxT) {
  for (int64_t c0 = 0; c0 < g.C; c0 += 8) {
    switch (std::min<int64_t>(8, g.C - c0)) {
      case 1: pixel_image_lanes<1>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 2: pixel_image_lanes<2>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 3: pixel_image_lanes<3>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 4: pixel_image_lanes<4>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 5: pixel_image_lanes<5>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 6: pixel_image_lanes<6>(g, dyT, wT, c0, ih, iw, dxT); break;
      case 7: pixel_image_lanes<7>(g, dyT, wT, c0, ih, iw, dxT); break;
      default: pixel_image_lanes<8>(g, dyT, wT, c0, ih, iw, dxT); break;
    }
  }
}
void backward_input_in_image_lanes(KernelCtx& ctx, const Geo& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
  const int T = threads();
  const int64_t dy_img = g.O * g.HO * g.WO, dx_img = g.C * g.H * g.W, taps = g.C * g.KH * g.KW;
  const int64_t per = 16 * (dy_img + dx_img), groups = (g.N + 15) / 16;
  float* wT = ctx.scratch<float>(g.O * taps);
  const Tensor held = ctx.workspace(T * per * int64_t(sizeof(float)));  // every float written before it is read
  if (ctx.planning()) return;
  float* bufs = static_cast<float*>(held.raw_data());
  const float *pdy = dy.data<float>(), *pw = w.data<float>();
  float* pdx = dx.data<float>();
  for (int64_t o = 0; o < g.O; ++o)  // w[o][c][kh][kw] -> wT[o][kh][kw][c]
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t k = 0; k < g.KH * g.KW; ++k) wT[(o * g.KH * g.KW + k) * g.C + c] = pw[(o * g.C + c) * g.KH * g.KW + k];
#pragma omp parallel for schedule(static)
  for (int64_t grp = 0; grp < groups; ++grp) {
    float* dyT = bufs + omp_get_thread_num() * per;
    float* dxT = dyT + 16 * dy_img;
    const int64_t n0 = grp * 16;
    const int m = int(std::min<int64_t>(16, g.N - n0));
    for (int64_t p = 0; p < dy_img; p += 16)
      transpose_in(pdy + n0 * dy_img + p, dy_img, m, int(std::min<int64_t>(16, dy_img - p)), dyT + p * 16);
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t iw = 0; iw < g.W; ++iw) image_lanes_pixel(g, dyT, wT, ih, iw, dxT);
    for (int64_t q = 0; q < dx_img; q += 16)
      transpose_out(dxT + q * 16, int(std::min<int64_t>(16, dx_img - q)), pdx + n0 * dx_img + q, dx_img, m);
  }
}
}  // namespace

void backward_input(KernelCtx& ctx, const Tensor& dy, const Tensor& w, Tensor& dx, const ConvAttrs& a) {
  const Geo g = geo(dx.shape(), w.shape(), dy.shape(), a);
  if (backward_input_image_lanes(dx.shape(), w.shape(), a)) return backward_input_in_image_lanes(ctx, g, dy, w, dx);
  // dy padded by KH-1 rows and KW-1 columns on each side: every tap of every dx element reads
  // inside it, the ones that fall outside dy read zeros.
  const int64_t Hp = g.HO + 2 * (g.KH - 1), Wp = g.WO + 2 * (g.KW - 1), per = g.O * Hp * Wp;
  float* pads = ctx.scratch<float>(threads() * per);
  if (ctx.planning()) return;
  const float *pdy = dy.data<float>(), *pw = w.data<float>();
  float* pdx = dx.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    float* dp = pads + omp_get_thread_num() * per;
    pad_planes(pdy + n * g.O * g.HO * g.WO, g.O, g.HO, g.WO, dp, Hp, Wp, g.KH - 1, g.KW - 1);
    for (int64_t ih = 0; ih < g.H; ih += 2) {
      // tap (kh, kw) reads dypad row ih + ph - kh + KH - 1 from column pw - kw + KW - 1. Only the
      // kernel rows kh in [k0, k1] read a row of dy (0 <= ih + ph - kh < HO); the others would add
      // the padding's zeros (LeNet-5's conv2: 50 of its 70 row taps are real). Two rows at a time
      // (every kh reads inside dypad): the union of their ranges.
      const bool pair = ih + 1 < g.H;
      const int64_t k0 = std::max<int64_t>(0, ih + g.ph - g.HO + 1), k1 = std::min(g.KH - 1, ih + g.ph + (pair ? 1 : 0));
      RowSpec r{dp + (ih + g.ph + g.KH - 1 - k0) * Wp + g.pw + g.KW - 1, g.O, Hp * Wp, std::max<int64_t>(0, k1 - k0 + 1),
                -Wp, g.KW, -1, pw + k0 * g.KW, g.KH * g.KW, g.C * g.KH * g.KW, g.KW, Wp};
      run_rows(r, nullptr, pdx + (n * g.C * g.H + ih) * g.W, g.H * g.W, g.C, g.W, pair, g.W);
    }
  }
}

namespace {
// Backward weights with the output channels in the lanes, for layers of 12-16 outputs whose
// rows are short (LeNet-5's conv2: 10-wide rows would leave 6 of 16 lanes idle, and each tap's
// dot product would be 10 rows long). dy of an image is transposed pixel-major, [HO * WO][16],
// and KW neighbouring taps of a kernel row add dy(pixel) * x(pixel + tap) into KW vectors.
template <int KW>
void taps_o_lanes(const float* dyT, int64_t HO, int64_t WO, const float* x, int64_t Wp, float* acc) {
  __m512 s[KW];
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j) s[j] = _mm512_loadu_ps(acc + 16 * j);
  for (int64_t oh = 0; oh < HO; ++oh) {
    const float* xr = x + oh * Wp;
    const float* d = dyT + oh * WO * 16;
    for (int64_t ow = 0; ow < WO; ++ow) {
      const __m512 dv = _mm512_loadu_ps(d + ow * 16);
#pragma GCC unroll 8
      for (int j = 0; j < KW; ++j) s[j] = _mm512_fmadd_ps(dv, _mm512_set1_ps(xr[ow + j]), s[j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j) _mm512_storeu_ps(acc + 16 * j, s[j]);
}
template <int K = 8>
void run_taps_o_lanes(const float* dyT, int64_t HO, int64_t WO, const float* x, int64_t Wp, int64_t kw, float* acc) {
  if constexpr (K >= 1) {
    for (; kw >= K; kw -= K, x += K, acc += 16 * K) taps_o_lanes<K>(dyT, HO, WO, x, Wp, acc);
    if (kw > 0) run_taps_o_lanes<K - 1>(dyT, HO, WO, x, Wp, kw, acc);
  }
}

void backward_weight_o_lanes(KernelCtx& ctx, const Geo& g, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db) {
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, per = g.C * Hp * Wp, pix = g.HO * g.WO;
  const int64_t taps = g.C * g.KH * g.KW;      // per output channel
  const int64_t acc_per = (taps + 1) * 16;     // a vector over o per tap, then the bias's
  const int T = threads();
  float* pads = ctx.scratch<float>(T * per);
  float* dyTs = ctx.scratch<float>(T * pix * 16);  // lanes o >= O stay zero
  float* accs = ctx.scratch<float>(T * acc_per);
  if (ctx.planning()) return;
  const float *pdy = dy.data<float>(), *px = x.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    const int t = omp_get_thread_num();
    float* xp = pads + t * per;
    float* dyT = dyTs + t * pix * 16;
    float* acc = accs + t * acc_per;
    pad_planes(px + n * g.C * g.H * g.W, g.C, g.H, g.W, xp, Hp, Wp, g.ph, g.pw);
    for (int64_t o = 0; o < g.O; ++o) {
      const float* d = pdy + (n * g.O + o) * pix;
      for (int64_t p = 0; p < pix; ++p) dyT[p * 16 + o] = d[p];
    }
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        run_taps_o_lanes(dyT, g.HO, g.WO, xp + (c * Hp + kh) * Wp, Wp, g.KW, acc + (c * g.KH + kh) * g.KW * 16);
    if (db) {
      __m512 s = _mm512_loadu_ps(acc + taps * 16);
      for (int64_t p = 0; p < pix; ++p) s = _mm512_add_ps(s, _mm512_loadu_ps(dyT + p * 16));
      _mm512_storeu_ps(acc + taps * 16, s);
    }
  }
  float* pdw = dw.data<float>();
  float* pdb = db ? db->data<float>() : nullptr;
  alignas(64) float v[16];
  for (int64_t i = 0; i < taps + (pdb ? 1 : 0); ++i) {
    __m512 s = _mm512_setzero_ps();
    for (int t = 0; t < T; ++t) s = _mm512_add_ps(s, _mm512_loadu_ps(accs + t * acc_per + i * 16));
    _mm512_store_ps(v, s);
    for (int64_t o = 0; o < g.O; ++o) {
      if (i < taps) pdw[o * taps + i] = v[o];
      else pdb[o] = v[o];
    }
  }
}
}  // namespace

void backward_weight(KernelCtx& ctx, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db, const ConvAttrs& a) {
  const Geo g = geo(x.shape(), dw.shape(), dy.shape(), a);
  if (g.O >= kOutputLanesMin) return backward_weight_o_lanes(ctx, g, dy, x, dw, db);
  const int64_t Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw, per = g.C * Hp * Wp;
  const int64_t taps = g.O * g.C * g.KH * g.KW;
  const int64_t acc_per = (taps + g.O) * 16;  // a vector of partial sums per tap, then per bias
  const int T = threads();
  float* pads = ctx.scratch<float>(T * per);
  float* accs = ctx.scratch<float>(T * acc_per);
  float* ones = ctx.scratch<float>(16 * ((g.WO + 15) / 16));
  if (ctx.planning()) return;
  std::fill_n(ones, 16 * ((g.WO + 15) / 16), 1.0f);
  const float *pdy = dy.data<float>(), *px = x.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    const int t = omp_get_thread_num();
    float* xp = pads + t * per;
    float* acc = accs + t * acc_per;
    pad_planes(px + n * g.C * g.H * g.W, g.C, g.H, g.W, xp, Hp, Wp, g.ph, g.pw);
    const float* dyn = pdy + n * g.O * g.HO * g.WO;
    if (db)
      for (int64_t o = 0; o < g.O; ++o) run_dot_rows(dyn + o * g.HO * g.WO, g.WO, ones, 0, g.HO, g.WO, 1, acc + (taps + o) * 16);
    // All output channels at once per input row of a tap row: dw[o][c][kh][:] over o.
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        run_dot_rows_ob(dyn, g.HO * g.WO, g.WO, xp + (c * Hp + kh) * Wp, Wp, g.HO, g.WO, g.KW,
                        acc + (c * g.KH + kh) * g.KW * 16, g.C * g.KH * g.KW * 16, g.O);
  }
  float* pdw = dw.data<float>();
  float* pdb = db ? db->data<float>() : nullptr;
  for (int64_t i = 0; i < taps + (pdb ? g.O : 0); ++i) {
    __m512 s = _mm512_setzero_ps();
    for (int t = 0; t < T; ++t) s = _mm512_add_ps(s, _mm512_loadu_ps(accs + t * acc_per + i * 16));
    const float v = _mm512_reduce_add_ps(s);
    if (i < taps) pdw[i] = v;
    else pdb[i - taps] = v;
  }
}
#else
void forward(KernelCtx&, const Tensor&, const Tensor&, const Tensor*, Tensor&, const ConvAttrs&) {
  throw Error("[conv2d] conv_small::forward needs AVX-512 (applies() is false without it)");
}
int64_t forward_scratch_bytes(const Shape&, const Shape&, const Shape&, const ConvAttrs&, int) { return 0; }
void forward(const Tensor&, const Tensor&, const Tensor*, Tensor&, const ConvAttrs&, void*, int) {
  throw Error("[conv2d] conv_small::forward needs AVX-512 (applies() is false without it)");
}
int64_t forward_int8_scratch_bytes(const Shape&, const Shape&, const Shape&, const ConvAttrs&, int) { return 0; }
void forward_int8(const Tensor&, const Tensor&, const Tensor*, const Tensor*, Tensor&, const QuantConvAttrs&, void*, int) {
  throw Error("[conv2d_int8] conv_small::forward_int8 needs AVX-512 (applies() is false without it)");
}
void backward_input(KernelCtx&, const Tensor&, const Tensor&, Tensor&, const ConvAttrs&) {
  throw Error("[conv2d_backward_input] conv_small::backward_input needs AVX-512");
}
void backward_weight(KernelCtx&, const Tensor&, const Tensor&, Tensor&, Tensor*, const ConvAttrs&) {
  throw Error("[conv2d_backward_weight] conv_small::backward_weight needs AVX-512");
}
#endif

}  // namespace reckon::conv_small
