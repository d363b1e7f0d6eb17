// Fast sum over any set of dims (f32, bf16, f16): the input is walked once in memory order;
// adjacent dims of the same kind are merged, so a reduction is a sequence of contiguous runs
// that are either summed into one output (reduced inner run) or added to an output row (kept
// run). bf16/f16 (the output is x's dtype): loaded to f32, summed in f32 workspace in the same
// order as the f32 kernel, rounded once at the end.
#include <type_traits>

#include "reckon/kernels/cpu/lowp.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

namespace {
template <class T>
void sum(KernelCtx& ctx, const Tensor& x, Tensor& y, const Sum::Attrs& a) {
  using lowp::load;
  // Merge dims into (size, reduced) groups.
  std::vector<bool> red(size_t(x.dim()), a.dims.empty());
  for (auto d : a.dims) red[size_t(normalize_dim("sum", d, x.dim()))] = true;
  std::vector<std::pair<int64_t, bool>> g;
  for (int64_t i = 0; i < x.dim(); ++i) {
    int64_t s = x.shape()[size_t(i)];
    if (s == 1) continue;
    if (!g.empty() && g.back().second == red[size_t(i)]) g.back().first *= s;
    else g.push_back({s, red[size_t(i)]});
  }
  const T* px = x.data<T>();
  int64_t ny = y.numel();
  if (g.empty()) {  // all size-1 dims
    if (ny > 0) y.data<T>()[0] = x.numel() ? px[0] : lowp::store<T>(0.f);
    return;
  }
  // The f32 sums: the output itself for f32, workspace otherwise.
  float* py = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    py = y.data<float>();
    std::fill_n(py, ny, 0.f);
  } else {
    py = ctx.scratch<float>(ny);
  }
  // Output strides of the groups, and the innermost run.
  int64_t ng = int64_t(g.size());
  std::vector<int64_t> ost(size_t(ng), 0);
  int64_t acc = 1;
  for (int64_t i = ng - 1; i >= 0; --i)
    if (!g[size_t(i)].second) {
      ost[size_t(i)] = acc;
      acc *= g[size_t(i)].first;
    }
  int64_t inner = g.back().first;
  bool inner_red = g.back().second;
  int64_t outer = x.numel() / inner;
  std::vector<int64_t> idx(size_t(ng - 1), 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base = 0;
    for (int64_t d = 0; d < ng - 1; ++d) base += idx[size_t(d)] * ost[size_t(d)];
    const T* row = px + o * inner;
    if (inner_red) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= inner; i += 4) {
        s0 += load(row[i]);
        s1 += load(row[i + 1]);
        s2 += load(row[i + 2]);
        s3 += load(row[i + 3]);
      }
      for (; i < inner; ++i) s0 += load(row[i]);
      py[base] += (s0 + s1) + (s2 + s3);
    } else {
      float* dst = py + base;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) dst[i] += load(row[i]);
    }
    for (int64_t d = ng - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < g[size_t(d)].first) break;
      idx[size_t(d)] = 0;
    }
  }
  if constexpr (!std::is_same_v<T, float>) {
    T* dst = y.data<T>();
#pragma omp simd
    for (int64_t i = 0; i < ny; ++i) dst[i] = lowp::store<T>(py[i]);
  }
}
}  // namespace

Support Sum::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (out[0].dtype() != in[0].dtype()) return Support::no("output dtype differs from x's");
  return lowp::visit(in[0].dtype(), [&]<class T>() {
    sum<T>(ctx, in[0], out[0], a);
    return Support::yes();
  });
}

}  // namespace reckon
