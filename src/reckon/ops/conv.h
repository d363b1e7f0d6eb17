// 2-D convolution (cross-correlation, as PyTorch), forward and its two backward ops.
// x (N, C, H, W), w (O, C/groups, KH, KW), b (O), y (N, O, HO, WO).
// MACs = N * O * HO * WO * (C/groups) * KH * KW: every kernel tap of every output, padding
// included (the textbook's formula; the reference kernel counts the same taps).
#pragma once
#include <array>
#include <optional>

#include "reckon/ops/op.h"

namespace reckon {

// How the cpu kernels compute a convolution. `automatic` (the default) lets oneDNN choose per
// shape, which on AVX-512 means Winograd F(4x4, 3x3) for most 3x3 stride-1 f32 convolutions
// (4x fewer multiplications in its tile products; results differ from the direct sum by rounding, ~1e-6
// relative); `direct` always sums the taps. It is an attribute of each call
// (ConvAttrs::algo), so a captured graph replays with the algorithm it was captured with; the
// functional conv2d() fills it from the process's setting (set_conv_algorithm, whose starting
// value the environment variable RECKON_CONV_ALGO=direct|auto gives). The meta device plans with the same
// choice, so the ledger accounts the workspace the chosen kernel takes. MACs are always
// counted as the direct sum (the textbook's figure), whatever the algorithm.
enum class ConvAlgorithm { automatic, direct };

struct ConvAttrs {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  ConvAlgorithm algo = ConvAlgorithm::automatic;
  RK_FIELDS(stride, padding, dilation, groups, algo)
};

void set_conv_algorithm(ConvAlgorithm a);
ConvAlgorithm conv_algorithm();
std::string_view conv_algorithm_name(ConvAlgorithm a);  // "auto" | "direct"
// "auto" | "direct", or an Error naming `source` (the flag or variable it came from) and the value.
ConvAlgorithm parse_conv_algorithm(std::string_view s, std::string_view source = "[conv2d]");
// Sets the algorithm while it lives, then restores the previous one; "" leaves it as it is.
class ConvAlgorithmScope {
 public:
  explicit ConvAlgorithmScope(ConvAlgorithm a);
  explicit ConvAlgorithmScope(const std::string& name);  // "auto" | "direct" | ""
  ~ConvAlgorithmScope();
  ConvAlgorithmScope(const ConvAlgorithmScope&) = delete;
  ConvAlgorithmScope& operator=(const ConvAlgorithmScope&) = delete;

