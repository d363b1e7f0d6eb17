// Direct NCHW f32 convolution kernels for small layers (see conv_small.cpp), used by the cpu
// conv kernels in place of oneDNN when applies() says so. Each function requests its buffers
// from ctx and, when ctx is planning (the meta device), returns after the requests.
#pragma once
#include "reckon/ops/conv.h"

namespace reckon::conv_small {

// f32, groups 1, stride 1, dilation 1, padding below the kernel size, fewer than 16 input
// channels, at most 16 outputs, at most 256 taps per output, padded rows of at most 64.
bool applies(const Shape& x, const Shape& w, const ConvAttrs& a, DType t);

void forward(KernelCtx& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const ConvAttrs& a);
void backward_input(KernelCtx& ctx, const Tensor& dy, const Tensor& w, Tensor& dx, const ConvAttrs& a);
// db may be null (no bias).
void backward_weight(KernelCtx& ctx, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db, const ConvAttrs& a);

}  // namespace reckon::conv_small
