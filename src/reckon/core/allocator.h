// The tagged allocator: every byte reckon holds is allocated here with one tag, and the
// tracker's live/peak accounts per tag are the memory ledger. The meta device allocates
// nothing but keeps the very same accounts, so a prediction is the training code run dry.
// Host blocks of 64 KiB and more are reused through a bounded size-class cache (allocator.cpp).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/core/dtype.h"

namespace reckon {

enum class Tag : uint8_t { input, param, grad, optimizer, activation, temporary, workspace };
constexpr int kNumTags = 7;

constexpr std::string_view tag_name(Tag t) {
  constexpr std::string_view names[] = {"input",      "param",     "grad",     "optimizer",
                                        "activation", "temporary", "workspace"};
  return names[int(t)];
}

// One entry of the memory timeline.
struct MemEvent {
  enum Kind : uint8_t { alloc, free, retag } kind;
  Tag tag;        // for retag: the new tag
  Tag from;       // for retag: the old tag
  int64_t bytes;
  int64_t live_total_bytes;  // after the event
};

// Accounts of one device. All figures in bytes.
struct MemStats {
  std::array<int64_t, kNumTags> live_bytes{};
  std::array<int64_t, kNumTags> peak_bytes{};       // per-tag peak, each at its own moment
  std::array<int64_t, kNumTags> at_peak_bytes{};    // per-tag live at the moment of total peak
  int64_t live_total_bytes = 0;
  int64_t peak_total_bytes = 0;
  int64_t num_allocs = 0;
};

class MemoryTracker {
 public:
  void on_alloc(Tag t, int64_t bytes);
  void on_free(Tag t, int64_t bytes);
  void on_retag(Tag from, Tag to, int64_t bytes);
  MemStats stats() const;
  // Starts a new peak window: peaks become the current live figures; the timeline is cleared.
  void reset_peak();
  void set_timeline(bool on);
  std::vector<MemEvent> timeline() const;

 private:
  void bump_peak_locked();
  mutable std::mutex mu_;
  MemStats s_;
  bool timeline_on_ = false;
  std::vector<MemEvent> events_;
};

MemoryTracker& tracker(Device d);

// What the allocator holds from the system on a host device (cpu), or would hold (meta: the
// same cache run on sizes alone). Bytes.
struct HostMemory {
  int64_t mapped_bytes = 0;         // big blocks (>= 64 KiB) mapped: live and cached, by size class
  int64_t resident_bytes = 0;       // of those, the pages requests reached: what the OS counts
  int64_t cached_bytes = 0;         // blocks freed and kept for reuse, big and small
  int64_t blocks = 0;               // big blocks mapped
  int64_t small_live_bytes = 0;     // small blocks (from malloc) live
  int64_t small_held_bytes = 0;     // small blocks held: live and cached
  int64_t peak_resident_bytes = 0;  // peak of resident + small held: the allocator's share of VmHWM
};
HostMemory host_memory(Device d);
// Hands the cached blocks back to the system and starts a new peak window from what is live:
// the meta device's figures are then those of a process that holds only the live storages.
void host_memory_restart(Device d);
// Hands the cached blocks back to the system, the peak window kept: what a run calls between
// phases whose blocks differ in size (training steps, then an evaluation at another batch), so
// that the process holds the larger phase's blocks, not both (the cache cannot give one phase's
// blocks to the other's requests).
void host_memory_trim(Device d);

// The tag given to allocations made on this thread while the guard lives (default: temporary).
Tag current_tag();
class TagGuard {
 public:
  explicit TagGuard(Tag t);
  ~TagGuard();
  TagGuard(const TagGuard&) = delete;
  TagGuard& operator=(const TagGuard&) = delete;

 private:
  Tag prev_;
};

// A block of device memory with one tag. data is null on the meta device.
// saved_refs counts the autograd nodes that keep it alive for backward; while it is > 0 a
// temporary block is accounted as an activation.
class Storage {
 public:
  Storage(Device d, int64_t bytes, Tag t);
  // A host block that borrows memory another library owns (a numpy array's, a torch tensor's:
  // the Python package's zero-copy exchange). It is accounted under its tag like any other;
  // `release` runs instead of a free when the last handle goes (it drops the owner's reference).
  // requires: d is cpu, data non-null unless bytes is 0, release callable.
  Storage(Device d, void* data, int64_t bytes, Tag t, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  Tag tag() const { return tag_; }
  void retag(Tag t);
  void add_saved_ref();
  void drop_saved_ref();

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Device device_;
  Tag tag_;
  int saved_refs_ = 0;
  size_t block_bytes_ = 0;  // a big block: its size (a size class, at least the request's)
  size_t touched_ = 0;      // a big block's resident bytes (the allocator's cache records them)
  std::function<void()> release_;  // borrowed memory: how to hand it back (empty: ours)
};

}  // namespace reckon
