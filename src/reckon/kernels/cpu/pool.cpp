// Fast pooling kernels (f32, bf16, f16), OpenMP over (n, c) planes. Windows are the reference's.
//   max/avg forward: each output row is built tap by tap, so the innermost loop runs over a
//     row of outputs and vectorises (stride-2 windows become gathers); every output still
//     visits its taps in (kh, kw) order, so ties and NaNs resolve as in the reference.
//   avg backward, adaptive forward and backward: separable, the row direction as contiguous
//     vector adds, the short column windows apart.
//   max backward: dy scattered by the saved indices.
// bf16/f16 (kernels/cpu/lowp.h): values are loaded to f32 and every sum is built in f32 in the
//   same order as for f32 (a per-thread f32 row or plane where the f32 kernel accumulates in
//   its output), then rounded once: the f32 kernel's result rounded.
// Not oneDNN: its max pooling returns a workspace rather than PyTorch's indices, and its
// average pooling divides ceil-mode windows that run past the padded input differently.
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <limits>

#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/pool.h"

namespace reckon {

namespace {
// Outputs ow whose tap iw = ow * s + off lies inside [0, n): ow in [lo, hi).
struct Run {
  int64_t lo, hi;
};
Run valid_run(int64_t off, int64_t s, int64_t n, int64_t nout) {
  int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t hi = n - 1 - off < 0 ? 0 : std::min(nout, (n - 1 - off) / s + 1);
  return {lo, std::max(lo, hi)};
}
// Avg-pool window of output o along one axis, PyTorch's rules: clipped extent and divisor part.
struct AvgAxis {
  int64_t start, end, padded;
};
AvgAxis avg_axis(int64_t o, int64_t in, int64_t k, int64_t s, int64_t p) {
  int64_t start = o * s - p;
  int64_t end = std::min(start + k, in + p);
  return {std::max<int64_t>(start, 0), std::min(end, in), end - start};
}
// Adaptive windows [h0, h1) per output row and [w0, w1) per output column.
struct AdaptiveWin {
  const int64_t *h0, *h1, *w0, *w1;
};
AdaptiveWin adaptive_windows(KernelCtx& ctx, int64_t H, int64_t W, int64_t HO, int64_t WO) {
  AdaptiveWin a;
  int64_t* p = ctx.scratch<int64_t>(2 * (HO + WO));
  int64_t *h0 = p, *h1 = p + HO, *w0 = p + 2 * HO, *w1 = p + 2 * HO + WO;
  for (int64_t i = 0; i < HO; ++i) h0[i] = adaptive_start(i, H, HO), h1[i] = adaptive_end(i, H, HO);
  for (int64_t i = 0; i < WO; ++i) w0[i] = adaptive_start(i, W, WO), w1[i] = adaptive_end(i, W, WO);
  a.h0 = h0, a.h1 = h1, a.w0 = w0, a.w1 = w1;
  return a;
}

using lowp::load;
using lowp::store;
template <class T>
constexpr bool kF32 = std::is_same_v<T, float>;
// n floats of scratch for each thread, each thread's slice on cache lines of its own
// (KernelCtx::per_thread), and the calling thread's slice of them.
float* thread_buffers(KernelCtx& ctx, int64_t n) {
  return ctx.scratch<float>(int64_t(omp_get_max_threads()) * KernelCtx::per_thread<float>(n));
}
float* thread_slice(float* buffers, int64_t n) {
  return buffers + int64_t(omp_get_thread_num()) * KernelCtx::per_thread<float>(n);
}
// For bf16/f16: one f32 buffer of n floats per thread, for what the f32 kernel accumulates in
// its output (none for f32).
template <class T>
float* f32_buffers(KernelCtx& ctx, int64_t n) {
  if constexpr (kF32<T>) return nullptr;
  else return thread_buffers(ctx, n);
}
// Where n f32 results are accumulated: the output itself for f32, else the calling thread's
// buffer.
template <class T>
float* f32_out(T* out, float* buffers, int64_t n) {
  if constexpr (kF32<T>) return out;
  else return thread_slice(buffers, n);
}
// n values to f32 and back, as loops of restrict pointers (so that they vectorise).
template <class T>
void widen(const T* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}
template <class T>
void narrow(const float* __restrict src, T* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}
// Rounds n accumulated f32 results into the output (nothing to do for f32).
template <class T>
void round_out(const float* acc, T* out, int64_t n) {
  if constexpr (!kF32<T>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = store<T>(acc[i]);
  }
}

#if defined(__AVX512F__)
// One output row of an f32 2x2/2 max pool, 16 outputs at a time (GCC leaves the portable loop
// below scalar and branchy for f32: a compare-and-jump per tap, mispredicted on real data).
// Permutes split the even and odd columns of the two input rows; the taps are compared in the
// portable loop's order (row 0 even, row 0 odd, row 1 even, row 1 odd) with its rule (a larger
// value or a NaN takes the slot), and the winning tap's number gives the flat index in the plane.
void max_pool_2x2_row_f32(const float* r0, const float* r1, int64_t b0, int64_t W, int64_t WO, float* yr,
                          int64_t* ir) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i width = _mm512_set1_epi32(int32_t(W));
  for (int64_t o = 0; o < WO; o += 16) {
    const int64_t n = std::min<int64_t>(16, WO - o), nin = 2 * n;
    const __mmask16 lo = nin >= 16 ? 0xFFFF : __mmask16((1u << nin) - 1);
    const __mmask16 hi = nin <= 16 ? 0 : (nin >= 32 ? 0xFFFF : __mmask16((1u << (nin - 16)) - 1));
    const float *a = r0 + 2 * o, *b = r1 + 2 * o;
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, a), a1 = _mm512_maskz_loadu_ps(hi, a + 16);
    const __m512 c0 = _mm512_maskz_loadu_ps(lo, b), c1 = _mm512_maskz_loadu_ps(hi, b + 16);
    __m512 m = _mm512_permutex2var_ps(a0, even, a1);
    __m512i tap = _mm512_setzero_si512();
    auto take = [&](__m512 v, int t) {
      const __mmask16 k = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_mask_blend_ps(k, m, v);
      tap = _mm512_mask_blend_epi32(k, tap, _mm512_set1_epi32(t));
    };
    take(_mm512_permutex2var_ps(a0, odd, a1), 1);
    take(_mm512_permutex2var_ps(c0, even, c1), 2);
    take(_mm512_permutex2var_ps(c0, odd, c1), 3);
    const __mmask16 out = n >= 16 ? 0xFFFF : __mmask16((1u << n) - 1);
    _mm512_mask_storeu_ps(yr + o, out, m);
    // index = b0 + 2 * (o + lane) + (tap & 1) + (tap >> 1) * W
    __m512i rel = _mm512_add_epi32(lane2, _mm512_and_si512(tap, _mm512_set1_epi32(1)));
    rel = _mm512_add_epi32(rel, _mm512_mullo_epi32(_mm512_srli_epi32(tap, 1), width));
    const __m512i base = _mm512_set1_epi64(b0 + 2 * o);
    const __m512i i_lo = _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(rel)));
    const __m512i i_hi = _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rel, 1)));
    _mm512_mask_storeu_epi64(ir + o, __mmask8(out & 0xFF), i_lo);
    _mm512_mask_storeu_epi64(ir + o + 8, __mmask8(out >> 8), i_hi);
  }
}

