// Depthwise int8 convolutions with AVX-512 VNNI (dw_int8.h).
//
// Lanes: a 64-byte load holds 64 channels, 16 in each 128-bit lane L. Unpacking four rows' loads
// (bytes, then words) gives four vectors V0..V3 whose dword i of lane L holds the four rows of
// channel 16L + 4j + i (j: the vector); the packed weights hold the kernel's rows in the same
// order, so vpdpbusd(V_j, W[kw][j]) adds one kernel column's taps of 16 channels. Packing the
// four int32 results back (packs_epi32 then packus/packs_epi16, which work within lanes too)
// restores the channels' order.
#include "reckon/kernels/cpu/dw_int8.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>


// GCC 12 warns that the unmasked AVX-512 conversions' placeholder operand (_mm512_undefined_*)
// may be used uninitialized when they are inlined into a target("avx512...") function (GCC bug
// 105593); nothing reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace reckon::dw_int8 {
namespace {

constexpr int kLanes = 64;  // channels per block
constexpr int kCols = 3;    // kernel columns (narrower kernels are padded with zero weights)
constexpr int kRows = 4;    // kernel rows (the taps vpdpbusd sums in one lane)
constexpr int kTile = 4;    // outputs of a row per tile

// The packed buffer: a header, then per block of 64 channels the weights and the constants.
struct Header {
  // 1: the careful requantization, exactly the reference's float steps: some |bias| > 2^24 (so
  // float(acc) + float(bias) may differ from float(acc + bias)), or some output could pass 2^30
  // before it is clamped. 0: the bias is in the accumulator and the clamp is taken on the rounded
  // integers, where it is the same (rounding is monotonic: round(clamp(v, A, B)) ==
  // clamp(round(v), round(A), round(B))), by the packs' saturation and a byte min/max.
  int32_t careful;
  float lo, hi;          // the post-ops and the saturation, as one clamp in the scaled domain
  int32_t zp;            // the output's zero point
  int32_t qlo, qhi;      // round(lo) + zp, round(hi) + zp: the clamp on stored values
  int32_t pad[10];
};
struct Block {
  int8_t w[kCols][4][kLanes];  // [kernel column][vector j][lane L][dword i][row]
  int32_t init[4][16];         // bias (unless careful) - x_zp' * sum of the channel's taps
  float bias[4][16];           // the bias as float (careful only)
  float mult[4][16];           // the output multiplier
};
static_assert(sizeof(Header) == 64 && sizeof(Block) % 64 == 0);

// Where channel c of a block sits in the vectors: vector j, element 4 * L + i of its 16.
inline void slot(int c, int& j, int& e) {
  const int L = c / 16, k = c % 16;
  j = k / 4;
  e = 4 * L + k % 4;
}

bool has_vnni() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  return ok;
}

// The post-op chain (relu of slope 0, clamp) composed with the saturation [lo, hi] into one
// clamp; false for a chain that is not one (leaky relu, sum).
bool folded_clamp(const QuantLinearAttrs& q, DType yt, float& A, float& B) {
  A = -std::numeric_limits<float>::infinity();
  B = std::numeric_limits<float>::infinity();
  // clamp(clamp(v, A, B), a, b) == clamp(v, clamp(A, a, b), clamp(B, a, b))
  auto then = [&](float a, float b) {
    A = std::min(std::max(A, a), b);
    B = std::min(std::max(B, a), b);
  };
  for (const auto& p : quant_scaled_post(q)) {
    if (p.kind == "relu" && p.alpha == 0.0) then(0.f, std::numeric_limits<float>::infinity());
    else if (p.kind == "clamp") then(float(p.alpha), float(p.beta));
    else return false;
  }
  const float zp = float(q.y_zero_point);
  then(float(quant_min(yt)) - zp, float(quant_max(yt)) - zp);
  return true;
}

// Layers of 16 or 32 channels (MobileNet's first depthwise layer) at stride 1 put PP = 64 / C
// neighbouring pixels in a vector (the same byte offsets a 64-channel block has in its row: a
// load at column iw holds pixels iw .. iw + PP - 1, which are what PP neighbouring outputs read
// at one kernel column), their weights repeated PP times; each output of a tile is then PP
// pixels.
inline int pixels_per_vector(int64_t C, int64_t stride_w) { return stride_w == 1 && (C == 16 || C == 32) ? int(kLanes / C) : 1; }

// The input: u8 with zero point 0 (padding reads as 0: zero-masked loads, one uop), u8, or s8
// (its top bit flipped: u8 with the zero point shifted by 128); padding reads as the zero point.
enum In { u8_zp0, u8_zp, s8 };

