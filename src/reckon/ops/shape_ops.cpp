#include "reckon/ops/shape_ops.h"

#include <algorithm>
#include <numeric>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

int64_t normalize_dim(std::string_view op, int64_t d, int64_t rank) {
  int64_t r = d < 0 ? d + rank : d;
  RK_CHECK(r >= 0 && r < std::max<int64_t>(rank, 1), "[{}] dim {} out of range for a {}-d tensor",
           op, d, rank);
  return r;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    RK_CHECK(da == db || da == 1 || db == 1, "[{}] shapes {} and {} do not broadcast", op,
             shape_str(a), shape_str(b));
    r[i] = da == 1 ? db : da;
  }
  return r;
}

namespace {
Cost free_cost() { return {}; }
}  // namespace

// ---- reshape ----
Shape resolve_reshape(const Shape& from, int64_t numel, const Shape& target) {
  Shape s = target;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      RK_CHECK(infer_at < 0, "[reshape] more than one -1 in {}", shape_str(target));
      infer_at = int64_t(i);
    } else {
      RK_CHECK(s[i] >= 0, "[reshape] negative size in {}", shape_str(target));
      // checked: an ONNX Reshape's shape is data from the file (fuzz_onnx found the wrap)
      known = checked_mul(known, s[i], fmt::format("[reshape] the shape {}", shape_str(target)));
    }
  }
  if (infer_at >= 0) {
    RK_CHECK(known > 0 && numel % known == 0, "[reshape] cannot view {} as {}", shape_str(from), shape_str(target));
    s[size_t(infer_at)] = numel / known;
  }
  RK_CHECK(shape_numel(s) == numel, "[reshape] cannot view {} ({} elements) as {}", shape_str(from), numel,
           shape_str(target));
  return s;
}

std::vector<TensorSpec> Reshape::infer(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  RK_CHECK(x.is_contiguous(), "[reshape] needs a contiguous input (got strides {})", shape_str(x.strides()));
  return {{resolve_reshape(x.shape(), x.numel(), a.shape), x.dtype()}};
}
Cost Reshape::cost(std::span<const Tensor>, std::span<const TensorSpec>, const Attrs&) { return free_cost(); }
SavedSet Reshape::saved(const Attrs&, NeedsGrad) { return {}; }
Tensor Reshape::view(std::span<const Tensor> in, const Attrs& a) {
  Shape s = infer(in, a)[0].shape;
  return make_view(in[0], s, contiguous_strides(s), in[0].offset());
}
std::vector<Tensor> Reshape::backward(const BackwardArgs& b, const Attrs&) {
  return {reshape(b.grad_outputs[0], b.input_specs[0].shape)};
}

// ---- permute ----
std::vector<TensorSpec> Permute::infer(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  RK_CHECK(int64_t(a.dims.size()) == x.dim(), "[permute] {} dims given for shape {}", a.dims.size(),
           shape_str(x.shape()));
  std::vector<bool> seen(a.dims.size());
  Shape s;
  for (auto d : a.dims) {
    int64_t nd = normalize_dim("permute", d, x.dim());
    RK_CHECK(!seen[size_t(nd)], "[permute] dim {} repeated", d);
    seen[size_t(nd)] = true;
    s.push_back(x.shape()[size_t(nd)]);
  }
  return {{s, x.dtype()}};
}
Cost Permute::cost(std::span<const Tensor>, std::span<const TensorSpec>, const Attrs&) { return free_cost(); }
SavedSet Permute::saved(const Attrs&, NeedsGrad) { return {}; }
Tensor Permute::view(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  infer(in, a);
  Shape s, st;
  for (auto d : a.dims) {
    int64_t nd = normalize_dim("permute", d, x.dim());
    s.push_back(x.shape()[size_t(nd)]);
    st.push_back(x.strides()[size_t(nd)]);
  }
  return make_view(x, s, st, x.offset());
}
std::vector<Tensor> Permute::backward(const BackwardArgs& b, const Attrs& a) {
  std::vector<int64_t> inv(a.dims.size());
  int64_t n = int64_t(a.dims.size());
  for (int64_t i = 0; i < n; ++i) inv[size_t(normalize_dim("permute", a.dims[size_t(i)], n))] = i;
  return {permute(b.grad_outputs[0], inv)};
}

