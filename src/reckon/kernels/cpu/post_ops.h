// A post-op chain (ops/fused.h) over f32 values: what the fused ops' fast kernels apply after their
// product, and what the inference engine applies after a product it runs with its own kernel.
#pragma once
#include <cstdint>
#include <vector>

#include "reckon/ops/fused.h"

namespace reckon {

// y = post(src) (src may be y itself; r: the residual a sum step adds, or null), in blocks of
// elements, one vectorised loop per step over each block, across threads when n is large. op
// names the caller in an error about an unknown step.
void apply_post_ops(const char* op, const float* src, float* y, const float* r, int64_t n, const std::vector<PostOp>& post);

}  // namespace reckon
