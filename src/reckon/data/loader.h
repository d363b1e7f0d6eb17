// The loader: turns a Dataset into batches for one epoch at a time — a seeded shuffle, a
// shard for this rank, batching (optionally dropping the last partial batch), augmentation
// (random crop with zero padding, horizontal flip) and per-channel normalisation — with a
// background thread preparing the next batches while the trainer computes.
//
// Every random choice is a pure function of (seed, epoch, sample index) (data/random.h), so
// start_epoch(e, k) yields exactly the batches k.. of an uninterrupted epoch e, and prefetch
// on or off changes nothing about the numbers.
// Not here: multi-threaded decoding (the data sets are in memory as u8; one thread converting
// them keeps far ahead of a training step), and padding shards to equal length.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/data/dataset.h"

namespace reckon::data {

struct Batch {
  Tensor x;           // (B, C, H, W) f32, allocated under TagGuard(Tag::input)
  Tensor y;           // (B) i64, the same tag
  int64_t index = 0;  // batch number in the epoch (counting skipped ones)
};

struct Normalize {
  std::vector<float> mean = {}, std = {};  // per channel; both empty = none. x = (x - mean[c]) / std[c]
};

struct Augment {
  int64_t crop_padding = 0;  // random crop of (H, W) from the image padded with p zeros per side
  bool hflip = false;        // horizontal flip with probability 1/2 (after the crop)
};

struct LoaderOptions {
  int64_t batch = 64;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  Normalize normalize = {};
  Augment augment = {};
  int prefetch = 2;  // batches prepared ahead by a background thread (0 = synchronous)
  // Sampler shard: this process sees the positions p of the (shuffled) epoch order with
  // p % world == rank. The ranks together see every sample exactly once per epoch; when the
  // dataset size is not a multiple of world, low ranks get one sample more.
  int64_t rank = 0, world = 1;
};

// The augmentation drawn for one sample: crop offsets in [0, 2p] into the padded image (p, p
// is the centre, i.e. no shift) and whether to flip.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t index, const Augment& a);

// The order of epoch e over [0, n): the identity when !shuffle, else a Fisher-Yates
// permutation drawn from (seed, epoch) alone.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

class Loader {
 public:
  // requires: ds outlives the loader; batch >= 1; world >= 1 and 0 <= rank < world;
  //           prefetch >= 0; crop_padding >= 0; normalize.mean/std empty or one per channel
  //           with std > 0. Throws reckon::Error naming the bad option otherwise.
  Loader(const Dataset& ds, LoaderOptions o);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  // Moving keeps the epoch in progress (the producer works on state that does not move); a
  // moved-from loader may only be destroyed or assigned to.
  Loader(Loader&&) noexcept;
  Loader& operator=(Loader&&) noexcept;

  int64_t num_batches() const;  // per epoch, for this rank
  int64_t num_samples() const;  // per epoch, for this rank (after drop_last)
  const LoaderOptions& options() const;
  const Dataset& dataset() const;

  // Starts epoch `epoch` (>= 0) at batch skip_batches (0 <= skip <= num_batches()); stops and
  // discards the batches a previous epoch had prepared. The order depends only on (seed, epoch).
  void start_epoch(int64_t epoch, int64_t skip_batches = 0);
  // The next batch of the epoch; false at its end. Rethrows what the producer thread threw
  // (e.g. a dataset error), after which the epoch is over (next() returns false). Calling
  // next() before any start_epoch() starts epoch 0.
  bool next(Batch& b);

  // This rank's dataset indices of epoch e, in batch order (what next() will visit).
  std::vector<int64_t> epoch_indices(int64_t epoch) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace reckon::data