// ---- expand ----
std::vector<TensorSpec> Expand::infer(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  RK_CHECK(a.shape.size() >= size_t(x.dim()), "[expand] cannot expand {} to fewer dims {}",
           shape_str(x.shape()), shape_str(a.shape));
  size_t lead = a.shape.size() - size_t(x.dim());
  for (size_t i = 0; i < size_t(x.dim()); ++i)
    RK_CHECK(x.shape()[i] == a.shape[lead + i] || x.shape()[i] == 1, "[expand] cannot expand {} to {}",
             shape_str(x.shape()), shape_str(a.shape));
  return {{a.shape, x.dtype()}};
}
Cost Expand::cost(std::span<const Tensor>, std::span<const TensorSpec>, const Attrs&) { return free_cost(); }
SavedSet Expand::saved(const Attrs&, NeedsGrad) { return {}; }
Tensor Expand::view(std::span<const Tensor> in, const Attrs& a) {
  infer(in, a);
  const Tensor& x = in[0];
  size_t lead = a.shape.size() - size_t(x.dim());
  Shape st(a.shape.size(), 0);
  for (size_t i = 0; i < size_t(x.dim()); ++i)
    st[lead + i] = x.shape()[i] == a.shape[lead + i] ? x.strides()[i] : 0;
  return make_view(x, a.shape, st, x.offset());
}
std::vector<Tensor> Expand::backward(const BackwardArgs& b, const Attrs&) {
  return {sum_to(b.grad_outputs[0], b.input_specs[0].shape)};
}

// ---- narrow ----
std::vector<TensorSpec> Narrow::infer(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t d = normalize_dim("narrow", a.dim, x.dim());
  RK_CHECK(a.start >= 0 && a.length >= 0 && a.start + a.length <= x.shape()[size_t(d)],
           "[narrow] [{}, {}) out of range for dim {} of {}", a.start, a.start + a.length, a.dim,
           shape_str(x.shape()));
  Shape s = x.shape();
  s[size_t(d)] = a.length;
  return {{s, x.dtype()}};
}
Cost Narrow::cost(std::span<const Tensor>, std::span<const TensorSpec>, const Attrs&) { return free_cost(); }
SavedSet Narrow::saved(const Attrs&, NeedsGrad) { return {}; }
Tensor Narrow::view(std::span<const Tensor> in, const Attrs& a) {
  Shape s = infer(in, a)[0].shape;
  const Tensor& x = in[0];
  int64_t d = normalize_dim("narrow", a.dim, x.dim());
  return make_view(x, s, x.strides(), x.offset() + a.start * x.strides()[size_t(d)]);
}
std::vector<Tensor> Narrow::backward(const BackwardArgs& b, const Attrs& a) {
  int64_t d = normalize_dim("narrow", a.dim, int64_t(b.input_specs[0].shape.size()));
  return {call1<PadNarrow>({b.grad_outputs[0]}, {b.input_specs[0].shape, d, a.start})};
}

std::vector<TensorSpec> PadNarrow::infer(std::span<const Tensor> in, const Attrs& a) {
  return {{a.full_shape, in[0].dtype()}};
}
Cost PadNarrow::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, bytes_of(in), bytes_of(out)};
}
SavedSet PadNarrow::saved(const Attrs&, NeedsGrad) { return {}; }

// ---- contiguous ----
std::vector<TensorSpec> Contiguous::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(!a.channels_last || in[0].dim() == 4, "[contiguous] channels-last needs a 4-D tensor, got {}",
           in[0].str());
  return {{in[0].shape(), in[0].dtype(), a.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous}};
}
Cost Contiguous::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, bytes_of(in), bytes_of(out)};
}
SavedSet Contiguous::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> Contiguous::backward(const BackwardArgs& b, const Attrs&) { return {b.grad_outputs[0]}; }

