// The loader's threads (issue 14): its producer thread against the thread that consumes,
// allocates and frees at the same time, stops, restarts, moves and destroys it at every point of
// an epoch, and several loaders sharing one dataset on threads of their own. Each test checks the
// numbers (the same batches as a synchronous loader) and the allocator's accounts (every byte the
// producer allocated is given back), so it means something in the ordinary build; the TSan build
// (`make tsan`, in CI) runs this file alone against the core and data layers compiled with
// -fsanitize=thread, where any data race between the threads fails it.
//
// Only core/ and data/ are included: that is all the TSan binary compiles.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "reckon/core/allocator.h"
#include "reckon/core/error.h"
#include "reckon/core/tensor.h"
#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"

using namespace reckon;
using namespace reckon::data;

namespace {

// Sample i is a (1, 3, 4) image whose values encode i, labels i % 5; sample fail_at throws.
// Every get() spins a little, unevenly, so the producer is caught at different points.
class SlowCountingDataset : public Dataset {
 public:
  explicit SlowCountingDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 3, 4}; }
  int64_t num_classes() const override { return 5; }
  std::string name() const override { return "slow-counting"; }
  void get(int64_t i, float* x, int64_t* y) const override {
    if (i == fail_at_) throw Error(fmt::format("[slow-counting] sample {} is broken", i));
    volatile int64_t spin = 0;
    for (int64_t k = 0; k < 200 * (i % 7); ++k) spin = spin + k;
    for (int j = 0; j < 12; ++j) x[j] = float(i) + 0.01f * float(j);
    *y = i % 5;
  }

 private:
  int64_t n_, fail_at_;
};

using Epoch = std::vector<std::vector<float>>;  // one entry per batch: x, then y as floats

std::vector<float> flat(const Batch& b) {
  std::vector<float> v(b.x.data<float>(), b.x.data<float>() + b.x.numel());
  for (int64_t j = 0; j < b.y.numel(); ++j) v.push_back(float(b.y.data<int64_t>()[j]));
  v.push_back(float(b.index));
  return v;
}

// Batches k.. of the epoch; between batches the consumer allocates, writes and frees, as a
// training step does while the producer works.
Epoch drain(Loader& l, int64_t max_batches = -1) {
  Epoch e;
  Batch b;
  while ((max_batches < 0 || int64_t(e.size()) < max_batches) && l.next(b)) {
    e.push_back(flat(b));
    TagGuard g(Tag::activation);
    Tensor scratch = Tensor::empty({int64_t(64 + 13 * e.size())});
    float* p = scratch.data<float>();
    for (int64_t j = 0; j < scratch.numel(); ++j) p[j] = float(j);
  }
  return e;
}

LoaderOptions options(int prefetch) {
  LoaderOptions o;
  o.batch = 3;
  o.seed = 7;
  o.prefetch = prefetch;
  o.normalize = {{0.25f}, {0.5f}};
  o.augment = {.crop_padding = 1, .hflip = true};
  return o;
}

int64_t live_bytes(Tag t) { return tracker(Device::cpu).stats().live_bytes[size_t(t)]; }

TEST(LoaderThreads, PrefetchedEpochsEqualSynchronousOnesWhileTheConsumerAllocates) {
  SlowCountingDataset ds(40);
  const int64_t input_before = live_bytes(Tag::input), activation_before = live_bytes(Tag::activation);
  std::vector<Epoch> ref;
  {
    Loader sync(ds, options(0));
    for (int64_t e = 0; e < 3; ++e) {
      sync.start_epoch(e);
      ref.push_back(drain(sync));
    }
    ASSERT_EQ(ref[0].size(), 14u);
    ASSERT_NE(ref[0], ref[1]);
  }
  for (int prefetch : {1, 2, 5, 20}) {
    Loader l(ds, options(prefetch));
    for (int64_t e = 0; e < 3; ++e) {
      l.start_epoch(e);
      EXPECT_EQ(drain(l), ref[size_t(e)]) << "prefetch " << prefetch << " epoch " << e;
    }
  }
  // Every batch the producer thread allocated under `input` was freed on this one.
  EXPECT_EQ(live_bytes(Tag::input), input_before);
  EXPECT_EQ(live_bytes(Tag::activation), activation_before);
}

