// reckon::Error: the one exception type. Messages name the op in brackets and print the
// shapes, e.g. "[conv2d] weight has 3 input channels but x has 4 (x: [8, 4, 32, 32])".
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <string_view>

namespace reckon {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// RK_CHECK(cond, "[op] message {}", args...): throw reckon::Error when cond is false.
#define RK_CHECK(cond, ...)                                             \
  do {                                                                  \
    if (!(cond)) throw ::reckon::Error(::fmt::format(__VA_ARGS__));     \
  } while (0)

// a * b for sizes that come from files and arguments, or an Error saying `what` overflows int64
// (the one helper the shape code, the data readers and the CLI share: issue 14's size class).
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(fmt::format("{}: {} x {} overflows a 64-bit size", what, a, b));
  return r;
}

// a + b for a count or size summed from files and arguments (a step's MACs, a window's extent),
// or an Error saying `what` overflows int64: checked_mul's twin for sums.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(fmt::format("{}: {} + {} overflows a 64-bit count", what, a, b));
  return r;
}

}  // namespace reckon
