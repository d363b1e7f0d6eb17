// oneDNN matmul for matmul and linear (f32, bf16; f16 runs the f32 kernel on f32 copies,
// run_in_f32, as this cpu has no f16 arithmetic). Transposes are expressed as strides, so no
// copy is made; linear's bias is fused.
#include <fmt/format.h>

#include "reckon/kernels/cpu/dnnl_common.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/matmul.h"

namespace reckon {

namespace {
using namespace dnnl_util;
using dnnl::memory;

struct MatmulPlan {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};
PlanCache<MatmulPlan>& cache() {
  static PlanCache<MatmulPlan> c;
  return c;
}

// Logical (batch, rows, cols) desc of a stored (batch, r, c) or transposed (batch, c, r) matrix.
memory::desc mat_desc(int64_t batch, int64_t rows, int64_t cols, bool trans, memory::data_type t) {
  if (batch == 1) {
    return trans ? memory::desc({rows, cols}, t, {1, rows}) : memory::desc({rows, cols}, t, {cols, 1});
  }
  return trans ? memory::desc({batch, rows, cols}, t, {rows * cols, 1, rows})
               : memory::desc({batch, rows, cols}, t, {rows * cols, cols, 1});
}

bool supported_dtype(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

Support Matmul::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  if (!supported_dtype(x.dtype())) return Support::no("dtype is not f32 or bf16");
  int64_t m = y.size(-2), n = y.size(-1), k = a.trans_a ? x.size(-2) : x.size(-1);
  int64_t batch = y.numel() / std::max<int64_t>(m * n, 1);
  if (m == 0 || n == 0 || k == 0) return Support::no("empty matrix");
  bool shared = w.dim() == 2 && batch > 1;
  if (shared) {
    if (a.trans_a) return Support::no("batched transposed a with a shared b");
    m *= batch;  // fold the batch into rows
    batch = 1;
  }
  auto t = dt(x.dtype());
  std::string key = fmt::format("{}:{}:{}:{}:{}:{}:{}", batch, m, n, k, a.trans_a, a.trans_b, int(x.dtype()));
  auto* plan = cache().get(key, [&] {
    auto ad = mat_desc(batch, m, k, a.trans_a, t);
    auto bd = mat_desc(batch, k, n, a.trans_b, t);
    auto cd = mat_desc(batch, m, n, false, t);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), default_attr(), engine());
    return MatmulPlan{pd, dnnl::matmul(pd)};
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  execute(ctx, plan->prim, plan->pd.scratchpad_desc(),
      {{DNNL_ARG_SRC, mem(plan->pd.src_desc(), x)},
       {DNNL_ARG_WEIGHTS, mem(plan->pd.weights_desc(), w)},
       {DNNL_ARG_DST, mem(plan->pd.dst_desc(), y)}});
  return Support::yes();
}

Support Linear::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, {}); });
  const Tensor &x = in[0], &w = in[1];
  bool bias = in.size() > 2 && in[2].defined();
  Tensor& y = out[0];
  if (!supported_dtype(x.dtype())) return Support::no("dtype is not f32 or bf16");
  int64_t n = x.size(0), k = x.size(1), o = w.size(0);
  if (n == 0 || k == 0 || o == 0) return Support::no("empty matrix");
  auto t = dt(x.dtype());
  std::string key = fmt::format("{}:{}:{}:{}:{}", n, k, o, bias, int(x.dtype()));
  auto* plan = cache().get("linear:" + key, [&] {
    auto ad = mat_desc(1, n, k, false, t);
    auto bd = mat_desc(1, k, o, true, t);  // w (OUT, IN) read as (IN, OUT)
    auto cd = mat_desc(1, n, o, false, t);
    auto md = bias ? dnnl::matmul::desc(ad, bd, memory::desc({1, o}, dt(in[2].dtype()), {o, 1}), cd)
                   : dnnl::matmul::desc(ad, bd, cd);
    auto pd = dnnl::matmul::primitive_desc(md, default_attr(), engine());
    return MatmulPlan{pd, dnnl::matmul(pd)};
  });
  if (!plan) return Support::no(kNoDnnlImpl);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(plan->pd.src_desc(), x)},
                                          {DNNL_ARG_WEIGHTS, mem(plan->pd.weights_desc(), w)},
                                          {DNNL_ARG_DST, mem(plan->pd.dst_desc(), y)}};
  if (bias) args[DNNL_ARG_BIAS] = mem(plan->pd.bias_desc(), in[2]);
  execute(ctx, plan->prim, plan->pd.scratchpad_desc(), std::move(args));
  return Support::yes();
}

namespace {
// Both kernels plan (see run above): the meta device accounts their scratchpads.
[[maybe_unused]] const bool kMatmulPlans = (cpu_kernel_plans<Matmul> = cpu_kernel_plans<Linear> = true);
}  // namespace

}  // namespace reckon
