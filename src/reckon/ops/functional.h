// The public op API (what nn/ and users call). Each function validates through its op's
// infer() and goes through the dispatcher; composites are written with other ops here and
// need no backward of their own. Shapes: x (N, C, H, W), w (O, C/groups, KH, KW).
#pragma once
#include <array>
#include <optional>
#include <vector>

#include "reckon/core/reflect.h"
#include "reckon/core/tensor.h"

namespace reckon {

using Int2 = std::array<int64_t, 2>;

// ---- shape and copies ----
Tensor reshape(const Tensor& x, Shape shape);       // one dim may be -1; view when contiguous
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor expand(const Tensor& x, Shape shape);        // broadcast view (stride 0)
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // slice view
Tensor contiguous(const Tensor& x);                 // x itself if already contiguous
Tensor to_channels_last(const Tensor& x);           // 4-D, NHWC in memory; x itself if already so
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
Tensor cast(const Tensor& x, DType dtype);          // x itself if already dtype
Tensor sum_to(const Tensor& x, const Shape& shape); // reduce broadcast dims (backward of expand)

// ---- elementwise (numpy broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor affine(const Tensor& x, double alpha, double beta);  // alpha * x + beta
Tensor scale(const Tensor& x, double alpha);                // alpha * x
// ---- writes: each an op (ops/writes.h), so recorded, costed and captured; no autograd ----
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu);  // uninitialised
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device dev = Device::cpu);
void fill_(const Tensor& dst, double value);
void copy_(const Tensor& dst, const Tensor& src);  // same numel, any dtypes and strides
void add_(const Tensor& dst, const Tensor& src);   // dst += src (same shape and dtype, dst dense)
void add_scalar_(const Tensor& dst, double value); // dst += value, any dtype
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor square(const Tensor& x);

// ---- activations ----
Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor clamp(const Tensor& x, double lo, double hi);  // torch.clamp
// ONNX's HardSigmoid max(0, min(1, alpha x + beta)) (torch's: alpha 1/6, beta 1/2), and
// torch's hardswish x * hardsigmoid(x).
Tensor hardsigmoid(const Tensor& x, double alpha = 0.2, double beta = 0.5);
Tensor hardswish(const Tensor& x);
Tensor gelu(const Tensor& x);     // exact (erf) form, as torch.nn.GELU()
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

// ---- reductions ----
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);  // {} = all
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);

// ---- matrix products ----
// a (..., M, K) @ b (..., K, N); trans_a/trans_b read a/b transposed in their last two dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x (N, IN), w (OUT, IN), b (OUT) or undefined -> (N, OUT)
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// ---- convolution and pooling ----
struct Conv2dArgs {
  Int2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), const Conv2dArgs& a = {});

struct Pool2dArgs {
  Int2 kernel{2, 2}, stride{0, 0} /* 0: = kernel */, padding{0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
};
Tensor max_pool2d(const Tensor& x, const Pool2dArgs& a);
Tensor avg_pool2d(const Tensor& x, const Pool2dArgs& a);
Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size);

// ---- normalisation and regularisation ----
// Training: normalises with batch statistics and updates running_mean/var in place
// (momentum as PyTorch: new = (1 - m) * old + m * batch, var unbiased). Eval: running stats.
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                    const Tensor& running_mean, const Tensor& running_var, bool training,
                    double momentum = 0.1, double eps = 1e-5);
// torch.nn.LocalResponseNorm(size, alpha, beta, k) over channels.
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75,
                           double k = 1.0);
Tensor dropout(const Tensor& x, double p, bool training);

// ---- softmax and losses ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
enum class Reduction { none, mean, sum };
struct CrossEntropyArgs {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  RK_FIELDS(reduction, label_smoothing, ignore_index)
};
// logits (N, C), target (N) int64 class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyArgs& a = {});
// logp (N, C) log-probabilities, target (N) int64.
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction r = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction r = Reduction::mean);

}  // namespace reckon