// One output row of an f32 max pool whose windows all lie inside the input (AlexNet's 3x3/2),
// 16 outputs at a time: each tap (i, j) is a vector of row i at columns (o + lane) * sw + j (a
// plain load for stride 1, two loads and a permute for stride 2, a gather otherwise), compared in
// the scalar loop's order with its rule (a larger value or a NaN takes the slot). The winning
// tap's offset i * W + j gives the flat index b0 + (o + lane) * sw + i * W + j in the plane.
void max_pool_inside_row_f32(const float* const* rows, int64_t kh, int64_t kw, int64_t sw, int64_t W, int64_t WO,
                             int64_t b0, float* yr, int64_t* ir) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lanes_sw = _mm512_mullo_epi32(lane, _mm512_set1_epi32(int32_t(sw)));
  const __m512i even = _mm512_add_epi32(lane, lane);
  for (int64_t o = 0; o < WO; o += 16) {
    const int64_t n = std::min<int64_t>(16, WO - o);
    const __mmask16 out = n >= 16 ? 0xFFFF : __mmask16((1u << n) - 1);
    const int64_t nin = 2 * n - 1;  // stride 2: elements spanned by the row's n taps
    const __mmask16 lo = nin >= 16 ? 0xFFFF : __mmask16((1u << nin) - 1);
    const __mmask16 hi = nin <= 16 ? 0 : (nin >= 32 ? 0xFFFF : __mmask16((1u << (nin - 16)) - 1));
    auto tap_at = [&](const float* src) {
      if (sw == 1) return _mm512_maskz_loadu_ps(out, src);
      if (sw == 2) return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, src), even, _mm512_maskz_loadu_ps(hi, src + 16));
      return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), out, lanes_sw, src, 4);
    };
    __m512 m = tap_at(rows[0] + o * sw);
    __m512i off = _mm512_setzero_si512();
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = i == 0 ? 1 : 0; j < kw; ++j) {
        const __m512 v = tap_at(rows[i] + o * sw + j);
        const __mmask16 k = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_mask_blend_ps(k, m, v);
        off = _mm512_mask_blend_epi32(k, off, _mm512_set1_epi32(int32_t(i * W + j)));
      }
    // A NaN at tap (0, 0) took its own slot in the scalar loop too: same value, same index.
    _mm512_mask_storeu_ps(yr + o, out, m);
    const __m512i rel = _mm512_add_epi32(lanes_sw, off);
    const __m512i base = _mm512_set1_epi64(b0 + o * sw);
    _mm512_mask_storeu_epi64(ir + o, __mmask8(out & 0xFF),
                             _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(rel))));
    _mm512_mask_storeu_epi64(ir + o + 8, __mmask8(out >> 8),
                             _mm512_add_epi64(base, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(rel, 1))));
  }
}
#endif

