#include "reckon/core/allocator.h"

#include <cstdlib>

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

Storage::Storage(Device d, int64_t bytes, Tag t) : bytes_(bytes), device_(d), tag_(t) {
  RK_CHECK(bytes >= 0, "[alloc] negative size {}", bytes);
  if (d == Device::cpu && bytes > 0) {
    size_t rounded = (size_t(bytes) + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    RK_CHECK(data_ != nullptr, "[alloc] out of host memory allocating {} bytes ({})", bytes,
             tag_name(t));
  }
  RK_CHECK(d != Device::cuda, "[alloc] this build has no cuda device");
  tracker(d).on_alloc(t, bytes);
}

Storage::~Storage() {
  tracker(device_).on_free(tag_, bytes_);
  std::free(data_);
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
