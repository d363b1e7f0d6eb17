// What else runs on this machine's cpus: /proc/stat's ticks, this process's own CPU time and the
// cpus it may run on. The cpu calibration (ledger/devices.h) uses it to mark a calibration made
// under load; a training run (train/threads.h) to use fewer threads while other processes hold
// cores.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace reckon {

// The text of /proc/stat ("" when it cannot be read).
std::string read_proc_stat();
// User and system CPU time of this process, all its threads, in seconds.
double self_cpu_seconds();
// The cpus this process may run on (empty: not known).
std::vector<int> affinity_cpus();

// Busy and total ticks of the cpus in `cpus` (their "cpuN" lines; the aggregate "cpu" line when
// empty) in a /proc/stat text; nothing when none of them is there. Busy counts user, nice,
// system, irq, softirq and steal.
struct StatTicks {
  double busy = 0, total = 0;
  int cpus = 0;  // how many cpus the figures are of
};
std::optional<StatTicks> stat_ticks(const std::string& text, const std::vector<int>& cpus = {});

// How many cores' worth of time other processes (and a hypervisor's steal) took of `cpus`
// between two readings of /proc/stat, this process having used self_cpu_s of CPU time
// meanwhile: (busy - self) / wall, at least 0. -1 when the texts do not hold those lines or no
// time passed.
double others_busy_cores(const std::string& stat_before, const std::string& stat_after, double self_cpu_s,
                         const std::vector<int>& cpus = {});

}  // namespace reckon
