// The parsers of command-line values that are sizes, memory amounts, shapes and states:
// parse_bytes (--max-memory, --memory), parse_input (--input CxHxW) and the rng state of a
// checkpoint. Each input is one argument's text.
#include <string>

#include "../tools/command.h"
#include "fuzz_util.h"
#include "reckon/io/checkpoint.h"
#include "reckon/ledger/ledger.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  const std::string s(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    const int64_t b = parse_bytes(s, "--max-memory");
    if (b <= 0) std::abort();  // a budget is positive or an error
  });
  fuzz::expect_clean([&] {
    Shape in = tools::parse_input(s, "train");
    if (in.size() != 3) std::abort();
    (void)checked_mul(checked_mul(in[0], in[1], "--input"), in[2], "--input");
  });
  fuzz::expect_clean([&] { (void)io::parse_rng_state(s); });
  return 0;
}
