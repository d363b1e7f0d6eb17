// Direct NCHW f32 convolution kernels for small layers (see conv_small.cpp), used by the cpu
// conv kernels in place of oneDNN when applies() says so. Each function requests its buffers
// from ctx and, when ctx is planning (the meta device), returns after the requests.
#pragma once
#include "reckon/ops/conv.h"
#include "reckon/ops/quant.h"

namespace reckon::conv_small {

// f32, groups 1, stride 1, dilation 1, padding below the kernel size, fewer than 16 input
// channels, at most 16 outputs, at most 256 taps per output, padded rows of at most 64.
bool applies(const Shape& x, const Shape& w, const ConvAttrs& a, DType t);
// Whether the forward and backward-weight passes put the output channels in the vector lanes (12
// to 16 outputs) rather than a row of the image: another loop, at another speed, which the op
// record names ("reckon small_direct o_lanes") so that the ledger times it by its own line.
constexpr int64_t kOutputLanesMin = 12;
inline bool output_channel_lanes(const Shape& w) { return w.size() == 4 && w[0] >= kOutputLanesMin; }

// Whether backward data puts 16 images in the vector lanes (conv_small.cpp,
// pixel_image_lanes): batches of at least 16 images a thread, planes of dy and dx of at most
// kImageLanesMaxFloats a sample together (a group's transposed copies, 64 times that in bytes,
// stay in a core's L2). Another loop, which the op record names ("reckon small_direct n_lanes").
constexpr int64_t kImageLanesMin = 16;
constexpr int64_t kImageLanesMaxFloats = 8192;
bool backward_input_image_lanes(const Shape& x, const Shape& w, const ConvAttrs& a);
// The share of the 16 vector lanes each pass's multiply-adds fill (KernelCtx::note_lane_use):
// rows of the output (forward, backward weight: WO values in ceil(WO / 16) vectors), of dx
// (backward data: every kernel row that reaches it, WO taps' worth of work in a row of W), the
// output channels (the o_lanes passes: O of 16), or the images (n_lanes: N of 16 a group).
// LeNet-5's conv2: forward and backward weight 16 of 16, backward data by rows 10 of 16; the
// probe's 6 -> 12 layer on 11 x 11 images 12 of 16 and 7 of 16, so one line per family no longer
// carries the lanes a layer's width idles.
double forward_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a);
double backward_input_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a);
double backward_weight_lane_use(const Shape& x, const Shape& w, const ConvAttrs& a);

void forward(KernelCtx& ctx, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const ConvAttrs& a);
// The same with its scratch given (what the inference engine plans in its arena): bytes from
// forward_scratch_bytes for at most `threads` threads, any content.
int64_t forward_scratch_bytes(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, int threads);
void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const ConvAttrs& a, void* scratch, int threads);
// An image's first layer: applies() and few_channel_first_layer (ops/conv.h: at most 3 input
// channels). There a low-precision kernel has no channels to put in its vector lanes, so these
// loops take it in every precision: conv2d_int8 runs forward_int8 (oneDNN's int8 kernel reached
// 22 G MAC/s on LeNet-5's 1-channel 5x5 layer on a Zen 4; with 6 channels 190, and it keeps those),
// and a bf16 convolution (autocast keeps one in f32; an explicit cast does not) computes in f32 on
// widened copies (oneDNN's bf16 kernels took 1.70 ms of fwd+bwd at batch 64 there, these loops
// 0.31 ms; at 6 channels bf16 won, 0.47 against 0.81).
bool first_layer(const Shape& x, const Shape& w, const ConvAttrs& a);
// conv2d_int8 (ops/quant.h) where first_layer(x, w, conv): x u8/s8 less its zero point and the s8
// weights as f32 (exact integers), these loops (each partial sum an integer below 2^24: exact), then
// the reference's requantization, bit for bit. r: the residual of a sum post-op, else null.
int64_t forward_int8_scratch_bytes(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, int threads);
void forward_int8(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* r, Tensor& y, const QuantConvAttrs& a,
                  void* scratch, int threads);
void backward_input(KernelCtx& ctx, const Tensor& dy, const Tensor& w, Tensor& dx, const ConvAttrs& a);
// db may be null (no bias).
void backward_weight(KernelCtx& ctx, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db, const ConvAttrs& a);

}  // namespace reckon::conv_small
