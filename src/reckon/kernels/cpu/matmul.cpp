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

bool supported_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
memory::data_type compute_dt(DType t) { return dt(t); }  // f16 never reaches it: see run_in_f32

// The user's tensor t as memory of desc `user`, converted to the primitive's desc when they
// differ (f16 -> f32): workspace held by `holder`.
memory input(KernelCtx& ctx, const memory::desc& user, const memory::desc& prim, const Tensor& t, Tensor& holder) {
  memory u(user, engine(), t.raw_data());
  return user == prim ? u : reorder_to(ctx, u, prim, holder);
}
// The primitive's output memory for the user's tensor t, and the copy back when they differ.
memory output(KernelCtx& ctx, const memory::desc& user, const memory::desc& prim, const Tensor& t, Tensor& holder) {
  if (user == prim) return memory(user, engine(), t.raw_data());
  holder = ctx.workspace(int64_t(prim.get_size()));
  return memory(prim, engine(), holder.raw_data());
}
void copy_back(KernelCtx& ctx, const memory& from, const memory::desc& user, const Tensor& t) {
  if (ctx.planning() || from.get_desc() == user) return;
  memory u(user, engine(), t.raw_data());
  dnnl::reorder(from, u).execute(stream(), const_cast<memory&>(from), u);
  stream().wait();
}

}  // namespace

Support Matmul::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, a); });
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  if (!supported_dtype(x.dtype())) return Support::no("dtype is not f32, bf16 or f16");
  int64_t m = y.size(-2), n = y.size(-1), k = a.trans_a ? x.size(-2) : x.size(-1);
  int64_t batch = y.numel() / std::max<int64_t>(m * n, 1);
  if (m == 0 || n == 0 || k == 0) return Support::no("empty matrix");
  bool shared = w.dim() == 2 && batch > 1;
  if (shared) {
    if (a.trans_a) return Support::no("batched transposed a with a shared b");
    m *= batch;  // fold the batch into rows
    batch = 1;
  }
  auto t = compute_dt(x.dtype()), ut = dt(x.dtype());
  std::string key = fmt::format("{}:{}:{}:{}:{}:{}:{}", batch, m, n, k, a.trans_a, a.trans_b, int(x.dtype()));
  auto& plan = cache().get(key, [&] {
    auto ad = mat_desc(batch, m, k, a.trans_a, t);
    auto bd = mat_desc(batch, k, n, a.trans_b, t);
    auto cd = mat_desc(batch, m, n, false, t);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), default_attr(), engine());
    return MatmulPlan{pd, dnnl::matmul(pd)};
  });
  Tensor hx, hw, hy;
  const auto yd = mat_desc(batch, m, n, false, ut);
  memory ym = output(ctx, yd, plan.pd.dst_desc(), y, hy);
  execute(ctx, plan.prim, plan.pd.scratchpad_desc(),
      {{DNNL_ARG_SRC, input(ctx, mat_desc(batch, m, k, a.trans_a, ut), plan.pd.src_desc(), x, hx)},
       {DNNL_ARG_WEIGHTS, input(ctx, mat_desc(batch, k, n, a.trans_b, ut), plan.pd.weights_desc(), w, hw)},
       {DNNL_ARG_DST, ym}});
  copy_back(ctx, ym, yd, y);
  return Support::yes();
}

Support Linear::cpu(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  if (in[0].dtype() == DType::f16)
    return run_in_f32(ctx, in, out, [&](std::span<const Tensor> i, std::span<Tensor> o) { return cpu(ctx, i, o, {}); });
  const Tensor &x = in[0], &w = in[1];
  bool bias = in.size() > 2 && in[2].defined();
  Tensor& y = out[0];
  if (!supported_dtype(x.dtype())) return Support::no("dtype is not f32, bf16 or f16");
  int64_t n = x.size(0), k = x.size(1), o = w.size(0);
  if (n == 0 || k == 0 || o == 0) return Support::no("empty matrix");
  auto t = compute_dt(x.dtype()), ut = dt(x.dtype());
  std::string key = fmt::format("{}:{}:{}:{}:{}", n, k, o, bias, int(x.dtype()));
  auto& plan = cache().get("linear:" + key, [&] {
    auto ad = mat_desc(1, n, k, false, t);
    auto bd = mat_desc(1, k, o, true, t);  // w (OUT, IN) read as (IN, OUT)
    auto cd = mat_desc(1, n, o, false, t);
    auto md = bias ? dnnl::matmul::desc(ad, bd, memory::desc({1, o}, compute_dt(in[2].dtype()), {o, 1}), cd)
                   : dnnl::matmul::desc(ad, bd, cd);
    auto pd = dnnl::matmul::primitive_desc(md, default_attr(), engine());
    return MatmulPlan{pd, dnnl::matmul(pd)};
  });
  Tensor hx, hw, hy, hb;
  const auto yd = mat_desc(1, n, o, false, ut);
  memory ym = output(ctx, yd, plan.pd.dst_desc(), y, hy);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, input(ctx, mat_desc(1, n, k, false, ut), plan.pd.src_desc(), x, hx)},
      {DNNL_ARG_WEIGHTS, input(ctx, mat_desc(1, k, o, true, ut), plan.pd.weights_desc(), w, hw)},
      {DNNL_ARG_DST, ym}};
  if (bias)
    args[DNNL_ARG_BIAS] =
        input(ctx, memory::desc({1, o}, dt(in[2].dtype()), {o, 1}), plan.pd.bias_desc(), in[2], hb);
  execute(ctx, plan.prim, plan.pd.scratchpad_desc(), std::move(args));
  copy_back(ctx, ym, yd, y);
  return Support::yes();
}

namespace {
// Both kernels plan (see run above): the meta device accounts their scratchpads.
[[maybe_unused]] const bool kMatmulPlans = (cpu_kernel_plans<Matmul> = cpu_kernel_plans<Linear> = true);
}  // namespace

}  // namespace reckon
