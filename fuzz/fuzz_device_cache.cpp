// The calibration cache (devices.json) that ledger, plan and train --max-memory read: any bytes
// give either a sound entry or none (and a recalibration), never an error or a crash.
#include <cstdlib>

#include "fuzz_util.h"
#include "reckon/ledger/devices.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  static const bool env = ::setenv("RECKON_CACHE_DIR", fuzz::scratch().c_str(), 1) == 0;
  (void)env;
  fuzz::put("devices.json", data, size);
  try {
    if (auto d = cached_cpu_spec()) {
      if (!(d->fp32_flops > 0 && d->bandwidth_bytes > 0)) std::abort();  // an entry is sound or absent
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: reading the device cache threw: %s\n", e.what());
    std::abort();
  }
  return 0;
}
