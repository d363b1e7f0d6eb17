// The calibration cache (devices.json) that ledger, plan and train --max-memory read: any bytes
// give either a sound entry or none (and a recalibration), never an error or a crash. Each input
// is read twice: as it is (an entry under another key or made by another reckon is not read), and
// where it is JSON with entries, with its first entry moved under this process's key and versions,
// so that mutated entries reach the reader's checks whatever cpu and build run the fuzzer.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "reckon/ledger/devices.h"

namespace {

void check_entry() {
  using namespace reckon;
  try {
    if (auto d = cached_cpu_spec()) {
      if (!(d->fp32_flops > 0 && d->bandwidth_bytes > 0 && d->bandwidth_bytes < 1e15)) std::abort();  // sound or absent
      // The bandwidth curve: at least two points, ascending, never faster for more bytes, ending at
      // the memory bandwidth; bandwidth_at stays within it.
      if (d->bandwidth_curve.size() < 2 || d->bandwidth_curve.back().second != d->bandwidth_bytes) std::abort();
      // The in-place curve (add_) likewise, with no tie to bandwidth_bytes.
      for (bool in_place : {false, true}) {
        const auto& c = in_place ? d->inplace_bandwidth_curve : d->bandwidth_curve;
        if (c.size() < 2) std::abort();
        for (size_t i = 1; i < c.size(); ++i)
          if (!(c[i].first > c[i - 1].first && c[i].second <= c[i - 1].second)) std::abort();
        for (double b : {0.0, c.front().first, 0.5 * (c.front().first + c.back().first), 1e30}) {
          const double bw = d->bandwidth_at(b, in_place);
          if (!(bw >= c.back().second * (1 - 1e-12) && bw <= c.front().second * (1 + 1e-12))) std::abort();
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: reading the device cache threw: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  static const bool env = ::setenv("RECKON_CACHE_DIR", fuzz::scratch().c_str(), 1) == 0;
  (void)env;
  fuzz::put("devices.json", data, size);
  check_entry();
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("cpus") || !j["cpus"].is_object() || j["cpus"].empty()) return 0;
  nlohmann::json entry = j["cpus"].begin().value();
  if (entry.is_object()) entry["versions"] = calibration_versions();
  j["cpus"] = nlohmann::json::object({{device_cache_key(), entry}});
  const std::string text = j.dump();
  fuzz::put("devices.json", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  check_entry();
  return 0;
}
