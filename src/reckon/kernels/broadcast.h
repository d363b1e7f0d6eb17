// Broadcast iteration shared by the elementwise kernels: the output's dims are merged where
// both inputs stay contiguous (or stay broadcast), leaving a few (size, stride_a, stride_b)
// groups; the innermost group is the hot loop.
#pragma once
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

struct BroadcastPlan {
  std::vector<int64_t> size, sa, sb;  // per merged dim, outermost first
};

// a and b are contiguous; out is their broadcast shape.
inline BroadcastPlan plan_broadcast(const Shape& a, const Shape& b, const Shape& out) {
  size_t n = out.size();
  auto strides_for = [&](const Shape& s) {
    std::vector<int64_t> st(n, 0);
    int64_t acc = 1;
    for (size_t k = 0; k < s.size(); ++k) {
      size_t i = s.size() - 1 - k, o = n - 1 - k;
      st[o] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
    return st;
  };
  auto sa = strides_for(a), sb = strides_for(b);
  BroadcastPlan p;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] == 1) continue;
    if (!p.size.empty()) {
      int64_t s = p.size.back();
      bool a_ok = p.sa.back() == sa[i] * out[i] || (p.sa.back() == 0 && sa[i] == 0);
      bool b_ok = p.sb.back() == sb[i] * out[i] || (p.sb.back() == 0 && sb[i] == 0);
      if (a_ok && b_ok) {
        p.size.back() = s * out[i];
        p.sa.back() = sa[i];
        p.sb.back() = sb[i];
        continue;
      }
    }
    p.size.push_back(out[i]);
    p.sa.push_back(sa[i]);
    p.sb.push_back(sb[i]);
  }
  if (p.size.empty()) {
    p.size = {1};
    p.sa = {0};
    p.sb = {0};
  }
  return p;
}

// Calls row(offset_a, offset_b, offset_out, n, stride_a, stride_b) for each innermost run.
template <class Row>
void for_each_row(const BroadcastPlan& p, Row&& row) {
  int64_t nd = int64_t(p.size.size());
  int64_t inner = p.size.back(), outer = 1;
  for (int64_t i = 0; i < nd - 1; ++i) outer *= p.size[size_t(i)];
  std::vector<int64_t> idx(size_t(std::max<int64_t>(nd - 1, 0)), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < outer; ++o) {
    row(oa, ob, o * inner, inner, p.sa.back(), p.sb.back());
    for (int64_t d = nd - 2; d >= 0; --d) {
      oa += p.sa[size_t(d)];
      ob += p.sb[size_t(d)];
      if (++idx[size_t(d)] < p.size[size_t(d)]) break;
      oa -= p.sa[size_t(d)] * p.size[size_t(d)];
      ob -= p.sb[size_t(d)] * p.size[size_t(d)];
      idx[size_t(d)] = 0;
    }
  }
}

}  // namespace reckon
