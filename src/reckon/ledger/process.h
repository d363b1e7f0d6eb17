// The process's memory as the OS counts it (resident pages, VmHWM), predicted: what reckon's
// allocator will hold comes from the meta device (host_memory: the same cache run on sizes);
// what the process holds besides is read from the process after the step was planned (code,
// libraries, oneDNN's primitives, which the meta step creates), plus what running the kernels
// adds to that (threads' stacks, the code the kernels run). That last part is measured once
// per reckon binary and thread count, by small steps in fresh processes, and cached beside the
// cpu calibration.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace reckon {

// /proc/self/status fields in bytes: VmRSS (resident now), VmHWM (the process's peak). 0 when
// unreadable.
int64_t process_rss_bytes();
int64_t process_hwm_bytes();

// What running a step adds to a process beyond its plans and the allocator's blocks (threads'
// stacks, the code its ops run: oneDNN's drivers, reckon's kernels), measured by probes: `reckon
// ledger MODEL --measure` on a few small models (kProbes in process.cpp), each in a fresh process.
// Each probe gives its total and, per op family (the op and its kernel's implementation:
// LedgerMeasured::first_run_bytes), what the family's first run added. A step is given the total
// of the probe whose families are nearest its own, plus the first runs of its families that probe
// did not run (the smallest any probe saw: shared code is counted by whichever op runs it first).
struct ProcessProbe {
  std::string args;  // "resnet18_cifar --batch 2"
  int64_t total_bytes = 0;
  std::map<std::string, int64_t> first_run_bytes;  // by op family
};
struct ProcessOverhead {
  bool measured = false;  // false: no reckon binary to probe from this process (all figures 0)
  std::string source;     // how it was had, in words
  std::vector<ProcessProbe> probes;

  // The figure for a step that runs these op families (repeats allowed). `how`: which probe
  // it is nearest and how many of its families no probe ran.
  int64_t bytes_for(const std::vector<std::string>& families, std::string* how = nullptr) const;
};

// This binary's figures for the current thread count: from the cache (process.json beside
// devices.json), or probed now (a few seconds) and cached. `refresh` probes even if cached
// (--recalibrate). In a probe itself (RECKON_PROCESS_PROBE set) nothing is probed: all 0; nor
// where no cpu calibration is cached for the probes to take.
ProcessOverhead process_overhead(bool refresh = false);

// Makes the cpu's calibration (ledger/devices.h) in a child process when device_spec("cpu") would
// make one here (cpu_calibration_due): its buffers (1.3 GiB of peak on a Xeon) would otherwise be
// this process's peak resident memory, which a training run and `ledger --measure` predict and
// then measure. One calibration at most: this process then takes the entry the child left as it
// is, even one made under load (the next command takes that again). Without a reckon binary to run
// it does nothing (device_spec calibrates in this process, as before).
void calibrate_cpu_in_child();

}  // namespace reckon
