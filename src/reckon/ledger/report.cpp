// The ledger as text (what `reckon ledger` prints) and as JSON. Every figure printed here is a
// field of the Ledger struct or a sum/ratio of them; nothing is estimated here.
#include <cmath>
#include <nlohmann/json.hpp>

#include "reckon/ledger/ledger.h"

namespace reckon {

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  std::string unit = text.substr(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  std::string u;
  for (char ch : unit) u += char(std::tolower(static_cast<unsigned char>(ch)));
  double mul = u == "" || u == "b" ? 1.0
               : u == "k" || u == "kb"   ? 1e3
               : u == "m" || u == "mb"   ? 1e6
               : u == "g" || u == "gb"   ? 1e9
               : u == "t" || u == "tb"   ? 1e12
               : u == "kib"              ? 1024.0
               : u == "mib"              ? 1024.0 * 1024
               : u == "gib"              ? 1024.0 * 1024 * 1024
               : u == "tib"              ? 1024.0 * 1024 * 1024 * 1024
                                         : -1;
  RK_CHECK(end > 0 && mul > 0 && std::isfinite(v) && v > 0 && v * mul < 9e18,
           "{}: '{}' is not a memory size (e.g. 4GiB, 512MiB, 2GB, 1000000)", flag, text);
  // A size with no unit is bytes: "0.5" would round to 0 (no budget) and pass unnoticed.
  RK_CHECK(v * mul >= 1.0 && (mul != 1.0 || v == std::floor(v)),
           "{}: '{}' is a fraction of a byte; give a unit (e.g. {}GiB) or a whole number of bytes", flag, text, text);
  return int64_t(v * mul);
}

std::string format_mib(int64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20)); }

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string format_si(double v) {
  const char* units[] = {"", " k", " M", " G", " T", " P"};
  int u = 0;
  double a = std::fabs(v);
  while (a >= 999.5 && u < 5) {
    a /= 1000.0;
    v /= 1000.0;
    ++u;
  }
  if (u == 0 && a == std::floor(a)) return fmt::format("{:.0f}", v);
  if (a >= 99.95) return fmt::format("{:.0f}{}", v, units[u]);
  if (a >= 9.995) return fmt::format("{:.1f}{}", v, units[u]);
  return fmt::format("{:.2f}{}", v, units[u]);
}

std::string format_count(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return (v < 0 ? "-" : "") + r;
}

namespace {

std::string fmt_ms(double s) {
  const double ms = s * 1e3;
  if (ms >= 99.95) return fmt::format("{:.0f}", ms);
  if (ms >= 9.995) return fmt::format("{:.1f}", ms);
  return fmt::format("{:.2f}", ms);
}

std::string fmt_duration(double s) {
  if (s < 1.0) return fmt::format("{:.0f} ms", s * 1e3);
  if (s < 120.0) return fmt::format("{:.1f} s", s);
  if (s < 7200.0) return fmt::format("{:.1f} min", s / 60.0);
  if (s < 2.0 * 86400.0) return fmt::format("{:.1f} h", s / 3600.0);
  return fmt::format("{:.1f} days", s / 86400.0);
}

std::string fmt_err(double predicted, double measured) {
  if (measured == 0.0) return predicted == 0.0 ? "0.0%" : "n/a";
  return fmt::format("{:+.1f}%", 100.0 * (predicted - measured) / measured);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string r;
  for (const auto& s : v) r += (r.empty() ? "" : sep) + s;
  return r;
}

std::string optimizer_desc(const LedgerConfig& c) {
  if (c.optimizer == "adamw") return "AdamW (2 moments per parameter)";
  return c.momentum != 0.0 ? fmt::format("SGD (momentum {})", c.momentum) : "SGD (no momentum)";
}

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

}  // namespace

