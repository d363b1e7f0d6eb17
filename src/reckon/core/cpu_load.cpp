// /proc/stat, getrusage and the affinity mask (cpu_load.h).
#include "reckon/core/cpu_load.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace reckon {

std::string read_proc_stat() {
  std::ifstream f("/proc/stat");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double self_cpu_seconds() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::optional<StatTicks> stat_ticks(const std::string& text, const std::vector<int>& cpus) {
  std::istringstream in(text);
  std::string line;
  StatTicks t;
  int listed = 0;  // "cpuN" lines (the aggregate line's cpus)
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    std::istringstream l(line);
    std::string name;
    l >> name;
    const bool numbered = name.size() >= 4 && name.size() <= 9 &&
                          std::all_of(name.begin() + 3, name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (cpus.empty()) {
      if (numbered) ++listed;
      if (name != "cpu") continue;
    } else {
      if (!numbered || std::find(cpus.begin(), cpus.end(), std::stoi(name.substr(3))) == cpus.end()) continue;
    }
    double f[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // user nice system idle iowait irq softirq steal
    int k = 0;
    while (k < 8 && l >> f[k]) ++k;
    if (k < 4) continue;
    t.busy += f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
    t.total += f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
    ++t.cpus;
  }
  if (t.cpus == 0) return std::nullopt;
  if (cpus.empty()) t.cpus = std::max(1, listed);
  return t;
}

double others_busy_cores(const std::string& stat_before, const std::string& stat_after, double self_cpu_s,
                         const std::vector<int>& cpus) {
  const auto a = stat_ticks(stat_before, cpus), b = stat_ticks(stat_after, cpus);
  if (!a || !b) return -1;
  const double tick = double(std::max(1L, sysconf(_SC_CLK_TCK)));
  const double busy = (b->busy - a->busy) / tick, wall = (b->total - a->total) / tick / b->cpus;
  if (!(wall > 0)) return -1;
  return std::max(0.0, (busy - self_cpu_s) / wall);
}

}  // namespace reckon
