// The thread count of a training run on a shared machine. OpenMP's threads spin and wait for
// each other at every parallel region's end, so one thread that shares its core with another
// process holds the others up: with a busy process on one of two cores, resnet18_cifar's 2-thread
// step ran at 33% of its quiet speed here, a 1-thread step at 53% (docs/2026-12-05-threads.md). So with
// --threads 0 (and OMP_NUM_THREADS not set) a run measures, every second between steps, how many
// cores other processes took (core/cpu_load.h), and runs on the cores they leave free.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace reckon::train {

// The threads to use of `max` when other processes took `others_cores` cores' worth of time:
// max less the cores they hold, a core counted from 0.4 on (two of them competing for one core
// cost more than one thread less), at least 1. others_cores < 0 (not known): max.
int threads_for_load(int max, double others_cores);

// Whether a run with --threads `requested` adapts its count: 0 and OMP_NUM_THREADS not set.
bool threads_adapt(int requested);

class ThreadGovernor {
 public:
  // max: the count when the cores are free (the current OpenMP count). interval_s: seconds
  // between readings.
  explicit ThreadGovernor(int max, double interval_s = 1.0);
  // Between steps: when a reading is due, sets OpenMP's thread count for what it found. A lower
  // count is taken when two readings in a row asked for it (a short burst of another process
  // does not move it), a higher one at once. True when the count changed.
  bool tick();
  // The decision of a reading that found `others_cores` (tick() without the reading).
  bool update(double others_cores);
  int threads() const { return threads_; }
  int max() const { return max_; }
  // Other processes' cores at the last reading (-1: none yet, or not known).
  double others_cores() const { return others_; }

 private:
  int max_, threads_;
  double interval_s_;
  double others_ = -1;
  int lower_asked_ = 0;  // the lower count the previous reading asked for (0: none)
  std::chrono::steady_clock::time_point t0_;
  std::string stat0_;
  double self0_ = 0;
  std::vector<int> cpus_;
};

}  // namespace reckon::train