template <class T>
void max_pool2d(KernelCtx& ctx, const Tensor& x, std::span<Tensor> out, const PoolAttrs& a) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = out[0].size(2), WO = out[0].size(3);
  const int64_t kh = a.kernel[0], kw = a.kernel[1], sh = a.stride[0], sw = a.stride[1];
  const int64_t ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
  // First tap inside the input of each output column (the index a window with no larger
  // value reports, as PyTorch's kernel starts from it).
  int64_t* wfirst = ctx.scratch<int64_t>(WO);
  for (int64_t ow = 0; ow < WO; ++ow) {
    int64_t w0 = ow * sw - pw;
    while (w0 < 0) w0 += dw;
    wfirst[ow] = w0;
  }
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  int64_t* pi = out[1].data<int64_t>();
  float* f32_rows = f32_buffers<T>(ctx, WO);
  // bf16/f16 2x2/2 windows: two input rows and an output row in f32 per thread
  float* rows2 = f32_buffers<T>(ctx, 2 * W + WO);
  const float ninf = -std::numeric_limits<float>::infinity();
  if (ph == 0 && pw == 0 && dh == 1 && dw == 1 && (HO - 1) * sh + kh <= H && (WO - 1) * sw + kw <= W) {
    if (kh == 2 && kw == 2 && sh == 2 && sw == 2) {
      // 2x2/2, the most common pool: outputs of a row are independent, so the loop over ow
      // vectorises (stride-2 loads) instead of chaining one compare after another.
#pragma omp parallel for schedule(static) if (planes * HO * WO > (1 << 13))
      for (int64_t p = 0; p < planes; ++p) {
        const T* xp = px + p * H * W;
        for (int64_t oh = 0; oh < HO; ++oh) {
          const T* r0 = xp + 2 * oh * W;
          const T* r1 = r0 + W;
          const int64_t b0 = 2 * oh * W, b1 = b0 + W;
          T* yr = py + (p * HO + oh) * WO;
          int64_t* ir = pi + (p * HO + oh) * WO;
#if defined(__AVX512F__)
          if constexpr (kF32<T>) {
            max_pool_2x2_row_f32(r0, r1, b0, W, WO, yr, ir);
            continue;
          } else {  // bf16/f16: the rows widened to f32 (exact), the same kernel, the maxima stored back (exact)
            float* f0 = thread_slice(rows2, 2 * W + WO);
            float* f1 = f0 + W;
            float* fy = f1 + W;
            widen(r0, f0, 2 * WO);
            widen(r1, f1, 2 * WO);
            max_pool_2x2_row_f32(f0, f1, b0, W, WO, fy, ir);
            narrow(fy, yr, WO);
            continue;
          }
#endif
#pragma omp simd
          for (int64_t ow = 0; ow < WO; ++ow) {
            float m = load(r0[2 * ow]);
            int64_t bi = b0 + 2 * ow;
            float v = load(r0[2 * ow + 1]);
            bool t = v > m || v != v;  // as PyTorch: first max wins, a NaN always takes the slot
            m = t ? v : m;
            bi = t ? b0 + 2 * ow + 1 : bi;
            v = load(r1[2 * ow]);
            t = v > m || v != v;
            m = t ? v : m;
            bi = t ? b1 + 2 * ow : bi;
            v = load(r1[2 * ow + 1]);
            t = v > m || v != v;
            m = t ? v : m;
            bi = t ? b1 + 2 * ow + 1 : bi;
            yr[ow] = store<T>(m);
            ir[ow] = bi;
          }
        }
      }
      return;
    }
    // Every window lies inside the input (e.g. 3x3/2).
#if defined(__AVX512F__)
    // The row kernel above, on f32 rows (bf16/f16 rows widened first, exactly).
    if (kh <= 16 && kh * W + 16 * sw < (int64_t(1) << 31)) {  // the tap offsets fit int32 lanes
      float* widened = f32_buffers<T>(ctx, kh * W + WO);
#pragma omp parallel for schedule(static) if (planes * HO * WO * kh * kw > (1 << 16))
      for (int64_t p = 0; p < planes; ++p) {
        const T* xp = px + p * H * W;
        const float* rows[16];
        float* fbuf = nullptr;
        if constexpr (!kF32<T>) fbuf = thread_slice(widened, kh * W + WO);
        for (int64_t oh = 0; oh < HO; ++oh) {
          const T* r0 = xp + oh * sh * W;
          for (int64_t i = 0; i < kh; ++i) {
            if constexpr (kF32<T>) {
              rows[i] = r0 + i * W;
            } else {
              widen(r0 + i * W, fbuf + i * W, W);
              rows[i] = fbuf + i * W;
            }
          }
          T* yr = py + (p * HO + oh) * WO;
          float* fy = kF32<T> ? reinterpret_cast<float*>(yr) : fbuf + kh * W;
          max_pool_inside_row_f32(rows, kh, kw, sw, W, WO, oh * sh * W, fy, pi + (p * HO + oh) * WO);
          if constexpr (!kF32<T>) narrow(fy, yr, WO);
        }
      }
      return;
    }
#endif
    // One scalar pass per output, same first-max / NaN-wins rule as the general loop below.
#pragma omp parallel for schedule(static) if (planes * HO * WO * kh * kw > (1 << 18))
    for (int64_t p = 0; p < planes; ++p) {
      const T* xp = px + p * H * W;
      T* yp = py + p * HO * WO;
      int64_t* ip = pi + p * HO * WO;
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          int64_t best = oh * sh * W + ow * sw;
          float m = load(xp[best]);
          for (int64_t i = 0; i < kh; ++i) {
            const T* xr = xp + (oh * sh + i) * W + ow * sw;
            for (int64_t j = 0; j < kw; ++j) {
              float v = load(xr[j]);
              // As PyTorch: a NaN always takes the slot. Unpredictable: ask for selects, not jumps.
              bool take = __builtin_expect_with_probability(v > m || v != v, 1, 0.5);
              m = take ? v : m;
              best = take ? (oh * sh + i) * W + ow * sw + j : best;
            }
          }
          yp[oh * WO + ow] = store<T>(m);
          ip[oh * WO + ow] = best;
        }
    }
    return;
  }
