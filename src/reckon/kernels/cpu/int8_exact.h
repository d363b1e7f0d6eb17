// Exact int8 products for cpus whose oneDNN int8 kernels are not exact.
//
// Without VNNI (AVX2 without AVX-VNNI, AVX-512 without AVX512_VNNI: Zen 3, Skylake), oneDNN 2.6
// multiplies u8 by s8 with vpmaddubsw, which adds each pair of products in int16 and saturates
// there: 255 * 127 * 2 = 64770 does not fit, so a conv or linear layer whose inputs are large
// comes out wrong, not just rounded (a trained lenet5 lost its accuracy in int8 on a Zen 3).
// These kernels widen both operands to int16 and multiply with vpmaddwd, whose pair sums are
// int32: the accumulator is the exact sum the reference kernel defines, and the outputs go
// through the reference's own requantization (kernels/ref/requant.h), so they match it bit for
// bit. conv2d_int8 and linear_int8 take this path on such cpus, eagerly and in the engine.
#pragma once
#include <span>

#include "reckon/ops/op.h"
#include "reckon/ops/quant.h"

namespace reckon::int8_exact {

// True when oneDNN's int8 products on this cpu sum every pair in int32 (the effective ISA has
// VNNI: avx512_core_vnni and above, or avx2_vnni). RECKON_INT8_EXACT=1 in the environment says
// false, so a VNNI machine can run (and test) the exact kernels too.
bool dnnl_is_exact();

// y = the quantized product, as Conv2dInt8::ref / LinearInt8::ref define it; `in` as the op
// takes it (x, w, optional int32 bias, optional residual). The name of the path taken is noted
// on ctx.
void conv(KernelCtx& ctx, std::span<const Tensor> in, Tensor& y, const QuantConvAttrs& a);
void linear(KernelCtx& ctx, std::span<const Tensor> in, Tensor& y, const QuantLinearAttrs& a);

}  // namespace reckon::int8_exact
