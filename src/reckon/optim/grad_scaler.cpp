#include "reckon/optim/grad_scaler.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/node.h"
#include "reckon/ops/update.h"

namespace reckon::optim {

namespace {

constexpr const char* kKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"};

void check_options(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval,
                   const char* where) {
  const float s = float(init_scale);
  RK_CHECK(std::isfinite(s) && s > 0.0f, "[GradScaler] {}: the scale must be finite and > 0 as a float32, got {}",
           where, init_scale);
  RK_CHECK(growth_factor > 1.0, "[GradScaler] {}: growth_factor must be > 1, got {}", where, growth_factor);
  RK_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0, "[GradScaler] {}: backoff_factor must be in (0, 1), got {}",
           where, backoff_factor);
  RK_CHECK(growth_interval >= 1 && growth_interval <= INT32_MAX,
           "[GradScaler] {}: growth_interval must be in [1, 2^31 - 1] (the tracker is int32), got {}", where,
           growth_interval);
}

std::string param_label(const Tensor& p, size_t i) {
  return p.name().empty() ? fmt::format("parameter {}", i) : p.name();
}

// The single value of dict[key] (any dtype), checked to be one value on cpu.
double scalar_entry(const nn::StateDict& dict, const char* key) {
  const Tensor* t = dict.find(key);
  RK_CHECK(t != nullptr, "[GradScaler] load_state_dict: missing key '{}'", key);
  RK_CHECK(t->defined() && t->numel() == 1 && t->device() == Device::cpu,
           "[GradScaler] load_state_dict: '{}' must be a single value on cpu, got {}", key,
           t->defined() ? t->str() : std::string("an undefined tensor"));
  return t->get(0);
}

int64_t integral_entry(const nn::StateDict& dict, const char* key) {
  const double v = scalar_entry(dict, key);
  RK_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15,
           "[GradScaler] load_state_dict: '{}' must be an integer, got {}", key, v);
  return int64_t(v);
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o) {
  if (!o.enabled) return;
  check_options(o.init_scale, o.growth_factor, o.backoff_factor, o.growth_interval, "options");
  scale_ = float(o.init_scale);  // torch.full((), init_scale, dtype=torch.float32)
}