std::string format_ledger(const Ledger& l) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  const LedgerTotals& t = l.totals;
  const LedgerTime& main = l.times.front();
  line(fmt::format("reckon ledger: {} ({}), one training step run on the meta device", l.model, l.model_type));
  line(fmt::format("  input {} {} ({}), {} classes, cross-entropy loss, {}", shape_str(l.input_shape),
                   l.config.precision == "fp32" ? "fp32" : l.config.precision + " autocast (f32 master weights)",
                   format_mib(t.input_bytes), l.num_classes, optimizer_desc(l.config)));
  if (!l.config.freeze.empty()) {
    std::string names;
    for (const auto& f : l.config.freeze) names += (names.empty() ? "" : ", ") + f;
    line(fmt::format("  frozen (not trained): {}; {} of {} parameters train", names, format_count(t.trainable_params),
                     format_count(t.params)));
  }
  if (t.winograd_ops > 0)
    line(fmt::format("  convolutions: {} calls of the step planned as Winograd (more workspace, fewer FLOPs; "
                     "--conv-algo direct: none)",
                     t.winograd_ops));
  if (l.config.accum > 1) {
    line(fmt::format("  gradient accumulation: {} micro-batches of {} = effective batch {} per optimizer step",
                     l.config.accum, l.input_shape[0], t.batch));
    bool bn = false;
    for (const auto& r : l.rows) bn = bn || r.type == "BatchNorm2d";
    if (bn)
      line(fmt::format("  note: batch-norm statistics see one micro-batch of {}, not the effective batch of {}",
                       l.input_shape[0], t.batch));
  }
  if (l.config.recompute)
    line(fmt::format("  recomputation: blocks keep only their input; {} forward MACs run again in backward "
                     "(+{:.0f}% of the step's MACs)",
                     format_si(double(t.recompute_macs)),
                     100.0 * double(t.recompute_macs) / double(std::max<int64_t>(1, t.fwd_macs + t.bwd_macs - t.recompute_macs))));
  line("");

  // ---- per layer ----
  size_t wscope = 5, wtype = 4, wops = 3, wshape = 6;
  for (const auto& r : l.rows) {
    wscope = std::max(wscope, r.scope.size());
    wtype = std::max(wtype, r.type.size());
    wops = std::max(wops, std::min<size_t>(join(r.ops, ",").size(), 28));
    wshape = std::max(wshape, shape_str(r.out_shape).size());
  }
  const std::string bound_hdr = fmt::format("bound on {} (FLOP/B vs ridge {:.1f})", main.device.name, main.ridge);
  line(fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>12}  {:>9}  {:>9}  {:>10}  {:>10}  {:>8}  {:>9}  {}", "layer",
                   wscope, "type", wtype, "ops", wops, "output", wshape, "params", "fwd MACs", "bwd MACs", "saved MiB",
                   "moved MiB", "FLOP/B", fmt::format("{} ms", main.device.name), bound_hdr));
  for (const auto& r : l.rows) {
    line(fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>12}  {:>9}  {:>9}  {:>10.2f}  {:>10.1f}  {:>8.1f}  {:>9}  {}",
                     r.scope, wscope, r.type, wtype, cut(join(r.ops, ","), 28), wops, shape_str(r.out_shape), wshape,
                     format_count(r.params), format_si(double(r.fwd_macs)), format_si(double(r.bwd_macs)),
                     double(r.saved_bytes) / (1 << 20), double(r.bytes_moved) / (1 << 20), r.intensity,
                     fmt_ms(r.time_s), r.compute_bound ? "compute" : "memory"));
  }
  line("");

  // ---- totals ----
  line(fmt::format("{:<34}  {:>12}  {:>14}", "totals", "per image", fmt::format("per step (batch {})", t.batch)));
  auto total = [&](const std::string& name, int64_t v) {
    line(fmt::format("  {:<32}  {:>12}  {:>14}", name, format_si(t.per_image(v)), format_si(double(v))));
  };
  total("forward MACs", t.fwd_macs);
  total("  conv MACs", t.conv_macs);
  total("  linear MACs (linear, matmul)", t.linear_macs);
  total("backward MACs", t.bwd_macs);
  if (t.recompute_macs > 0) total("  of which recomputed forward", t.recompute_macs);
  total("FLOPs (2 x MACs + other FLOPs)", t.flops);
  line(fmt::format("  {:<32}  {:>12}  {:>14}", "bytes moved (MiB)", fmt::format("{:.1f}", t.per_image(t.bytes_moved) / (1 << 20)),
                   fmt::format("{:.1f}", double(t.bytes_moved) / (1 << 20))));
  line(fmt::format("  {:<32}  {:>12}  {:>14}", "activations saved (MiB)",
                   fmt::format("{:.2f}", t.per_image(t.saved_bytes) / (1 << 20)),
                   fmt::format("{:.1f}", double(t.saved_bytes) / (1 << 20))));
  line(fmt::format("  {:<32}  {:>12}  {:>14}", "op calls", "", format_count(t.num_ops)));
  line(fmt::format("  parameters {} ({})", format_count(t.params), format_mib(t.param_bytes)));
  line(fmt::format("  (optimizer): its update ops move {} (as they declare)", format_mib(t.optimizer_bytes)));
  line("");

  // ---- memory ----
  line("memory at the moment of peak (predicted on the meta device)");
  for (int i = 0; i < kNumTags; ++i)
    line(fmt::format("  {:<12} {:>14}", tag_name(Tag(i)), format_mib(l.memory.at_peak_bytes[size_t(i)])));
  line(fmt::format("  {:<12} {:>14}", "peak", format_mib(l.memory.peak_bytes)));
  const LedgerMemory& lm = l.memory;
  line(fmt::format("process peak resident memory (VmHWM), predicted: {}", format_mib(lm.process_peak_bytes)));
  line(fmt::format("  {:<66} {:>12}", "this process once the step is planned (code, libraries, kernels)",
                   format_mib(lm.process_planned_bytes)));
  line(fmt::format("  {:<66} {:>12}", "reckon's allocator at its peak: the pages its blocks reach",
                   format_mib(lm.allocator_resident_bytes)));
  line(fmt::format("    {:<64} {:>12}", "of which freed blocks kept for reuse (at the step's end)",
                   format_mib(lm.allocator_cached_bytes)));
  line(fmt::format("  {:<66} {:>12}", "running the kernels (threads, the code they run)",
                   format_mib(lm.process_overhead_bytes)));
  line(fmt::format("    ({})", lm.process_overhead_source));
  line("  not seen by the meta device: workspace of kernels that do not plan (--measure shows each)");
  line("");

  // ---- time ----
  line(fmt::format("time per step: each op max(FLOPs / peak, bytes / bandwidth), the roofline, on its op family's "
                   "calibrated line (fixed cost + scale x roofline, + its layout conversions; the GPUs: the roofline "
                   "+ a per-op overhead); {}",
                   l.config.precision));
  const bool run = l.config.dataset_size > 0;
  line(fmt::format("  {:<10} {:>12} {:>10} {:>7} {:>10} {:>9} {:>9} {:>9} {:>10} {:>8}  {}", "device", "peak TFLOP/s",
                   "GB/s", "ridge", "step ms", "compute", "memory", "overhead", "images/s", "fits",
                   run ? fmt::format("run: {} images x {} epochs", format_count(l.config.dataset_size), l.config.epochs)
                       : std::string("(--dataset-size N --epochs E: a whole run)")));
  for (const auto& d : l.times) {
    line(fmt::format("  {:<10} {:>12.2f} {:>10.1f} {:>7.1f} {:>10} {:>9} {:>9} {:>9} {:>10.1f} {:>8}  {}", d.device.name,
                     d.peak_flops / 1e12, d.device.bandwidth_bytes / 1e9, d.ridge, fmt_ms(d.step_s), fmt_ms(d.compute_s),
                     fmt_ms(d.memory_s), fmt_ms(d.overhead_s), double(t.batch) / d.step_s,
                     d.fits ? "yes" : "NO", run ? fmt_duration(d.run_s) : ""));
  }
  for (const auto& d : l.times)
    if (d.device.name == "cpu")
      line(fmt::format("  cpu: {}; {}; a convolution planned as Winograd counts its direct FLOPs / {:.2f}; kernels' "
                       "layout conversions at {:.0f} GB/s; {} ops "
                       "timed by their family's line, {} by their op's, {} by the bare roofline{}",
                       d.device.description, d.device.source, d.device.winograd_speedup,
                       d.device.reorder_bandwidth / 1e9, d.family_line_ops,
                       d.op_line_ops, d.roofline_ops,
                       d.roofline_families.empty() ? "" : fmt::format(" ({})", fmt::join(d.roofline_families, ", "))));
  for (const auto& d : l.times)
    if (d.device.name == "cpu" && !d.device.bandwidth_curve.empty()) {
      auto points = [](const std::vector<std::pair<double, double>>& c) {
        std::vector<std::string> pts;
        for (const auto& [bytes, bw] : c) pts.push_back(fmt::format("{} {:.0f}", format_mib(int64_t(bytes)), bw / 1e9));
        return fmt::format("{}", fmt::join(pts, ", "));
      };
      line(fmt::format("  cpu: bandwidth by the bytes an op moves (GB/s; between two points interpolated, past the last "
                       "one the memory's): {}",
                       points(d.device.bandwidth_curve)));
      if (!d.device.inplace_bandwidth_curve.empty())
        line(fmt::format("  cpu: in place (an op that writes what it read; the optimizer's updates at the last "
                         "point, the memory's): {}",
                         points(d.device.inplace_bandwidth_curve)));
    }
  for (const auto& d : l.times)
    if (d.device.name == "cpu")
      if (const std::string n = slower_precision_note(d.device, d.precision); !n.empty()) line("  " + n);
  line(fmt::format("  {}: {} ops compute-bound, {} bandwidth-bound (ridge {:.1f} FLOP/B = {:.2f} TFLOP/s / {:.0f} GB/s)",
                   main.device.name, main.compute_bound_ops, main.memory_bound_ops, main.ridge, main.peak_flops / 1e12,
                   main.device.bandwidth_bytes / 1e9));

  // ---- measured ----
  const LedgerMeasured& m = l.measured;
  if (!m.ran) return o;
  line("");
  line(fmt::format("predicted vs measured: the same step run on the cpu ({} timed step{} after a warm-up step; time: "
                   "each op's best)",
                   m.steps, m.steps == 1 ? "" : "s"));
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "memory at the moment of peak", "predicted", "measured", "error"));
  for (int i = 0; i < kNumTags; ++i) {
    const int64_t p = l.memory.at_peak_bytes[size_t(i)], q = m.memory.at_peak_bytes[size_t(i)];
    line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", tag_name(Tag(i)), format_mib(p), format_mib(q),
                     fmt_err(double(p), double(q))));
  }
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "peak (reckon's allocator)", format_mib(l.memory.peak_bytes),
                   format_mib(m.memory.peak_bytes), fmt_err(double(l.memory.peak_bytes), double(m.memory.peak_bytes))));
  line("  process peak resident memory (VmHWM)");
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "  once the step is planned (the same)", format_mib(lm.process_planned_bytes),
                   format_mib(lm.process_planned_bytes), ""));
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "  reckon's allocator (pages reached)", format_mib(lm.allocator_resident_bytes),
                   format_mib(m.allocator_resident_bytes),
                   fmt_err(double(lm.allocator_resident_bytes), double(m.allocator_resident_bytes))));
  const int64_t rest = m.process_peak_bytes - m.allocator_resident_bytes - lm.process_planned_bytes;
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "  running the kernels", format_mib(lm.process_overhead_bytes),
                   format_mib(rest), ""));
  line(fmt::format("  {:<40} {:>13} {:>13} {:>8}", "  the process's peak", format_mib(lm.process_peak_bytes),
                   format_mib(m.process_peak_bytes), fmt_err(double(lm.process_peak_bytes), double(m.process_peak_bytes))));
  line("  not seen by the meta device (named, not folded into the prediction):");
  line(fmt::format("    {:<54} {:>13}", "workspace of kernels that do not plan (largest request)",
                   format_mib(m.unplanned_workspace_bytes)));
  if (!m.unplanned_ops.empty()) line(fmt::format("      by {}", m.unplanned_ops));
  line("");

  double pred_sum = 0, meas_sum = 0;
  line(fmt::format("  {:<{}} {:>14} {:>13} {:>8}", "time on this cpu", wscope + 2, "predicted ms", "measured ms", "error"));
  for (const auto& r : l.rows) {
    line(fmt::format("  {:<{}} {:>14} {:>13} {:>8}", r.scope, wscope + 2, fmt_ms(r.cpu_time_s), fmt_ms(r.measured_s),
                     fmt_err(r.cpu_time_s, r.measured_s)));
    pred_sum += r.cpu_time_s;
    meas_sum += r.measured_s;
  }
  line(fmt::format("  {:<{}} {:>14} {:>13} {:>8}", "step", wscope + 2, fmt_ms(pred_sum), fmt_ms(m.step_s),
                   fmt_err(pred_sum, m.step_s)));
  line(fmt::format("  (the fastest whole step took {} ms)", fmt_ms(m.best_step_wall_s)));
  for (const auto& d : l.times)
    if (d.device.name == "cpu" && d.device.fp32_flops > 0 && m.fp32_flops_now > 0)
      line(fmt::format("  (this cpu's fp32 peak just after: {:.0f} GFLOP/s, {:.0f}% of the {:.0f} it was calibrated at; "
                       "the prediction is at the calibration's speed)",
                       m.fp32_flops_now / 1e9, 100 * m.fp32_flops_now / d.device.fp32_flops, d.device.fp32_flops / 1e9));
  return o;
}

