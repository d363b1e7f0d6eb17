// The loader (see loader.h). One producer thread per loader fills a bounded queue with whole
// batches; the consumer (next()) takes them in order. All randomness is counter-based, so the
// producer and the synchronous path compute the same batch b from (seed, epoch, b) alone.
#include "reckon/data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "reckon/data/random.h"

namespace reckon::data {

namespace {
constexpr uint64_t kShuffleDomain = 0x5f3759df0badc0deull;
constexpr uint64_t kAugmentDomain = 0xa0761d6478bd642full;
}  // namespace

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (!shuffle) return order;
  // Fisher-Yates; draw j is splitmix64's output at position j of the stream keyed by (seed, epoch).
  const uint64_t key = hash64(seed ^ kShuffleDomain, uint64_t(epoch));
  for (int64_t j = n - 1; j > 0; --j) {
    const uint64_t r = mix64(key + uint64_t(j) * 0x9e3779b97f4a7c15ull);
    std::swap(order[size_t(j)], order[size_t(bounded(r, uint64_t(j) + 1))]);
  }
  return order;
}

AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t index, const Augment& a) {
  AugmentDraw d;
  const uint64_t r1 = hash64(seed ^ kAugmentDomain, uint64_t(epoch), uint64_t(index));
  const uint64_t r2 = mix64(r1);
  if (a.crop_padding > 0) {
    d.dy = int64_t(bounded(r1, uint64_t(2 * a.crop_padding + 1)));
    d.dx = int64_t(bounded(r2, uint64_t(2 * a.crop_padding + 1)));
  }
  d.flip = a.hflip && (mix64(r2) >> 63) != 0;
  return d;
}

