// Reference pooling: one output at a time, window taps in (kh, kw) order, sums in double.
// These loops are the spec of the windows described in ops/pool.h; pooling counts no MACs.
#include <cmath>
#include <limits>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/pool.h"

namespace reckon {

namespace {
// PyTorch's avg-pool window of output o: [start, end) clipped to the input, and the divisor.
struct AvgWin {
  int64_t start, end, padded;  // padded: extent clipped to the padded input (count_include_pad)
};
AvgWin avg_win(int64_t o, int64_t in, int64_t k, int64_t s, int64_t p) {
  int64_t start = o * s - p;
  int64_t end = std::min(start + k, in + p);
  int64_t padded = end - start;
  return {std::max<int64_t>(start, 0), std::min(end, in), padded};
}
// The divisor of a window: its padded area, or only the taps inside the input.
int64_t avg_divisor(const AvgWin& r, const AvgWin& c, bool count_include_pad) {
  return count_include_pad ? r.padded * c.padded : (r.end - r.start) * (c.end - c.start);
}
}  // namespace

void MaxPool2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = out[0].size(2), WO = out[0].size(3);
  const int64_t kh = a.kernel[0], kw = a.kernel[1], sh = a.stride[0], sw = a.stride[1];
  const int64_t ph = a.padding[0], pw = a.padding[1], dh = a.dilation[0], dw = a.dilation[1];
  int64_t* pi = out[1].data<int64_t>();
  visit_float(x.dtype(), "max_pool2d", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out[0].data<T>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
          int64_t h1 = std::min(h0 + (kh - 1) * dh + 1, H), w1 = std::min(w0 + (kw - 1) * dw + 1, W);
          while (h0 < 0) h0 += dh;
          while (w0 < 0) w0 += dw;
          T best = -std::numeric_limits<T>::infinity();
          int64_t arg = h0 * W + w0;
          for (int64_t ih = h0; ih < h1; ih += dh)
            for (int64_t iw = w0; iw < w1; iw += dw) {
              T v = px[p * H * W + ih * W + iw];
              if (v > best || std::isnan(v)) {
                best = v;
                arg = ih * W + iw;
              }
            }
          int64_t yi = (p * HO + oh) * WO + ow;
          py[yi] = best;
          pi[yi] = arg;
        }
  });
}

void MaxPool2dBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor &dy = in[0], &idx = in[1];
  const int64_t planes = a.x_shape[0] * a.x_shape[1], HW = a.x_shape[2] * a.x_shape[3];
  const int64_t per = dy.size(2) * dy.size(3);
  const int64_t* pi = idx.data<int64_t>();
  visit_float(dy.dtype(), "max_pool2d_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    T* pdx = out[0].data<T>();
    for (int64_t i = 0; i < planes * HW; ++i) pdx[i] = T(0);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t j = 0; j < per; ++j) {
        int64_t t = pi[p * per + j];
        RK_CHECK(t >= 0 && t < HW, "[max_pool2d_backward] index {} out of range for a plane of {}", t, HW);
        pdx[p * HW + t] += pdy[p * per + j];
      }
  });
}

void AvgPool2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = out[0].size(2), WO = out[0].size(3);
  visit_float(x.dtype(), "avg_pool2d", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out[0].data<T>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          AvgWin r = avg_win(oh, H, a.kernel[0], a.stride[0], a.padding[0]);
          AvgWin c = avg_win(ow, W, a.kernel[1], a.stride[1], a.padding[1]);
          int64_t yi = (p * HO + oh) * WO + ow;
          if (r.start >= r.end || c.start >= c.end) {
            py[yi] = T(0);
            continue;
          }
          double s = 0;
          for (int64_t ih = r.start; ih < r.end; ++ih)
            for (int64_t iw = c.start; iw < c.end; ++iw) s += double(px[(p * H + ih) * W + iw]);
          int64_t div = avg_divisor(r, c, a.count_include_pad);
          py[yi] = T(s / double(div));
        }
  });
}

void AvgPool2dBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& dy = in[0];
  const int64_t planes = a.x_shape[0] * a.x_shape[1], H = a.x_shape[2], W = a.x_shape[3];
  const int64_t HO = dy.size(2), WO = dy.size(3);
  const PoolAttrs& q = a.pool;
  visit_float(dy.dtype(), "avg_pool2d_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    T* pdx = out[0].data<T>();
    double* acc = ctx.scratch<double>(planes * H * W);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          AvgWin r = avg_win(oh, H, q.kernel[0], q.stride[0], q.padding[0]);
          AvgWin c = avg_win(ow, W, q.kernel[1], q.stride[1], q.padding[1]);
          if (r.start >= r.end || c.start >= c.end) continue;
          int64_t div = avg_divisor(r, c, q.count_include_pad);
          double g = double(pdy[(p * HO + oh) * WO + ow]) / double(div);
          for (int64_t ih = r.start; ih < r.end; ++ih)
            for (int64_t iw = c.start; iw < c.end; ++iw) acc[size_t((p * H + ih) * W + iw)] += g;
        }
    for (int64_t i = 0; i < planes * H * W; ++i) pdx[i] = T(acc[size_t(i)]);
  });
}

void AdaptiveAvgPool2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = out[0].size(2), WO = out[0].size(3);
  visit_float(x.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    const T* px = x.data<T>();
    T* py = out[0].data<T>();
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          int64_t h0 = adaptive_start(oh, H, HO), h1 = adaptive_end(oh, H, HO);
          int64_t w0 = adaptive_start(ow, W, WO), w1 = adaptive_end(ow, W, WO);
          double s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += double(px[(p * H + ih) * W + iw]);
          py[(p * HO + oh) * WO + ow] = T(s / double((h1 - h0) * (w1 - w0)));
        }
  });
}

void AdaptiveAvgPool2dBackward::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& dy = in[0];
  const int64_t planes = a.x_shape[0] * a.x_shape[1], H = a.x_shape[2], W = a.x_shape[3];
  const int64_t HO = dy.size(2), WO = dy.size(3);
  visit_float(dy.dtype(), "adaptive_avg_pool2d_backward", [&]<class T>() {
    const T* pdy = dy.data<T>();
    T* pdx = out[0].data<T>();
    double* acc = ctx.scratch<double>(planes * H * W);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t oh = 0; oh < HO; ++oh)
        for (int64_t ow = 0; ow < WO; ++ow) {
          int64_t h0 = adaptive_start(oh, H, HO), h1 = adaptive_end(oh, H, HO);
          int64_t w0 = adaptive_start(ow, W, WO), w1 = adaptive_end(ow, W, WO);
          double g = double(pdy[(p * HO + oh) * WO + ow]) / double((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[size_t((p * H + ih) * W + iw)] += g;
        }
    for (int64_t i = 0; i < planes * H * W; ++i) pdx[i] = T(acc[size_t(i)]);
  });
}

}  // namespace reckon
