// Fast sum over any set of dims (f32): the input is walked once in memory order; adjacent
// dims of the same kind are merged, so a reduction is a sequence of contiguous runs that are
// either summed into one output (reduced inner run) or added to an output row (kept run).
#include "reckon/ops/dispatch.h"
#include "reckon/ops/shape_ops.h"

namespace reckon {

Support Sum::cpu(KernelCtx&, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  if (x.dtype() != DType::f32) return Support::no("dtype is not f32");
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
  const float* px = x.data<float>();
  float* py = y.data<float>();
  int64_t ny = y.numel();
  if (g.empty()) {  // all size-1 dims
    if (ny > 0) py[0] = x.numel() ? px[0] : 0.f;
    return Support::yes();
  }
  std::fill_n(py, ny, 0.f);
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
    const float* row = px + o * inner;
    if (inner_red) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= inner; i += 4) {
        s0 += row[i];
        s1 += row[i + 1];
        s2 += row[i + 2];
        s3 += row[i + 3];
      }
      for (; i < inner; ++i) s0 += row[i];
      py[base] += (s0 + s1) + (s2 + s3);
    } else {
      float* dst = py + base;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) dst[i] += row[i];
    }
    for (int64_t d = ng - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < g[size_t(d)].first) break;
      idx[size_t(d)] = 0;
    }
  }
  return Support::yes();
}

}  // namespace reckon