template <int S, int PP, In IN, bool CAREFUL>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"))) void run_rows(
    const uint8_t* x, uint8_t* y, const Header* h, const Block* blocks, int64_t N, int64_t H, int64_t W, int64_t C,
    int64_t OH, int64_t OW, int64_t KH, int64_t sh, int64_t ph, int64_t pw, uint8_t zp_byte, bool sy) {
  const int64_t CB = (C + kLanes - 1) / kLanes, items = N * OH * CB;
  const __m512i zpv = _mm512_set1_epi8(char(zp_byte)), flip = _mm512_set1_epi8(char(0x80));
  const __m512 lo = _mm512_set1_ps(h->lo), hi = _mm512_set1_ps(h->hi);
  const __m512i yzp = _mm512_set1_epi16(int16_t(h->zp));
  const __m512i qlo = _mm512_set1_epi8(char(h->qlo)), qhi = _mm512_set1_epi8(char(h->qhi));
  const bool narrow = h->qlo > (sy ? -128 : 0) || h->qhi < (sy ? 127 : 255);  // a post-op clamp inside the type's range
  constexpr int G = S * PP;  // input columns between a tile's outputs
  // The bytes of the pixels among a load's PP (or a store's) that lie inside [0, W), and with
  // PP == 1, the block's channels when its pixel does (no branches: the masks say it all).
  auto pixels = [C](int64_t first, int64_t W, __mmask64 m) -> __mmask64 {
    if constexpr (PP == 1) return first >= 0 && first < W ? m : 0;
    auto low = [](int64_t bytes) { return bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1; };
    return low(std::clamp<int64_t>(W - first, 0, PP) * C) & ~low(std::clamp<int64_t>(-first, 0, PP) * C);
  };
#pragma omp parallel for schedule(static)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t cb = it % CB, row = it / CB, n = row / OH, oh = row % OH;
    const int64_t c0 = cb * kLanes, rem = C - c0;
    const __mmask64 m = rem >= kLanes ? ~__mmask64(0) : (__mmask64(1) << rem) - 1;
    const Block& b = blocks[cb];
    // Each kernel row's input row (null: padding, or a row past the kernel's; read as the zero
    // point).
    const uint8_t* rows[kRows];
    for (int r = 0; r < kRows; ++r) {
      const int64_t ih = oh * sh - ph + r;
      rows[r] = r < KH && ih >= 0 && ih < H ? x + ((n * H + ih) * W) * C + c0 : nullptr;
    }
    uint8_t* yrow = y + ((n * OH + oh) * OW) * C + c0;
    for (int64_t ow0 = 0; ow0 < OW; ow0 += kTile * PP) {
      __m512i acc[kTile][4];
      for (int t = 0; t < kTile; ++t)
        for (int j = 0; j < 4; ++j) acc[t][j] = _mm512_loadu_si512(b.init[j]);
      constexpr int ncols = (kTile - 1) * G + kCols;
#pragma GCC unroll 16
      for (int c = 0; c < ncols; ++c) {
        const int64_t iw = ow0 * S - pw + c;
        const __mmask64 lm = pixels(iw, W, m);
        __m512i R[kRows];
        for (int r = 0; r < kRows; ++r) {
          R[r] = zpv;
          if (rows[r] && lm) {
            if constexpr (IN == u8_zp0) R[r] = _mm512_maskz_loadu_epi8(lm, rows[r] + iw * C);
            else R[r] = _mm512_mask_loadu_epi8(zpv, lm, rows[r] + iw * C);
          }
          if constexpr (IN == s8) R[r] = _mm512_xor_si512(R[r], flip);
        }
        const __m512i A = _mm512_unpacklo_epi8(R[0], R[1]), B = _mm512_unpackhi_epi8(R[0], R[1]);
        const __m512i Cv = _mm512_unpacklo_epi8(R[2], R[3]), D = _mm512_unpackhi_epi8(R[2], R[3]);
        const __m512i V[4] = {_mm512_unpacklo_epi16(A, Cv), _mm512_unpackhi_epi16(A, Cv), _mm512_unpacklo_epi16(B, D),
                              _mm512_unpackhi_epi16(B, D)};
#pragma GCC unroll 4
        for (int t = 0; t < kTile; ++t) {
          const int kw = c - t * G;
          if (kw < 0 || kw >= kCols) continue;
          for (int j = 0; j < 4; ++j)
            acc[t][j] = _mm512_dpbusd_epi32(acc[t][j], V[j], _mm512_loadu_si512(b.w[kw][j]));
        }
      }
      const int tn = int(std::min<int64_t>(kTile, (OW - ow0 + PP - 1) / PP));
      for (int t = 0; t < tn; ++t) {
        __m512i q[4];
        for (int j = 0; j < 4; ++j) {
          __m512 v = _mm512_cvtepi32_ps(acc[t][j]);
          if constexpr (CAREFUL) v = _mm512_add_ps(v, _mm512_loadu_ps(b.bias[j]));
          v = _mm512_mul_ps(v, _mm512_loadu_ps(b.mult[j]));
          if constexpr (CAREFUL) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
          q[j] = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        }
        const __m512i p01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), yzp);
        const __m512i p23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), yzp);
        __m512i out = sy ? _mm512_packs_epi16(p01, p23) : _mm512_packus_epi16(p01, p23);
        if constexpr (!CAREFUL) {
          if (narrow) out = sy ? _mm512_min_epi8(_mm512_max_epi8(out, qlo), qhi) : _mm512_min_epu8(_mm512_max_epu8(out, qlo), qhi);
        }
        const int64_t o = ow0 + t * PP;
        _mm512_mask_storeu_epi8(yrow + o * C, pixels(o, OW, m), out);
      }
    }
  }
}

}  // namespace