GradScaler::PerOptimizer& GradScaler::per_optimizer(const Optimizer& opt) {
  for (PerOptimizer& s : per_opt_)
    if (s.opt == &opt) return s;
  per_opt_.push_back(PerOptimizer{&opt});
  return per_opt_.back();
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  RK_CHECK(loss.defined(), "[GradScaler] scale: the loss is an undefined tensor");
  return ::reckon::scale(loss, double(scale_));
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& st = per_optimizer(opt);
  RK_CHECK(st.stage != Stage::unscaled,
           "[GradScaler] unscale_() has already been called on this optimizer since the last update()");
  RK_CHECK(st.stage != Stage::stepped, "[GradScaler] unscale_() is being called after step()");
  if (new_step_) {
    overflow_param_.clear();
    new_step_ = false;
  }
  // torch: self._scale.double().reciprocal().float() ("FP32 division can be imprecise for
  // certain compile options"). Multiplying by it is not dividing by the scale.
  // Each gradient's unscale is an op (unscale_grad_: g *= inv in place, found_inf set on an inf or
  // NaN), in the optimizer phase; the flag lives on the gradients' device and is read after each
  // op on the cpu (to name the first parameter that overflowed). On meta nothing overflows.
  const double inv = double(float(1.0 / double(scale_)));
  NoGrad no_grad;
  PhaseGuard phase(Phase::optimizer);
  Tensor found;
  const auto& params = opt.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    RK_CHECK(g.dtype() == DType::f32,
             "[GradScaler] unscale_: parameter {} ('{}') has a {} gradient; only float32 gradients are unscaled "
             "(keep the parameters, and so their gradients, in float32 under autocast)",
             i, p.name(), dtype_name(g.dtype()));
    RK_CHECK(g.device() == Device::cpu || g.is_meta(), "[GradScaler] unscale_: parameter {} ('{}') has a gradient on {}",
             i, p.name(), device_name(g.device()));
    st.checked = true;
    if (!found.defined()) found = full({}, 0.0, DType::f32, g.device());
    call<UnscaleGrad>({g, found}, {inv});
    if (!g.is_meta() && !st.found_inf && found.item() != 0.0) {
      st.found_inf = true;
      if (overflow_param_.empty()) overflow_param_ = param_label(p, i);
    }
  }
  st.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  RK_CHECK(per_optimizer(opt).stage != Stage::stepped,
           "[GradScaler] step() has already been called since the last update()");
  if (per_optimizer(opt).stage == Stage::ready) unscale_(opt);
  PerOptimizer& st = per_optimizer(opt);
  RK_CHECK(st.checked,
           "[GradScaler] step(): no inf checks were recorded for this optimizer: none of its {} parameters has a "
           "gradient",
           opt.params().size());
  if (st.found_inf) {
    ++skipped_steps_;
    st.stage = Stage::stepped;
    return false;
  }
  opt.step();
  per_optimizer(opt).stage = Stage::stepped;
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  bool checked = false, found_inf = false;
  for (const PerOptimizer& s : per_opt_) {
    checked = checked || s.checked;
    found_inf = found_inf || s.found_inf;
  }
  RK_CHECK(checked,
           "[GradScaler] update(): no inf checks were recorded since the last update() (call step() or unscale_() "
           "with gradients first)");
  // torch's _amp_update_scale_ kernel: float scale times double factor, in double, stored as
  // float; the tracker counts this step before it is compared with growth_interval.
  const float old_scale = scale_;
  if (found_inf) {
    scale_ = float(double(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
  } else {
    const int32_t successful = growth_tracker_ + 1;
    if (successful == options_.growth_interval) {
      const float grown = float(double(scale_) * options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;  // never grow past float32's range to inf
      growth_tracker_ = 0;
    } else {
      growth_tracker_ = successful;
    }
  }
  warning_.clear();
  if (found_inf && scale_ < 1.0f)
    warning_ = fmt::format(
        "[GradScaler] gradients overflowed (first in '{}') at scale {}, so the scale backs off to {}: below 1, "
        "the gradients overflow even unscaled. The loss may be diverging (lower the learning rate?) or the "
        "model's values may not fit float16's range (bf16-trained weights?); bf16 autocast needs no scaler",
        overflow_param_, old_scale, scale_);
  start_next_step();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  const float s = float(new_scale);
  RK_CHECK(std::isfinite(s) && s > 0.0f, "[GradScaler] update(new_scale): the scale must be finite and > 0, got {}",
           new_scale);
  scale_ = s;  // torch: self._scale.fill_(new_scale)
  warning_.clear();
  start_next_step();
}

void GradScaler::start_next_step() {
  scale_history_.push_back(scale_);
  per_opt_.clear();
  new_step_ = true;
}

nn::StateDict GradScaler::state_dict() const {
  nn::StateDict d;
  if (!options_.enabled) return d;
  d.insert("scale", Tensor::full({}, double(scale_), DType::f32));
  d.insert("growth_factor", Tensor::full({}, options_.growth_factor, DType::f64));
  d.insert("backoff_factor", Tensor::full({}, options_.backoff_factor, DType::f64));
  d.insert("growth_interval", Tensor::full({}, double(options_.growth_interval), DType::i64));
  d.insert("_growth_tracker", Tensor::full({}, double(growth_tracker_), DType::i32));
  return d;
}

void GradScaler::load_state_dict(const nn::StateDict& dict) {
  if (!options_.enabled) return;
  RK_CHECK(!dict.empty(),
           "[GradScaler] load_state_dict: the dict is empty, possibly because it was saved from a disabled "
           "GradScaler");
  for (const auto& [key, t] : dict) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    RK_CHECK(known,
             "[GradScaler] load_state_dict: unknown key '{}' (expected scale, growth_factor, backoff_factor, "
             "growth_interval, _growth_tracker)",
             key);
  }
  const double scale = scalar_entry(dict, "scale");
  const double growth_factor = scalar_entry(dict, "growth_factor");
  const double backoff_factor = scalar_entry(dict, "backoff_factor");
  const int64_t growth_interval = integral_entry(dict, "growth_interval");
  const int64_t tracker = integral_entry(dict, "_growth_tracker");
  check_options(scale, growth_factor, backoff_factor, growth_interval, "load_state_dict");
  RK_CHECK(tracker >= 0 && tracker < growth_interval,
           "[GradScaler] load_state_dict: '_growth_tracker' is {} but must be in [0, growth_interval = {})", tracker,
           growth_interval);
  scale_ = float(scale);
  options_.init_scale = scale;  // as torch: _init_scale = state_dict["scale"]
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  growth_tracker_ = int32_t(tracker);
}

}  // namespace reckon::optim
