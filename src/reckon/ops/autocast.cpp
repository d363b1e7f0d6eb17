#include "reckon/ops/autocast.h"

#include <map>
#include <utility>

#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon {

namespace {
thread_local AutocastState t_state;
thread_local int t_depth = 0;  // guards alive that turned autocast on
// Casts of parameters in the outermost guard: (source impl, dtype) -> (source, cast).
// The source is kept so its address cannot be reused by another tensor while cached.
thread_local std::map<std::pair<const TensorImpl*, DType>, std::pair<Tensor, Tensor>> t_cache;

Tensor cast_cached(const Tensor& t, DType d) {
  // Only casts that carry a graph: one made under NoGrad (e.g. a recomputed block's first,
  // graph-less forward) would hand a later use with grad on a weight that gets no gradient.
  const bool cacheable = t.is_leaf() && t.requires_grad() && grad_enabled();
  if (!cacheable) return cast(t, d);
  auto key = std::make_pair(&t.impl(), d);
  if (auto it = t_cache.find(key); it != t_cache.end()) return it->second.second;
  Tensor c = cast(t, d);
  t_cache.emplace(key, std::make_pair(t, c));
  return c;
}

int rank(DType t) {
  switch (t) {
    case DType::f64: return 3;
    case DType::f32: return 2;
    default: return 1;  // bf16, f16
  }
}
}  // namespace

AutocastState autocast_state() { return t_state; }
bool autocast_active() { return t_state.enabled && !in_backward(); }

Autocast::Autocast(DType dtype) : Autocast(AutocastState{dtype != DType::f32, dtype == DType::f32 ? DType::bf16 : dtype}) {}

Autocast::Autocast(AutocastState s) : prev_(t_state) {
  RK_CHECK(!s.enabled || s.dtype == DType::bf16 || s.dtype == DType::f16,
           "[autocast] the low-precision dtype must be bf16 or f16, not {}", dtype_name(s.dtype));
  t_state = s;
  ++t_depth;
}

Autocast::~Autocast() {
  t_state = prev_;
  if (--t_depth == 0) t_cache.clear();
}

DType precision_dtype(const std::string& p) {
  if (p == "fp32") return DType::f32;
  if (p == "bf16") return DType::bf16;
  if (p == "fp16") return DType::f16;
  throw Error(fmt::format("--precision: unknown precision '{}' (fp32, bf16 or fp16)", p));
}

std::string precision_name(DType d) {
  switch (d) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return std::string(dtype_name(d));
  }
}

namespace detail {

bool is_low_precision(DType t) { return t == DType::bf16 || t == DType::f16; }

int64_t autocast_cache_size() { return int64_t(t_cache.size()); }

void autocast_inputs(AmpPolicy p, std::vector<Tensor>& in) {
  switch (p) {
    case AmpPolicy::keep:
      return;
    case AmpPolicy::lower:
      for (auto& t : in)
        if (t.defined() && t.dtype() == DType::f32) t = cast_cached(t, t_state.dtype);
      return;
    case AmpPolicy::fp32:
      for (auto& t : in)
        if (t.defined() && is_low_precision(t.dtype())) t = cast(t, DType::f32);
      return;
    case AmpPolicy::promote: {
      DType widest = DType::u8;
      bool mixed = false;
      for (auto& t : in) {
        if (!t.defined() || !is_floating(t.dtype())) continue;
        if (widest == DType::u8) {
          widest = t.dtype();
        } else if (t.dtype() != widest) {
          mixed = true;
          // bf16 with f16: neither holds the other, so both go to f32.
          widest = rank(t.dtype()) > rank(widest) ? t.dtype() : rank(t.dtype()) < rank(widest) ? widest : DType::f32;
        }
      }
      if (!mixed) return;
      for (auto& t : in)
        if (t.defined() && is_floating(t.dtype()) && t.dtype() != widest) t = cast_cached(t, widest);
      return;
    }
  }
}

}  // namespace detail
}  // namespace reckon
