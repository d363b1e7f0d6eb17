// The CIFAR-10 binary reader: the input is test_batch.bin (records of 1 label byte and
// 3x32x32 pixels).
#include "fuzz_util.h"
#include "reckon/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  fuzz::put("test_batch.bin", data, size);
  fuzz::expect_clean([&] { (void)data::open_cifar(fuzz::scratch().string(), false, false, "cifar10"); });
  return 0;
}
