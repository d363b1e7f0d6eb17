// Reference kernels of the copying shape ops and of sum: plain loops, the spec.
#include <cstring>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

void PadNarrow::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& g = in[0];
  Tensor& y = out[0];
  std::memset(y.raw_data(), 0, size_t(y.nbytes()));
  // y viewed as (outer, full_d * inner); g as (outer, len * inner).
  int64_t outer = 1, inner = 1, d = a.dim;
  for (int64_t i = 0; i < d; ++i) outer *= a.full_shape[size_t(i)];
  for (size_t i = size_t(d) + 1; i < a.full_shape.size(); ++i) inner *= a.full_shape[i];
  int64_t len = g.shape()[size_t(d)], full = a.full_shape[size_t(d)];
  size_t es = dtype_size(g.dtype());
  auto* src = static_cast<const char*>(g.raw_data());
  auto* dst = static_cast<char*>(y.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + size_t((o * full + a.start) * inner) * es, src + size_t(o * len * inner) * es,
                size_t(len * inner) * es);
}

void Contiguous::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& t = in[0];
  Tensor& r = out[0];
  if (!r.is_contiguous()) {  // a channels-last result: element by element
    raw_copy(r, t);
    return;
  }
  if (t.is_contiguous()) {
    std::memcpy(r.raw_data(), t.raw_data(), size_t(r.nbytes()));
    return;
  }
  // Walk the strided source with an odometer; inner dimension copied by a typed loop.
  const int64_t nd = t.dim();
  const int64_t es = int64_t(dtype_size(t.dtype()));
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(r.raw_data());
  if (nd == 0) {
    std::memcpy(dst, src, size_t(es));
    return;
  }
  const auto& shape = t.shape();
  const auto& st = t.strides();
  int64_t inner = shape[nd - 1], inner_stride = st[nd - 1];
  int64_t outer = t.numel() / std::max<int64_t>(inner, 1);
  std::vector<int64_t> idx(size_t(nd), 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd - 1; ++d) off += idx[size_t(d)] * st[d];
    const char* s = src + off * es;
    if (inner_stride == 1) {
      std::memcpy(dst, s, size_t(inner * es));
    } else if (es == 4) {
      auto* d4 = reinterpret_cast<uint32_t*>(dst);
      auto* s4 = reinterpret_cast<const uint32_t*>(s);
      for (int64_t i = 0; i < inner; ++i) d4[i] = s4[i * inner_stride];
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(dst + i * es, s + i * inner_stride * es, size_t(es));
    }
    dst += inner * es;
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[d]) break;
      idx[size_t(d)] = 0;
    }
  }
}

void Concat::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Tensor& y = out[0];
  int64_t d = normalize_dim("concat", a.dim, y.dim());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= y.shape()[size_t(i)];
  for (int64_t i = d + 1; i < y.dim(); ++i) inner *= y.shape()[size_t(i)];
  size_t es = dtype_size(y.dtype());
  int64_t total = y.shape()[size_t(d)];
  auto* dst = static_cast<char*>(y.raw_data());
  int64_t start = 0;
  for (auto& x : in) {
    int64_t len = x.shape()[size_t(d)];
    auto* src = static_cast<const char*>(x.raw_data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + size_t((o * total + start) * inner) * es, src + size_t(o * len * inner) * es,
                  size_t(len * inner) * es);
    start += len;
  }
}

void Cast::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  int64_t n = x.numel();
  if (x.dtype() == DType::f32 && y.dtype() == DType::bf16) {
    const float* s = x.data<float>();
    bf16_t* d = y.data<bf16_t>();
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_t(s[i]);
  } else if (x.dtype() == DType::bf16 && y.dtype() == DType::f32) {
    const bf16_t* s = x.data<bf16_t>();
    float* d = y.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = float(s[i]);
  } else if (x.dtype() == DType::f32 && y.dtype() == DType::f64) {
    const float* s = x.data<float>();
    double* d = y.data<double>();
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
  } else if (x.dtype() == DType::f64 && y.dtype() == DType::f32) {
    const double* s = x.data<double>();
    float* d = y.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = float(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y.set(i, x.get(i));
  }
}

void Sum::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  // Output index of each input element: drop (or zero) the reduced coordinates.
  std::vector<bool> red(size_t(x.dim()), a.dims.empty());
  for (auto d : a.dims) red[size_t(normalize_dim("sum", d, x.dim()))] = true;
  std::vector<int64_t> ostride(size_t(x.dim()), 0);
  int64_t acc = 1;
  for (int64_t i = x.dim() - 1; i >= 0; --i)
    if (!red[size_t(i)]) {
      ostride[size_t(i)] = acc;
      acc *= x.shape()[size_t(i)];
    }
  visit_float(x.dtype(), "sum", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    double* accum = ctx.scratch<double>(y.numel());
    std::vector<int64_t> idx(size_t(x.dim()), 0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t o = 0;
      for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * ostride[d];
      accum[size_t(o)] += double(px[i]);
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < x.shape()[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = T(accum[size_t(i)]);
  });
}

}  // namespace reckon
