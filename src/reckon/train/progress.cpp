// The display, the running sums' JSON and the formatters (progress.h).
#include "reckon/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace reckon::train {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  auto t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

std::string fmt_floats(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.4f}", i ? ", " : "", v[i]);
  return s + "]";
}

void Running::add(float loss, int64_t right, int64_t n) {
  loss_sum += double(loss);
  correct += right;
  seen += n;
  steps += 1;
}

nlohmann::json Running::to_json() const {
  return {{"loss_sum", loss_sum}, {"correct", correct}, {"seen", seen}, {"steps", steps}};
}

Running Running::from_json(const nlohmann::json& j) {
  Running r;
  r.loss_sum = j.at("loss_sum").get<double>();
  r.correct = j.at("correct").get<int64_t>();
  r.seen = j.at("seen").get<int64_t>();
  r.steps = j.at("steps").get<int64_t>();
  return r;
}

Display::Display(const TrainConfig& c) : verbose_(c.verbose > 0), print_every_(c.print_every) {
  bar_ = verbose_ && (c.progress == 1 || (c.progress < 0 && ::isatty(STDERR_FILENO)));
}

void Display::step(int64_t epoch, int64_t epochs, int64_t batch, int64_t batches, int64_t step, double loss,
                   double acc, double images_per_s, double eta_s) {
  if (!verbose_) return;
  if (bar_) {
    auto now = Clock::now();
    if (batch != batches && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    constexpr int kWidth = 24;
    int filled = int(double(kWidth) * double(batch) / double(std::max<int64_t>(1, batches)));
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  acc %.2f%%  %.0f img/s  ETA %s", (long long)epoch,
                (long long)epochs, bar.c_str(), (long long)batch, (long long)batches, loss, 100 * acc, images_per_s,
                fmt_duration(eta_s).c_str());
    std::fflush(stderr);
  } else if (step % print_every_ == 0) {
    std::fprintf(stderr, "epoch %lld/%lld  batch %lld/%lld  step %lld  loss %.4f  acc %.2f%%  %.0f img/s  ETA %s\n",
                (long long)epoch, (long long)epochs, (long long)batch, (long long)batches, (long long)step, loss,
                100 * acc, images_per_s, fmt_duration(eta_s).c_str());
    std::fflush(stderr);
  }
}

void Display::print(std::FILE* to, const std::string& s) {
  if (!verbose_) return;
  if (bar_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
  std::fflush(stderr);
  std::fprintf(to, "%s\n", s.c_str());
  std::fflush(to);
}

void Display::line(const std::string& s) { print(stderr, s); }
void Display::result(const std::string& s) { print(stdout, s); }

}  // namespace reckon::train
