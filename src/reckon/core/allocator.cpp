#include "reckon/core/allocator.h"

#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define RECKON_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RECKON_ASAN 1
#endif
#endif
#ifdef RECKON_ASAN
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "reckon/core/error.h"

namespace reckon {

void MemoryTracker::bump_peak_locked() {
  for (int i = 0; i < kNumTags; ++i)
    if (s_.live_bytes[i] > s_.peak_bytes[i]) s_.peak_bytes[i] = s_.live_bytes[i];
  if (s_.live_total_bytes > s_.peak_total_bytes) {
    s_.peak_total_bytes = s_.live_total_bytes;
    s_.at_peak_bytes = s_.live_bytes;
  }
}

void MemoryTracker::on_alloc(Tag t, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  s_.live_bytes[int(t)] += bytes;
  s_.live_total_bytes += bytes;
  s_.num_allocs++;
  bump_peak_locked();
  if (timeline_on_) events_.push_back({MemEvent::alloc, t, t, bytes, s_.live_total_bytes});
}

void MemoryTracker::on_free(Tag t, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  s_.live_bytes[int(t)] -= bytes;
  s_.live_total_bytes -= bytes;
  if (timeline_on_) events_.push_back({MemEvent::free, t, t, bytes, s_.live_total_bytes});
}

void MemoryTracker::on_retag(Tag from, Tag to, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  s_.live_bytes[int(from)] -= bytes;
  s_.live_bytes[int(to)] += bytes;
  bump_peak_locked();
  if (timeline_on_) events_.push_back({MemEvent::retag, to, from, bytes, s_.live_total_bytes});
}

MemStats MemoryTracker::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return s_;
}

void MemoryTracker::reset_peak() {
  std::lock_guard<std::mutex> g(mu_);
  s_.peak_bytes = s_.live_bytes;
  s_.at_peak_bytes = s_.live_bytes;
  s_.peak_total_bytes = s_.live_total_bytes;
  events_.clear();
}

void MemoryTracker::set_timeline(bool on) {
  std::lock_guard<std::mutex> g(mu_);
  timeline_on_ = on;
}

std::vector<MemEvent> MemoryTracker::timeline() const {
  std::lock_guard<std::mutex> g(mu_);
  return events_;
}

MemoryTracker& tracker(Device d) {
  static MemoryTracker trackers[3];
  return trackers[int(d)];
}

namespace {
thread_local Tag t_current_tag = Tag::temporary;
}

Tag current_tag() { return t_current_tag; }
TagGuard::TagGuard(Tag t) : prev_(t_current_tag) { t_current_tag = t; }
TagGuard::~TagGuard() { t_current_tag = prev_; }