#pragma omp parallel for schedule(static) if (planes * HO * WO * kh * kw > (1 << 14))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = px + p * H * W;
    for (int64_t oh = 0; oh < HO; ++oh) {
      T* yo = py + (p * HO + oh) * WO;
      float* yr = f32_out(yo, f32_rows, WO);
      int64_t* ir = pi + (p * HO + oh) * WO;
      int64_t h0 = oh * sh - ph;
      int64_t hf = h0;
      while (hf < 0) hf += dh;
      for (int64_t ow = 0; ow < WO; ++ow) {
        yr[ow] = ninf;
        ir[ow] = hf * W + wfirst[ow];
      }
      for (int64_t i = 0; i < kh; ++i) {
        int64_t ih = h0 + i * dh;
        if (ih < 0 || ih >= H) continue;
        const T* xr = xp + ih * W;
        for (int64_t j = 0; j < kw; ++j) {
          int64_t off = j * dw - pw;
          Run r = valid_run(off, sw, W, WO);
          int64_t base = ih * W + off;
#pragma omp simd
          for (int64_t ow = r.lo; ow < r.hi; ++ow) {
            float v = load(xr[ow * sw + off]);
            bool take = v > yr[ow] || v != v;
            yr[ow] = take ? v : yr[ow];
            ir[ow] = take ? base + ow * sw : ir[ow];
          }
        }
      }
      round_out(yr, yo, WO);
    }
  }
}