 private:
  ConvAlgorithm prev_;
};
// The oneDNN implementations the cpu conv kernels have run since the last reset, with counts
// ("jit_wino_4x3:avx512_core fwd": 14, ...): benchmarks print which kernels ran.
std::vector<std::pair<std::string, int64_t>> conv_kernels_used();
void reset_conv_kernels_used();
// Whether this build has reckon's direct NCHW kernels for small layers (stride 1, fewer than 16
// input channels, at most 16 outputs, rows of at most 64: LeNet-5's convolutions), which take
// those layers from oneDNN: they need AVX-512 at build time (RECKON_NATIVE on such a cpu).
bool conv_small_direct_available();

// Output spatial size of a conv/pool window, or an error naming op and sizes.
int64_t conv_out_size(std::string_view op, int64_t in, int64_t k, int64_t stride, int64_t pad,
                      int64_t dilation, bool ceil_mode = false);

// The share of a convolution's taps (output pixels x kernel taps) that fall inside the input, not
// its padding (taps), and the share of its kernel's taps that any output reads there (weights):
// resnet18_cifar's 3x3 layers of stride 1 on 4x4 images read (10/12)^2 of their taps, the wide
// time probe's on 1x1 images 1/9, and 1/9 of their weights.
void conv_tap_shares(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a, double& taps, double& weights);
// Whether a oneDNN implementation name is its gemm-based convolution ("x64:gemm:jit",
// "x64:gemm_s8u8s32:jit", "gemm:jit"), not brgemm nor brgconv: im2col and a matrix product over
// every tap, padding included.
bool conv_impl_is_gemm(std::string_view impl);
// Whether a convolution's kernel `impl` (oneDNN's name, or reckon's own) computes only the taps
// that read the input (conv_tap_shares' taps), forward or backward, as oneDNN's direct kernels do;
// Winograd transforms whole padded tiles and gemm multiplies im2col's zeros.
bool conv_impl_skips_padding(std::string_view impl);

// An image's first convolution, of few channels: at most 3 input channels and 16 outputs, groups 1,
// stride 1, dilation 1 (LeNet-5's 1 -> 6 and TinyCNN's 1 -> 16). Low precision buys nothing there:
// its kernels have no channels to put in their vector lanes. So autocast keeps the call in f32
// (Conv2d::amp_keeps_f32) and the int8 program runs it on reckon's direct loops
// (kernels/cpu/conv_small.h).
bool few_channel_first_layer(const Shape& x, const Shape& w, const ConvAttrs& a);

// Whether this cpu's bf16 dot products (AVX512_BF16's vdpbf16ps) compute fewer FLOPs a cycle than
// its f32 FMAs: an Intel core with AVX512_BF16 and no AMX (an Intel Xeon, 2026-12-06: 171 GFLOP/s
// bf16 against 355 f32 on 2 threads, bench/fma_peak.c), or one without AVX512_BF16. Not on AMD's
// Zen 4 and later (bf16 twice f32) nor on Intel with AMX-BF16. From cpuid: fixed per machine.
bool cpu_bf16_slower_than_f32();
// Tests: pins what cpu_bf16_slower_than_f32() answers (nullopt: this cpu's answer again), so that
// figures frozen on one cpu (tests/test_ledger_golden.cpp) compare on another.
void pin_cpu_bf16_slower_than_f32(std::optional<bool> slower);
// Autocast's second exception, to bf16 (fp16 computes in f32 on the cpu anyway): on a cpu whose
// bf16 is slower than its f32 (cpu_bf16_slower_than_f32), a narrow convolution (groups 1, fewer than 16 input channels, at
// most 16 outputs: LeNet-5's 6 -> 16) stays f32. Its activations are small, so bf16 saves little
// memory, and it costs time: reckon's direct f32 loops (or oneDNN's f32 kernels) run it faster
// than oneDNN's bf16 ones (lenet5's bf16 step on that Xeon: 22k images/s at batch 64 with its
// 6 -> 16 layer in bf16, 30k with it in f32; batch 256: 27k against 41k).
bool narrow_conv_keeps_f32(const Shape& w, const ConvAttrs& a);

// Whether a convolution of this geometry, whose activations (x, y, dy, dx) are like `act`, runs
// oneDNN's kernels on NHWC activations with no reorder (kernels/cpu/conv.cpp): f32 or bf16, one
// group, on the cpu with the fast kernels allowed, and not one of reckon's own NCHW small
// kernels. The three conv ops run channels-last when this holds and an activation prefers it.
bool conv_takes_channels_last(const Shape& x, const Shape& w, const ConvAttrs& a, const Tensor& act);

struct Conv2d {
  static constexpr std::string_view kName = "conv2d";
  static bool channels_last(std::span<const Tensor> in, const ConvAttrs& a) {
    return in.size() > 1 && in[0].prefers_channels_last() && conv_takes_channels_last(in[0].shape(), in[1].shape(), a, in[0]);
  }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 1u;
  static constexpr OpClass kClass = OpClass::conv;
  static constexpr AmpPolicy kAmp = AmpPolicy::lower;
  // Autocast's exceptions to kAmp (ops/autocast.h): an image's few-channel first layer stays f32,
  // and a narrow layer does on a cpu whose bf16 is slower than its f32 (narrow_conv_keeps_f32).
  // On LeNet-5 at batch 64 (Zen 4, 2 threads) a bf16 step took 2.49 ms with it in bf16, 2.06 with
  // it in f32, against 2.50 for the fp32 step.
  static bool amp_keeps_f32(std::span<const Tensor> in, const ConvAttrs& a) {
    return in.size() > 1 && in[0].defined() && in[1].defined() &&
           (few_channel_first_layer(in[0].shape(), in[1].shape(), a) ||
            (autocast_state().dtype == DType::bf16 && narrow_conv_keeps_f32(in[1].shape(), a)));
  }
  RK_OP_DECLS(ConvAttrs);
  RK_OP_ONNX;
  RK_OP_REF;
  RK_OP_CPU;
  RK_OP_BACKWARD;
};

// in = (dy (N, O, HO, WO), w) -> dx (N, C, H, W).
struct Conv2dBackwardInput {
  static constexpr std::string_view kName = "conv2d_backward_input";
  static constexpr OpClass kClass = OpClass::conv;
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    ConvAttrs conv;
    Shape x_shape;
    RK_FIELDS(conv, x_shape)
  };
  static bool channels_last(std::span<const Tensor> in, const A& a) {
    return in.size() > 1 && in[0].prefers_channels_last() && conv_takes_channels_last(a.x_shape, in[1].shape(), a.conv, in[0]);
  }
  static constexpr uint32_t kChannelsLastIn = 1u, kChannelsLastOut = 1u;
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

// in = (dy (N, O, HO, WO), x) -> dw (O, C/groups, KH, KW) and, when with_bias, db (O).
struct Conv2dBackwardWeight {
  static constexpr std::string_view kName = "conv2d_backward_weight";
  static constexpr OpClass kClass = OpClass::conv;
  static constexpr std::string_view kNotExportable = "backward op";
  static constexpr std::string_view kNoGradient = "backward op";
  struct A {
    ConvAttrs conv;
    Shape w_shape;
    bool with_bias = false;
    RK_FIELDS(conv, w_shape, with_bias)
  };
  // dy and x channels-last when either prefers it; the weight gradient is OIHW either way.
  static bool channels_last(std::span<const Tensor> in, const A& a) {
    return in.size() > 1 && (in[0].prefers_channels_last() || in[1].prefers_channels_last()) &&
           in[0].dtype() == in[1].dtype() && conv_takes_channels_last(in[1].shape(), a.w_shape, a.conv, in[0]);
  }
  static constexpr uint32_t kChannelsLastIn = 3u, kChannelsLastOut = 0u;
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

}  // namespace reckon
