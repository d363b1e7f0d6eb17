// Mixed precision (autocast): while an Autocast guard is on, the dispatcher casts an op's
// inputs by the op's policy before shape inference, so every op keeps its own precision rule
// with its definition (`static constexpr AmpPolicy kAmp = ...` in the op struct):
//   lower    conv2d, linear, matmul: f32 inputs are cast to the autocast dtype (bf16 or f16);
//            these run on oneDNN's low-precision kernels where the cpu has them. An op may
//            keep a call in f32 by its shape (`static bool amp_keeps_f32(in, attrs)`): a
//            convolution of an image's few channels does (ops/conv.h), where torch.autocast
//            lowers it; there low precision has nothing to gain. So do a narrow one and a
//            small linear layer under bf16 on a cpu whose bf16 is slower than its f32
//            (narrow_conv_keeps_f32, small_linear_keeps_f32 in ops/matmul.h).
//   fp32     losses, softmax, log-softmax, sums, LRN: bf16/f16 inputs are cast to f32.
//   keep     batch norm, cast: inputs as they come (x in bf16, parameters in f32); the kernel
//            computes in f32 and writes y in x's dtype.
//   promote  everything else (the default): inputs of different floating dtypes are cast to
//            the widest; an op with one input runs in its input's dtype (relu, pooling, ...).
// Casts of a leaf that requires grad (a parameter) are cached for the life of the outermost
// guard, so a weight used twice in one forward is cast once. Backward runs no policy: each
// backward op sees the dtypes its forward saw, and Cast's backward returns a parameter's
// gradient in f32 (the master copy's dtype).
// A kernel that has no bf16/f16 path computes in f32: the dispatcher widens its low-precision
// inputs into f32 workspace, runs the f32 kernel and rounds the outputs back (OpRecord.kernel
// says "cpu-f32" or "ref-f32"), so fp16 on a cpu without fp16 arithmetic stores fp16 and
// computes in fp32.
// Mirrors torch.autocast; see ops/dispatch.h for where the policy is applied.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

enum class AmpPolicy : uint8_t { lower, fp32, keep, promote };

template <class Op>
constexpr AmpPolicy amp_policy() {
  if constexpr (requires { Op::kAmp; })
    return Op::kAmp;
  else
    return AmpPolicy::promote;
}

// What autocast does on this thread right now (saved and restored by recomputation).
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;  // bf16 or f16
};
AutocastState autocast_state();
// Autocast is applied only outside backward passes.
bool autocast_active();

// Sets the thread's autocast state while it lives (they nest; the outermost one owns the
// cast cache). Autocast(DType::f32) is "off".
class Autocast {
 public:
  explicit Autocast(DType dtype);
  explicit Autocast(AutocastState s);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastState prev_;
};

// The dtype name of a --precision flag: "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; throws
// naming the flag otherwise.
DType precision_dtype(const std::string& precision);
std::string precision_name(DType d);

namespace detail {
// Applies policy p to the inputs in place (the dispatcher calls this under autocast).
void autocast_inputs(AmpPolicy p, std::vector<Tensor>& in);
bool is_low_precision(DType t);
// Number of cached casts alive (tests).
int64_t autocast_cache_size();
}  // namespace detail

}  // namespace reckon
