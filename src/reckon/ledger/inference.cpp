#include "reckon/ledger/inference.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "reckon/engine/quantize.h"
#include "reckon/ledger/ledger.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"

namespace reckon {

namespace {
double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5))];
}

// The weights' bytes at fp32, bf16 and int8 (conv and linear weights as int8 with one fp32 scale
// per output channel, their biases as int32; every other constant stays fp32).
void file_sizes(const engine::Program& p, InferenceLedger& l) {
  std::vector<int> role(p.graph.values.size(), 0);  // 1: a conv/linear weight, 2: its bias
  for (const auto& n : p.graph.nodes) {
    const OpClass c = op_info(n.op).op_class;
    if ((c == OpClass::conv || c == OpClass::linear) && n.inputs.size() > 1 && p.is_constant(n.inputs[1])) {
      role[size_t(n.inputs[1])] = 1;
      if (n.inputs.size() > 2 && p.is_constant(n.inputs[2])) role[size_t(n.inputs[2])] = 2;
    }
  }
  for (const auto& [id, t] : p.constants) {
    if (!is_floating(t.dtype())) continue;
    const int64_t n = t.numel();
    l.params += n;
    l.file_fp32 += 4 * n;
    l.file_bf16 += 2 * n;
    l.file_int8 += role[size_t(id)] == 1 ? n + 4 * t.size(0) : 4 * n;
  }
}
}  // namespace

std::vector<std::string> engine_step_families(const engine::StepInfo& s) {
  const std::string root = s.op.substr(0, s.op.find_first_of(" +"));
  const char* prec = s.op.find("int8") != std::string::npos ? "int8" : "fp32";
  std::vector<std::string> k;
  if (s.conv_width > 0) {  // a convolution: by its shape class first (time_model.h), as the training ledger does
    const std::string cls = conv_class({s.conv_width, s.conv_out_hw, false});
    k.push_back(fmt::format("engine | {} | {} [{}] {}", root, s.impl, prec, cls));
    k.push_back(fmt::format("engine | {} [{}] {}", root, prec, cls));
  }
  k.push_back(fmt::format("engine | {} | {} [{}]", root, s.impl, prec));
  k.push_back(fmt::format("engine | {} [{}]", root, prec));
  return k;
}

EngineStepTime engine_step_time(const DeviceSpec& d, const engine::StepInfo& s) {
  EngineStepTime t;
  const double peak = d.peak("fp32");
  // The MACs its kernel computes: oneDNN's direct convolutions skip the padded taps
  // (StepInfo::conv_tap_share); Winograd transforms whole padded tiles, gemm multiplies the
  // im2col matrix's zeros and reckon's own kernels (kind "direct") the padding's, so those
  // compute them all.
  const bool wino = s.impl.find("wino") != std::string::npos;
  const bool skips_padding = s.kind == "onednn" && conv_impl_skips_padding(s.impl);
  const double macs = double(s.cost.macs) * (skips_padding ? s.conv_tap_share : 1.0);
  double flops = 2 * macs + double(s.cost.flops);
  if (wino && d.winograd_speedup > 0)
    flops = 2 * macs / d.winograd_speedup + double(s.cost.flops);
  const double lanes = s.lane_use > 0 && s.lane_use < 1 ? s.lane_use : 1.0;  // the lanes it issues (KernelCtx::lane_use)
  flops /= lanes;
  // An int8 product: its MACs at the int8 peak, the rest of its FLOPs (requantization) at fp32.
  // reckon's direct loops compute an int8 first layer in f32 (exact integers): at the fp32 peak.
  const bool on_int8 = s.op.find("int8") != std::string::npos && !s.int8_in_f32 && s.cost.macs > 0;
  const double tc = on_int8 ? 2 * macs / lanes / d.peak("int8") + double(s.cost.flops) / peak : flops / peak;
  // ... and the weights of taps no output reads are not fetched (StepInfo::conv_weight_share).
  const double bytes =
      double(s.bytes_moved) - (skips_padding ? double(s.weight_bytes) * (1.0 - s.conv_weight_share) : 0.0);
  const double tm = bytes / d.bandwidth_at(bytes);
  t.roofline_s = std::max(tc, tm);
  t.compute_bound = tc >= tm;
  for (const std::string& k : engine_step_families(s))
    if (auto it = d.op_families.find(k); it != d.op_families.end()) {
      t.fixed_s = it->second.fixed_s;
      t.total_s = it->second.fixed_s + it->second.scale * t.roofline_s;
      t.line = k;
      return t;
    }
  t.fixed_s = d.name == "cpu" ? d.engine_step_overhead_s : d.op_overhead_s;
  t.total_s = t.roofline_s + t.fixed_s;
  return t;
}

