// What a training run shows and counts as it goes: the one-line display (a redrawn progress
// bar on a terminal, plain log lines every few steps otherwise), running sums of loss and
// accuracy over a span of steps (kept in the checkpoint so a resumed run reports the same
// figures), and the small formatters of times (seconds) and figures. The trainer's own parts,
// not an API. Not here: the metrics files and TensorBoard events (io/).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reckon/train/config.h"

namespace reckon::train {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0);
// s seconds as "M:SS" or "H:MM:SS"; "--:--" for an unknown (negative or not finite) time.
std::string fmt_duration(double s);
// "[0.2860, 0.3530]": per-channel figures.
std::string fmt_floats(const std::vector<float>& v);

// Running sums over a span of steps (an epoch, a log interval). Kept in the checkpoint so a
// resumed run reports the same figures.
struct Running {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, steps = 0;
  // One step: its mean loss, and `right` of its n samples right.
  void add(float loss, int64_t right, int64_t n);
  double loss() const { return steps ? loss_sum / double(steps) : 0.0; }  // mean over the steps
  double accuracy() const { return seen ? double(correct) / double(seen) : 0.0; }
  nlohmann::json to_json() const;
  // Throws nlohmann::json::exception for a missing key.
  static Running from_json(const nlohmann::json& j);
};

// The one-line display: a redrawn progress bar on a terminal, or plain lines every few steps.
// The log and the bar go to stderr (as tqdm and Lightning draw them), the run's results to
// stdout, so `reckon train ... > result.txt` still shows the run; nothing when c.verbose is 0.
class Display {
 public:
  explicit Display(const TrainConfig& c);
  // After each step: batch of batches (1-based) in epoch of epochs; loss and acc over the epoch
  // so far. The bar redraws at most every 100 ms (and at the epoch's last batch); the plain
  // line shows every print_every steps.
  void step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss, double acc,
            double images_per_s, double eta_s);
  // A full log line on stderr (ends the bar's line first).
  void line(const std::string& s);
  // A line of the run's result (the final accuracy, where the files are) on stdout.
  void result(const std::string& s);

 private:
  // s on `to` after ending the bar's line (the bar is on stderr).
  void print(std::FILE* to, const std::string& s);
  bool verbose_, bar_ = false, drawn_ = false;
  int64_t print_every_;
  Clock::time_point last_{};
};

}  // namespace reckon::train
