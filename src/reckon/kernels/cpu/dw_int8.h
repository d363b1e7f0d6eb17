// Depthwise int8 convolutions on channels-last bytes with AVX-512 VNNI (the engine's kernel for
// MobileNet's 3x3 depthwise layers).
//
// oneDNN 2.6 runs an int8 depthwise layer as brdgmm_dw, which multiplies one tap at a time: on
// mobilenet_v2 (224, batch 1, 2 threads) its layers ran at 26-46 G MAC/s, no faster than the fp32
// ones (23-53), a fifth of the int8 model's time. vpdpbusd sums four u8 x s8 products of one
// channel in an int32 lane, so this kernel gives each lane the kernel column's rows: the bytes of
// up to four input rows at one column are interleaved (8 unpacks for 64 channels), and that
// interleaved column serves every output of a tile that reads it, one vpdpbusd per kernel column
// and 16 channels. A tile is 4 outputs of a row by 64 channels. The zero point is taken out by
// starting each accumulator at -x_zp * sum(w) with padding read as x_zp (an s8 input is read as
// u8 by flipping its top bit, and its zero point shifted by 128), and the outputs are written by
// the reference's requantization (kernels/ref/requant.h) in vector form, so they match it bit
// for bit.
#pragma once
#include <cstdint>

#include "reckon/core/tensor.h"
#include "reckon/ops/quant.h"

namespace reckon::dw_int8 {

// Whether the kernel takes this conv2d_int8: depthwise (groups == channels == outputs), a kernel
// of at most 4 rows and 3 columns, a stride of 1 or 2 across (any down), no dilation, u8 or s8 in
// and out, a post-op chain of relu (slope 0) and clamp only, and a cpu with AVX-512 VNNI.
bool applies(const Shape& xs, const Shape& ws, const QuantConvAttrs& a, DType xt, DType yt);

// Bytes of the packed weights (and per-channel constants) of `channels` channels.
int64_t packed_bytes(int64_t channels);

// The share of vpdpbusd's multiply-adds that are taps of the layer (the rest: a kernel's rows
// and columns padded to 4 x 3, channels padded to a block of 64).
double lane_use(int64_t channels, int64_t KH, int64_t KW, int64_t stride_w);

// Packs w (C, 1, KH, KW) s8 and the int32 bias (C, or null) of conv a on an input of type xt.
void pack(const int8_t* w, const int32_t* bias, int64_t C, int64_t KH, int64_t KW, const QuantConvAttrs& a, DType xt,
          void* out);

// y (N, OH, OW, C) = the conv of x (N, H, W, C), both channels-last bytes, from pack()'s weights.
void forward(const void* x, void* y, const void* packed, const Shape& xs, const Shape& ys, int64_t KH,
             const QuantConvAttrs& a, DType xt, DType yt);

}  // namespace reckon::dw_int8
