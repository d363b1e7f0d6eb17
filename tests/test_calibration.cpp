// What other processes take of this machine's cpus, and what reckon does about it.
// The cpu calibration that defends itself (issue 15; ledger/devices.h): the other processes' share
// of the CPU read from /proc/stat, which of a cached and a fresh calibration is kept, and, with
// spinning processes on this process's cores, a calibration made under load marked in the cache,
// taken again on the next use, kept after its attempts are spent, and never put in place of a
// quiet one by --recalibrate. No timing is asserted: only what the calibration records and keeps.
// A training run's thread count (issue 16; train/threads.h): the rule, its hysteresis, and a run
// beside a spinning process that gives up a core, unless its count is fixed.
#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reckon/core/cpu_load.h"
#include "reckon/ledger/devices.h"
#include "reckon/train/threads.h"
#include "reckon/train/trainer.h"
#include "test_util.h"

using namespace reckon;
using json = nlohmann::json;

namespace {

// /proc/stat text with one aggregate line and a line per cpu, from per-cpu tick counts
// {user, nice, system, idle, iowait, irq, softirq, steal}.
std::string stat_text(const std::vector<std::vector<long>>& cpus) {
  std::vector<long> all(8, 0);
  for (const auto& c : cpus)
    for (int i = 0; i < 8; ++i) all[size_t(i)] += c[size_t(i)];
  auto line = [](const std::string& name, const std::vector<long>& f) {
    std::string s = name;
    for (long v : f) s += " " + std::to_string(v);
    return s + " 0 0\n";
  };
  std::string s = line("cpu ", all);
  for (size_t c = 0; c < cpus.size(); ++c) s += line("cpu" + std::to_string(c), cpus[c]);
  return s + "intr 1 2 3\nctxt 99\n";
}

TEST(Calibration, OthersShareIsReadFromProcStat) {
  const double tick = double(sysconf(_SC_CLK_TCK));
  const std::string before = stat_text({{100, 0, 50, 1000, 0, 0, 0, 0}, {40, 0, 20, 1000, 0, 0, 0, 0}});
  // cpu0: 100 busy ticks (60 user, 20 system, 20 steal), none idle; cpu1: 20 busy, 80 idle.
  const std::string after = stat_text({{160, 0, 70, 1000, 0, 0, 0, 20}, {60, 0, 20, 1080, 0, 0, 0, 0}});
  const double self = 60 / tick;  // this process: 60 ticks
  EXPECT_NEAR(others_cpu_share(before, after, self), (120.0 - 60) / 200, 1e-12);
  EXPECT_NEAR(others_cpu_share(before, after, self, {0}), (100.0 - 60) / 100, 1e-12);
  EXPECT_NEAR(others_cpu_share(before, after, 0, {1}), 20.0 / 100, 1e-12);
  EXPECT_EQ(others_cpu_share(before, after, self, {1}), 0.0);  // less busy than self: clamped
  EXPECT_NEAR(others_cpu_share(before, after, 0, {0, 1}), 120.0 / 200, 1e-12);
  // A calibration on one thread of two cpus: the other cpu absorbs 100 of the others' ticks.
  EXPECT_NEAR(others_cpu_share(before, after, 0, {0, 1}, 1), (120.0 - 100) / 100, 1e-12);
  EXPECT_NEAR(others_cpu_share(before, after, 0, {}, 1), (120.0 - 100) / 100, 1e-12);  // the aggregate line
  EXPECT_EQ(others_cpu_share(before, after, self, {0, 1}, 1), 0.0);
  EXPECT_NEAR(others_cpu_share(before, after, 0, {0, 1}, 8), 120.0 / 200, 1e-12);  // at most the cpus there are
  // iowait is idle time, not another process's.
  const std::string io = stat_text({{100, 0, 50, 1000, 50, 0, 0, 0}, {40, 0, 20, 1000, 0, 0, 0, 0}});
  EXPECT_EQ(others_cpu_share(before, io, 0), 0.0);
  // Nothing to go by: -1.
  EXPECT_EQ(others_cpu_share(before, before, 0), -1.0);  // no time passed
  EXPECT_EQ(others_cpu_share("", after, 0), -1.0);
  EXPECT_EQ(others_cpu_share("garbage\ncpu x y\n", "cpu", 0), -1.0);
  EXPECT_EQ(others_cpu_share(before, after, 0, {7}), -1.0);  // a cpu /proc/stat does not list
  // This machine's own /proc/stat, a tenth of a second apart, parses.
  std::ifstream f("/proc/stat");
  std::string a((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  usleep(100000);
  std::ifstream g("/proc/stat");
  std::string b((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  const double share = others_cpu_share(a, b, 0);
  EXPECT_GE(share, 0.0);
  EXPECT_LE(share, 1.0);
}

DeviceSpec entry(bool under_load, double share, int attempts, const std::string& when) {
  DeviceSpec d;
  d.name = "cpu";
  d.calibrated = true;
  d.under_load = under_load;
  d.others_cpu_share = share;
  d.attempts = attempts;
  d.calibrated_at = when;
  return d;
}

TEST(Calibration, AQuietOneIsKeptAgainstABusyMoment) {
  const DeviceSpec quiet_old = entry(false, 0.02, 1, "old"), busy_old = entry(true, 0.30, 1, "old");
  const DeviceSpec quiet_new = entry(false, 0.01, 1, "new"), busy_new = entry(true, 0.40, 1, "new");
  const DeviceSpec less_busy_new = entry(true, 0.20, 1, "new");
  EXPECT_EQ(calibration_to_keep(std::nullopt, busy_new).calibrated_at, "new");  // nothing else to use
  EXPECT_EQ(calibration_to_keep(std::nullopt, busy_new).attempts, 1);
  EXPECT_EQ(calibration_to_keep(busy_old, quiet_new).calibrated_at, "new");  // a quiet one replaces
  EXPECT_EQ(calibration_to_keep(quiet_old, quiet_new).calibrated_at, "new");
  EXPECT_EQ(calibration_to_keep(quiet_old, busy_new).calibrated_at, "old");  // a busy one does not
  EXPECT_EQ(calibration_to_keep(busy_old, busy_new).calibrated_at, "old");   // the less disturbed
  EXPECT_EQ(calibration_to_keep(busy_old, less_busy_new).calibrated_at, "new");
  DeviceSpec twice = calibration_to_keep(busy_old, busy_new);
  EXPECT_EQ(twice.attempts, 2);
  EXPECT_EQ(calibration_to_keep(twice, busy_new).attempts, 3);
  EXPECT_EQ(calibration_to_keep(twice, quiet_new).attempts, 1);  // quiet: the count starts again
  // fresh_calibration_kept names the same choice.
  for (const auto& cached : {std::optional<DeviceSpec>(), std::optional<DeviceSpec>(quiet_old),
                             std::optional<DeviceSpec>(busy_old)})
    for (const DeviceSpec& fresh : {quiet_new, busy_new, less_busy_new})
      EXPECT_EQ(fresh_calibration_kept(cached, fresh), calibration_to_keep(cached, fresh).calibrated_at == "new");
  EXPECT_EQ(calibration_to_keep(quiet_old, busy_new).attempts, 1);
  // The report says which.
  EXPECT_NE(calibration_quality(quiet_new).find("quiet: other processes took 1% of the CPU"), std::string::npos)
      << calibration_quality(quiet_new);
  EXPECT_NE(calibration_quality(busy_new).find("made under load: other processes took 40%"), std::string::npos);
  EXPECT_NE(calibration_quality(busy_new).find("taken again by the next command"), std::string::npos);
  DeviceSpec spent = entry(true, 0.3, kCalibrationAttempts, "x");
  EXPECT_NE(calibration_quality(spent).find("the least disturbed of 3 calibrations"), std::string::npos);
  EXPECT_NE(calibration_quality(entry(false, -1, 1, "x")).find("not known"), std::string::npos);
}

// Processes that spin, one on every cpu this process may run on (or `count` of them), until they
// are destroyed (or this process dies: PR_SET_PDEATHSIG).
class Spinners {
 public:
  explicit Spinners(int count = 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = 2;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = std::max(1, CPU_COUNT(&set));
    if (count > 0) n = count;
    for (int i = 0; i < n; ++i) {
      pid_t p = fork();
      if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile unsigned long k = 0;
        for (;;) k = k + 1;  // only spinning: nothing after fork() in a threaded process but this
      }
      if (p > 0) pids_.push_back(p);
    }
  }
  ~Spinners() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }
  size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

// A cache directory of this test's own, RECKON_CACHE_DIR put back afterwards.
class CalibrationCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("reckon-calibration-test-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    env_.emplace("RECKON_CACHE_DIR", dir_.string());
    forget_cpu_calibration();
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    env_.reset();
    forget_cpu_calibration();
  }
  json cached_entry() {
    std::ifstream in(device_cache_path());
    json j = json::parse(in);
    EXPECT_EQ(j["cpus"].size(), 1u);
    return j["cpus"].begin().value();
  }
  void edit_entry(const std::function<void(json&)>& f) {
    std::ifstream in(device_cache_path());
    json j = json::parse(in);
    f(j["cpus"].begin().value());
    std::ofstream(device_cache_path()) << j.dump(1);
    forget_cpu_calibration();
  }
  std::optional<test_util::ScopedEnv> env_;
  std::filesystem::path dir_;
};

TEST_F(CalibrationCache, MadeUnderLoadIsMarkedTakenAgainAndNeverReplacesAQuietOne) {
  {
    Spinners busy;
    ASSERT_GT(busy.size(), 0u);
    usleep(200000);  // the spinners running before the calibration starts
    const DeviceSpec cpu = device_spec("cpu");
    EXPECT_GT(cpu.others_cpu_share, kCalibrationBusyShare) << cpu.source;
    EXPECT_TRUE(cpu.under_load) << cpu.source;
    EXPECT_EQ(cpu.attempts, 1);
    EXPECT_NE(cpu.source.find("made under load"), std::string::npos) << cpu.source;
    EXPECT_GT(cpu.fp32_flops, 0.0);  // used meanwhile
    json e = cached_entry();
    EXPECT_EQ(e["under_load"], true);
    EXPECT_EQ(e["attempts"], 1);
    EXPECT_GT(e["others_cpu_share"].get<double>(), kCalibrationBusyShare);
    EXPECT_GE(e["spread"].get<double>(), 0.0);
  }
  // The next use takes it again: a quiet one replaces it, one made under load is its second
  // attempt (whichever this machine's other work makes it).
  edit_entry([](json& e) { e["calibrated_at"] = "2000-01-01T00:00:00Z"; });
  const DeviceSpec again = device_spec("cpu");
  EXPECT_EQ(again.attempts, again.under_load ? 2 : 1) << again.source;
  EXPECT_EQ(cached_entry()["attempts"], again.attempts);
  if (!again.under_load) EXPECT_NE(cached_entry()["calibrated_at"], "2000-01-01T00:00:00Z");

  // Made under load with its attempts spent: used as it is, not measured again.
  edit_entry([](json& e) {
    e["under_load"] = true;
    e["others_cpu_share"] = 0.5;
    e["attempts"] = kCalibrationAttempts;
    e["calibrated_at"] = "2000-01-01T00:00:00Z";
  });
  DeviceSpec spent = device_spec("cpu");
  EXPECT_EQ(spent.calibrated_at, "2000-01-01T00:00:00Z");
  EXPECT_NE(spent.source.find("the least disturbed of 3"), std::string::npos) << spent.source;
  // Made under load with attempts left: used as it is in a process-memory probe (whose peak
  // resident memory a calibration would become) and once a child calibrated for this command...
  edit_entry([](json& e) {
    e["attempts"] = 1;
    e["others_cpu_share"] = 1.0;  // more disturbed than any fresh one can be
  });
  {
    test_util::ScopedEnv probe(kProcessProbeEnv, "1");
    EXPECT_EQ(device_spec("cpu").calibrated_at, "2000-01-01T00:00:00Z");
    forget_cpu_calibration();
  }
  use_cached_cpu_calibration();
  EXPECT_EQ(device_spec("cpu").attempts, 1);
  EXPECT_EQ(cached_entry()["calibrated_at"], "2000-01-01T00:00:00Z");
  forget_cpu_calibration();
  // ... and measured again otherwise.
  const DeviceSpec retaken = device_spec("cpu");
  EXPECT_NE(retaken.calibrated_at, "2000-01-01T00:00:00Z");
  EXPECT_EQ(cached_entry()["attempts"], retaken.under_load ? 2 : 1);

  // A quiet one is used as it is; --recalibrate under load measures but keeps it.
  edit_entry([](json& e) {
    e["under_load"] = false;
    e["others_cpu_share"] = 0.0;
    e["attempts"] = 1;
    e["calibrated_at"] = "2000-01-01T00:00:00Z";
  });
  EXPECT_EQ(device_spec("cpu").calibrated_at, "2000-01-01T00:00:00Z");
  {
    Spinners busy;
    usleep(200000);
    const Recalibration r = recalibrate_cpu();
    EXPECT_TRUE(r.fresh.under_load) << r.fresh.source;
    EXPECT_FALSE(r.fresh_kept);
    EXPECT_EQ(r.kept.calibrated_at, "2000-01-01T00:00:00Z");
    EXPECT_FALSE(r.kept.under_load);
  }
  EXPECT_EQ(device_spec("cpu").calibrated_at, "2000-01-01T00:00:00Z");
  EXPECT_EQ(cached_entry()["calibrated_at"], "2000-01-01T00:00:00Z");
  EXPECT_EQ(cached_entry()["under_load"], false);
}

}  // namespace

TEST(Threads, OthersBusyCoresAreReadFromProcStat) {
  const double tick = double(sysconf(_SC_CLK_TCK));
  const std::string before = stat_text({{100, 0, 50, 1000, 0, 0, 0, 0}, {40, 0, 20, 1000, 0, 0, 0, 0}});
  const std::string after = stat_text({{160, 0, 70, 1000, 0, 0, 0, 20}, {60, 0, 20, 1080, 0, 0, 0, 0}});
  // 120 busy ticks over 100 ticks of wall time per cpu: 1.2 cores, of which this process took 0.6.
  EXPECT_NEAR(others_busy_cores(before, after, 60 / tick), 0.6, 1e-12);
  EXPECT_NEAR(others_busy_cores(before, after, 0, {0}), 1.0, 1e-12);
  EXPECT_EQ(others_busy_cores(before, after, 200 / tick), 0.0);  // less busy than self: 0
  EXPECT_EQ(others_busy_cores(before, before, 0), -1.0);
  EXPECT_EQ(others_busy_cores("", after, 0), -1.0);
}

TEST(Threads, TheRuleGivesUpTheCoresOthersHold) {
  using train::threads_for_load;
  EXPECT_EQ(threads_for_load(2, -1), 2);   // not known
  EXPECT_EQ(threads_for_load(2, 0.0), 2);
  EXPECT_EQ(threads_for_load(2, 0.3), 2);  // a little background
  EXPECT_EQ(threads_for_load(2, 0.4), 1);  // most of a core
  EXPECT_EQ(threads_for_load(2, 1.0), 1);
  EXPECT_EQ(threads_for_load(2, 2.0), 1);  // never none
  EXPECT_EQ(threads_for_load(8, 3.5), 4);
  EXPECT_EQ(threads_for_load(1, 1.0), 1);
}

TEST(Threads, TheGovernorDropsOnASustainedLoadAndComesBackAtOnce) {
  const int prev = omp_get_max_threads();
  {
    train::ThreadGovernor g(4);
    EXPECT_EQ(g.threads(), 4);
    EXPECT_FALSE(g.update(1.0));  // one reading: a burst, perhaps
    EXPECT_EQ(g.threads(), 4);
    EXPECT_FALSE(g.update(0.1));  // it was
    EXPECT_FALSE(g.update(1.0));
    EXPECT_TRUE(g.update(2.0));   // two in a row: the smaller drop of the two
    EXPECT_EQ(g.threads(), 3);
    EXPECT_EQ(omp_get_max_threads(), 3);
    EXPECT_FALSE(g.update(2.0));
    EXPECT_TRUE(g.update(2.0));
    EXPECT_EQ(g.threads(), 2);
    EXPECT_TRUE(g.update(0.0));  // the cores are free again: all of them at once
    EXPECT_EQ(g.threads(), 4);
    EXPECT_EQ(omp_get_max_threads(), 4);
    EXPECT_DOUBLE_EQ(g.others_cores(), 0.0);
  }
  omp_set_num_threads(prev);
  // Pinned: --threads N, or OMP_NUM_THREADS (set for these tests by CMake).
  EXPECT_FALSE(train::threads_adapt(2));
  {
    test_util::ScopedEnv pin("OMP_NUM_THREADS", "2");
    EXPECT_FALSE(train::threads_adapt(0));
  }
  test_util::ScopedEnv unpinned("OMP_NUM_THREADS", std::nullopt);
  EXPECT_TRUE(train::threads_adapt(0));
}

// lenet5 on synthetic data for `seconds` from its first step (then stopped by the step callback),
// beside one spinning process. The clock starts at the first step: what comes before it (a
// calibration taken again because the tests' cache was made while this machine was busy) is no
// part of what the governor is given time to see.
static train::TrainResult run_beside_a_spinner(int threads, double seconds, const std::filesystem::path& out) {
  train::TrainConfig cfg;
  cfg.model = "lenet5";
  cfg.data = "synthetic:1x28x28:4096:10";
  cfg.batch = 64;
  cfg.epochs = 1000;
  cfg.threads = threads;
  cfg.out = out.string();
  cfg.verbose = 0;
  std::optional<std::chrono::steady_clock::time_point> t0;
  cfg.on_step = [&](const train::StepReport&) {
    const auto now = std::chrono::steady_clock::now();
    if (!t0) t0 = now;
    return std::chrono::duration<double>(now - *t0).count() < seconds;
  };
  return train::train(cfg);
}

TEST(Threads, ATrainingRunGivesUpACoreThatAnotherProcessHolds) {
  const int max = omp_get_max_threads();
  if (max < 2) GTEST_SKIP() << "one thread: there is no core to give up";
  const auto dir = test_util::fresh_dir("threads", "busy");
  test_util::ScopedEnv unpinned("OMP_NUM_THREADS", std::nullopt);
  Spinners busy(1);
  ASSERT_EQ(busy.size(), 1u);
  usleep(200000);
  const train::TrainResult adapted = run_beside_a_spinner(0, 4.0, dir / "adapted");
  EXPECT_EQ(adapted.max_threads, max);
  EXPECT_GT(adapted.fewer_threads_steps, 0) << "of " << adapted.steps << " steps";
  EXPECT_EQ(omp_get_max_threads(), max);  // put back when the run ended
  const train::TrainResult fixed = run_beside_a_spinner(max, 2.5, dir / "fixed");
  EXPECT_EQ(fixed.fewer_threads_steps, 0);
  EXPECT_GT(fixed.steps, 0);
  std::filesystem::remove_all(dir);
}