// Channels-last (NHWC) max pooling: each output position's window is a few rows of C values, the
// channels in the vector lanes; the reference's rule (first maximum, a NaN takes the slot, the
// window's first tap inside the input when nothing beats -inf) and its indices (ih * W + iw, per
// plane), so both layouts give the same values and indices.
template <class T>
void max_pool2d_nhwc(KernelCtx& ctx, const Tensor& x, std::span<Tensor> out, const PoolAttrs& a) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = out[0].size(2), WO = out[0].size(3);
  const int64_t kh = a.kernel[0], kw = a.kernel[1], sh = a.stride[0], sw = a.stride[1];
  const int64_t ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  int64_t* pi = out[1].data<int64_t>();
  float* bufs = thread_buffers(ctx, C);
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (N * HO * WO * C * kh * kw > (1 << 15))
  for (int64_t q = 0; q < N * HO * WO; ++q) {
    const int64_t n = q / (HO * WO), oh = (q / WO) % HO, ow = q % WO;
    int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
    const int64_t h1 = std::min(h0 + (kh - 1) * dh + 1, H), w1 = std::min(w0 + (kw - 1) * dw + 1, W);
    while (h0 < 0) h0 += dh;
    while (w0 < 0) w0 += dw;
    float* m = thread_slice(bufs, C);
    int64_t* ir = pi + q * C;
    std::fill_n(m, C, ninf);
    std::fill_n(ir, C, h0 * W + w0);
    for (int64_t ih = h0; ih < h1; ih += dh)
      for (int64_t iw = w0; iw < w1; iw += dw) {
        const T* xr = px + ((n * H + ih) * W + iw) * C;
        const int64_t at = ih * W + iw;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float v = load(xr[c]);
          const bool take = v > m[c] || v != v;
          m[c] = take ? v : m[c];
          ir[c] = take ? at : ir[c];
        }
      }
    T* yr = py + q * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = store<T>(m[c]);
  }
}
}  // namespace

Support MaxPool2d::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("y's dtype differs from x's");
  const bool nhwc = channels_last(in, a);
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    if (nhwc)
      max_pool2d_nhwc<T>(ctx, in[0], out, a);
    else
      max_pool2d<T>(ctx, in[0], out, a);
    return Support::yes();
  });
}

namespace {
template <class T>
bool max_pool2d_backward(KernelCtx& ctx, const Tensor& dy, const Tensor& idx, Tensor& dx, const Shape& xs) {
  const int64_t planes = xs[0] * xs[1], HW = xs[2] * xs[3];
  const int64_t per = dy.size(2) * dy.size(3);
  const int64_t* pi = idx.data<int64_t>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  float* f32_planes = f32_buffers<T>(ctx, HW);
  bool bad = false;  // an index outside the plane is skipped, then reported
#pragma omp parallel for schedule(static) reduction(|| : bad) if (planes * HW > (1 << 15))
  for (int64_t p = 0; p < planes; ++p) {
    float* d = f32_out(pdx + p * HW, f32_planes, HW);
    std::fill_n(d, HW, 0.f);
    const int64_t* ip = pi + p * per;
    const T* g = pdy + p * per;
    for (int64_t j = 0; j < per; ++j) {
      if (uint64_t(ip[j]) < uint64_t(HW)) d[ip[j]] += load(g[j]);
      else bad = true;
    }
    round_out(d, pdx + p * HW, HW);
  }
  return !bad;
}

// NHWC: dy (N, HO, WO, C) added into dx (N, H, W, C) at each index's position; one sample a
// thread (windows overlap within a sample), summed in f32 and rounded once for bf16/f16.
template <class T>
bool max_pool2d_backward_nhwc(KernelCtx& ctx, const Tensor& dy, const Tensor& idx, Tensor& dx, const Shape& xs) {
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
  const int64_t per = dy.size(2) * dy.size(3);
  const int64_t* pi = idx.data<int64_t>();
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  float* f32_samples = f32_buffers<T>(ctx, HW * C);
  bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad) if (N * HW * C > (1 << 15))
  for (int64_t n = 0; n < N; ++n) {
    float* d = f32_out(pdx + n * HW * C, f32_samples, HW * C);
    std::fill_n(d, HW * C, 0.f);
    for (int64_t j = 0; j < per; ++j) {
      const int64_t* ir = pi + (n * per + j) * C;
      const T* g = pdy + (n * per + j) * C;
      for (int64_t c = 0; c < C; ++c) {
        if (uint64_t(ir[c]) < uint64_t(HW)) d[ir[c] * C + c] += load(g[c]);
        else bad = true;
      }
    }
    round_out(d, pdx + n * HW * C, HW * C);
  }
  return !bad;
}
}  // namespace

