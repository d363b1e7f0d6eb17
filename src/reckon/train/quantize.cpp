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

Tensor dequantize_int(const Tensor& t, double scale, int64_t zp);

namespace {
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

  // Programs per batch size (the test split's last batch may be smaller): fp32 and one per method.
  struct Programs {
    std::unique_ptr<engine::Engine> fp32;
    std::vector<std::unique_ptr<engine::Engine>> int8;
  };
  std::vector<engine::QuantOptions> opts;
  for (const auto& m : methods) {
    engine::QuantOptions o;
    engine::parse_method(m, o);
    o.per_channel = !a.per_tensor;
    o.keep_fp32 = a.keep_fp32;
    opts.push_back(o);
  }
  std::map<int64_t, Programs> by_batch;
  auto programs = [&](int64_t b) -> Programs& {
    auto it = by_batch.find(b);
    if (it != by_batch.end()) return it->second;
    engine::Program p = b == a.batch ? prog : fused_program(model, chw, b);
    Programs ps;
    for (const auto& o : opts) {
      auto q = engine::quantize_program(p, cal, o);
      ps.int8.push_back(std::make_unique<engine::Engine>(std::move(q.program), engine::EngineOptions{.passes = {}}));
    }
    ps.fp32 = std::make_unique<engine::Engine>(std::move(p), engine::EngineOptions{.passes = {}});
    return by_batch.emplace(b, std::move(ps)).first->second;
  };

  // The per-layer report, on the first calibration batch.
  for (size_t k = 0; k < methods.size(); ++k) {
    MethodReport mr;
    mr.method = opts[k].method == "percentile" ? fmt::format("percentile={:g}", opts[k].percentile_p) : opts[k].method;
    auto q = engine::quantize_program(prog, cal, opts[k]);
    std::vector<Tensor> fp(prog.graph.values.size()), iv(q.program.graph.values.size());
    engine::run_program(prog, first_batch[0], [&](int v, const Tensor& t) { fp[size_t(v)] = t; });
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
    r.methods.push_back(std::move(mr));
  }

  // Accuracy on the test split: fp32 and each method through the engine, batch by batch.
  {
    data::LoaderOptions lo;
    lo.batch = a.batch;
    lo.shuffle = false;
    lo.normalize = s.norm;
    data::Loader loader(*s.test, lo);
    loader.start_epoch(0);
    data::Batch b;
    int64_t right_fp = 0, n = 0;
    std::vector<int64_t> right(methods.size(), 0), agree(methods.size(), 0);
    std::vector<double> sig(methods.size(), 0), noise(methods.size(), 0);
    std::vector<int64_t> pf, pq;
    std::vector<float> dumped;
    const int64_t K = s.test->num_classes();
    while ((a.limit == 0 || n < a.limit) && loader.next(b)) {
      check_labels(b, K, a.data, 0);
      Tensor x = contiguous(b.x);
      Programs& ps = programs(x.size(0));
      Tensor yf = ps.fp32->run(x);
      right_fp += count_correct(yf, b.y, &pf);
      const float* pyf = yf.data<float>();
      for (size_t k = 0; k < methods.size(); ++k) {
        Tensor yq = ps.int8[k]->run(x);
        right[k] += count_correct(yq, b.y, &pq);
        for (size_t i = 0; i < pf.size(); ++i) agree[k] += pf[i] == pq[i];
        const float* pyq = yq.data<float>();
        if (k == 0 && !a.dump_outputs.empty()) dumped.insert(dumped.end(), pyq, pyq + yq.numel());
        for (int64_t i = 0; i < yq.numel(); ++i) {
          sig[k] += double(pyf[i]) * pyf[i];
          noise[k] += double(pyf[i] - pyq[i]) * (pyf[i] - pyq[i]);
        }
      }
      n += x.size(0);
    }
    r.test_images = n;
    r.fp32_accuracy = n ? double(right_fp) / double(n) : 0;
    for (size_t k = 0; k < methods.size(); ++k) {
      r.methods[k].int8_accuracy = n ? double(right[k]) / double(n) : 0;
      r.methods[k].agreement = n ? double(agree[k]) / double(n) : 0;
      r.methods[k].output_sqnr_db = noise[k] > 0 ? 10 * std::log10(sig[k] / noise[k]) : INFINITY;
    }
    if (!a.dump_outputs.empty()) {
      Tensor t = Tensor::empty({n, K}, DType::f32);
      std::copy(dumped.begin(), dumped.end(), t.data<float>());
      io::write_npy(a.dump_outputs, t);
    }
  }

  // The first method's program as a QDQ file (batch dimension left symbolic).
  if (!a.out.empty()) {
    auto q = engine::quantize_program(prog, cal, opts[0]);
    const std::string bytes = onnx::export_graph(
        q.program.graph, [&](const graph::Value& v) { return q.program.constants.at(v.id); }, {.dynamic_batch = true});
    onnx::write_file_atomic(a.out, bytes);
    r.out = a.out;
    r.out_bytes = int64_t(bytes.size());
  }

  // Size and speed at the report's batch size.
  Programs& ps = programs(a.batch);
  Tensor x = first_batch[0];
  r.fp32_weight_bytes = ps.fp32->weight_bytes();
  r.fp32_arena_bytes = ps.fp32->arena_bytes();
  r.fp32_ms = median_ms(*ps.fp32, x);
  for (size_t k = 0; k < methods.size(); ++k) {
    auto& e = *ps.int8[k];
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

Tensor dequantize_int(const Tensor& t, double scale, int64_t zp) {
  QuantizeAttrs qa{{scale}, {zp}, 1, quant_dtype_name(t.dtype())};
  return call1<DequantizeLinear>({t}, qa);
}

std::string format_quantize(const QuantizeReport& r) {
  auto kib = [](int64_t b) { return fmt::format("{:.1f} KiB", double(b) / 1024.0); };
  std::string s = fmt::format("reckon quantize {} on {}: calibrated on {} training images (batch {}), weights s8 {}\n",
                              r.model, r.data, r.calib_images, r.batch,
                              r.per_tensor ? "per tensor" : "per output channel");
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