// Host blocks are kept for reuse when freed: big ones (64 KiB and more) in size classes of a
// quarter power of two (at most 25% rounding), small ones in 64-byte classes. A fresh
// multi-megabyte block costs a page fault per 4 KiB on first touch, which measured at 8 ms of a
// 50 ms convolution; reuse is what every framework's allocator does. The cache is bounded
// (kCacheMaxBytes) and its bytes are not live in the accounts: they belong to no tensor.
//
// The same cache runs on the meta device, where its blocks hold no memory: what a process
// keeps resident is then predicted by the code that keeps it (ledger/process.h). So that what
// is resident is known:
// - big blocks are mapped from the system directly (mmap), not through malloc: resident are
//   the pages a block's largest request reached (a block's pages are touched when its tensor
//   is written; the tail of its size class never is), and nothing once it is unmapped.
//   (malloc's mmap threshold moves with what other code frees, so the same step's resident
//   size depended on history.)
// - small blocks come from malloc and are kept too: handed back, they let malloc trim its heap
//   and fault the pages in again next step (lenet5: 4 page faults a step, where none is needed).
namespace {
constexpr size_t kBigBytes = 64 << 10;
constexpr size_t kCacheMaxBytes = size_t(4) << 30;
constexpr size_t kPage = 4096;
// A big request takes the smallest cached block of its class or less than this many times larger.
constexpr size_t kReuseRatio = 2;

size_t size_class(size_t bytes) {
  if (bytes < kBigBytes) return (bytes + 63) / 64 * 64;
  size_t p = size_t(1) << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  size_t q = p / 4;
  return (bytes + q - 1) / q * q;
}
size_t page_round(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

struct Block {
  void* p = nullptr;   // null on the meta device
  size_t cls = 0;      // its size class: what is mapped (or malloc'd)
  size_t touched = 0;  // bytes resident: the largest request's pages (a small block: all of it)
};

// Makes pages resident (writes them) without changing their contents (fresh pages are zero).
// Where the system cannot (out of memory), the pages are left to the kernel that writes them.
void populate_pages(char* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;
#endif
  std::memset(p, 0, n);  // kernels before 5.14
}

// Under AddressSanitizer a cached small block is poisoned until it is taken again, so that a
// use after free of a small tensor's memory is still reported, as it was when small blocks went
// back to malloc. (Big blocks were cached before and are not poisoned.)
#ifdef RECKON_ASAN
void poison(void* p, size_t n) {
  if (p) ASAN_POISON_MEMORY_REGION(p, n);
}
void unpoison(void* p, size_t n) {
  if (p) ASAN_UNPOISON_MEMORY_REGION(p, n);
}
#else
void poison(void*, size_t) {}
void unpoison(void*, size_t) {}
#endif

class HostCache {
 public:
  explicit HostCache(bool holds_memory) : holds_(holds_memory) {}

  // A block of at least `bytes` (> 0): a cached one, or a fresh one of the request's size class.
  // Null p on a real device means the system refused. `populate` (big blocks): the pages the
  // request reaches are made resident now, not when (and if) a kernel writes them.
  Block take(size_t bytes, bool populate) {
    const size_t cls = size_class(bytes);
    const bool big = cls >= kBigBytes;
    std::unique_lock<std::mutex> g(mu_);
    Block b;
    // Its own class first; a big one, else the smallest larger cached block less than
    // kReuseRatio times larger (of equal ones, the longest cached).
    auto it = free_.lower_bound(cls);
    if (it != free_.end() && (it->first == cls || (big && it->first < kReuseRatio * cls))) {
      b = it->second;
      free_.erase(it);
      cached_ -= b.cls;
      if (!big) unpoison(b.p, b.cls);
    } else if (big) {
      b.cls = cls;
      if (holds_) {
        void* p = mmap(nullptr, cls, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return b;
        b.p = p;
      }
      s_.mapped_bytes += int64_t(cls);
      s_.blocks++;
    } else {
      b.cls = b.touched = cls;
      if (holds_ && !(b.p = std::aligned_alloc(64, cls))) return b;
      s_.small_held_bytes += int64_t(cls);
    }
    size_t fresh_from = 0, fresh_bytes = 0;  // pages to populate, after the lock is let go
    if (big) {
      const size_t t = std::max(b.touched, page_round(bytes));
      if (populate && b.p && t > b.touched) fresh_from = b.touched, fresh_bytes = t - b.touched;
      s_.resident_bytes += int64_t(t - b.touched);
      b.touched = t;
    } else {
      s_.small_live_bytes += int64_t(b.cls);
    }
    s_.peak_resident_bytes = std::max(s_.peak_resident_bytes, s_.resident_bytes + s_.small_held_bytes);
    g.unlock();  // the block is the caller's now; other threads need not wait for its pages
    if (fresh_bytes > 0) populate_pages(static_cast<char*>(b.p) + fresh_from, fresh_bytes);
    return b;
  }
  void give(const Block& b) {
    std::lock_guard<std::mutex> g(mu_);
    if (b.cls < kBigBytes) s_.small_live_bytes -= int64_t(b.cls);
    if (cached_ + b.cls <= kCacheMaxBytes) {
      free_.emplace(b.cls, b);
      cached_ += b.cls;
      if (b.cls < kBigBytes) poison(b.p, b.cls);
      return;
    }
    drop_locked(b);
  }
  HostMemory stats() {
    std::lock_guard<std::mutex> g(mu_);
    HostMemory m = s_;
    m.cached_bytes = int64_t(cached_);
    return m;
  }
  // Every cached block back to the system; the peak window starts again from what is held.
  // Hands the cached blocks back; a new peak window from what is live when restart_peak.
  void trim(bool restart_peak) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [c, b] : free_) drop_locked(b);
    free_.clear();
    cached_ = 0;
    if (restart_peak) s_.peak_resident_bytes = s_.resident_bytes + s_.small_held_bytes;
  }

 private:
  void drop_locked(const Block& b) {
    if (b.cls < kBigBytes) {
      unpoison(b.p, b.cls);
      std::free(b.p);
      s_.small_held_bytes -= int64_t(b.cls);
      return;
    }
    if (b.p) munmap(b.p, b.cls);
    s_.mapped_bytes -= int64_t(b.cls);
    s_.resident_bytes -= int64_t(b.touched);
    s_.blocks--;
  }
  const bool holds_;
  std::mutex mu_;
  std::multimap<size_t, Block> free_;
  size_t cached_ = 0;
  HostMemory s_;
};

HostCache& host_cache(Device d) {
  // never destroyed: storages may outlive statics
  static HostCache* cpu = new HostCache(true);
  static HostCache* meta = new HostCache(false);
  return d == Device::cpu ? *cpu : *meta;
}
}  // namespace

