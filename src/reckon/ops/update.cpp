#include "reckon/ops/update.h"

#include "reckon/ops/dispatch.h"

namespace reckon {

namespace {
// Every input of an update: defined (where required), f32, dense, the parameter's shape.
void check_same(std::string_view op, std::span<const Tensor> in, std::initializer_list<const char*> names) {
  RK_CHECK(in.size() == names.size(), "[{}] needs {} tensors, got {}", op, names.size(), in.size());
  const Tensor& p = in[0];
  size_t i = 0;
  for (const char* n : names) {
    const Tensor& t = in[i++];
    if (!t.defined()) {
      RK_CHECK(std::string_view(n) == "buf", "[{}] {} is undefined", op, n);
      continue;
    }
    RK_CHECK(t.dtype() == DType::f32 && t.is_contiguous(), "[{}] {} must be a dense f32 tensor, got {}", op, n,
             t.str());
    RK_CHECK(t.shape() == p.shape(), "[{}] {} has shape {} but the parameter has {}", op, n, shape_str(t.shape()),
             shape_str(p.shape()));
  }
}
int64_t f32_bytes(const Tensor& t) { return t.defined() ? t.nbytes() : 0; }
}  // namespace

// ---- sgd ----
std::vector<TensorSpec> SgdUpdate::infer(std::span<const Tensor> in, const Attrs& a) {
  check_same(kName, in, {"param", "grad", "buf"});
  RK_CHECK(in[2].defined() == (a.momentum != 0.0), "[{}] a momentum buffer {} with momentum {}", kName,
           in[2].defined() ? "given" : "missing", a.momentum);
  if (!in[2].defined()) return {in[0].spec()};
  return {in[0].spec(), in[2].spec()};
}
Cost SgdUpdate::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[0].numel();
  // weight decay: 2; momentum buf: 3; nesterov: 2; p -= lr d: 2 (per element).
  const int64_t per = (a.weight_decay != 0.0 ? 2 : 0) + (in[2].defined() ? 3 + (a.nesterov ? 2 : 0) : 0) + 2;
  return {0, per * n, f32_bytes(in[0]) + f32_bytes(in[1]) + f32_bytes(in[2]), bytes_of(out)};
}
SavedSet SgdUpdate::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- adam ----
std::vector<TensorSpec> AdamUpdate::infer(std::span<const Tensor> in, const Attrs& a) {
  check_same(kName, in, {"param", "grad", "exp_avg", "exp_avg_sq"});
  RK_CHECK(a.step >= 1, "[{}] the step count must be at least 1, got {}", kName, a.step);
  return {in[0].spec(), in[2].spec(), in[3].spec()};
}
Cost AdamUpdate::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  const int64_t n = in[0].numel();
  // decay: 2 (either form); m: 3; v: 4; denom: sqrt, divide, add: 3; p -= step m / denom: 3.
  const int64_t per = (a.weight_decay != 0.0 ? 2 : 0) + 3 + 4 + 3 + 3;
  return {0, per * n, bytes_of(in), bytes_of(out)};
}
SavedSet AdamUpdate::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- unscale ----
std::vector<TensorSpec> UnscaleGrad::infer(std::span<const Tensor> in, const Attrs&) {
  RK_CHECK(in.size() == 2 && in[0].defined() && in[1].defined(), "[{}] needs (grad, found_inf)", kName);
  RK_CHECK(in[0].dtype() == DType::f32, "[{}] only float32 gradients are unscaled, got {}", kName, in[0].str());
  RK_CHECK(in[1].dtype() == DType::f32 && in[1].numel() == 1, "[{}] found_inf must be one f32 value, got {}", kName,
           in[1].str());
  return {in[0].spec(), in[1].spec()};
}
Cost UnscaleGrad::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 2);  // a compare and a multiply per element
}
SavedSet UnscaleGrad::saved(const Attrs&, NeedsGrad) { return {}; }

}  // namespace reckon