TEST(LoaderThreads, RestartsMovesAndDestructionsAtEveryPointOfAnEpoch) {
  SlowCountingDataset ds(25);
  const int64_t input_before = live_bytes(Tag::input);
  Epoch e1;
  {
    Loader sync(ds, options(0));
    sync.start_epoch(1);
    e1 = drain(sync);
  }
  const int64_t n = int64_t(e1.size());
  for (int prefetch : {1, 3}) {
    for (int64_t k = 0; k <= n; ++k) {
      // Stopped after k batches by a new epoch: the new one is whole and right.
      Loader l(ds, options(prefetch));
      l.start_epoch(0);
      drain(l, k);
      l.start_epoch(1);
      EXPECT_EQ(drain(l), e1) << "prefetch " << prefetch << " restarted after " << k;
      // Moved after k batches: the new owner carries on with batch k.
      l.start_epoch(1);
      Epoch head = drain(l, k);
      Loader moved = std::move(l);
      Epoch tail = drain(moved);
      head.insert(head.end(), tail.begin(), tail.end());
      EXPECT_EQ(head, e1) << "prefetch " << prefetch << " moved after " << k;
      // Resumed at batch k.
      moved.start_epoch(1, k);
      EXPECT_EQ(drain(moved), Epoch(e1.begin() + k, e1.end())) << "prefetch " << prefetch << " resumed at " << k;
      // Destroyed after k batches, with the producer blocked on a full queue or still working.
      {
        Loader d(ds, options(prefetch));
        d.start_epoch(1);
        drain(d, k);
      }
      // Assigned over after k batches: the old producer stops before the new loader runs.
      moved.start_epoch(0);
      drain(moved, k);
      moved = Loader(ds, options(prefetch));
      moved.start_epoch(1);
      EXPECT_EQ(drain(moved), e1);
    }
  }
  EXPECT_EQ(live_bytes(Tag::input), input_before);
}

TEST(LoaderThreads, AnErrorOnTheProducerThreadReachesTheConsumerOnce) {
  for (int prefetch : {1, 2, 6}) {
    for (int round = 0; round < 10; ++round) {
      SlowCountingDataset ds(30, /*fail_at=*/17);
      LoaderOptions o = options(prefetch);
      o.shuffle = false;
      Loader l(ds, o);
      l.start_epoch(0);
      Batch b;
      int64_t good = 0;
      std::string msg;
      try {
        while (l.next(b)) ++good;
      } catch (const Error& e) {
        msg = e.what();
      }
      EXPECT_EQ(good, 5) << "prefetch " << prefetch;  // batches 0..4; batch 5 holds sample 17
      EXPECT_EQ(msg, "[slow-counting] sample 17 is broken");
      EXPECT_FALSE(l.next(b));
      // Started again with the error still queued, or past it: no stale batch, no second throw.
      l.start_epoch(0, 6);
      Epoch rest = drain(l);
      ASSERT_EQ(rest.size(), 4u);
      EXPECT_EQ(rest.front().back(), 6.0f);  // the batch index
      if (round % 2) {  // and destroyed with an error waiting in its queue
        l.start_epoch(0, 5);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
}

TEST(LoaderThreads, LoadersOnSeveralThreadsShareOneDataset) {
  SlowCountingDataset ds(61);
  const int64_t world = 3;
  std::vector<Epoch> alone(world), together(world);
  for (int64_t r = 0; r < world; ++r) {
    LoaderOptions o = options(0);
    o.rank = r, o.world = world;
    Loader l(ds, o);
    l.start_epoch(2);
    alone[size_t(r)] = drain(l);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        LoaderOptions o = options(int(r) + 1);
        o.rank = r, o.world = world;
        Loader l(ds, o);
        for (int64_t e = 0; e < 3; ++e) {
          l.start_epoch(e);
          Epoch got = drain(l);
          if (e == 2) together[size_t(r)] = std::move(got);
        }
      } catch (...) {
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int64_t r = 0; r < world; ++r) EXPECT_EQ(together[size_t(r)], alone[size_t(r)]) << "rank " << r;
}

}  // namespace
