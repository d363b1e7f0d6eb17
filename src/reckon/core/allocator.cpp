#include "reckon/core/allocator.h"

#include <cstdlib>
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

// Host blocks of 64 KiB and more are kept for reuse when freed, in size classes of a
// quarter power of two (at most 25% rounding). A fresh multi-megabyte block costs a page
// fault per 4 KiB on first touch, which measured at 8 ms of a 50 ms convolution; reuse is
// what every framework's allocator does. The cache is bounded (kCacheMaxBytes) and its
// bytes are not live in the accounts: they belong to no tensor.
namespace {
constexpr size_t kCacheMinBytes = 64 << 10;
constexpr size_t kCacheMaxBytes = size_t(4) << 30;

size_t size_class(size_t bytes) {
  if (bytes < kCacheMinBytes) return (bytes + 63) / 64 * 64;
  size_t p = size_t(1) << (63 - __builtin_clzll(bytes));  // largest power of two <= bytes
  size_t q = p / 4;
  return (bytes + q - 1) / q * q;
}

class HostCache {
 public:
  void* get(size_t cls) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = free_.find(cls);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= cls;
    return p;
  }
  bool put(void* p, size_t cls) {
    std::lock_guard<std::mutex> g(mu_);
    if (cached_ + cls > kCacheMaxBytes) return false;
    free_.emplace(cls, p);
    cached_ += cls;
    return true;
  }
  size_t cached() {
    std::lock_guard<std::mutex> g(mu_);
    return cached_;
  }
  void release_all() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [c, p] : free_) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

HostCache& host_cache() {
  static HostCache* c = new HostCache;  // never destroyed: storages may outlive statics
  return *c;
}

void* host_alloc(size_t bytes) {
  size_t cls = size_class(bytes);
  if (cls >= kCacheMinBytes)
    if (void* p = host_cache().get(cls)) return p;
  return std::aligned_alloc(64, cls);
}

void host_free(void* p, size_t bytes) {
  if (!p) return;
  size_t cls = size_class(bytes);
  if (cls >= kCacheMinBytes && host_cache().put(p, cls)) return;
  std::free(p);
}
}  // namespace

int64_t host_cache_bytes() { return int64_t(host_cache().cached()); }
void host_cache_release() { host_cache().release_all(); }

Storage::Storage(Device d, int64_t bytes, Tag t) : bytes_(bytes), device_(d), tag_(t) {
  RK_CHECK(bytes >= 0, "[alloc] negative size {}", bytes);
  if (d == Device::cpu && bytes > 0) {
    data_ = host_alloc(size_t(bytes));
    RK_CHECK(data_ != nullptr, "[alloc] out of host memory allocating {} bytes ({})", bytes,
             tag_name(t));
  }
  RK_CHECK(d != Device::cuda, "[alloc] this build has no cuda device");
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
  } else {
    host_free(data_, size_t(bytes_));
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