struct Loader::Impl {
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };

  const Dataset& ds;
  LoaderOptions o;
  int64_t c_n = 0, h = 0, w = 0, numel = 0, num_classes = 0;
  int64_t shard_count = 0;  // samples of this rank before drop_last
  int64_t samples = 0;      // per epoch, after drop_last
  int64_t batches = 0;
  bool augment = false;
  Tensor scratch;  // (C, H, W) f32, one sample before augmentation

  // The epoch in progress.
  bool started = false;
  int64_t epoch = 0;
  std::vector<int64_t> indices;  // read-only while the producer runs
  int64_t next_batch = 0;        // the batch next() hands out next

  // Prefetch.
  std::thread producer;
  std::mutex mu;
  std::condition_variable cv_items, cv_space;
  std::deque<Item> queue;
  bool stop = false;

  Impl(const Dataset& d, LoaderOptions opts) : ds(d), o(std::move(opts)) {
    RK_CHECK(o.batch >= 1, "[loader] batch must be >= 1 (got {})", o.batch);
    RK_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world,
             "[loader] rank {} is not in [0, world) with world {}", o.rank, o.world);
    RK_CHECK(o.prefetch >= 0, "[loader] prefetch must be >= 0 (got {})", o.prefetch);
    RK_CHECK(o.augment.crop_padding >= 0, "[loader] crop padding must be >= 0 (got {})", o.augment.crop_padding);
    const Shape s = ds.sample_shape();
    RK_CHECK(s.size() == 3, "[loader] dataset {} has sample shape {}, not (C, H, W)", ds.name(), shape_str(s));
    c_n = s[0], h = s[1], w = s[2], numel = shape_numel(s);
    num_classes = ds.num_classes();
    const auto& nm = o.normalize;
    RK_CHECK(nm.mean.size() == nm.std.size(), "[loader] normalize has {} means but {} stds", nm.mean.size(),
             nm.std.size());
    RK_CHECK(nm.mean.empty() || int64_t(nm.mean.size()) == c_n,
             "[loader] normalize has {} values per statistic but dataset {} has {} channels", nm.mean.size(),
             ds.name(), c_n);
    for (size_t c = 0; c < nm.std.size(); ++c)
      RK_CHECK(nm.std[c] > 0, "[loader] normalize std of channel {} is {} (must be > 0)", c, nm.std[c]);

    const int64_t n = ds.size(), world = o.world, rank = o.rank;
    // Divisions rounded up without adding divisor - 1, which overflows for a batch (or world)
    // near INT64_MAX (UBSan found it behind `train --batch 99999999999999999999`).
    auto ceil_div = [](int64_t a, int64_t b) { return a / b + (a % b != 0); };
    shard_count = n > rank ? ceil_div(n - rank, world) : 0;
    batches = o.drop_last ? shard_count / o.batch : ceil_div(shard_count, o.batch);
    samples = o.drop_last ? batches * o.batch : shard_count;
    augment = o.augment.crop_padding > 0 || o.augment.hflip;
    if (augment) {
      TagGuard g(Tag::input);
      scratch = Tensor::empty({numel});
    }
  }

  ~Impl() { stop_producer(); }

  std::vector<int64_t> epoch_indices(int64_t e) const {
    std::vector<int64_t> order = epoch_order(ds.size(), o.seed, e, o.shuffle);
    std::vector<int64_t> mine;
    mine.reserve(size_t(shard_count));
    for (int64_t p = o.rank; p < int64_t(order.size()); p += o.world) mine.push_back(order[size_t(p)]);
    mine.resize(size_t(samples));
    return mine;
  }

  // Crop (from the image padded with p zeros per side) and flip: src -> dst, both (C, H, W).
  void apply_augment(const AugmentDraw& d, const float* src, float* dst) const {
    const int64_t p = o.augment.crop_padding;
    for (int64_t c = 0; c < c_n; ++c) {
      const float* s = src + c * h * w;
      float* t = dst + c * h * w;
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sy = y + d.dy - p;
        float* row = t + y * w;
        if (sy < 0 || sy >= h) {
          std::fill(row, row + w, 0.0f);
          continue;
        }
        const float* srow = s + sy * w;
        for (int64_t x = 0; x < w; ++x) {
          const int64_t sx = (d.flip ? w - 1 - x : x) + d.dx - p;
          row[x] = sx >= 0 && sx < w ? srow[sx] : 0.0f;
        }
      }
    }
  }

  // Batch b of the current epoch. Allocates with the calling thread's tag (input, by the callers).
  Batch make_batch(int64_t b) const {
    const int64_t begin = b * o.batch, end = std::min(begin + o.batch, samples);
    const int64_t bs = end - begin;
    Batch out;
    out.index = b;
    out.x = Tensor::empty({bs, c_n, h, w});
    out.y = Tensor::empty({bs}, DType::i64);
    float* x = out.x.data<float>();
    int64_t* y = out.y.data<int64_t>();
    const bool normalize = !o.normalize.mean.empty();
    const int64_t hw = h * w;
    for (int64_t j = 0; j < bs; ++j) {
      const int64_t idx = indices[size_t(begin + j)];
      float* dst = x + j * numel;
      if (augment) {
        float* tmp = scratch.data<float>();
        ds.get(idx, tmp, y + j);
        apply_augment(augment_draw(o.seed, epoch, idx, o.augment), tmp, dst);
      } else {
        ds.get(idx, dst, y + j);
      }
      RK_CHECK(y[j] >= 0 && y[j] < num_classes, "[loader] dataset {} gave label {} for sample {} ({} classes)",
               ds.name(), y[j], idx, num_classes);
      if (normalize)
        for (int64_t c = 0; c < c_n; ++c) {
          const float m = o.normalize.mean[size_t(c)], sd = o.normalize.std[size_t(c)];
          float* plane = dst + c * hw;
          for (int64_t k = 0; k < hw; ++k) plane[k] = (plane[k] - m) / sd;  // as torchvision: sub, then div
        }
    }
    return out;
  }

  void produce(int64_t from) {
    TagGuard g(Tag::input);  // the tag is per thread: the batches of this thread are input
    std::exception_ptr error;
    try {
      for (int64_t b = from; b < batches; ++b) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv_space.wait(lk, [&] { return stop || int64_t(queue.size()) < o.prefetch; });
          if (stop) return;
        }
        Item item{make_batch(b), nullptr};
        {
          std::lock_guard<std::mutex> lk(mu);
          if (stop) return;
          queue.push_back(std::move(item));
        }
        cv_items.notify_one();
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (!error) return;
    // Published after the handler has ended and moved, so this thread touches the exception
    // no more once the consumer can see it.
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back(Item{Batch{}, std::move(error)});
    }
    cv_items.notify_one();
  }

  void stop_producer() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv_space.notify_all();
    if (producer.joinable()) producer.join();
    queue.clear();
    stop = false;
  }

  void start_epoch(int64_t e, int64_t skip) {
    RK_CHECK(e >= 0, "[loader] epoch must be >= 0 (got {})", e);
    RK_CHECK(skip >= 0 && skip <= batches, "[loader] cannot skip {} batches of an epoch of {}", skip, batches);
    stop_producer();
    epoch = e;
    indices = epoch_indices(e);
    next_batch = skip;
    started = true;
    if (o.prefetch > 0 && skip < batches) producer = std::thread(&Impl::produce, this, skip);
  }

  bool next(Batch& out) {
    if (!started) start_epoch(0, 0);
    if (next_batch >= batches) return false;
    if (o.prefetch == 0) {
      TagGuard g(Tag::input);
      try {
        out = make_batch(next_batch);
      } catch (...) {
        next_batch = batches;  // as with prefetch: the epoch ends with the error
        throw;
      }
      ++next_batch;
      return true;
    }
    Item item;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv_items.wait(lk, [&] { return !queue.empty(); });
      item = std::move(queue.front());
      queue.pop_front();
    }
    cv_space.notify_one();
    if (item.error) {
      next_batch = batches;  // the epoch ends with the error
      std::rethrow_exception(item.error);
    }
    out = std::move(item.batch);
    ++next_batch;
    return true;
  }
};

Loader::Loader(const Dataset& ds, LoaderOptions o) : impl_(std::make_unique<Impl>(ds, std::move(o))) {}
Loader::~Loader() = default;
Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&&) noexcept = default;
int64_t Loader::num_batches() const { return impl_->batches; }
int64_t Loader::num_samples() const { return impl_->samples; }
const LoaderOptions& Loader::options() const { return impl_->o; }
const Dataset& Loader::dataset() const { return impl_->ds; }
void Loader::start_epoch(int64_t epoch, int64_t skip_batches) { impl_->start_epoch(epoch, skip_batches); }
bool Loader::next(Batch& b) { return impl_->next(b); }
std::vector<int64_t> Loader::epoch_indices(int64_t epoch) const { return impl_->epoch_indices(epoch); }

}  // namespace reckon::data
