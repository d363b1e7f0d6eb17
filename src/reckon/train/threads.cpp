// Fewer threads while other processes hold cores (threads.h).
#include "reckon/train/threads.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "reckon/core/cpu_load.h"

namespace reckon::train {

int threads_for_load(int max, double others_cores) {
  if (!(others_cores >= 0)) return max;
  const int held = int(std::floor(others_cores + 0.6));
  return std::clamp(max - held, 1, std::max(1, max));
}

bool threads_adapt(int requested) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  return requested == 0 && (env == nullptr || *env == '\0');
}

ThreadGovernor::ThreadGovernor(int max, double interval_s)
    : max_(std::max(1, max)), threads_(max_), interval_s_(interval_s), t0_(std::chrono::steady_clock::now()),
      stat0_(read_proc_stat()), self0_(self_cpu_seconds()), cpus_(affinity_cpus()) {}

bool ThreadGovernor::tick() {
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - t0_).count() < interval_s_) return false;
  std::string stat = read_proc_stat();
  const double self = self_cpu_seconds();
  const double others = others_busy_cores(stat0_, stat, self - self0_, cpus_);
  t0_ = now;
  stat0_ = std::move(stat);
  self0_ = self;
  return update(others);
}

bool ThreadGovernor::update(double others_cores) {
  others_ = others_cores;
  const int want = threads_for_load(max_, others_);
  int next = threads_;
  if (want > threads_) {
    next = want;
    lower_asked_ = 0;
  } else if (want < threads_) {
    if (lower_asked_ > 0) next = std::max(want, lower_asked_);
    lower_asked_ = next == threads_ ? want : 0;
  } else {
    lower_asked_ = 0;
  }
  if (next == threads_) return false;
  threads_ = next;
  omp_set_num_threads(threads_);
  return true;
}

}  // namespace reckon::train