void host_memory_restart(Device d) {
  RK_CHECK(d != Device::cuda, "[alloc] host_memory_restart: the cuda device holds no host blocks");
  host_cache(d).trim(true);
}
void host_memory_trim(Device d) {
  RK_CHECK(d != Device::cuda, "[alloc] host_memory_trim: the cuda device holds no host blocks");
  host_cache(d).trim(false);
}
HostMemory host_memory(Device d) {
  RK_CHECK(d != Device::cuda, "[alloc] host_memory: the cuda device holds no host blocks");
  return host_cache(d).stats();
}

Storage::Storage(Device d, int64_t bytes, Tag t) : bytes_(bytes), device_(d), tag_(t) {
  RK_CHECK(bytes >= 0, "[alloc] negative size {}", bytes);
  RK_CHECK(d != Device::cuda, "[alloc] this build has no cuda device");
  if (bytes > 0) {
    // A kernel's workspace (oneDNN's scratchpad) is sized for its worst case and often only
    // partly written (resnet18_cifar's layer4: 117 MiB asked, 73 written), and how much depends
    // on the kernel's insides, which the meta device cannot see: its pages are made resident
    // when it is taken, so that what the process holds is what was asked.
    const Block b = host_cache(d).take(size_t(bytes), t == Tag::workspace);
    RK_CHECK(d != Device::cpu || b.p != nullptr, "[alloc] out of host memory allocating {} bytes ({})", bytes,
             tag_name(t));
    data_ = b.p;
    block_bytes_ = b.cls;
    touched_ = b.touched;
  }
  tracker(d).on_alloc(t, bytes);
}

Storage::Storage(Device d, void* data, int64_t bytes, Tag t, std::function<void()> release)
    : data_(data), bytes_(bytes), device_(d), tag_(t), release_(std::move(release)) {
  RK_CHECK(d == Device::cpu, "[alloc] borrowed memory must be host memory, not {}", device_name(d));
  RK_CHECK(bytes >= 0 && (data != nullptr || bytes == 0), "[alloc] borrowed block of {} bytes at {}", bytes, data);
  RK_CHECK(bool(release_), "[alloc] a borrowed block needs a release");
  tracker(d).on_alloc(t, bytes);
}

Storage::~Storage() {
  tracker(device_).on_free(tag_, bytes_);
  if (release_) {
    release_();
  } else if (bytes_ > 0) {
    host_cache(device_).give(Block{data_, block_bytes_, touched_});
  }
}

void Storage::retag(Tag t) {
  if (t == tag_) return;
  tracker(device_).on_retag(tag_, t, bytes_);
  tag_ = t;
}

void Storage::add_saved_ref() {
  if (saved_refs_++ == 0 && tag_ == Tag::temporary) retag(Tag::activation);
}

void Storage::drop_saved_ref() {
  if (--saved_refs_ == 0 && tag_ == Tag::activation) retag(Tag::temporary);
}

}  // namespace reckon
