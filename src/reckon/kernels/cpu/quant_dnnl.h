// oneDNN descriptors of the quantized conv and linear ops (ops/quant.h), shared by their eager
// cpu kernels (plain tensors, kernels/cpu/quant.cpp) and the inference engine (blocked layouts
// kept between steps): one place says how reckon's int8 arithmetic maps onto oneDNN 2.6's
// (output scales per channel, the post-ops in the scaled domain, zero points as attributes, an
// s32 bias added before the scale).
#pragma once
#include <optional>

#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/ops/quant.h"

namespace reckon::dnnl_util {

// The attributes of a quantized product with `out_channels` outputs (user scratchpad); nullopt
// when a post-op has no oneDNN form.
std::optional<dnnl::primitive_attr> quant_attr(const QuantLinearAttrs& q, int64_t out_channels);

struct QuantConvGeo {
  dnnl::memory::dims x, w, y, stride, dil, pad_l, pad_r;
  dnnl::memory::dims w_user;  // OIHW or GOIHW (the weight tensor's own bytes)
  dnnl::memory::format_tag w_tag;
};
QuantConvGeo quant_conv_geo(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a);

// src: the input's descriptor (a layout, or format any); weights and dst are `any`.
dnnl::convolution_forward::primitive_desc quant_conv_pd(const dnnl::memory::desc& src, const QuantConvGeo& g,
                                                        DType y, bool bias, const dnnl::primitive_attr& attr);
dnnl::inner_product_forward::primitive_desc quant_linear_pd(const dnnl::memory::desc& src, const Shape& w,
                                                            DType y, bool bias, const dnnl::primitive_attr& attr);

}  // namespace reckon::dnnl_util