Support MaxPool2dBackward::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("dx's dtype differs from dy's");
  const bool nhwc = channels_last(in, a);
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    RK_CHECK(nhwc ? max_pool2d_backward_nhwc<T>(ctx, in[0], in[1], out[0], a.x_shape)
                  : max_pool2d_backward<T>(ctx, in[0], in[1], out[0], a.x_shape),
             "[max_pool2d_backward] an index is out of range for a plane of {} (x: {})", a.x_shape[2] * a.x_shape[3],
             shape_str(a.x_shape));
    return Support::yes();
  });
}

namespace {
template <class T>
void avg_pool2d(KernelCtx& ctx, const Tensor& x, Tensor& y, const PoolAttrs& a) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = y.size(2), WO = y.size(3);
  const int64_t kh = a.kernel[0], kw = a.kernel[1], sw = a.stride[1], pw = a.padding[1];
  // Column parts of the divisor: padded extent and taps inside the input.
  int64_t* col = ctx.scratch<int64_t>(2 * WO);
  for (int64_t ow = 0; ow < WO; ++ow) {
    AvgAxis c = avg_axis(ow, W, kw, sw, pw);
    col[ow] = c.padded;
    col[WO + ow] = std::max<int64_t>(c.end - c.start, 0);
  }
  const T* px = x.data<T>();
  T* py = y.data<T>();
  float* f32_rows = f32_buffers<T>(ctx, WO);
#pragma omp parallel for schedule(static) if (planes * HO * WO * kh * kw > (1 << 14))
  for (int64_t p = 0; p < planes; ++p) {
    const T* xp = px + p * H * W;
    for (int64_t oh = 0; oh < HO; ++oh) {
      T* yo = py + (p * HO + oh) * WO;
      float* yr = f32_out(yo, f32_rows, WO);
      AvgAxis r = avg_axis(oh, H, kh, a.stride[0], a.padding[0]);
      std::fill_n(yr, WO, 0.f);
      if (r.start >= r.end) {
        round_out(yr, yo, WO);
        continue;
      }
      for (int64_t ih = r.start; ih < r.end; ++ih) {
        const T* xr = xp + ih * W;
        for (int64_t j = 0; j < kw; ++j) {
          int64_t off = j - pw;
          Run run = valid_run(off, sw, W, WO);
#pragma omp simd
          for (int64_t ow = run.lo; ow < run.hi; ++ow) yr[ow] += load(xr[ow * sw + off]);
        }
      }
      const int64_t rows = a.count_include_pad ? r.padded : r.end - r.start;
      const int64_t* cdiv = a.count_include_pad ? col : col + WO;
#pragma omp simd
      for (int64_t ow = 0; ow < WO; ++ow) {
        int64_t d = rows * cdiv[ow];
        yr[ow] = col[WO + ow] > 0 ? yr[ow] / float(d) : 0.f;
      }
      round_out(yr, yo, WO);
    }
  }
}
}  // namespace

Support AvgPool2d::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("y's dtype differs from x's");
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    avg_pool2d<T>(ctx, in[0], out[0], a);
    return Support::yes();
  });
}

