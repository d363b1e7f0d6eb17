#include "reckon/ledger/process.h"

#include <fmt/format.h>
#include <omp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reckon/core/file.h"
#include "reckon/core/json.h"
#include "reckon/ledger/devices.h"
#include "reckon/onnx/export.h"

namespace reckon {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t proc_status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0) {
      std::istringstream is(line.substr(n));
      int64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

std::string cache_path() { return (fs::path(device_cache_path()).parent_path() / "process.json").string(); }

// The reckon command-line binary to probe: this process if it is one, else RECKON_BIN (the
// Python package's tests set it), else a `reckon` beside this executable (the test binary's).
std::string reckon_cli() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && self.filename() == "reckon") return self.string();
  if (const char* b = std::getenv("RECKON_BIN"); b && *b && fs::is_regular_file(b, ec)) {
    const fs::path c = fs::weakly_canonical(b, ec);  // the key names the file as /proc/self/exe does
    return ec ? std::string(b) : c.string();
  }
  if (!ec && fs::is_regular_file(self.parent_path() / "reckon", ec)) return (self.parent_path() / "reckon").string();
  return {};
}

// What the cached figure is for: the binary (path, size, modification time) and thread count.
std::string cache_key(const std::string& bin) {
  struct stat st {};
  if (stat(bin.c_str(), &st) != 0) return {};
  return fmt::format("{}|{}|{}.{:09}|{} threads", bin, int64_t(st.st_size), int64_t(st.st_mtim.tv_sec),
                     int64_t(st.st_mtim.tv_nsec), omp_get_max_threads());
}

json read_cache() {
  try {
    json j = parse_json(read_regular_file(cache_path(), "process", uint64_t(1) << 22), cache_path());
    if (j.is_object()) return j;
  } catch (const std::exception&) {
  }
  return json::object();  // missing or damaged: probed afresh
}

// Writes the entry (replacing the entries of earlier builds of the same binary at the same
// thread count), through a temporary file renamed into place, so that a reader sees the old file
// or the new one. A write that fails (a read-only home, a full disk) keeps nothing and leaves the
// old file: the figures are probed again next time.
void write_cache(const std::string& key, const std::string& bin, const json& entry) {
  const std::string path = cache_path();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  json j = read_cache();
  const std::string threads = fmt::format("|{} threads", omp_get_max_threads());
  for (auto it = j.begin(); it != j.end();) {
    const std::string& k = it.key();
    const bool same_binary = k.rfind(bin + "|", 0) == 0 && k.size() >= threads.size() &&
                             k.compare(k.size() - threads.size(), threads.size(), threads) == 0;
    it = same_binary && k != key ? j.erase(it) : std::next(it);
  }
  j[key] = entry;
  try {
    onnx::write_file_atomic(path, j.dump(2) + "\n");
  } catch (const std::exception&) {  // a read-only home, a full disk: not kept, probed again next time
  }
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `reckon ledger ARGS` as a child at this process's thread count, stopped after 600 s.
std::string ledger_command(const std::string& bin, const std::string& args) {
  return fmt::format("OMP_NUM_THREADS={} timeout 600 {} ledger {}", omp_get_max_threads(), shell_quote(bin), args);
}

// The probes: small steps whose ops cover the zoo's families (reckon's own small convolutions,
// oneDNN's direct, Winograd, depthwise and 1x1 ones, batch norm, pooling, the residual add, bf16
// autocast and AdamW).
constexpr const char* kProbes[] = {
    "lenet5 --batch 8",
    "tinycnn --batch 8",
    "tinycnn --batch 8 --precision bf16 --optimizer adamw",
    "mobilenet_v2 --batch 2 --input 3x64x64",
    "resnet18_cifar --batch 2",
};

// Runs one probe; nullopt with why in `why`.
std::optional<ProcessProbe> probe(const std::string& bin, const char* args, std::string& why) {
  const std::string cmd = std::string(kProcessProbeEnv) + "=1 " +
                          ledger_command(bin, fmt::format("{} --measure --measure-steps 1 --json", args)) +
                          " 2>/dev/null </dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    why = fmt::format("could not start {}: {}", bin, std::strerror(errno));
    return std::nullopt;
  }
  std::string out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    why = code == 124   ? fmt::format("`{} ledger {} --measure` took over 600 s", bin, args)
          : code >= 0 ? fmt::format("`{} ledger {} --measure` exited with {}", bin, args, code)
                      : fmt::format("`{} ledger {} --measure` was killed", bin, args);
    return std::nullopt;
  }
  try {
    const json j = parse_json(out, "the probe's ledger");
    const int64_t planned = j.at("memory").at("process_planned_bytes").get<int64_t>();
    const int64_t hwm = j.at("measured").at("process_peak_bytes").get<int64_t>();
    const int64_t alloc = j.at("measured").at("allocator_resident_bytes").get<int64_t>();
    if (planned <= 0 || hwm <= 0) {
      why = "the probe could not read /proc/self/status";
      return std::nullopt;
    }
    ProcessProbe r;
    r.args = args;
    r.total_bytes = std::max<int64_t>(0, hwm - planned - alloc);
    r.first_run_bytes = j.at("measured").at("first_run_bytes").get<std::map<std::string, int64_t>>();
    return r;
  } catch (const std::exception& e) {
    why = fmt::format("the probe's output: {}", e.what());
    return std::nullopt;
  }
}