// ---- concat ----
std::vector<TensorSpec> Concat::infer(std::span<const Tensor> in, const Attrs& a) {
  RK_CHECK(!in.empty(), "[concat] no tensors to join");
  const Tensor& x0 = in[0];
  RK_CHECK(x0.dim() >= 1, "[concat] cannot join scalars ({})", x0.str());
  int64_t d = normalize_dim("concat", a.dim, x0.dim());
  Shape s = x0.shape();
  s[size_t(d)] = 0;
  for (auto& t : in) {
    RK_CHECK(t.dim() == x0.dim() && t.dtype() == x0.dtype(), "[concat] {} and {} cannot be joined",
             t.str(), x0.str());
    for (int64_t i = 0; i < t.dim(); ++i)
      RK_CHECK(i == d || t.shape()[size_t(i)] == x0.shape()[size_t(i)],
               "[concat] shapes {} and {} differ outside dim {}", shape_str(t.shape()),
               shape_str(x0.shape()), a.dim);
    s[size_t(d)] += t.shape()[size_t(d)];
  }
  return {{s, x0.dtype()}};
}
Cost Concat::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, bytes_of(in), bytes_of(out)};
}
SavedSet Concat::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> Concat::backward(const BackwardArgs& b, const Attrs& a) {
  std::vector<Tensor> r;
  int64_t d = normalize_dim("concat", a.dim, int64_t(b.input_specs[0].shape.size()));
  int64_t start = 0;
  for (auto& s : b.input_specs) {
    int64_t len = s.shape[size_t(d)];
    r.push_back(contiguous(narrow(b.grad_outputs[0], d, start, len)));
    start += len;
  }
  return r;
}

// ---- cast ----
std::vector<TensorSpec> Cast::infer(std::span<const Tensor> in, const Attrs& a) {
  return {{in[0].shape(), a.dtype}};
}
Cost Cast::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, 0, bytes_of(in), bytes_of(out)};
}
SavedSet Cast::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> Cast::backward(const BackwardArgs& b, const Attrs&) {
  return {cast(b.grad_outputs[0], b.input_specs[0].dtype)};
}

// ---- sum ----
namespace {
std::vector<int64_t> sum_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> r;
  if (dims.empty()) {
    r.resize(size_t(x.dim()));
    std::iota(r.begin(), r.end(), 0);
    return r;
  }
  for (auto d : dims) r.push_back(normalize_dim("sum", d, x.dim()));
  std::sort(r.begin(), r.end());
  RK_CHECK(std::adjacent_find(r.begin(), r.end()) == r.end(), "[sum] repeated dim");
  return r;
}
}  // namespace
std::vector<TensorSpec> Sum::infer(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  RK_CHECK(is_floating(x.dtype()), "[sum] needs a floating tensor, got {}", dtype_name(x.dtype()));
  auto dims = sum_dims(x, a.dims);
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i) {
    bool red = std::binary_search(dims.begin(), dims.end(), i);
    if (!red) s.push_back(x.shape()[size_t(i)]);
    else if (a.keepdim) s.push_back(1);
  }
  return {{s, x.dtype()}};
}
Cost Sum::cost(std::span<const Tensor> in, std::span<const TensorSpec> out, const Attrs&) {
  return {0, in[0].numel(), bytes_of(in), bytes_of(out)};
}
SavedSet Sum::saved(const Attrs&, NeedsGrad) { return {}; }
std::vector<Tensor> Sum::backward(const BackwardArgs& b, const Attrs& a) {
  const Shape& xs = b.input_specs[0].shape;
  Shape kept = xs;
  std::vector<int64_t> dims;
  if (a.dims.empty()) {
    for (size_t i = 0; i < xs.size(); ++i) dims.push_back(int64_t(i));
  } else {
    for (auto d : a.dims) dims.push_back(normalize_dim("sum", d, int64_t(xs.size())));
  }
  for (auto d : dims) kept[size_t(d)] = 1;
  return {contiguous(expand(reshape(b.grad_outputs[0], kept), xs))};
}