namespace {
template <class T>
void avg_pool2d_backward(KernelCtx& ctx, const Tensor& dy, Tensor& dx, const AvgPool2dBackward::Attrs& a) {
  const PoolAttrs& q = a.pool;
  const int64_t planes = a.x_shape[0] * a.x_shape[1], H = a.x_shape[2], W = a.x_shape[3];
  const int64_t HO = dy.size(2), WO = dy.size(3);
  const int64_t kh = q.kernel[0], kw = q.kernel[1], sw = q.stride[1], pw = q.padding[1];
  int64_t* col = ctx.scratch<int64_t>(2 * WO);
  // Per thread: g (WO) = dy / divisor of one output row, t (W) = g spread over the columns.
  float* tbuf = thread_buffers(ctx, WO + W);
  for (int64_t ow = 0; ow < WO; ++ow) {
    AvgAxis c = avg_axis(ow, W, kw, sw, pw);
    col[ow] = c.padded;
    col[WO + ow] = std::max<int64_t>(c.end - c.start, 0);
  }
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  float* f32_planes = f32_buffers<T>(ctx, H * W);
  // dx[ih][iw] = sum over output rows oh whose window holds ih of t_oh[iw], where t_oh spreads
  // row oh's dy over its column windows: the strided scatter runs once per output row rather
  // than once per (output row, kernel row); the row sums are contiguous.
#pragma omp parallel for schedule(static) if (planes * HO * WO * kh * kw > (1 << 14))
  for (int64_t p = 0; p < planes; ++p) {
    float* g = thread_slice(tbuf, WO + W);
    float* t = g + WO;
    float* dp = f32_out(pdx + p * H * W, f32_planes, H * W);
    std::fill_n(dp, H * W, 0.f);
    for (int64_t oh = 0; oh < HO; ++oh) {
      AvgAxis r = avg_axis(oh, H, kh, q.stride[0], q.padding[0]);
      if (r.start >= r.end) continue;
      const T* dyr = pdy + (p * HO + oh) * WO;
      const int64_t rows = q.count_include_pad ? r.padded : r.end - r.start;
      const int64_t* cdiv = q.count_include_pad ? col : col + WO;
#pragma omp simd
      for (int64_t ow = 0; ow < WO; ++ow) g[ow] = col[WO + ow] > 0 ? load(dyr[ow]) / float(rows * cdiv[ow]) : 0.f;
      std::fill_n(t, W, 0.f);
      for (int64_t j = 0; j < kw; ++j) {
        int64_t off = j - pw;
        Run run = valid_run(off, sw, W, WO);
        // ow * sw + off is injective in ow, so the lanes of one tap never collide.
#pragma omp simd
        for (int64_t ow = run.lo; ow < run.hi; ++ow) t[ow * sw + off] += g[ow];
      }
      for (int64_t ih = r.start; ih < r.end; ++ih) {
        float* dr = dp + ih * W;
#pragma omp simd
        for (int64_t iw = 0; iw < W; ++iw) dr[iw] += t[iw];
      }
    }
    round_out(dp, pdx + p * H * W, H * W);
  }
}
}  // namespace

Support AvgPool2dBackward::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("dx's dtype differs from dy's");
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    avg_pool2d_backward<T>(ctx, in[0], out[0], a);
    return Support::yes();
  });
}

