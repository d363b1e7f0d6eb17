// Counter-based random numbers for the data layer: every draw is a pure function of
// (seed, epoch, index, ...) through the splitmix64 finaliser, never a shared generator's
// state. That is what makes a resumed epoch, a prefetching loader and a synchronous one give
// the very same batches. Not for cryptography.
#pragma once
#include <cstdint>

namespace reckon::data {

// splitmix64's output function (Steele, Lea, Flood 2014): a bijection of 64-bit words with
// full avalanche.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A hash of a few words; different argument orders or counts give unrelated values.
constexpr uint64_t hash64(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ (b + 0x632be59bd9b4e019ull)); }
constexpr uint64_t hash64(uint64_t a, uint64_t b, uint64_t c) { return hash64(hash64(a, b), c); }
constexpr uint64_t hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return hash64(hash64(a, b, c), d);
}

// A value in [0, n) from 64 random bits (Lemire's multiply-shift; bias below 2^-32 for n < 2^32).
inline uint64_t bounded(uint64_t r, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(r) * n) >> 64);
}

}  // namespace reckon::data