std::optional<ProcessOverhead> probe_all(const std::string& bin, std::string& why) {
  ProcessOverhead o;
  for (const char* args : kProbes) {
    auto r = probe(bin, args, why);
    if (!r) return std::nullopt;
    o.probes.push_back(std::move(*r));
  }
  o.measured = true;
  return o;
}

json to_json(const ProcessProbe& p) {
  return {{"args", p.args}, {"total_bytes", p.total_bytes}, {"first_run_bytes", p.first_run_bytes}};
}

std::mutex g_mu;
}  // namespace

int64_t process_rss_bytes() { return proc_status_bytes("VmRSS:"); }
int64_t process_hwm_bytes() { return proc_status_bytes("VmHWM:"); }

int64_t ProcessOverhead::bytes_for(const std::vector<std::string>& families, std::string* how) const {
  if (probes.empty()) return 0;
  std::vector<std::string> fams = families;
  std::sort(fams.begin(), fams.end());
  fams.erase(std::unique(fams.begin(), fams.end()), fams.end());
  // The nearest probe: most families in common, fewest the step does not run.
  const ProcessProbe* best = nullptr;
  int best_score = 0;
  for (const auto& p : probes) {
    int score = 0;
    for (const auto& [f, b] : p.first_run_bytes) score += std::binary_search(fams.begin(), fams.end(), f) ? 1 : -1;
    if (!best || score > best_score) best = &p, best_score = score;
  }
  int64_t sum = best->total_bytes;
  int unprobed = 0;
  for (const auto& f : fams) {
    if (best->first_run_bytes.count(f)) continue;
    std::optional<int64_t> least;
    for (const auto& p : probes)
      if (auto it = p.first_run_bytes.find(f); it != p.first_run_bytes.end()) {
        const int64_t v = std::max<int64_t>(0, it->second);
        least = least ? std::min(*least, v) : v;
      }
    if (least)
      sum += *least;
    else
      unprobed++;
  }
  if (how) {
    *how = fmt::format("nearest probe: {}", best->args);
    if (unprobed > 0) *how += fmt::format("; {} of the step's op families ran in no probe (counted 0)", unprobed);
  }
  return sum;
}

void calibrate_cpu_in_child() {
  const std::string bin = reckon_cli();
  if (bin.empty()) return;
  static std::atomic<bool> tried{false};  // once a process: a child that left no entry is not sent again
  if (!cpu_calibration_due() || tried.exchange(true)) return;
  // One calibration (an entry made under load is taken again by the next command, not at once:
  // the load is most likely still there), which this process then takes as it is. Where the child
  // could not leave an entry (the cache cannot be written), device_spec calibrates in this process.
  const std::string cmd = ledger_command(bin, "lenet5 --batch 1") + " >/dev/null 2>&1 </dev/null";
  if (std::system(cmd.c_str()) == 0 && cached_cpu_spec()) use_cached_cpu_calibration();
}

ProcessOverhead process_overhead(bool refresh) {
  std::lock_guard<std::mutex> g(g_mu);
  // Once per process and key, failures included (a probe that failed is not run again).
  static std::map<std::string, ProcessOverhead> memo;
  ProcessOverhead r;
  if (in_process_probe()) {
    r.source = "this is a probe";
    return r;
  }
  const std::string bin = reckon_cli();
  const std::string key = bin.empty() ? std::string() : cache_key(bin);
  if (key.empty()) {
    r.source = "not measured: no reckon binary to probe from this process (set RECKON_BIN)";
    return r;
  }
  if (auto it = memo.find(key); it != memo.end() && !refresh) return it->second;
  auto described = [&](ProcessOverhead o, const std::string& at) {
    o.source = fmt::format("probed {} by {} small steps in fresh processes (cached in {})", at, std::size(kProbes),
                           cache_path());
    return o;
  };
  if (!refresh) {
    const json j = read_cache();
    if (j.contains(key)) try {
        const json& e = j.at(key);
        ProcessOverhead o;
        o.measured = true;
        for (const json& p : e.at("probes"))
          o.probes.push_back({p.at("args").get<std::string>(), p.at("total_bytes").get<int64_t>(),
                              p.at("first_run_bytes").get<std::map<std::string, int64_t>>()});
        if (o.probes.empty()) throw std::runtime_error("no probes");
        return memo[key] = described(o, e.at("measured_at").get<std::string>());
      } catch (const std::exception&) {
      }
  }
  if (!cached_cpu_spec()) {  // (not cached: the directory cannot be written)
    r.source = fmt::format("not measured: no cpu calibration is cached in {} for the probes to take (each would "
                           "calibrate, and the calibration would be its peak)",
                           device_cache_path());
    return r;  // (not kept: a later call may find one)
  }
  std::string why;
  if (auto o = probe_all(bin, why)) {
    const std::string at = now_utc();
    json probes = json::array();
    for (const auto& p : o->probes) probes.push_back(to_json(p));
    write_cache(key, bin, {{"probes", probes}, {"measured_at", at}});
    return memo[key] = described(*o, at);
  }
  r.source = "not measured: " + why;
  return memo[key] = r;
}

}  // namespace reckon
