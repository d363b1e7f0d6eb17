// Element types, devices and the small value types every layer shares.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace reckon {

enum class DType : uint8_t { f32, f64, bf16, f16, i8, u8, i32, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

// cpu: host memory; meta: shapes and accounts only, no data; cuda: reserved (stub backend).
enum class Device : uint8_t { cpu, meta, cuda };

constexpr std::string_view device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::meta: return "meta";
    case Device::cuda: return "cuda";
  }
  return "?";
}

// bfloat16 stored as its upper 16 bits; conversions round to nearest even.
struct bf16_t {
  uint16_t bits = 0;
  bf16_t() = default;
  explicit bf16_t(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = uint16_t((u >> 16) | 0x40);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = uint16_t(u >> 16);
    }
  }
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE half stored as bits; the compiler's _Float16 does the arithmetic conversions (clang before
// 15 has _Float16 on x86 only with AVX512-FP16; its storage type __fp16 converts alike, rounding
// to nearest even).
#if defined(__clang__) && __clang_major__ < 15 && !defined(__AVX512FP16__)
using half_arith_t = __fp16;
#else
using half_arith_t = _Float16;
#endif
struct f16_t {
  uint16_t bits = 0;
  f16_t() = default;
  explicit f16_t(float f) {
    half_arith_t h = static_cast<half_arith_t>(f);
    std::memcpy(&bits, &h, 2);
  }
  explicit operator float() const {
    half_arith_t h;
    std::memcpy(&h, &bits, 2);
    return static_cast<float>(h);
  }
};

}  // namespace reckon
