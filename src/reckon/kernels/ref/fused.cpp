// Reference kernels of the fused ops: the op they fuse (its own reference kernel), then each
// post-op step element by element, in double-checked order. f32 and f64.
#include "reckon/ops/dispatch.h"
#include "reckon/ops/fused.h"
#include "reckon/ops/matmul.h"

namespace reckon {

namespace {
// y = post(y) in place, element by element; r: the residual (sum) or undefined.
void post_ref(const char* op, Tensor& y, const Tensor* r, const std::vector<PostOp>& post) {
  std::vector<PostKind> kinds;
  for (const auto& p : post) kinds.push_back(post_kind(op, p.kind));
  visit_float(y.dtype(), op, [&]<class T>() {
    T* py = y.data<T>();
    const T* pr = r ? r->data<T>() : nullptr;
    for (int64_t i = 0; i < y.numel(); ++i) {
      T v = py[i];
      for (size_t k = 0; k < post.size(); ++k)
        v = apply_post<T>(kinds[k], post[k].alpha, post[k].beta, v, pr ? pr[i] : T(0));
      py[i] = v;
    }
  });
}
const Tensor* residual(std::span<const Tensor> in) { return in.size() > 3 && in[3].defined() ? &in[3] : nullptr; }
}  // namespace

void FusedConv2d::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Conv2d::ref(ctx, in.first(std::min<size_t>(3, in.size())), out, a.conv);
  post_ref("conv2d_fused", out[0], residual(in), a.post);
}
void FusedLinear::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Linear::ref(ctx, in.first(std::min<size_t>(3, in.size())), out, {});
  post_ref("linear_fused", out[0], residual(in), a.post);
}
void FusedElementwise::ref(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), "elementwise_fused", [&]<class T>() {
    std::copy_n(in[0].data<T>(), in[0].numel(), out[0].data<T>());
  });
  post_ref("elementwise_fused", out[0], nullptr, a.post);
}

}  // namespace reckon