std::string ledger_json(const Ledger& l) {
  using json = nlohmann::ordered_json;
  auto tags = [](const std::array<int64_t, kNumTags>& a) {
    json j = json::object();
    for (int i = 0; i < kNumTags; ++i) j[std::string(tag_name(Tag(i)))] = a[size_t(i)];
    return j;
  };
  json j;
  j["model"] = l.model;
  j["model_type"] = l.model_type;
  j["input_shape"] = l.input_shape;
  j["num_classes"] = l.num_classes;
  j["config"] = {{"batch", l.config.batch},         {"precision", l.config.precision},
                 {"optimizer", l.config.optimizer}, {"momentum", l.config.momentum},
                 {"device", l.config.device},       {"dataset_size", l.config.dataset_size},
                 {"epochs", l.config.epochs},       {"plan_workspace", l.config.plan_workspace},
                 {"conv_algo", l.config.conv_algo}, {"freeze", l.config.freeze},
                 {"memory_format", l.config.memory_format}};
  json rows = json::array();
  for (const auto& r : l.rows)
    rows.push_back({{"scope", r.scope},
                    {"type", r.type},
                    {"ops", r.ops},
                    {"output_shape", r.out_shape},
                    {"params", r.params},
                    {"fwd_macs", r.fwd_macs},
                    {"bwd_macs", r.bwd_macs},
                    {"fwd_flops", r.fwd_flops},
                    {"bwd_flops", r.bwd_flops},
                    {"saved_bytes", r.saved_bytes},
                    {"bytes_moved", r.bytes_moved},
                    {"workspace_bytes", r.workspace_bytes},
                    {"num_ops", r.num_ops},
                    {"flops_per_byte", r.intensity},
                    {"time_s", r.time_s},
                    {"compute_bound", r.compute_bound},
                    {"cpu_time_s", r.cpu_time_s},
                    {"measured_s", r.measured_s}});
  j["layers"] = rows;
  const LedgerTotals& t = l.totals;
  j["totals"] = {{"batch", t.batch},
                 {"params", t.params},
                 {"trainable_params", t.trainable_params},
                 {"param_bytes", t.param_bytes},
                 {"fwd_macs", t.fwd_macs},
                 {"bwd_macs", t.bwd_macs},
                 {"conv_macs", t.conv_macs},
                 {"linear_macs", t.linear_macs},
                 {"flops", t.flops},
                 {"bytes_moved", t.bytes_moved},
                 {"saved_bytes", t.saved_bytes},
                 {"recompute_macs", t.recompute_macs},
                 {"winograd_ops", t.winograd_ops},
                 {"micro_batch", l.input_shape.empty() ? 0 : l.input_shape[0]},
                 {"accum", l.config.accum},
                 {"precision", l.config.precision},
                 {"recompute", l.config.recompute},
                 {"input_bytes", t.input_bytes},
                 {"optimizer_bytes", t.optimizer_bytes},
                 {"num_ops", t.num_ops},
                 {"fwd_macs_per_image", t.per_image(t.fwd_macs)},
                 {"conv_macs_per_image", t.per_image(t.conv_macs)},
                 {"flops_per_image", t.per_image(t.flops)}};
  j["memory"] = {{"at_peak_bytes", tags(l.memory.at_peak_bytes)},
                 {"tag_peak_bytes", tags(l.memory.tag_peak_bytes)},
                 {"peak_bytes", l.memory.peak_bytes},
                 {"process_planned_bytes", l.memory.process_planned_bytes},
                 {"allocator_resident_bytes", l.memory.allocator_resident_bytes},
                 {"allocator_cached_bytes", l.memory.allocator_cached_bytes},
                 {"process_overhead_bytes", l.memory.process_overhead_bytes},
                 {"process_overhead_source", l.memory.process_overhead_source},
                 {"process_peak_bytes", l.memory.process_peak_bytes}};
  json times = json::array();
  for (const auto& d : l.times) {
    auto curve = [](const std::vector<std::pair<double, double>>& c) {
      json a = json::array();
      for (const auto& [bytes, bw] : c) a.push_back({{"bytes", bytes}, {"bandwidth_bytes", bw}});
      return a;
    };
    times.push_back({{"device", d.device.name},
                     {"description", d.device.description},
                     {"source", d.device.source},
                     {"precision", d.precision},
                     {"peak_flops", d.peak_flops},
                     {"bandwidth_bytes", d.device.bandwidth_bytes},
                     {"bandwidth_curve", curve(d.device.bandwidth_curve)},
                     {"inplace_bandwidth_curve", curve(d.device.inplace_bandwidth_curve)},
                     {"memory_bytes", d.device.memory_bytes},
                     {"op_overhead_s", d.device.op_overhead_s},
                     {"winograd_speedup", d.device.winograd_speedup},
                     {"reorder_bandwidth", d.device.reorder_bandwidth},
                     {"ridge_flops_per_byte", d.ridge},
                     {"step_s", d.step_s},
                     {"compute_s", d.compute_s},
                     {"memory_s", d.memory_s},
                     {"overhead_s", d.overhead_s},
                     {"optimizer_s", d.optimizer_s},
                     {"compute_bound_ops", d.compute_bound_ops},
                     {"memory_bound_ops", d.memory_bound_ops},
                     {"family_line_ops", d.family_line_ops},
                     {"op_line_ops", d.op_line_ops},
                     {"roofline_ops", d.roofline_ops},
                     {"roofline_families", d.roofline_families},
                     {"op_families", d.device.op_families.size()},
                     {"fits", d.fits},
                     {"steps_per_epoch", d.steps_per_epoch},
                     {"epochs", d.epochs},
                     {"run_s", d.run_s}});
  }
  j["time"] = times;
  if (l.measured.ran) {
    const LedgerMeasured& m = l.measured;
    double cpu_speed = 0;  // the fp32 peak just after the steps over the calibration's
    for (const auto& d : l.times)
      if (d.device.name == "cpu" && d.device.fp32_flops > 0) cpu_speed = m.fp32_flops_now / d.device.fp32_flops;
    j["measured"] = {{"steps", m.steps},
                     {"at_peak_bytes", tags(m.memory.at_peak_bytes)},
                     {"tag_peak_bytes", tags(m.memory.tag_peak_bytes)},
                     {"peak_bytes", m.memory.peak_bytes},
                     {"peak_error", l.measured.memory.peak_bytes
                                        ? double(l.memory.peak_bytes - m.memory.peak_bytes) / double(m.memory.peak_bytes)
                                        : 0.0},
                     {"unplanned_workspace_bytes", m.unplanned_workspace_bytes},
                     {"unplanned_ops", m.unplanned_ops},
                     {"process_peak_bytes", m.process_peak_bytes},
                     {"allocator_resident_bytes", m.allocator_resident_bytes},
                     {"first_run_bytes", m.first_run_bytes},
                     {"step_s", m.step_s},
                     {"best_step_wall_s", m.best_step_wall_s},
                     {"fp32_flops_now", m.fp32_flops_now},
                     {"cpu_speed", cpu_speed},
                     {"optimizer_s", m.optimizer_s}};
    json ops = json::array();
    for (const auto& o : m.ops)
      ops.push_back({{"row", o.row}, {"op", o.op}, {"phase", o.phase}, {"family", o.family},
                     {"measured_s", o.measured_s}, {"predicted_s", o.predicted_s}});
    j["measured"]["ops"] = std::move(ops);
  }
  return j.dump(1) + "\n";
}

}  // namespace reckon