// ---- functional ----
Tensor reshape(const Tensor& x, Shape shape) {
  return call1<Reshape>({x.is_contiguous() ? x : contiguous(x)}, {std::move(shape)});
}
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  int64_t n = x.dim();
  if (n == 0) return reshape(x, {1});
  int64_t s = normalize_dim("flatten", start_dim, n), e = normalize_dim("flatten", end_dim, n);
  Shape r(x.shape().begin(), x.shape().begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= x.shape()[size_t(i)];
  r.push_back(m);
  r.insert(r.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, r);
}
Tensor permute(const Tensor& x, std::vector<int64_t> dims) { return call1<Permute>({x}, {std::move(dims)}); }
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> p(size_t(x.dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[size_t(normalize_dim("transpose", d0, x.dim()))], p[size_t(normalize_dim("transpose", d1, x.dim()))]);
  return permute(x, p);
}
Tensor expand(const Tensor& x, Shape shape) { return call1<Expand>({x}, {std::move(shape)}); }
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return call1<Narrow>({x}, {dim, start, length});
}
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : call1<Contiguous>({x}); }
Tensor to_channels_last(const Tensor& x) {
  return x.is_channels_last() ? x : call1<Contiguous>({x}, {.channels_last = true});
}
Tensor concat(const std::vector<Tensor>& xs, int64_t dim) { return call1<Concat>(xs, {dim}); }
Tensor cast(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : call1<Cast>({x}, {dtype}); }
Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return call1<Sum>({x}, {std::move(dims), keepdim});
}
Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  Tensor s = sum(x, dims, keepdim);
  int64_t n = s.numel() == 0 ? 1 : x.numel() / std::max<int64_t>(s.numel(), 1);
  return scale(s, 1.0 / double(n));
}
Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  size_t lead = size_t(x.dim()) - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < size_t(x.dim()); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) dims.push_back(int64_t(i));
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  return reshape(s, shape);
}

}  // namespace reckon

// ---- ONNX ----
namespace reckon {

std::vector<std::string> Reshape::onnx(OnnxArgs& o, const Attrs&) {
  Shape target = o.out_specs[0].shape;  // resolved (no -1)
  // With a symbolic batch, a reshape that keeps dim 0 copies it from the input (ONNX's 0).
  if (o.sink.dynamic_batch && !target.empty() && !o.in_specs[0].shape.empty() &&
      target[0] == o.in_specs[0].shape[0])
    target[0] = 0;
  return {o.one("Reshape", {o.in[0], o.sink.const_i64(target)})};
}
std::vector<std::string> Permute::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Transpose", {o.in[0]}, {{"perm", a.dims}})};
}
std::vector<std::string> Expand::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Expand", {o.in[0], o.sink.const_i64(a.shape)})};
}
std::vector<std::string> Narrow::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Slice", {o.in[0], o.sink.const_i64({a.start}), o.sink.const_i64({a.start + a.length}),
                          o.sink.const_i64({a.dim})})};
}
std::vector<std::string> Contiguous::onnx(OnnxArgs& o, const Attrs&) { return {o.one("Identity", {o.in[0]})}; }
std::vector<std::string> Concat::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Concat", o.in, {{"axis", a.dim}})};
}
std::vector<std::string> Cast::onnx(OnnxArgs& o, const Attrs& a) {
  return {o.one("Cast", {o.in[0]}, {{"to", int64_t(onnx_dtype(a.dtype))}})};
}
std::vector<std::string> Sum::onnx(OnnxArgs& o, const Attrs& a) {
  std::vector<std::string> in{o.in[0]};
  if (!a.dims.empty()) in.push_back(o.sink.const_i64(a.dims));  // an input from opset 13 on
  return {o.one("ReduceSum", in, {{"keepdims", int64_t(a.keepdim)}})};
}

}  // namespace reckon
