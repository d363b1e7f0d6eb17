// Exact int8 products (int8_exact.h): each product is a matrix product C[o][p] = sum_k w[o][k] *
// x[k][p], k over the taps (conv: input channel x kernel row x kernel column; linear: the
// input features), p over the outputs of one image and group (conv: output pixels; linear: the
// batch rows). Columns are packed 16 at a time as int16 pairs along k, the weights as int16
// pairs per row; a 4x16 tile of C is 8 ymm accumulators fed by vpmaddwd (int16 x int16, pairs
// summed in int32: exact). The input zero point is taken out as x_zp * sum_k w[o][k], with the
// conv's spatial padding packed as x_zp so that it contributes nothing, as in the reference.
#include "reckon/kernels/cpu/int8_exact.h"

#include <immintrin.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/kernels/ref/requant.h"

namespace reckon::int8_exact {

bool dnnl_is_exact() {
  static const bool exact = [] {
    if (const char* e = std::getenv("RECKON_INT8_EXACT"); e && std::string_view(e) == "1") return false;
    const auto isa = unsigned(dnnl::get_effective_cpu_isa());
    // oneDNN's isa values are feature masks: avx512_core_vnni (and bf16, amx above it) carry
    // the avx512 VNNI bit, avx2_vnni its own.
    return (isa & unsigned(dnnl_cpu_isa_avx512_core_vnni) & ~unsigned(dnnl_cpu_isa_avx512_core)) != 0 ||
           (isa & unsigned(dnnl_cpu_isa_avx2_vnni) & ~unsigned(dnnl_cpu_isa_avx2)) != 0;
  }();
  return exact;
}

namespace {
constexpr int kNR = 16;  // columns per packed panel
constexpr int kMR = 4;   // weight rows per tile

// A packed panel: for k pair q and column j, panel[(q * 16 + j) * 2 + (k & 1)].
// acc[r][j] += sum over k of w_r[k] * panel(k, j), for MR rows of packed weights.
template <int MR>
__attribute__((target("avx2"))) void tile_avx2(const int16_t* panel, const int16_t* const* w, int64_t K2,
                                               int32_t (*acc)[kNR]) {
  __m256i c[MR][2];
  for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
  for (int64_t q = 0; q < K2; ++q) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 32));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + q * 32 + 16));
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, w[r] + 2 * q, sizeof pair);
      const __m256i wv = _mm256_set1_epi32(pair);
      c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(wv, x0));
      c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(wv, x1));
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r]), c[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc[r] + 8), c[r][1]);
  }
}
template <int MR>
void tile_scalar(const int16_t* panel, const int16_t* const* w, int64_t K2, int32_t (*acc)[kNR]) {
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kNR; ++j) {
      int32_t s = 0;
      for (int64_t q = 0; q < K2; ++q)
        s += int32_t(w[r][2 * q]) * panel[(q * kNR + j) * 2] + int32_t(w[r][2 * q + 1]) * panel[(q * kNR + j) * 2 + 1];
      acc[r][j] = s;
    }
}
template <int MR>
void tile(bool avx2, const int16_t* panel, const int16_t* const* w, int64_t K2, int32_t (*acc)[kNR]) {
  if (avx2) tile_avx2<MR>(panel, w, K2, acc);
  else tile_scalar<MR>(panel, w, K2, acc);
}

// The weights of one product as int16 rows of 2 * K2 (zero past K), and each row's sum.
struct Weights {
  int64_t O = 0, K = 0, K2 = 0;
  int16_t* rows = nullptr;
  int32_t* sums = nullptr;
};
Weights pack_weights(KernelCtx& ctx, const int8_t* w, int64_t O, int64_t K) {
  Weights p{O, K, (K + 1) / 2};
  p.rows = ctx.scratch<int16_t>(O * 2 * p.K2);
  p.sums = ctx.scratch<int32_t>(O);
  if (ctx.planning()) return p;
  for (int64_t o = 0; o < O; ++o) {
    int32_t s = 0;
    for (int64_t k = 0; k < K; ++k) {
      p.rows[o * 2 * p.K2 + k] = w[o * K + k];
      s += w[o * K + k];
    }
    p.sums[o] = s;
  }
  return p;
}

// One product, over `blocks` column panels shared among threads: pack(b, panel) fills panel b,
// out(o, b * 16 + j, acc) takes the exact accumulator of row o (zero point taken out).
template <class Pack, class Out>
void run(KernelCtx& ctx, const std::vector<Weights>& ws, int64_t blocks, int32_t x_zp, Pack&& pack, Out&& out) {
  const int64_t K2 = ws[0].K2, O = ws[0].O;
  const int nt = omp_get_max_threads();
  int16_t* panels = ctx.scratch<int16_t>(int64_t(nt) * K2 * kNR * 2);
  if (ctx.planning()) return;
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const int64_t groups = int64_t(ws.size());
#pragma omp parallel for schedule(dynamic)
  for (int64_t t = 0; t < blocks * groups; ++t) {
    const int64_t b = t / groups, g = t % groups;
    int16_t* panel = panels + int64_t(omp_get_thread_num()) * K2 * kNR * 2;
    pack(b, g, panel);
    const Weights& w = ws[size_t(g)];
    int32_t acc[kMR][kNR];
    for (int64_t o0 = 0; o0 < O; o0 += kMR) {
      const int mr = int(std::min<int64_t>(kMR, O - o0));
      const int16_t* rows[kMR];
      for (int r = 0; r < mr; ++r) rows[r] = w.rows + (o0 + r) * 2 * K2;
      switch (mr) {
        case 4: tile<4>(avx2, panel, rows, K2, acc); break;
        case 3: tile<3>(avx2, panel, rows, K2, acc); break;
        case 2: tile<2>(avx2, panel, rows, K2, acc); break;
        default: tile<1>(avx2, panel, rows, K2, acc); break;
      }
      for (int r = 0; r < mr; ++r)
        for (int j = 0; j < kNR; ++j) out(g, o0 + r, b * kNR + j, acc[r][j] - x_zp * w.sums[o0 + r]);
    }
  }
}
}  // namespace