bool applies(const Shape& xs, const Shape& ws, const QuantConvAttrs& a, DType xt, DType yt) {
  if (!has_vnni() || xs.size() != 4 || ws.size() != 4) return false;
  const ConvAttrs& cv = a.conv;
  const int64_t C = xs[1];
  if (cv.groups != C || ws[0] != C || ws[1] != 1 || ws[2] > kRows || ws[3] > kCols) return false;
  if (cv.dilation[0] != 1 || cv.dilation[1] != 1) return false;
  if (cv.stride[0] < 1 || cv.stride[1] < 1 || cv.stride[1] > 2) return false;
  if ((xt != DType::u8 && xt != DType::i8) || (yt != DType::u8 && yt != DType::i8)) return false;
  float A, B;
  return folded_clamp(a.q, yt, A, B);
}

double lane_use(int64_t channels, int64_t KH, int64_t KW, int64_t stride_w) {
  const int64_t lanes = channels * pixels_per_vector(channels, stride_w);
  return double(lanes * KH * KW) / double((lanes + kLanes - 1) / kLanes * kLanes * kRows * kCols);
}

int64_t packed_bytes(int64_t channels) {
  return int64_t(sizeof(Header)) + (channels + kLanes - 1) / kLanes * int64_t(sizeof(Block));
}

void pack(const int8_t* w, const int32_t* bias, int64_t C, int64_t KH, int64_t KW, const QuantConvAttrs& a, DType xt,
          void* out) {
  const DType yt = quant_dtype("conv2d_int8", a.q.y_dtype, false);
  auto* h = static_cast<Header*>(out);
  std::memset(out, 0, size_t(packed_bytes(C)));
  RK_CHECK(folded_clamp(a.q, yt, h->lo, h->hi), "[dw_int8] the post-ops of this conv are not a clamp");
  h->zp = int32_t(a.q.y_zero_point);
  h->qlo = int32_t(std::nearbyint(h->lo)) + h->zp;
  h->qhi = int32_t(std::nearbyint(h->hi)) + h->zp;
  // The input as u8 (an s8 input's top bit flipped): its zero point too.
  const int32_t xzp = int32_t(a.q.x_zero_point) + (xt == DType::i8 ? 128 : 0);
  for (int64_t c = 0; c < C; ++c) {
    const double b = bias ? double(bias[c]) : 0.0, most = 255.0 * 128.0 * double(KH * KW) + std::abs(b);
    if (std::abs(b) > double(1 << 24) || most * std::abs(double(quant_multiplier(a.q, c))) > double(1 << 30)) h->careful = 1;
  }
  auto* blocks = reinterpret_cast<Block*>(static_cast<char*>(out) + sizeof(Header));
  const int PP = pixels_per_vector(C, a.conv.stride[1]);  // (then lane k holds channel k % C)
  for (int64_t k = 0; k < C * PP; ++k) {
    const int64_t c = k % C;
    Block& b = blocks[k / kLanes];
    int j, e;
    slot(int(k % kLanes), j, e);
    int32_t sum = 0;
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const int8_t v = w[(c * KH + kh) * KW + kw];
        b.w[kw][j][4 * e + kh] = v;
        sum += v;
      }
    const int32_t bi = bias ? bias[c] : 0;
    b.init[j][e] = (h->careful ? 0 : bi) - xzp * sum;
    b.bias[j][e] = float(bi);
    b.mult[j][e] = quant_multiplier(a.q, c);
  }
}

void forward(const void* x, void* y, const void* packed, const Shape& xs, const Shape& ys, int64_t KH,
             const QuantConvAttrs& a, DType xt, DType yt) {
  const auto* h = static_cast<const Header*>(packed);
  const auto* blocks = reinterpret_cast<const Block*>(static_cast<const char*>(packed) + sizeof(Header));
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OH = ys[2], OW = ys[3];
  const auto& cv = a.conv;
  const auto zp_byte = uint8_t(int8_t(a.q.x_zero_point));  // the stored byte a padded tap reads as
  const bool sy = yt == DType::i8;
  auto run = [&]<int S, int PP, In IN>() {
    auto go = h->careful ? run_rows<S, PP, IN, true> : run_rows<S, PP, IN, false>;
    go(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), h, blocks, N, H, W, C, OH, OW, KH, cv.stride[0],
       cv.padding[0], cv.padding[1], zp_byte, sy);
  };
  auto by_types = [&]<int S, int PP>() {
    if (xt == DType::i8) run.template operator()<S, PP, s8>();
    else if (a.q.x_zero_point != 0) run.template operator()<S, PP, u8_zp>();
    else run.template operator()<S, PP, u8_zp0>();
  };
  switch (cv.stride[1] == 2 ? 0 : pixels_per_vector(C, cv.stride[1])) {
    case 0: by_types.template operator()<2, 1>(); break;
    case 1: by_types.template operator()<1, 1>(); break;
    case 2: by_types.template operator()<1, 2>(); break;
    default: by_types.template operator()<1, 4>(); break;
  }
}

}  // namespace reckon::dw_int8
