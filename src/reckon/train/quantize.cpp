// `reckon quantize` (quantize.h).
#include "reckon/train/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "reckon/engine/engine.h"
#include "reckon/io/npy.h"
#include "reckon/onnx/export.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"
#include "reckon/train/config.h"
#include "reckon/train/data_spec.h"
#include "reckon/train/eval.h"
#include "reckon/train/progress.h"

namespace reckon::train {

namespace {
// An 8-bit tensor's real values.
Tensor dequantize_int(const Tensor& t, double scale, int64_t zp) {
  QuantizeAttrs qa{{scale}, {zp}, 1, quant_dtype_name(t.dtype())};
  return call1<DequantizeLinear>({t}, qa);
}

// The fused program of the model at batch size b (the engine's passes run once here).
engine::Program fused_program(nn::Module& m, const Shape& chw, int64_t b) {
  Shape s{b};
  s.insert(s.end(), chw.begin(), chw.end());
  engine::Program p = engine::make_program(m, s);
  engine::run_passes(p);
  return p;
}

double median_ms(engine::Engine& e, const Tensor& x) {
  Tensor y = Tensor::empty(e.output_shape(), DType::f32);
  e.run(x, y);  // warm
  std::vector<double> t;
  const auto t_end = Clock::now() + std::chrono::milliseconds(400);
  while (t.size() < 5 || (t.size() < 200 && Clock::now() < t_end)) {
    const auto t0 = Clock::now();
    e.run(x, y);
    t.push_back(seconds_since(t0) * 1e3);
  }
  std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
  return t[t.size() / 2];
}

Tensor dequantized(const Tensor& t, double scale, int64_t zp) {
  if (scale == 0) return t;
  return dequantize_int(t, scale, zp);
}

std::vector<std::string> all_methods() { return {"minmax", "moving-average", "percentile", "mse", "entropy"}; }
}  // namespace

QuantizeReport quantize_model(const QuantizeArgs& a) {
  RK_CHECK(a.calib_batches >= 1, "--calib-batches must be at least 1 (got {})", a.calib_batches);
  RK_CHECK(a.batch >= 1 && a.batch <= 65536, "--batch must be in [1, 65536] (got {})", a.batch);
  RK_CHECK(a.limit >= 0, "--limit must be >= 0 (got {})", a.limit);
  ThreadsGuard threads_guard(a.threads);
  std::vector<std::string> methods;
  for (const auto& m : a.methods) {
    if (m == "all") {
      for (const auto& x : all_methods()) methods.push_back(x);
      continue;
    }
    engine::QuantOptions o;
    engine::parse_method(m, o);
    methods.push_back(m);
  }
  RK_CHECK(!methods.empty(), "--method: none given");
  EvalSetup s = prepare_evaluation(a.model, a.checkpoint, a.data, a.normalize);
  const Shape chw = s.test->sample_shape();
  nn::Module& model = *s.model;
  model.eval();

  QuantizeReport r;
  r.model = a.model;
  r.data = a.data;
  r.batch = a.batch;
  r.per_tensor = a.per_tensor;
  r.keep_auto = a.keep_auto;
  r.max_drop = a.max_drop;
  r.normalize = s.norm;

  // Calibration: full batches of the training split, shuffled with a fixed seed.
  engine::Program prog = fused_program(model, chw, a.batch);
  engine::Calibrator cal(prog);
  std::vector<Tensor> first_batch;
  {
    auto train_set = data::open_dataset(a.data, true, 0);
    data::LoaderOptions lo;
    lo.batch = a.batch;
    lo.shuffle = true;
    lo.drop_last = true;
    lo.seed = 1234;
    lo.normalize = s.norm;
    data::Loader loader(*train_set, lo);
    loader.start_epoch(0);
    data::Batch b;
    while (cal.batches() < a.calib_batches && loader.next(b)) {
      Tensor x = contiguous(b.x);
      if (first_batch.empty()) first_batch.push_back(x);
      cal.observe(x);
      r.calib_images += x.size(0);
    }
    RK_CHECK(cal.batches() > 0, "--data {}: its training split has fewer than --batch {} images", a.data, a.batch);
  }
  r.fixed_ranges = engine::fix_input_ranges(prog, cal, a.input_ranges);

  std::vector<engine::QuantOptions> opts;
  for (const auto& m : methods) {
    engine::QuantOptions o;
    engine::parse_method(m, o);
    o.per_channel = !a.per_tensor;
    o.keep_fp32 = a.keep_fp32;
    opts.push_back(o);
  }
  // Every layer the quantizer sees, by scope: --keep-fp32 names must be among them.
  const std::vector<engine::QuantLayer> all_layers = engine::quantize_program(prog, cal, opts[0]).layers;
  for (const auto& k : a.keep_fp32) {
    const bool known = std::any_of(all_layers.begin(), all_layers.end(), [&](const auto& L) { return L.name == k; });
    if (known) continue;
    std::string names;
    for (const auto& L : all_layers) names += (names.empty() ? "" : ", ") + L.name;
    RK_CHECK(false, "--keep-fp32 {}: no such int8 layer in {} (its layers: {})", k, a.model, names);
  }

  // The evaluated test images, their labels and the fp32 program's logits, batch by batch (the
  // last batch may be smaller: programs are made per batch size).
  struct TestBatch {
    Tensor x, y, fp32_logits;
    std::vector<int64_t> fp32_pred;
  };
  std::vector<TestBatch> test;
  std::map<int64_t, engine::Program> prog_by_batch;
  std::map<int64_t, std::unique_ptr<engine::Engine>> fp32;  // by batch size
  auto program_for = [&](int64_t b) -> const engine::Program& {
    auto it = prog_by_batch.find(b);
    if (it == prog_by_batch.end()) it = prog_by_batch.emplace(b, b == a.batch ? prog : fused_program(model, chw, b)).first;
    return it->second;
  };
  {
    data::LoaderOptions lo;
    lo.batch = a.batch;
    lo.shuffle = false;
    lo.normalize = s.norm;
    data::Loader loader(*s.test, lo);
    loader.start_epoch(0);
    data::Batch b;
    const int64_t K = s.test->num_classes();
    int64_t right = 0, n = 0;
    while ((a.limit == 0 || n < a.limit) && loader.next(b)) {
      check_labels(b, K, a.data, 0);
      TestBatch t{contiguous(b.x), b.y, Tensor(), {}};
      const int64_t bs = t.x.size(0);
      auto& e = fp32[bs];
      if (!e) e = std::make_unique<engine::Engine>(engine::Program(program_for(bs)), engine::EngineOptions{.passes = {}});
      t.fp32_logits = e->run(t.x);
      right += count_correct(t.fp32_logits, t.y, &t.fp32_pred);
      n += bs;
      test.push_back(std::move(t));
    }
    r.test_images = n;
    r.fp32_accuracy = n ? double(right) / double(n) : 0;
  }

  // One quantization's figures on the evaluated images (logits kept when `keep_logits`).
  struct Scored {
    double accuracy = 0, agreement = 0, sqnr_db = 0;
    std::vector<float> logits;
  };
  auto score = [&](const engine::QuantOptions& o, bool keep_logits) {
    std::map<int64_t, std::unique_ptr<engine::Engine>> int8;
    int64_t right = 0, agree = 0, n = 0;
    double sig = 0, noise = 0;
    Scored sc;
    std::vector<int64_t> pq;
    for (const TestBatch& t : test) {
      const int64_t bs = t.x.size(0);
      auto& e = int8[bs];
      if (!e)
        e = std::make_unique<engine::Engine>(engine::quantize_program(program_for(bs), cal, o).program,
                                             engine::EngineOptions{.passes = {}});
      Tensor yq = e->run(t.x);
      right += count_correct(yq, t.y, &pq);
      for (size_t i = 0; i < pq.size(); ++i) agree += t.fp32_pred[i] == pq[i];
      const float *pf = t.fp32_logits.data<float>(), *pyq = yq.data<float>();
      for (int64_t i = 0; i < yq.numel(); ++i) {
        sig += double(pf[i]) * pf[i];
        noise += double(pf[i] - pyq[i]) * (pf[i] - pyq[i]);
      }
      if (keep_logits) sc.logits.insert(sc.logits.end(), pyq, pyq + yq.numel());
      n += bs;
    }
    sc.accuracy = n ? double(right) / double(n) : 0;
    sc.agreement = n ? double(agree) / double(n) : 0;
    sc.sqnr_db = noise > 0 ? 10 * std::log10(sig / noise) : INFINITY;
    return sc;
  };

  // --keep-fp32 auto: each layer's sensitivity is the logits' SQNR with only it in int8; the
  // least tolerant layers go back to fp32 one at a time until the drop is within --max-drop.
  std::vector<MethodReport> reports(methods.size());
  if (a.keep_auto) {
    RK_CHECK(a.max_drop >= 0 && std::isfinite(a.max_drop), "--max-drop must be >= 0 points (got {})", a.max_drop);
    Tensor exact = engine::run_program(prog, first_batch[0]);
    for (size_t k = 0; k < methods.size(); ++k) {
      MethodReport& mr = reports[k];
      Scored full = score(opts[k], false);
      mr.full_int8_accuracy = full.accuracy;
      if (100 * (r.fp32_accuracy - full.accuracy) <= a.max_drop) continue;
      std::vector<std::pair<double, std::string>> sens;
      for (const auto& L : all_layers) {
        if (std::find(opts[k].keep_fp32.begin(), opts[k].keep_fp32.end(), L.name) != opts[k].keep_fp32.end()) continue;
        engine::QuantOptions alone = opts[k];
        alone.keep_fp32.clear();
        for (const auto& M : all_layers)
          if (M.name != L.name) alone.keep_fp32.push_back(M.name);
        auto q = engine::quantize_program(prog, cal, alone);
        sens.emplace_back(engine::sqnr_db(exact, engine::run_program(q.program, first_batch[0])), L.name);
      }
      std::stable_sort(sens.begin(), sens.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      mr.auto_met = false;
      for (const auto& [db, name] : sens) {
        opts[k].keep_fp32.push_back(name);
        const double acc = score(opts[k], false).accuracy;
        mr.auto_steps.push_back({name, db, acc});
        if (100 * (r.fp32_accuracy - acc) <= a.max_drop) {
          mr.auto_met = true;
          break;
        }
      }
    }
  }

  // Each method's int8 program at the report's batch size, with the layers it keeps in fp32.
  std::vector<engine::QuantizedProgram> qprogs;
  for (const auto& o : opts) qprogs.push_back(engine::quantize_program(prog, cal, o));

  // The per-layer report, on the first calibration batch.
  std::vector<Tensor> fp(prog.graph.values.size());
  engine::run_program(prog, first_batch[0], [&](int v, const Tensor& t) { fp[size_t(v)] = t; });
  for (size_t k = 0; k < methods.size(); ++k) {
    MethodReport& mr = reports[k];
    mr.method = opts[k].method == "percentile" ? fmt::format("percentile={:g}", opts[k].percentile_p) : opts[k].method;
    const engine::QuantizedProgram& q = qprogs[k];
    std::vector<Tensor> iv(q.program.graph.values.size());
    engine::run_program(q.program, first_batch[0], [&](int v, const Tensor& t) { iv[size_t(v)] = t; });
    for (const auto& L : q.layers) {
      LayerReport lr;
      lr.layer = L;
      const Tensor& e = fp[size_t(L.fp32_output)];
      const int v = L.fp32_output;
      lr.sqnr_db = engine::sqnr_db(e, dequantized(iv[size_t(L.int8_output)], q.value_scale[size_t(v)],
                                                  q.value_zero_point[size_t(v)]));
      mr.layers.push_back(lr);
    }
    mr.kept_fp32 = q.kept_fp32;
    mr.quantize_steps = q.quantize_steps;
    mr.dequantize_steps = q.dequantize_steps;
  }

  // Accuracy on the evaluated test images: each method (with the layers it keeps) against fp32.
  for (size_t k = 0; k < methods.size(); ++k) {
    Scored sc = score(opts[k], k == 0 && !a.dump_outputs.empty());
    reports[k].int8_accuracy = sc.accuracy;
    if (!a.keep_auto) reports[k].full_int8_accuracy = sc.accuracy;
    reports[k].agreement = sc.agreement;
    reports[k].output_sqnr_db = sc.sqnr_db;
    if (k == 0 && !a.dump_outputs.empty()) {
      const int64_t K = s.test->num_classes();
      Tensor t = Tensor::empty({r.test_images, K}, DType::f32);
      std::copy(sc.logits.begin(), sc.logits.end(), t.data<float>());
      io::write_npy(a.dump_outputs, t);
    }
  }
  r.methods = std::move(reports);

  // The first method's program as a QDQ file (batch dimension left symbolic).
  if (!a.out.empty()) {
    const engine::QuantizedProgram& q = qprogs[0];
    const std::string bytes = onnx::export_graph(
        q.program.graph, [&](const graph::Value& v) { return q.program.constants.at(v.id); }, {.dynamic_batch = true});
    onnx::write_file_atomic(a.out, bytes);
    r.out = a.out;
    r.out_bytes = int64_t(bytes.size());
  }

  // Size and speed at the report's batch size.
  auto& fe = fp32[a.batch];
  if (!fe) fe = std::make_unique<engine::Engine>(engine::Program(prog), engine::EngineOptions{.passes = {}});
  Tensor x = first_batch[0];
  r.fp32_weight_bytes = fe->weight_bytes();
  r.fp32_arena_bytes = fe->arena_bytes();
  r.fp32_ms = median_ms(*fe, x);
  for (size_t k = 0; k < methods.size(); ++k) {
    engine::Engine e(std::move(qprogs[k].program), engine::EngineOptions{.passes = {}});
    r.methods[k].int8_weight_bytes = e.weight_bytes();
    r.methods[k].int8_arena_bytes = e.arena_bytes();
    r.methods[k].int8_ms = median_ms(e, x);
    for (const auto& st : e.steps())
      if (st.op.rfind("conv2d int8", 0) == 0 && std::find(r.methods[k].impls.begin(), r.methods[k].impls.end(), st.impl) ==
                                                      r.methods[k].impls.end())
        r.methods[k].impls.push_back(st.impl);
  }
  return r;
}

std::string format_quantize(const QuantizeReport& r) {
  auto kib = [](int64_t b) { return fmt::format("{:.1f} KiB", double(b) / 1024.0); };
  std::string s = fmt::format("reckon quantize {} on {}: calibrated on {} training images (batch {}), weights s8 {}\n",
                              r.model, r.data, r.calib_images, r.batch,
                              r.per_tensor ? "per tensor" : "per output channel");
  if (r.fixed_ranges > 0)
    s += fmt::format("the inputs of {} layers take the ranges quantization-aware training learnt\n", r.fixed_ranges);
  for (const auto& m : r.methods) {
    s += fmt::format("\nmethod {}: {} int8 layers, {} quantize and {} dequantize steps\n", m.method, m.layers.size(),
                     m.quantize_steps, m.dequantize_steps);
    s += fmt::format("  {:<28} {:<26} {:>3}->{:<3} {:>10} {:>10} {:>21} {:>10} {:>8}\n", "layer", "op", "x", "y", "x scale",
                     "y scale", "y observed [min, max]", "y clip", "SQNR dB");
    for (const auto& l : m.layers) {
      const auto& L = l.layer;
      s += fmt::format("  {:<28} {:<26} {:>3}->{:<3} {:>10.4g} {:>10} {:>21} {:>10} {:>8.1f}\n", L.name.substr(0, 28),
                       L.op.substr(0, 26), L.x_dtype, L.y_dtype, L.x_scale,
                       L.y_scale > 0 ? fmt::format("{:.4g}", L.y_scale) : "-",
                       fmt::format("[{:.3g}, {:.3g}]", L.y_min + 0.0, L.y_max + 0.0),
                       L.y_threshold > 0 ? fmt::format("{:.4g}", L.y_threshold) : "-", l.sqnr_db);
    }
    if (r.keep_auto) {
      s += fmt::format("  keep-fp32 auto (max drop {:g} points): every layer int8 {:.2f}% (drop {:.2f})", r.max_drop,
                       100 * m.full_int8_accuracy, 100 * (r.fp32_accuracy - m.full_int8_accuracy));
      if (m.auto_steps.empty()) s += ", within: nothing kept\n";
      else s += "\n";
      for (const auto& st : m.auto_steps)
        s += fmt::format("    + {} in fp32 (with only it int8, logits at {:.1f} dB): {:.2f}% (drop {:.2f})\n", st.layer,
                         st.alone_sqnr_db, 100 * st.accuracy, 100 * (r.fp32_accuracy - st.accuracy));
      if (!m.auto_met) s += "    not met: every layer is in fp32 and the drop is still above --max-drop\n";
    }
    if (!m.kept_fp32.empty()) {
      s += "  in f32 between int8 layers:";
      for (const auto& k : m.kept_fp32) s += " " + k;
      s += "\n";
    }
  }
  s += fmt::format("\naccuracy on the test split ({} images), through the inference engine:\n", r.test_images);
  s += fmt::format("  {:<24} {:>9} {:>8} {:>10} {:>10} {:>12} {:>12} {:>10}\n", "", "top-1", "drop", "agreement",
                   "logit SQNR", "weights", "arena", "ms/batch");
  s += fmt::format("  {:<24} {:>8.2f}% {:>8} {:>10} {:>10} {:>12} {:>12} {:>10.3f}\n", "fp32", 100 * r.fp32_accuracy, "",
                   "", "", kib(r.fp32_weight_bytes), kib(r.fp32_arena_bytes), r.fp32_ms);
  for (const auto& m : r.methods)
    s += fmt::format("  {:<24} {:>8.2f}% {:>8.2f} {:>9.2f}% {:>7.1f} dB {:>12} {:>12} {:>10.3f}\n", "int8 " + m.method,
                     100 * m.int8_accuracy, 100 * (r.fp32_accuracy - m.int8_accuracy), 100 * m.agreement,
                     m.output_sqnr_db, kib(m.int8_weight_bytes), kib(m.int8_arena_bytes), m.int8_ms);
  if (!r.out.empty())
    s += fmt::format("wrote {} ({}: QDQ ONNX of the {} program, {})\n", r.out, kib(r.out_bytes), r.methods[0].method,
                     "inputs normalised as the report's training run");
  if (!r.methods.empty() && !r.methods[0].impls.empty()) {
    s += "int8 convolutions ran:";
    for (const auto& i : r.methods[0].impls) s += " " + i;
    s += "\n";
  }
  return s;
}

}  // namespace reckon::train