namespace {
// Compiles p as the deployment ledger does: fp32 as it is; int8 after the passes, quantized with
// the ranges observed on calib (or, without, placeholder ranges: the meta device's plan).
engine::Engine compile_program(engine::Program p, const engine::EngineOptions& eo, bool int8, const Tensor* calib,
                               engine::QuantizedProgram* keep = nullptr, std::vector<engine::PassReport>* passes = nullptr) {
  if (!int8) return engine::Engine(std::move(p), eo);
  std::vector<engine::PassReport> reports = engine::run_passes(p, eo.passes);
  if (passes) *passes = std::move(reports);
  engine::Calibrator cal = calib ? engine::Calibrator(p) : engine::Calibrator::assumed(p);
  if (calib) cal.observe(*calib);
  engine::QuantizedProgram q = engine::quantize_program(p, cal, {});
  engine::EngineOptions qo = eo;
  qo.passes = {};
  if (!keep) return engine::Engine(std::move(q.program), qo);
  engine::Program prog = q.program;  // (the constants' storage shared)
  *keep = std::move(q);
  return engine::Engine(std::move(prog), qo);
}

// Each step's fastest time over `runs` timed runs of e on x.
std::vector<double> fastest_steps(engine::Engine& e, const Tensor& x, Tensor& y, int runs) {
  std::vector<double> best;
  for (int i = 0; i < runs; ++i) {
    const std::vector<double> t = e.run_timed(x, y);
    if (best.empty()) best = t;
    for (size_t k = 0; k < t.size() && k < best.size(); ++k) best[k] = std::min(best[k], t[k]);
  }
  return best;
}
}  // namespace

EngineProbe::EngineProbe(const DeviceSpec& d) : d_(d) {
  for (const ProbeNetwork& net : probe_networks())
    for (const bool int8 : {false, true})
      for (const Shape& shape : net.inputs) {
        Case c;
        c.x = Tensor::empty(shape);
        fill_normal_(c.x, 0.0, 1.0);
        // A case this cpu cannot compile or run leaves its families to the roofline and the
        // step overhead, rather than failing the calibration every ledger needs.
        try {
          c.e = std::make_unique<engine::Engine>(
              compile_program(engine::make_program(*net.module, shape), {}, int8, &c.x));
          c.y = Tensor::empty(c.e->output_shape());
          for (int i = 0; i < 3; ++i) c.e->run(c.x, c.y);
        } catch (const Error&) {
          continue;
        }
        cases_.push_back(std::move(c));
      }
}

EngineProbe::~EngineProbe() = default;

double EngineProbe::round() {
  std::vector<double> best;
  for (Case& c : cases_) {
    std::vector<double> t;
    try {
      t = fastest_steps(*c.e, c.x, c.y, 7);
    } catch (const Error&) {
      t.clear();  // (compiled, then failed: its earlier rounds' times stand, if any)
    }
    if (c.best.empty()) c.best = t;
    for (size_t k = 0; k < t.size() && k < c.best.size(); ++k) c.best[k] = std::min(c.best[k], t[k]);
    best.insert(best.end(), c.best.begin(), c.best.end());
  }
  return geometric_mean(best);
}

std::map<std::string, FamilyTime> EngineProbe::fit() const {
  std::map<std::string, std::vector<FamilySample>> by;
  for (const Case& c : cases_) {
    const auto& steps = c.e->steps();
    for (size_t k = 0; k < steps.size() && k < c.best.size(); ++k) {
      FamilySample s;
      s.op = steps[k].op;
      s.impl = steps[k].impl;
      s.roofline_s = engine_step_time(d_, steps[k]).roofline_s;
      s.measured_s = c.best[k];
      for (const std::string& key : engine_step_families(steps[k])) by[key].push_back(s);
    }
  }
  std::map<std::string, FamilyTime> out;
  for (const auto& [k, v] : by) out[k] = fit_family(v, d_.engine_step_overhead_s);
  return out;
}

