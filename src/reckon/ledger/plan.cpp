// The plan (plan.h): the ladder of micro-batch, precision, accumulation and recomputation, each
// rung one ledger() pass over a training step of one meta model, captured; the table and JSON
// that show it.
#include "reckon/ledger/plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "reckon/core/error.h"
#include "reckon/ledger/devices.h"
#include "reckon/ledger/ledger.h"
#include "reckon/nn/models/registry.h"
#include "reckon/nn/recompute.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/conv.h"

namespace reckon {

namespace {

bool known_precision(const std::string& p) { return p == "fp32" || p == "bf16" || p == "fp16"; }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

void check_config(const PlanConfig& cfg) {
  RK_CHECK(cfg.batch > 0, "[plan] --batch must be positive (the effective batch: micro-batch x accumulation), got {}",
           cfg.batch);
  RK_CHECK(cfg.memory_bytes > 0, "[plan] --memory must be a positive number of bytes (e.g. 4GiB, 512MiB), got {}",
           cfg.memory_bytes);
  RK_CHECK(!cfg.precisions.empty(), "[plan] --precisions is empty: name at least one of fp32, bf16, fp16");
  for (const auto& p : cfg.precisions)
    RK_CHECK(known_precision(p), "[plan] --precisions: unknown precision '{}' (fp32, bf16 or fp16)", p);
  const auto models = nn::model_names();
  RK_CHECK(std::find(models.begin(), models.end(), cfg.model) != models.end(),
           "[plan] model: unknown model '{}' (known: {})", cfg.model, join(models, ", "));
  RK_CHECK(cfg.optimizer == "sgd" || cfg.optimizer == "adamw", "[plan] --optimizer: unknown optimizer '{}' (sgd or adamw)",
           cfg.optimizer);
  RK_CHECK(cfg.momentum >= 0.0, "[plan] --momentum must be >= 0, got {}", cfg.momentum);
  RK_CHECK(cfg.num_classes >= 0, "[plan] --classes must be positive (0: the model's default), got {}", cfg.num_classes);
  if (!cfg.input.empty()) {
    bool ok = cfg.input.size() == 3;
    for (auto d : cfg.input) ok = ok && d > 0;
    RK_CHECK(ok, "[plan] --input must be one sample's C x H x W with positive sizes, got {}", shape_str(cfg.input));
  }
  try {
    device_spec(cfg.device);
  } catch (const Error& e) {
    throw Error(fmt::format("[plan] --device: {}", e.what()));
  }
}

// The micro-batches tried, largest first: for k = 0, 1, ... the largest divisor of batch that is
// at most batch / 2^k (the powers of two when batch is one), ending at 1.
std::vector<int64_t> micro_batches(int64_t batch) {
  std::vector<int64_t> r;
  for (int64_t target = batch;; target /= 2) {
    int64_t d = std::max<int64_t>(target, 1);
    while (batch % d != 0) --d;
    if (r.empty() || r.back() != d) r.push_back(d);
    if (target <= 1) break;
  }
  return r;
}

int precision_index(const PlanConfig& cfg, const std::string& p) {
  return int(std::find(cfg.precisions.begin(), cfg.precisions.end(), p) - cfg.precisions.begin());
}

std::string rung_label(const PlanRung& r) {
  return fmt::format("{}, micro-batch {} x {}{}{}", r.precision, r.micro_batch, r.accum, r.recompute ? ", recompute" : "",
                     r.direct_conv ? ", direct convolutions" : "");
}

std::string step_ms(double s) {
  const double ms = s * 1e3;
  return ms >= 100 ? fmt::format("{:.0f}", ms) : ms >= 10 ? fmt::format("{:.1f}", ms) : fmt::format("{:.2f}", ms);
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f}", double(bytes) / (1024.0 * 1024.0)); }

}  // namespace

const PlanRung* Plan::best() const { return chosen >= 0 && chosen < int(ladder.size()) ? &ladder[size_t(chosen)] : nullptr; }

int Plan::smallest() const {
  int s = -1;
  for (int i = 0; i < int(ladder.size()); ++i)
    if (s < 0 || ladder[size_t(i)].peak_bytes < ladder[size_t(s)].peak_bytes) s = i;
  return s;
}

Plan plan(const PlanConfig& cfg) {
  check_config(cfg);
  const auto t0 = std::chrono::steady_clock::now();
  Plan P;
  P.config = cfg;
  P.config.progress = nullptr;
  const DeviceSpec dev = device_spec(cfg.device);
  P.device_description = dev.description;
  P.device_memory_bytes = dev.memory_bytes;
  for (const auto& prec : cfg.precisions)
    if (std::string n = slower_precision_note(dev, prec); !n.empty()) P.notes.push_back(std::move(n));

  const std::vector<int64_t> micros = micro_batches(cfg.batch);
  // Direct-convolution rungs only make sense when the process runs the default algorithm.
  const bool try_direct = cfg.allow_direct_conv && conv_algorithm() == ConvAlgorithm::automatic;
  // The model, built once on the meta device: each rung captures one training step of it (its
  // blocks marked for recomputation or not, as the rung asks).
  nn::ModelConfig mc;
  mc.num_classes = cfg.num_classes;
  if (!cfg.input.empty()) mc.in_channels = cfg.input[0];
  const Shape sample = cfg.input.empty() ? onnx::model_input_shape(cfg.model, mc) : cfg.input;
  mc.device = Device::meta;
  const std::shared_ptr<nn::Module> meta = onnx::make_model(cfg.model, mc);
  // One rung: one ledger() pass over a captured step. *recomputed: whether recomputation ran any
  // forward op again (false for a model without blocks to recompute); *winograd: whether any
  // convolution planned as Winograd.
  auto run = [&](int64_t micro, const std::string& precision, bool recompute, bool direct, bool* recomputed,
                 bool* winograd) {
    PlanRung r;
    r.micro_batch = micro;
    r.accum = cfg.batch / micro;
    r.precision = precision;
    r.recompute = recompute;
    r.direct_conv = direct;
    if (cfg.progress) cfg.progress(rung_label(r));
    LedgerConfig lc;
    lc.batch = micro;
    lc.accum = r.accum;
    lc.input = cfg.input;
    lc.num_classes = cfg.num_classes;
    lc.precision = precision;
    lc.recompute = recompute;
    if (direct) lc.conv_algo = "direct";
    lc.optimizer = cfg.optimizer;
    lc.momentum = cfg.momentum;
    lc.device = cfg.device;
    lc.plan_workspace = true;
    if (recompute)
      nn::enable_recompute(*meta);
    else
      nn::disable_recompute(*meta);
    const Ledger l = ledger(*meta, sample, lc);
    r.peak_bytes = l.memory.peak_bytes;
    r.step_s = l.times.front().step_s;
    r.images_per_s = r.step_s > 0 ? double(cfg.batch) / r.step_s : 0;
    r.fits = r.peak_bytes <= cfg.memory_bytes;
    if (recomputed) *recomputed = l.totals.recompute_macs > 0;
    if (winograd) *winograd = l.totals.winograd_ops > 0;
    return r;
  };

  // Without recomputation: for each precision, halve the micro-batch until a rung fits (smaller
  // micro-batches only add steps). first_fit[p]: the micro-batch that fitted (0: none).
  // A rung that does not fit because of Winograd's workspace is tried with direct convolutions
  // too, until one of those fits; first_fit is then the larger of the two.
  std::vector<int64_t> first_fit(cfg.precisions.size(), 0);
  for (size_t p = 0; p < cfg.precisions.size(); ++p) {
    bool direct_fitted = false;
    for (int64_t m : micros) {
      bool winograd = false;
      P.ladder.push_back(run(m, cfg.precisions[p], false, false, nullptr, &winograd));
      if (P.ladder.back().fits) {
        first_fit[p] = std::max(first_fit[p], m);
        break;
      }
      if (try_direct && winograd && !direct_fitted) {
        P.ladder.push_back(run(m, cfg.precisions[p], false, true, nullptr, nullptr));
        if (P.ladder.back().fits) {
          direct_fitted = true;
          first_fit[p] = m;
        }
      }
    }
  }
  // With recomputation: the same walk, from the whole batch down to just above the micro-batch
  // that fitted without it (from there on, recomputing is only slower); the whole batch is
  // always shown, so the ladder prices recomputation even when it is not needed.
  P.recompute_applies = cfg.allow_recompute;
  for (size_t p = 0; p < cfg.precisions.size() && P.recompute_applies; ++p)
    for (int64_t m : micros) {
      if (m != cfg.batch && m <= first_fit[p]) break;
      bool recomputed = true;
      PlanRung r = run(m, cfg.precisions[p], true, false, &recomputed, nullptr);
      if (!recomputed) {  // no block to recompute: the rung is the one without
        P.recompute_applies = false;
        break;
      }
      P.ladder.push_back(r);
      if (r.fits) break;
    }

  // Ladder order: the run as asked, mixed precision, accumulation, then recomputation.
  std::stable_sort(P.ladder.begin(), P.ladder.end(), [&](const PlanRung& a, const PlanRung& b) {
    if (a.recompute != b.recompute) return !a.recompute;
    if (a.micro_batch != b.micro_batch) return a.micro_batch > b.micro_batch;
    if (a.precision != b.precision) return precision_index(cfg, a.precision) < precision_index(cfg, b.precision);
    return !a.direct_conv && b.direct_conv;
  });
  // The fastest that fits; ties (within a part in a million) go to the smaller peak.
  for (int i = 0; i < int(P.ladder.size()); ++i) {
    const PlanRung& r = P.ladder[size_t(i)];
    if (!r.fits) continue;
    if (P.chosen < 0) {
      P.chosen = i;
      continue;
    }
    const PlanRung& c = P.ladder[size_t(P.chosen)];
    const double tol = 1e-6 * std::max(r.step_s, c.step_s);
    if (r.step_s < c.step_s - tol || (std::abs(r.step_s - c.step_s) <= tol && r.peak_bytes < c.peak_bytes)) P.chosen = i;
  }
  P.search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return P;
}

std::string plan_train_command(const Plan& p, const PlanRung& r) {
  std::string s = fmt::format("reckon train {} --batch {} --accum {} --precision {}", p.config.model, r.micro_batch,
                              r.accum, r.precision);
  if (r.recompute) s += " --recompute";
  if (r.direct_conv) s += " --conv-algo direct";
  if (p.config.optimizer != "sgd") s += " --optimizer " + p.config.optimizer;
  return s;
}

std::string format_plan(const Plan& p) {
  const PlanConfig& c = p.config;
  std::string o;
  o += fmt::format("plan for {}: effective batch {}, budget {}, device {} ({}), {}{}\n", c.model, c.batch,
                   format_bytes(c.memory_bytes), c.device, p.device_description, c.optimizer,
                   c.input.empty() ? "" : ", input " + shape_str(c.input));
  o += "the budget covers the step's tracked memory (parameters, gradients, optimizer state, activations, workspace,\n"
       "input) as the ledger predicts it, not the process's code, libraries or dataset\n";
  if (p.device_memory_bytes > 0 && c.memory_bytes > p.device_memory_bytes)
    o += fmt::format("note: the budget is more than {}'s memory ({})\n", c.device, format_mib(p.device_memory_bytes));
  if (c.allow_recompute && !p.recompute_applies) o += "note: the model has no blocks to recompute\n";
  for (const auto& n : p.notes) o += n + "\n";
  o += "\n";
  o += fmt::format("  {:>2}  {:<9}  {:>13}  {:<9}  {:<6}  {:>10}  {:>7}  {:>9}  {:>9}  {}\n", "#", "precision",
                   "micro x accum", "recompute", "conv", "peak MiB", "budget", "step ms", "images/s", "fits");
  for (size_t i = 0; i < p.ladder.size(); ++i) {
    const PlanRung& r = p.ladder[i];
    const double use = 100.0 * double(r.peak_bytes) / double(c.memory_bytes);
    o += fmt::format("  {:>2}  {:<9}  {:>13}  {:<9}  {:<6}  {:>10}  {:>6.0f}%  {:>9}  {:>9.1f}  {}{}\n", i + 1,
                     r.precision, fmt::format("{} x {}", r.micro_batch, r.accum), r.recompute ? "yes" : "no",
                     r.direct_conv ? "direct" : "auto", mib(r.peak_bytes), use,
                     step_ms(r.step_s), r.images_per_s, r.fits ? "yes" : "no",
                     int(i) == p.chosen ? "  <- recommended" : "");
  }
  o += "\n";
  if (const PlanRung* b = p.best()) {
    o += fmt::format("recommended: rung {} ({}), the fastest that fits: {} predicted ({:.0f}% of the budget), {} ms per "
                     "step, {:.1f} images/s\n",
                     p.chosen + 1, rung_label(*b), format_mib(b->peak_bytes),
                     100.0 * double(b->peak_bytes) / double(c.memory_bytes), step_ms(b->step_s), b->images_per_s);
    o += "  " + plan_train_command(p, *b) + "\n";
  } else {
    const int s = p.smallest();
    if (s >= 0) {
      const PlanRung& r = p.ladder[size_t(s)];
      o += fmt::format("nothing fits in {}: the smallest predicted peak is {} (rung {}: {}); it needs a budget of at "
                       "least {}, a smaller effective batch or model, or a device with more memory\n",
                       format_mib(c.memory_bytes), format_mib(r.peak_bytes), s + 1, rung_label(r),
                       format_mib(r.peak_bytes));
    } else {
      o += fmt::format("nothing fits in {}: no rung was tried\n", format_mib(c.memory_bytes));
    }
  }
  return o;
}

std::string plan_json(const Plan& p) {
  using nlohmann::json;
  const PlanConfig& c = p.config;
  json j;
  j["model"] = c.model;
  j["batch"] = c.batch;
  j["memory_bytes"] = c.memory_bytes;
  j["device"] = c.device;
  j["device_description"] = p.device_description;
  j["device_memory_bytes"] = p.device_memory_bytes;
  j["input"] = c.input;
  j["num_classes"] = c.num_classes;
  j["optimizer"] = c.optimizer;
  j["precisions"] = c.precisions;
  j["allow_recompute"] = c.allow_recompute;
  j["allow_direct_conv"] = c.allow_direct_conv;
  j["recompute_applies"] = p.recompute_applies;
  j["notes"] = p.notes;
  j["search_s"] = p.search_s;
  json ladder = json::array();
  for (const PlanRung& r : p.ladder)
    ladder.push_back({{"micro_batch", r.micro_batch},
                      {"accum", r.accum},
                      {"precision", r.precision},
                      {"recompute", r.recompute},
                      {"direct_conv", r.direct_conv},
                      {"peak_bytes", r.peak_bytes},
                      {"step_s", r.step_s},
                      {"images_per_s", r.images_per_s},
                      {"fits", r.fits}});
  j["ladder"] = ladder;
  j["chosen"] = p.chosen;  // index into ladder, -1: nothing fits
  if (const PlanRung* b = p.best()) {
    j["recommended"] = ladder[size_t(p.chosen)];
    j["command"] = plan_train_command(p, *b);
  } else {
    j["recommended"] = nullptr;
    const int s = p.smallest();
    j["smallest_peak_bytes"] = s >= 0 ? p.ladder[size_t(s)].peak_bytes : 0;
  }
  return j.dump(2) + "\n";
}

}  // namespace reckon
