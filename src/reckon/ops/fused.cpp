#include "reckon/ops/fused.h"

#include <fmt/format.h>

#include "reckon/ops/matmul.h"

namespace reckon {

namespace {
struct KindName {
  const char* name;
  PostKind kind;
  int64_t flops;
};
constexpr KindName kKinds[] = {
    {"relu", PostKind::relu, 2},       {"clamp", PostKind::clamp, 2},   {"sigmoid", PostKind::sigmoid, 4},
    {"tanh", PostKind::tanh, 4},       {"gelu", PostKind::gelu, 8},     {"silu", PostKind::silu, 5},
    {"hardswish", PostKind::hardswish, 5}, {"affine", PostKind::affine, 2}, {"exp", PostKind::exp, 4},
    {"log", PostKind::log, 4},         {"square", PostKind::square, 1}, {"sum", PostKind::sum, 1},
};

std::string fmt_num(double v) { return fmt::format("{:g}", v); }

// Checks the chain and its residual: returns the index of the residual input (-1 without a sum).
int check_post(std::string_view op, std::span<const Tensor> in, size_t base, const std::vector<PostOp>& post,
               bool allow_sum) {
  int sums = 0;
  for (const auto& p : post) {
    if (post_kind(op, p.kind) == PostKind::sum) ++sums;
  }
  RK_CHECK(sums <= 1, "[{}] a post-op chain adds one residual at most, this one has {} sum steps", op, sums);
  RK_CHECK(allow_sum || sums == 0, "[{}] has no residual input: a sum step is not allowed", op);
  const size_t want = base + size_t(sums);
  RK_CHECK(in.size() == want || (sums == 0 && in.size() == want + 1 && !in[want].defined()),
           "[{}] takes {} inputs with this chain ({}), got {}", op, want, post_ops_str(post), in.size());
  return sums ? int(base) : -1;
}
void check_residual(std::string_view op, const Tensor& r, const TensorSpec& y) {
  RK_CHECK(r.defined() && r.shape() == y.shape && r.dtype() == y.dtype,
           "[{}] the residual must be the output's shape and dtype {} {}, got {}", op, shape_str(y.shape),
           dtype_name(y.dtype), r.defined() ? shape_str(r.shape()) + " " + std::string(dtype_name(r.dtype())) : "none");
}
int64_t chain_flops(const std::vector<PostOp>& post, int64_t n) {
  int64_t f = 0;
  for (const auto& p : post) f += post_flops(post_kind("post-op", p.kind)) * n;
  return f;
}
}  // namespace

PostKind post_kind(std::string_view op, const std::string& kind) {
  for (const auto& k : kKinds)
    if (kind == k.name) return k.kind;
  std::string known;
  for (const auto& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
  throw Error(fmt::format("[{}] unknown post-op '{}' (known: {})", op, kind, known));
}
int64_t post_flops(PostKind k) {
  for (const auto& e : kKinds)
    if (e.kind == k) return e.flops;
  return 1;
}
bool has_sum(const std::vector<PostOp>& post) {
  for (const auto& p : post)
    if (p.kind == "sum") return true;
  return false;
}
std::string post_ops_str(const std::vector<PostOp>& post) {
  std::string s;
  for (const auto& p : post) {
    if (!s.empty()) s += "+";
    s += p.kind;
    PostKind k = post_kind("post-op", p.kind);
    if (k == PostKind::clamp || k == PostKind::affine || k == PostKind::hardswish)
      s += "[" + fmt_num(p.alpha) + "," + fmt_num(p.beta) + "]";
    else if (k == PostKind::relu && p.alpha != 0)
      s += "[" + fmt_num(p.alpha) + "]";
  }
  return s;
}

// ---- conv2d_fused ----
std::vector<TensorSpec> FusedConv2d::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() >= 2, "[conv2d_fused] needs x and weight");
  const int r = check_post(kName, in, 3, a.post, true);
  auto specs = Conv2d::infer(in.first(std::min<size_t>(3, in.size())), a.conv);
  if (r >= 0) check_residual(kName, in[size_t(r)], specs[0]);
  return specs;
}
Cost FusedConv2d::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  Cost c = Conv2d::cost(in.first(std::min<size_t>(3, in.size())), out, a.conv);
  c.flops += chain_flops(a.post, shape_numel(out[0].shape));
  if (in.size() > 3 && in[3].defined()) c.bytes_read += in[3].nbytes();
  return c;
}
SavedSet FusedConv2d::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- linear_fused ----
std::vector<TensorSpec> FusedLinear::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() >= 2, "[linear_fused] needs x and weight");
  const int r = check_post(kName, in, 3, a.post, true);
  auto specs = Linear::infer(in.first(std::min<size_t>(3, in.size())), {});
  if (r >= 0) check_residual(kName, in[size_t(r)], specs[0]);
  return specs;
}
Cost FusedLinear::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  Cost c = Linear::cost(in.first(std::min<size_t>(3, in.size())), out, {});
  c.flops += chain_flops(a.post, shape_numel(out[0].shape));
  if (in.size() > 3 && in[3].defined()) c.bytes_read += in[3].nbytes();
  return c;
}
SavedSet FusedLinear::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- elementwise_fused ----
std::vector<TensorSpec> FusedElementwise::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(in.size() == 1 && in[0].defined(), "[elementwise_fused] takes one tensor");
  check_post(kName, in, 1, a.post, false);
  RK_CHECK(!a.post.empty(), "[elementwise_fused] needs at least one step");
  RK_CHECK(is_floating(in[0].dtype()), "[elementwise_fused] needs a floating tensor, got {}",
           dtype_name(in[0].dtype()));
  return {{in[0].shape(), in[0].dtype()}};
}
Cost FusedElementwise::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs& a) {
  return {0, chain_flops(a.post, in[0].numel()), bytes_of(in), bytes_of(out)};
}
SavedSet FusedElementwise::saved(const Attrs&, NeedsGrad) { return {}; }

}  // namespace reckon