InferenceLedger inference_ledger(const std::string& model_name, const InferenceConfig& cfg) {
  RK_CHECK(cfg.batch >= 1, "[ledger] --batch must be >= 1, got {}", cfg.batch);
  auto say = [&](const std::string& s) {
    if (cfg.progress) cfg.progress(s);
  };
  InferenceLedger l;
  l.model = model_name;
  l.config = cfg;
  say("calibrating " + cfg.device);
  l.device = device_spec(cfg.device);
  l.step_overhead_s = l.device.name == "cpu" ? l.device.engine_step_overhead_s : l.device.op_overhead_s;
  Shape in = cfg.input.empty() ? onnx::model_input_shape(model_name) : cfg.input;
  in.insert(in.begin(), cfg.batch);
  l.input_shape = in;
  if (onnx::is_onnx_path(model_name)) l.onnx_file_bytes = int64_t(std::filesystem::file_size(model_name));

  RK_CHECK(cfg.precision == "fp32" || cfg.precision == "int8",
           "[ledger] --precision {}: the inference engine runs fp32 and int8", cfg.precision);
  const bool int8 = cfg.precision == "int8";
  engine::EngineOptions o;
  o.passes = cfg.passes;
  o.blocked_layouts = cfg.blocked_layouts;
  // The program the engine compiles: at int8 the passes run here and the fused program is
  // quantized (cal: none on the meta device, placeholder ranges).
  std::vector<engine::PassReport> pass_reports;
  auto compile = [&](engine::Program p, const engine::EngineOptions& eo, const Tensor* calib) {
    engine::QuantizedProgram q;
    engine::Engine e = compile_program(std::move(p), eo, int8, calib, &q, &pass_reports);
    if (!int8) return e;
    l.int8_layers = int64_t(q.layers.size());
    if (!calib && l.int8_qdq_file_bytes < 0) {
      const auto zeros = [&](const graph::Value& v) {
        const Tensor& t = q.program.constants.at(v.id);
        return Tensor::zeros(t.shape(), t.dtype());
      };
      l.int8_qdq_file_bytes = int64_t(onnx::export_graph(q.program.graph, zeros, {.dynamic_batch = true}).size());
    }
    return e;
  };
  say("compiling " + model_name + " on the meta device");
  nn::ModelConfig mc;
  mc.device = Device::meta;
  auto meta = onnx::make_model(model_name, mc);
  engine::Program prog = engine::make_program(*meta, in);
  file_sizes(prog, l);
  engine::Engine e = compile(std::move(prog), o, nullptr);
  l.output_shape = e.output_shape();
  l.passes = int8 ? pass_reports : e.passes();
  l.reorders = e.reorders();
  {
    engine::EngineOptions plain = o;
    plain.blocked_layouts = false;
    engine::Engine p = compile(engine::make_program(*meta, in), plain, nullptr);
    l.reorders_plain = p.reorders();
  }
  l.arena_bytes = e.arena_bytes();
  l.values_bytes = e.values_bytes();
  l.weight_bytes = e.weight_bytes();
  for (const auto& s : e.steps()) {
    InferenceRow r;
    r.step = s;
    r.flops = double(2 * s.cost.macs + s.cost.flops);
    const EngineStepTime t = engine_step_time(l.device, s);
    r.predicted_s = t.total_s;
    r.line = t.line;
    r.bound = t.fixed_s > t.total_s - t.fixed_s ? "overhead" : t.compute_bound ? "compute" : "memory";
    l.macs += s.cost.macs;
    l.macs_read += double(s.cost.macs) * s.conv_tap_share;
    l.bytes_moved += s.bytes_moved;
    l.predicted_s += r.predicted_s;
    l.rows.push_back(std::move(r));
  }

  if (cfg.measure) {
    say("measuring on this cpu");
    auto m = onnx::make_model(model_name);
    engine::Program p = engine::make_program(*m, in);
    m.reset();
    Tensor calib = Tensor::empty(in);
    fill_normal_(calib, 0.0, 1.0);
    const int64_t before = tracker(Device::cpu).stats().live_bytes[size_t(Tag::activation)];
    engine::Engine real = compile(std::move(p), o, &calib);
    l.measured_arena_bytes = tracker(Device::cpu).stats().live_bytes[size_t(Tag::activation)] - before;
    RK_CHECK(real.steps().size() == e.steps().size(),
             "[ledger] the engine built with data has {} steps, on meta {}", real.steps().size(), e.steps().size());
    Tensor x = Tensor::empty(in), y = Tensor::empty(real.output_shape());
    fill_normal_(x, 0.0, 1.0);
    for (int i = 0; i < 5; ++i) real.run(x, y);
    const int64_t allocs0 = tracker(Device::cpu).stats().num_allocs;
    std::vector<double> lat;
    for (int i = 0; i < std::max(cfg.measure_runs, 5); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      real.run(x, y);
      lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const std::vector<double> best = fastest_steps(real, x, y, std::max(cfg.measure_runs / 2, 5));
    l.run_allocations = tracker(Device::cpu).stats().num_allocs - allocs0;
    for (size_t k = 0; k < best.size() && k < l.rows.size(); ++k) l.rows[k].measured_s = best[k];
    l.measured = true;
    l.measured_p50_s = pct(lat, 50);
    l.measured_p90_s = pct(lat, 90);
  }
  return l;
}

namespace {
std::string ms(double s) { return fmt::format("{:.3f}", 1e3 * s); }
std::string err(double pred, double meas) { return meas > 0 ? fmt::format("{:+.1f}%", 100.0 * (pred - meas) / meas) : "-"; }
}  // namespace

std::string format_inference(const InferenceLedger& l) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  const bool int8 = l.config.precision == "int8";
  line(fmt::format("deployment ledger: {}, input {}, {}, on {} ({})", l.model, shape_str(l.input_shape),
                   int8 ? fmt::format("int8 ({} conv/linear layers in int8)", l.int8_layers) : std::string("fp32"),
                   l.device.name, l.device.description));
  line(fmt::format("  roofline: {:.1f} GFLOP/s fp32{}, {:.1f} GB/s, {:.2f} us per engine step", l.device.peak("fp32") / 1e9,
                   int8 ? fmt::format(", {:.1f} G int8 OP/s", l.device.peak("int8") / 1e9) : std::string(),
                   l.device.bandwidth_bytes / 1e9, 1e6 * l.step_overhead_s));
  line("");
  std::string head = fmt::format("  {:<30} {:<34} {:>10} {:>11} {:>9} {:>10} {:>12}", "layer", "fused op", "MACs",
                                 "bytes moved", "bound", "pred ms", "arena offset");
  if (l.measured) head += fmt::format(" {:>10} {:>8}", "meas ms", "error");
  line(head);
  for (const auto& r : l.rows) {
    const auto& s = r.step;
    std::string row = fmt::format("  {:<30} {:<34} {:>10} {:>11} {:>9} {:>10} {:>12}", s.name.substr(0, 30),
                                  s.op.substr(0, 34), format_count(s.cost.macs), format_count(s.bytes_moved), r.bound,
                                  ms(r.predicted_s), s.out_offset < 0 ? std::string("-") : format_count(s.out_offset));
    if (l.measured) row += fmt::format(" {:>10} {:>8}", ms(r.measured_s), err(r.predicted_s, r.measured_s));
    line(row);
  }
  line("");
  line("totals");
  const double b = double(l.config.batch);
  line(fmt::format("  latency per request (batch {})  predicted {} ms{}", l.config.batch, ms(l.predicted_s),
                   l.measured ? fmt::format(", measured p50 {} ms (p90 {} ms), error {}", ms(l.measured_p50_s),
                                            ms(l.measured_p90_s), err(l.predicted_s, l.measured_p50_s))
                              : ""));
  line(fmt::format("  requests/s                       {:.1f} ({:.1f} images/s){}", 1.0 / l.predicted_s, b / l.predicted_s,
                   l.measured ? fmt::format(", measured {:.1f} ({:.1f} images/s)", 1.0 / l.measured_p50_s,
                                            b / l.measured_p50_s)
                              : ""));
  line(fmt::format("  MACs                             {}", format_count(l.macs)));
  if (std::llround(l.macs_read) < l.macs)
    line(fmt::format("    on taps that read the input    {} ({:.1f}%; the rest multiply a convolution's padding)",
                     format_count(std::llround(l.macs_read)), 100.0 * l.macs_read / double(l.macs)));
  line(fmt::format("  bytes moved                      {}", format_count(l.bytes_moved)));
  line(fmt::format("  arena                            {} ({} if no two values shared){}", format_mib(l.arena_bytes),
                   format_mib(l.values_bytes),
                   l.measured ? fmt::format(", measured {} ({}), {} allocations in the timed runs",
                                            format_mib(l.measured_arena_bytes),
                                            l.measured_arena_bytes == l.arena_bytes ? "exact" : "differs", l.run_allocations)
                              : ""));
  line(fmt::format("  weights in the engine's layouts  {}", format_mib(l.weight_bytes)));
  line(fmt::format("  file size                        fp32 {}, bf16 {}, int8 {} ({} weights){}", format_mib(l.file_fp32),
                   format_mib(l.file_bf16), format_mib(l.file_int8), format_count(l.params),
                   l.onnx_file_bytes >= 0 ? fmt::format("; the .onnx file: {}", format_mib(l.onnx_file_bytes)) : ""));
  if (l.int8_qdq_file_bytes >= 0)
    line(fmt::format("  int8 QDQ file                    {} bytes ({}: what reckon quantize --out writes)",
                     format_count(l.int8_qdq_file_bytes), format_mib(l.int8_qdq_file_bytes)));
  line(fmt::format("  reorders per run                 {} (plain layouts: {})", l.reorders, l.reorders_plain));
  line("");
  line("what each pass saved");
  line(fmt::format("  {:<24} {:>9} {:>14} {:>18}", "pass", "rewrites", "ops", "bytes moved"));
  for (const auto& p : l.passes)
    line(fmt::format("  {:<24} {:>9} {:>6} -> {:<5} {:>8} -> {}", p.name, p.rewrites, p.nodes_before, p.nodes_after,
                     format_count(p.bytes_before), format_count(p.bytes_after)));
  line(fmt::format("  {:<24} {:>9} {:>6} -> {:<5}", "choose_layouts", l.reorders_plain - l.reorders, l.reorders_plain,
                   l.reorders));
  line("  (choose_layouts: reorders per run with every value plain -> with the layouts chosen once)");
  return o;
}

