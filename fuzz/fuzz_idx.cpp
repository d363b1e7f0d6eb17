// The IDX reader (MNIST's format, raw or gzip): the input is split into an images file and a
// labels file (the first 4 bytes give the images file's length), read as the test split.
#include <cstring>

#include "fuzz_util.h"
#include "reckon/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  data += 4;
  size -= 4;
  n = uint32_t(std::min<size_t>(n, size));
  const bool gz = size > 2 && data[0] == 0x1f && data[1] == 0x8b;
  std::filesystem::remove(fuzz::scratch() / "t10k-images-idx3-ubyte");
  std::filesystem::remove(fuzz::scratch() / "t10k-images-idx3-ubyte.gz");
  fuzz::put(gz ? "t10k-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte", data, n);
  fuzz::put("t10k-labels-idx1-ubyte", data + n, size - n);
  fuzz::expect_clean([&] { (void)data::open_idx(fuzz::scratch().string(), false, 0, "idx"); });
  return 0;
}
