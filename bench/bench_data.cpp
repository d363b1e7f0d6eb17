// The data loader: one epoch of Fashion-MNIST's training split in batches of 64 (shuffled,
// normalised), without and with the prefetch thread. A batch must come far faster than a
// training step (about 1.5 ms for lenet5 here); the aim is under 0.1 ms. This was a timed
// assertion in tests/test_data.cpp until a sanitizer build (make sanitize) ran it 10x slower:
// speed belongs here, the tests check what the batches hold.
#include <benchmark/benchmark.h>

#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"

namespace {

using namespace reckon;
using namespace reckon::data;

void BM_loader_fashion_mnist(benchmark::State& state) {
  static std::unique_ptr<Dataset> train = [] {
    try {
      return open_dataset("fashion-mnist", true);
    } catch (const Error&) {
      return std::unique_ptr<Dataset>{};
    }
  }();
  if (!train) {
    state.SkipWithError("fashion-mnist is not installed (apt-get install dataset-fashion-mnist)");
    return;
  }
  Loader l(*train, {.batch = 64, .shuffle = true, .seed = 1, .normalize = {{0.2860f}, {0.3530f}},
                    .prefetch = int(state.range(0))});
  int64_t batches = 0, epoch = 0;
  Batch b;
  for (auto _ : state) {
    l.start_epoch(epoch++);
    while (l.next(b)) ++batches;
  }
  state.counters["ms_per_batch"] =
      benchmark::Counter(double(batches) / 1000.0, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["images_per_s"] = benchmark::Counter(64.0 * double(batches), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_loader_fashion_mnist)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