namespace {
template <class T>
void adaptive_avg_pool2d(KernelCtx& ctx, const Tensor& x, Tensor& y) {
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = y.size(2), WO = y.size(3);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  if (HO == 1 && WO == 1) {  // global average pool
    const int64_t HW = H * W;
    const float inv = 1.f / float(HW);
#pragma omp parallel for schedule(static) if (planes * HW > (1 << 15))
    for (int64_t p = 0; p < planes; ++p) {
      const T* xp = px + p * HW;
      py[p] = store<T>(lowp::sum16(HW, [&](int64_t i) { return load(xp[i]); }) * inv);
    }
    return;
  }
  if (HO == H && WO == W) {  // every window one value (AlexNet's pool to 6x6 of 6x6 maps): a copy,
    // as the sum from +0 gives it (-0 becomes +0, as in the loops below and the reference)
    const int64_t n = planes * H * W;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) py[i] = store<T>(0.0f + load(px[i]));
    return;
  }
  const AdaptiveWin win = adaptive_windows(ctx, H, W, HO, WO);
  float* cbuf = thread_buffers(ctx, W);
  // Separable: c[iw] = sum over the row window of oh (contiguous vector adds, the bulk of the
  // work), then y[oh][ow] = sum of c over the column window of ow (short scalar runs).
#pragma omp parallel for schedule(static) if (planes * H * W > (1 << 15))
  for (int64_t p = 0; p < planes; ++p) {
    float* c = thread_slice(cbuf, W);
    const T* xp = px + p * H * W;
    for (int64_t oh = 0; oh < HO; ++oh) {
      std::fill_n(c, W, 0.f);
      for (int64_t ih = win.h0[oh]; ih < win.h1[oh]; ++ih) {
        const T* xr = xp + ih * W;
#pragma omp simd
        for (int64_t iw = 0; iw < W; ++iw) c[iw] += load(xr[iw]);
      }
      T* yr = py + (p * HO + oh) * WO;
      const int64_t rows = win.h1[oh] - win.h0[oh];
      for (int64_t ow = 0; ow < WO; ++ow) {
        float s = 0.f;
        for (int64_t iw = win.w0[ow]; iw < win.w1[ow]; ++iw) s += c[iw];
        yr[ow] = store<T>(s / float(rows * (win.w1[ow] - win.w0[ow])));
      }
    }
  }
}
}  // namespace

Support AdaptiveAvgPool2d::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("y's dtype differs from x's");
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    adaptive_avg_pool2d<T>(ctx, in[0], out[0]);
    return Support::yes();
  });
}

namespace {
template <class T>
void adaptive_avg_pool2d_backward(KernelCtx& ctx, const Tensor& dy, Tensor& dx, const Shape& xs) {
  const int64_t planes = xs[0] * xs[1], H = xs[2], W = xs[3];
  const int64_t HO = dy.size(2), WO = dy.size(3);
  const T* pdy = dy.data<T>();
  T* pdx = dx.data<T>();
  if (HO == 1 && WO == 1) {
    const int64_t HW = H * W;
#pragma omp parallel for schedule(static) if (planes * HW > (1 << 15))
    for (int64_t p = 0; p < planes; ++p) std::fill_n(pdx + p * HW, HW, store<T>(load(pdy[p]) / float(HW)));
    return;
  }
  if (HO == H && WO == W) {  // an identity forward: dx = dy (summed from +0, as below)
    const int64_t n = planes * H * W;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) pdx[i] = store<T>(0.0f + load(pdy[i]));
    return;
  }
  float* f32_planes = f32_buffers<T>(ctx, H * W);
  const AdaptiveWin win = adaptive_windows(ctx, H, W, HO, WO);
  float* tbuf = thread_buffers(ctx, W);
  // dx[ih] = sum over row windows oh holding ih of t_oh, t_oh[iw] = sum over column windows ow
  // holding iw of dy[oh][ow] / area.
#pragma omp parallel for schedule(static) if (planes * H * W > (1 << 15))
  for (int64_t p = 0; p < planes; ++p) {
    float* t = thread_slice(tbuf, W);
    float* dp = f32_out(pdx + p * H * W, f32_planes, H * W);
    std::fill_n(dp, H * W, 0.f);
    for (int64_t oh = 0; oh < HO; ++oh) {
      const T* dyr = pdy + (p * HO + oh) * WO;
      const int64_t rows = win.h1[oh] - win.h0[oh];
      std::fill_n(t, W, 0.f);
      for (int64_t ow = 0; ow < WO; ++ow) {
        const float g = load(dyr[ow]) / float(rows * (win.w1[ow] - win.w0[ow]));
        for (int64_t iw = win.w0[ow]; iw < win.w1[ow]; ++iw) t[iw] += g;
      }
      for (int64_t ih = win.h0[oh]; ih < win.h1[oh]; ++ih) {
        float* dr = dp + ih * W;
#pragma omp simd
        for (int64_t iw = 0; iw < W; ++iw) dr[iw] += t[iw];
      }
    }
    round_out(dp, pdx + p * H * W, H * W);
  }
}
}  // namespace

Support AdaptiveAvgPool2dBackward::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out,
                                       const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("dx's dtype differs from dy's");
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    adaptive_avg_pool2d_backward<T>(ctx, in[0], out[0], a.x_shape);
    return Support::yes();
  });
}

}  // namespace reckon
