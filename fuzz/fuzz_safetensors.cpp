// The safetensors reader on arbitrary bytes: framing, header JSON, dtypes, offsets.
#include "fuzz_util.h"
#include "reckon/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = reckon::fuzz::put("in.safetensors", data, size);
  reckon::fuzz::expect_clean([&] { (void)reckon::load_safetensors(p); });
  return 0;
}