void conv(KernelCtx& ctx, std::span<const Tensor> in, Tensor& y, const QuantConvAttrs& a) {
  const Tensor &x = in[0], &w = in[1];
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), CG = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t OH = y.size(2), OW = y.size(3), G = a.conv.groups, OG = O / G;
  const int64_t K = CG * KH * KW, P = OH * OW, pblocks = (P + kNR - 1) / kNR;
  const ConvAttrs& cv = a.conv;
  std::vector<Weights> ws;
  for (int64_t g = 0; g < G; ++g)
    ws.push_back(pack_weights(ctx, ctx.planning() ? nullptr : w.data<int8_t>() + g * OG * K, OG, K));
  ctx.note_impl("reckon int8 exact (int16 pairs, int32 sums)");
  const int32_t xzp = int32_t(a.q.x_zero_point);
  const requant::Requant rq(a.q, ctx.planning() ? nullptr : requant::bias_of(in));
  const Tensor* r = requant::residual_of(in);
  visit_q8(x.dtype(), "conv2d_int8", [&]<class Q>() {
    const Q* px = ctx.planning() ? nullptr : x.data<Q>();
    // The groups of every image are the product's groups; a column block lies in one image.
    std::vector<Weights> all;
    for (int64_t n = 0; n < N; ++n) all.insert(all.end(), ws.begin(), ws.end());
    run(
        ctx, all, pblocks, xzp,
        [&](int64_t b, int64_t ng, int16_t* panel) {
          const int64_t n = ng / G, g = ng % G;
          int64_t ih0[kNR], iw0[kNR];
          int jn = 0;
          for (int j = 0; j < kNR; ++j) {
            const int64_t p = b * kNR + j;
            if (p >= P) break;
            ih0[j] = (p / OW) * cv.stride[0] - cv.padding[0];
            iw0[j] = (p % OW) * cv.stride[1] - cv.padding[1];
            jn = j + 1;
          }
          const int64_t K2 = (K + 1) / 2;
          std::memset(panel, 0, size_t(K2 * kNR * 2) * sizeof(int16_t));
          int64_t k = 0;
          for (int64_t c = 0; c < CG; ++c) {
            const Q* plane = px + (n * C + g * CG + c) * H * W;
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw, ++k) {
                int16_t* dst = panel + (k / 2) * kNR * 2 + (k & 1);
                for (int j = 0; j < jn; ++j) {
                  const int64_t ih = ih0[j] + kh * cv.dilation[0], iw = iw0[j] + kw * cv.dilation[1];
                  dst[j * 2] = ih < 0 || ih >= H || iw < 0 || iw >= W ? int16_t(xzp) : int16_t(plane[ih * W + iw]);
                }
              }
          }
        },
        [&](int64_t ng, int64_t o, int64_t p, int32_t acc) {
          if (p >= P) return;
          const int64_t n = ng / G, oc = (ng % G) * OG + o;
          const int64_t i = (n * O + oc) * P + p;
          rq.store(y, i, rq.value(acc, oc, requant::residual_at(r, i)));
        });
  });
}

void linear(KernelCtx& ctx, std::span<const Tensor> in, Tensor& y, const QuantLinearAttrs& a) {
  const Tensor &x = in[0], &w = in[1];
  const int64_t N = x.size(0), K = x.size(1), O = w.size(0), pblocks = (N + kNR - 1) / kNR;
  const std::vector<Weights> ws{pack_weights(ctx, ctx.planning() ? nullptr : w.data<int8_t>(), O, K)};
  ctx.note_impl("reckon int8 exact (int16 pairs, int32 sums)");
  const int32_t xzp = int32_t(a.x_zero_point);
  const requant::Requant rq(a, ctx.planning() ? nullptr : requant::bias_of(in));
  const Tensor* r = requant::residual_of(in);
  visit_q8(x.dtype(), "linear_int8", [&]<class Q>() {
    const Q* px = ctx.planning() ? nullptr : x.data<Q>();
    run(
        ctx, ws, pblocks, xzp,
        [&](int64_t b, int64_t, int16_t* panel) {
          std::memset(panel, 0, size_t(ws[0].K2 * kNR * 2) * sizeof(int16_t));
          for (int j = 0; j < kNR && b * kNR + j < N; ++j) {
            const Q* row = px + (b * kNR + j) * K;
            for (int64_t k = 0; k < K; ++k) panel[((k / 2) * kNR + j) * 2 + (k & 1)] = int16_t(row[k]);
          }
        },
        [&](int64_t, int64_t o, int64_t n, int32_t acc) {
          if (n >= N) return;
          rq.store(y, n * O + o, rq.value(acc, o, requant::residual_at(r, n * O + o)));
        });
  });
}

}  // namespace reckon::int8_exact