std::string inference_json(const InferenceLedger& l) {
  using nlohmann::json;
  json rows = json::array();
  for (const auto& r : l.rows) {
    const auto& s = r.step;
    json j{{"name", s.name},           {"op", s.op},         {"kind", s.kind},           {"macs", s.cost.macs},
           {"flops", r.flops},         {"bytes_moved", s.bytes_moved}, {"weight_bytes", s.weight_bytes},
           {"arena_offset", s.out_offset}, {"out_bytes", s.out_bytes}, {"scratch_bytes", s.scratch_bytes},
           {"impl", s.impl},           {"in_place", s.in_place}, {"conv_tap_share", s.conv_tap_share},
           {"conv_weight_share", s.conv_weight_share}, {"bound", r.bound}, {"line", r.line}, {"predicted_ms", 1e3 * r.predicted_s}};
    if (l.measured) j["measured_ms"] = 1e3 * r.measured_s;
    rows.push_back(j);
  }
  json passes = json::array();
  for (const auto& p : l.passes)
    passes.push_back({{"name", p.name}, {"rewrites", p.rewrites}, {"nodes_before", p.nodes_before},
                      {"nodes_after", p.nodes_after}, {"bytes_before", p.bytes_before}, {"bytes_after", p.bytes_after},
                      {"flops_before", p.flops_before}, {"flops_after", p.flops_after}});
  json j{{"model", l.model},
         {"input", l.input_shape},
         {"output", l.output_shape},
         {"batch", l.config.batch},
         {"precision", l.config.precision},
         {"int8_layers", l.int8_layers},
         {"device", l.device.name},
         {"step_overhead_us", 1e6 * l.step_overhead_s},
         {"steps", rows},
         {"passes", passes},
         {"totals",
          {{"predicted_latency_ms", 1e3 * l.predicted_s},
           {"requests_per_s", 1.0 / l.predicted_s},
           {"images_per_s", double(l.config.batch) / l.predicted_s},
           {"macs", l.macs},
           {"macs_read", std::llround(l.macs_read)},
           {"bytes_moved", l.bytes_moved},
           {"arena_bytes", l.arena_bytes},
           {"values_bytes", l.values_bytes},
           {"weight_bytes", l.weight_bytes},
           {"params", l.params},
           {"file_bytes", {{"fp32", l.file_fp32}, {"bf16", l.file_bf16}, {"int8", l.file_int8}, {"onnx", l.onnx_file_bytes},
                           {"int8_qdq", l.int8_qdq_file_bytes}}},
           {"reorders_per_run", l.reorders},
           {"reorders_plain_layouts", l.reorders_plain}}}};
  if (l.measured)
    j["measured"] = {{"p50_ms", 1e3 * l.measured_p50_s},
                     {"p90_ms", 1e3 * l.measured_p90_s},
                     {"arena_bytes", l.measured_arena_bytes},
                     {"run_allocations", l.run_allocations}};
  return j.dump(1) + "\n";
}

}  // namespace reckon
