#include "reckon/ops/writes.h"

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

namespace {
void check_dst(std::string_view op, std::span<const Tensor> in, size_t n) {
  RK_CHECK(in.size() == n && in[0].defined(), "[{}] needs {}", op, n == 1 ? "a destination" : "(dst, src)");
  for (size_t i = 1; i < n; ++i) RK_CHECK(in[i].defined(), "[{}] needs (dst, src), got an undefined src", op);
}
}  // namespace

// ---- empty ----
std::vector<TensorSpec> Empty::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.empty(), "[empty] takes no tensor, got {}", in.size());
  for (auto d : a.shape) RK_CHECK(d >= 0, "[empty] negative size in shape {}", shape_str(a.shape));
  return {{a.shape, a.dtype}};
}
Cost Empty::cost(std::span<const Tensor>, std::span<const TensorSpec>, const Attrs&) { return {}; }
SavedSet Empty::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- full ----
std::vector<TensorSpec> Full::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.empty(), "[full] takes no tensor, got {}", in.size());
  for (auto d : a.shape) RK_CHECK(d >= 0, "[full] negative size in shape {}", shape_str(a.shape));
  return {{a.shape, a.dtype}};
}
Cost Full::cost(std::span<const Tensor>, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, 0, bytes_of(out)};
}
SavedSet Full::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- fill_ ----
std::vector<TensorSpec> FillInplace::infer(std::span<const Tensor> in, const Attrs&) {
  check_dst(kName, in, 1);
  return {in[0].spec()};
}
Cost FillInplace::cost(std::span<const Tensor>, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, 0, bytes_of(out)};
}
SavedSet FillInplace::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- copy_ ----
std::vector<TensorSpec> CopyInplace::infer(std::span<const Tensor> in, const Attrs&) {
  check_dst(kName, in, 2);
  RK_CHECK(in[0].numel() == in[1].numel(), "[copy_] {} elements into {} ({} into {})", in[1].numel(), in[0].numel(),
           in[1].str(), in[0].str());
  return {in[0].spec()};
}
Cost CopyInplace::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, in[1].nbytes(), bytes_of(out)};
}
SavedSet CopyInplace::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- add_ ----
std::vector<TensorSpec> AddInplace::infer(std::span<const Tensor> in, const Attrs&) {
  check_dst(kName, in, 2);
  RK_CHECK(in[0].shape() == in[1].shape() && in[0].dtype() == in[1].dtype(), "[add_] {} += {}", in[0].str(),
           in[1].str());
  RK_CHECK(is_floating(in[0].dtype()), "[add_] needs floating tensors, got {}", in[0].str());
  RK_CHECK(in[0].is_contiguous(), "[add_] the destination {} must be contiguous", in[0].str());
  return {in[0].spec()};
}
Cost AddInplace::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 1);
}
SavedSet AddInplace::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- add_scalar_ ----
std::vector<TensorSpec> AddScalarInplace::infer(std::span<const Tensor> in, const Attrs&) {
  check_dst(kName, in, 1);
  return {in[0].spec()};
}
Cost AddScalarInplace::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return elementwise_cost(in, out, 1);
}
SavedSet AddScalarInplace::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- functional ----
Tensor empty(const Shape& shape, DType dtype, Device dev) { return call1<Empty>({}, {shape, dtype, dev}); }
Tensor full(const Shape& shape, double value, DType dtype, Device dev) {
  return call1<Full>({}, {shape, dtype, dev, value});
}
void fill_(const Tensor& dst, double value) { call<FillInplace>({dst}, {value}); }
void copy_(const Tensor& dst, const Tensor& src) { call<CopyInplace>({dst, src}); }
void add_(const Tensor& dst, const Tensor& src) { call<AddInplace>({dst, src}); }
void add_scalar_(const Tensor& dst, double value) { call<AddScalarInplace>({dst}, {value}); }

}  // namespace reckon

namespace reckon {
std::vector<std::string> Full::onnx(OnnxArgs& o, const Attrs& a) {
  std::string y = o.one("Expand", {o.sink.const_f32(float(a.value)), o.sink.const_i64(a.shape)});
  if (a.dtype != DType::f32) y = o.one("Cast", {y}, {{"to", int64_t(onnx_dtype(a.dtype))}});
  return {y};
}
}  // namespace reckon
