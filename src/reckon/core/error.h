// reckon::Error: the one exception type. Messages name the op in brackets and print the
// shapes, e.g. "[conv2d] weight has 3 input channels but x has 4 (x: [8, 4, 32, 32])".
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace reckon {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// RK_CHECK(cond, "[op] message {}", args...): throw reckon::Error when cond is false.
#define RK_CHECK(cond, ...)                                             \
  do {                                                                  \
    if (!(cond)) throw ::reckon::Error(::fmt::format(__VA_ARGS__));     \
  } while (0)

}  // namespace reckon
