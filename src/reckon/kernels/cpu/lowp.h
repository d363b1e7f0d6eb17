// Low-precision storage for the cpu kernels: a kernel templated on its storage type T (float,
// bf16_t, f16_t) loads each element as float, computes in f32 and stores with round to nearest
// even, so a bf16/f16 call gives what "widen to f32, run the f32 kernel, round" gives, without
// the widening copies. For T = float load/store are the identity, so the f32 code is the one
// it was, except that row sums (batch norm's statistics, the global average pool) now add in
// sum16's order.
// The conversions are integer bit manipulation, bit-identical to bf16_t / f16_t's (tests check
// every f16 value and the rounding cases), because gcc 12 vectorises these and does not
// vectorise _Float16 conversions on a cpu without AVX512-FP16; vcvtneps2bf16 is not used as it
// flushes subnormals to zero.
// Sums over a row use sum16 below rather than `omp simd reduction(+)`, whose order is the
// vectoriser's choice: gcc splits a sum of 16-bit loads over 32 lanes and a sum of floats over
// 16, and contracts to FMA differently, so the bf16/f16 result would not be the f32 one rounded.
// Not here: f64 (stays on the reference kernels), arithmetic in bf16/f16.
#pragma once
#include <bit>
#include <cstdint>

#include "reckon/core/tensor.h"
#include "reckon/ops/op.h"

namespace reckon::lowp {

// c ? a : b on all 32 bits, written with masks: gcc 12 gives up vectorising a loop whose
// conversions chain several ?: of mixed widths (a load feeding a store, as in y = x * s + b).
inline uint32_t select(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(c);
  return (a & m) | (b & ~m);
}

inline float load(float x) { return x; }
inline float load(bf16_t x) { return std::bit_cast<float>(uint32_t(x.bits) << 16); }
// IEEE half -> float, exact: rebias the exponent; subnormals via one exact float subtraction.
inline float load(f16_t x) {
  const uint32_t h = x.bits;
  const uint32_t m = (h & 0x7fffu) << 13;  // exponent and mantissa, aligned to float's
  const uint32_t e = m & 0x0f800000u;      // half exponent field, shifted
  const uint32_t normal = m + ((127u - 15u) << 23);
  // inf / NaN: all-ones exponent; NaNs come out quiet, as vcvtph2ps makes them.
  const uint32_t special = (m + ((255u - 31u) << 23)) | select((m & 0x7fffffu) != 0, 0x400000u, 0u);
  // subnormal (or zero): value = mantissa * 2^-24 = (2^-14 + mantissa * 2^-24) - 2^-14.
  const float sub = std::bit_cast<float>(m + (113u << 23)) - std::bit_cast<float>(113u << 23);
  const uint32_t mag = select(e == 0x0f800000u, special, select(e == 0, std::bit_cast<uint32_t>(sub), normal));
  return std::bit_cast<float>(mag | ((h & 0x8000u) << 16));
}

template <class T>
T store(float f);
template <>
inline float store<float>(float f) {
  return f;
}
// float -> bf16, nearest even; a NaN stays a NaN (quiet), as bf16_t(float).
template <>
inline bf16_t store<bf16_t>(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t q = (u >> 16) | 0x40u;
  bf16_t b;
  b.bits = uint16_t(select((u & 0x7fffffffu) > 0x7f800000u, q, r));
  return b;
}
// float -> IEEE half, nearest even: overflow to inf, subnormals rounded by one float add (exact
// but for the wanted rounding), NaN quiet with the payload's top bits (as vcvtps2ph).
template <>
inline f16_t store<f16_t>(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t big = select(a > 0x7f800000u, nan, 0x7c00u);  // NaN, or inf for |f| >= 65520
  // normal: drop 13 mantissa bits with nearest even, rebias the exponent
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // |f| < 2^-14: adding 0.5 lands the half mantissa in the float's low bits, rounded by the add
  const uint32_t sub =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(126u << 23)) - (126u << 23);
  const uint32_t mag = select(a >= 0x477ff000u, big, select(a < (113u << 23), sub, normal));
  f16_t h;
  h.bits = uint16_t(mag | sign);
  return h;
}

// Sum of f(i) for i in [0, n) in float: 16 lanes (lane l adds the i with i % 16 == l, in
// order), then added pairwise. The order is written out, so every storage type, compiler and
// vector width gives the same float; the lane loop vectorises (one zmm, or two ymm).
template <class F>
inline float sum16(int64_t n, F&& f) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
#pragma omp simd
    for (int l = 0; l < 16; ++l) acc[l] += f(i + l);
  for (int l = 0; i + l < n; ++l) acc[l] += f(i + l);
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// Calls f.template operator()<T>() with T the storage type of dtype d (float, bf16_t, f16_t);
// other dtypes are declined (f64 and integers stay on the reference kernels).
template <class F>
Support visit(DType d, F&& f) {
  switch (d) {
    case DType::f32: return f.template operator()<float>();
    case DType::bf16: return f.template operator()<bf16_t>();
    case DType::f16: return f.template operator()<f16_t>();
    default: return Support::no("dtype is not f32, bf16 or f16");
  }
}

}  // namespace reckon::lowp
