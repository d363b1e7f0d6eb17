// Op benchmarks: forward and backward of the heavy ops on representative shapes. Each
// benchmark reads the FLOPs from the ops' own declared cost (an observer on the dispatcher),
// so the GFLOP/s column is derived from what ran, and prints it next to the machine's peak.
// Peak (fp32, 2 threads, 4.48 GHz Zen 5 AVX-512): 574 GFLOP/s; override with RECKON_PEAK_GFLOPS.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/op_list.h"
#include "reckon/ops/update.h"

using namespace reckon;

namespace {

double peak_gflops() {
  const char* e = std::getenv("RECKON_PEAK_GFLOPS");
  return e ? std::atof(e) : 574.0;
}

Tensor rand_t(const Shape& s) {
  Tensor t = Tensor::empty(s);
  fill_uniform_(t, -1, 1);
  return t;
}

// Runs fn once under an observer to learn the FLOPs (2 x MACs + other) and kernels per call.
template <class Fn>
std::pair<double, std::string> measure_cost(Fn&& fn) {
  double flops = 0;
  std::string kernels;
  ObserveOps obs([&](const OpRecord& r) {
    flops += 2.0 * double(r.cost.macs) + double(r.cost.flops);
    if (r.cost.macs > 0) kernels += std::string(r.op) + ":" + std::string(r.kernel) + " ";
  });
  fn();
  return {flops, kernels};
}

template <class Fn>
void run_bench(benchmark::State& state, Fn&& fn) {
  auto [flops, kernels] = measure_cost(fn);
  for (auto _ : state) fn();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["%peak"] =
      benchmark::Counter(flops * 1e-9 * 100.0 / peak_gflops(), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels);
}

struct ConvShape {
  const char* name;
  int64_t n, c, h, o, k, s, p;
};
const ConvShape kConvs[] = {
    {"resnet_3x3_64", 32, 64, 56, 64, 3, 1, 1},
    {"resnet_3x3_256", 32, 256, 14, 256, 3, 1, 1},
    {"alexnet_conv1", 16, 3, 224, 96, 11, 4, 2},
    {"alexnet_conv3", 16, 256, 13, 384, 3, 1, 1},
    {"cifar_3x3_128", 128, 128, 16, 128, 3, 1, 1},
    {"lenet_conv2", 64, 6, 14, 16, 5, 1, 0},
    {"lenet_conv1", 64, 1, 28, 6, 5, 1, 2},
};

void BM_conv2d_fwd(benchmark::State& st) {
  const ConvShape& c = kConvs[st.range(0)];
  Tensor x = rand_t({c.n, c.c, c.h, c.h}), w = rand_t({c.o, c.c, c.k, c.k}), b = rand_t({c.o});
  Conv2dArgs a{{c.s, c.s}, {c.p, c.p}, {1, 1}, 1};
  NoGrad ng;
  run_bench(st, [&] { benchmark::DoNotOptimize(conv2d(x, w, b, a)); });
}

void BM_conv2d_fwd_bwd(benchmark::State& st) {
  const ConvShape& c = kConvs[st.range(0)];
  Tensor x = rand_t({c.n, c.c, c.h, c.h}), w = rand_t({c.o, c.c, c.k, c.k}), b = rand_t({c.o});
  // As in training: the image input of a first layer (3 channels) needs no gradient.
  if (c.c > 3) x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Conv2dArgs a{{c.s, c.s}, {c.p, c.p}, {1, 1}, 1};
  Tensor y0 = conv2d(x, w, b, a);
  Tensor dy = rand_t(y0.shape());
  run_bench(st, [&] {
    Tensor y = conv2d(x, w, b, a);
    y.backward(dy);
  });
}

void BM_linear_fwd_bwd(benchmark::State& st) {
  int64_t n = st.range(0), in = st.range(1), out = st.range(2);
  Tensor x = rand_t({n, in}), w = rand_t({out, in}), b = rand_t({out});
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor dy = rand_t({n, out});
  run_bench(st, [&] { linear(x, w, b).backward(dy); });
}

void BM_linear_fwd(benchmark::State& st) {
  int64_t n = st.range(0), in = st.range(1), out = st.range(2);
  Tensor x = rand_t({n, in}), w = rand_t({out, in}), b = rand_t({out});
  NoGrad ng;
  run_bench(st, [&] { benchmark::DoNotOptimize(linear(x, w, b)); });
}

void BM_relu_fwd_bwd(benchmark::State& st) {
  Tensor x = rand_t({32, 64, 56, 56});
  x.set_requires_grad(true);
  Tensor dy = rand_t(x.shape());
  run_bench(st, [&] { relu(x).backward(dy); });
  st.SetBytesProcessed(int64_t(st.iterations()) * x.nbytes() * 5);
}

// Arg: elements. Out-of-place relu from inside L1 to past the last-level cache: the bandwidth
// a streaming op sees at each working-set size (read n x 4 bytes, write n x 4), the curve the
// ledger's cache-aware roofline (devices.h) steps along.
void BM_relu_fwd(benchmark::State& st) {
  Tensor x = rand_t({st.range(0)});
  NoGrad ng;
  run_bench(st, [&] { benchmark::DoNotOptimize(relu(x)); });
  st.SetBytesProcessed(int64_t(st.iterations()) * x.nbytes() * 2);
}

// Args: N, C, H (= W), kernel, stride: LeNet-5's and ResNet's 2x2/2, AlexNet's 3x3/2.
void BM_max_pool2d_fwd(benchmark::State& st) {
  Tensor x = rand_t({st.range(0), st.range(1), st.range(2), st.range(2)});
  const int64_t k = st.range(3), s = st.range(4);
  NoGrad ng;
  run_bench(st, [&] { benchmark::DoNotOptimize(max_pool2d(x, {{k, k}, {s, s}, {0, 0}, false, true})); });
  st.SetBytesProcessed(int64_t(st.iterations()) * x.nbytes() * 2);
}

void BM_max_pool2d_fwd_bwd(benchmark::State& st) {
  Tensor x = rand_t({st.range(0), st.range(1), st.range(2), st.range(2)});
  const int64_t k = st.range(3), s = st.range(4);
  x.set_requires_grad(true);
  Tensor dy = rand_t(max_pool2d(x, {{k, k}, {s, s}, {0, 0}, false, true}).shape());
  run_bench(st, [&] { max_pool2d(x, {{k, k}, {s, s}, {0, 0}, false, true}).backward(dy); });
  st.SetBytesProcessed(int64_t(st.iterations()) * x.nbytes() * 3);
}

// AlexNet's adaptive average pool to 6x6 (an identity on its 6x6 maps at 224x224) and a global one.
void BM_adaptive_avg_pool2d_fwd_bwd(benchmark::State& st) {
  Tensor x = rand_t({st.range(0), st.range(1), st.range(2), st.range(2)});
  x.set_requires_grad(true);
  const int64_t o = st.range(3);
  Tensor dy = rand_t({st.range(0), st.range(1), o, o});
  run_bench(st, [&] { adaptive_avg_pool2d(x, {o, o}).backward(dy); });
  st.SetBytesProcessed(int64_t(st.iterations()) * x.nbytes() * 3);
}

// One SGD-with-momentum update of n parameters (LeNet-5's largest tensor is 48,000; a bias 6).
void BM_sgd_update(benchmark::State& st) {
  const int64_t n = st.range(0);
  Tensor p = rand_t({n}), g = rand_t({n}), buf = rand_t({n});
  NoGrad ng;
  for (auto _ : st) call<SgdUpdate>({p, g, buf}, {.lr = 1e-6, .momentum = 0.9});
  st.SetBytesProcessed(int64_t(st.iterations()) * n * 4 * 5);
}

// LeNet-5's first layer (1 -> 6 channels, 5x5, padding 2, 28x28) at batch 256, the forward of the
// inference engine's direct step: f32, and int8 (s8 in, u8 out, bias and relu requantized). Both
// run reckon's direct loops (kernels/cpu/conv_small.h); int8 adds the conversions around them.
void BM_first_layer_fwd(benchmark::State& st) {
  const bool int8 = st.range(0) != 0;
  Tensor x = rand_t({256, 1, 28, 28}), w = rand_t({6, 1, 5, 5}), b = rand_t({6});
  NoGrad ng;
  if (!int8) {
    Conv2dArgs a{{1, 1}, {2, 2}, {1, 1}, 1};
    run_bench(st, [&] { benchmark::DoNotOptimize(relu(conv2d(x, w, b, a))); });
    return;
  }
  QuantConvAttrs qa;
  qa.conv = {{1, 1}, {2, 2}, {1, 1}, 1};
  qa.q.x_scale = 0.02;
  qa.q.w_scale = std::vector<double>(6, 0.01);
  qa.q.y_scale = 0.05;
  qa.q.post = {{"relu"}};
  Tensor xq = call<QuantizeLinear>({x}, QuantizeAttrs{{0.02}, {0}, 1, "s8"})[0];
  Tensor wq = call<QuantizeLinear>({w}, QuantizeAttrs{{0.01}, {0}, 1, "s8"})[0];
  Tensor bq = Tensor::zeros({6}, DType::i32);
  run_bench(st, [&] { benchmark::DoNotOptimize(call<Conv2dInt8>({xq, wq, bq}, qa)[0]); });
}

}  // namespace

BENCHMARK(BM_first_layer_fwd)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_max_pool2d_fwd)
    ->Args({64, 6, 28, 2, 2})
    ->Args({64, 16, 10, 2, 2})
    ->Args({32, 64, 112, 2, 2})
    ->Args({16, 64, 55, 3, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_max_pool2d_fwd_bwd)->Args({16, 64, 55, 3, 2})->Args({16, 192, 27, 3, 2})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_adaptive_avg_pool2d_fwd_bwd)->Args({16, 256, 6, 6})->Args({128, 512, 4, 1})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_sgd_update)->Arg(6)->Arg(48000)->Arg(1 << 20)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_conv2d_fwd)->DenseRange(0, 6)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_conv2d_fwd_bwd)->DenseRange(0, 6)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_linear_fwd)->Args({256, 4096, 4096})->Args({256, 9216, 4096})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_linear_fwd_bwd)->Args({256, 4096, 4096})->Args({256, 9216, 4096})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_relu_fwd)->RangeMultiplier(4)->Range(1 << 12, 1 << 28)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_relu_fwd_bwd)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
