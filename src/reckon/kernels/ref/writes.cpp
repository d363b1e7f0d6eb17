// Reference kernels of the writes (ops/writes.h): the raw fills and copies of core, element by
// element in logical order, so any strides and dtypes work.
#include "reckon/ops/writes.h"

namespace reckon {

void Empty::ref(KernelCtx&, std::span<const Tensor>, std::span<Tensor>, const Attrs&) {}

void Full::ref(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) { raw_fill(out[0], a.value); }

void FillInplace::ref(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  raw_fill(out[0], a.value);
}

void CopyInplace::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  raw_copy(out[0], in[1]);
}

void AddInplace::ref(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &d = out[0], &s = in[1];
  for (int64_t i = 0; i < d.numel(); ++i) d.set(i, d.get(i) + s.get(i));
}

void AddScalarInplace::ref(KernelCtx&, std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  const Tensor& d = out[0];
  for (int64_t i = 0; i < d.numel(); ++i) d.set(i, d.get(i) + a.value);
}

}  // namespace reckon
