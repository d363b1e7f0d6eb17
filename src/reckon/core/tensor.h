// Tensor: a shared handle to (storage, offset, shape, strides, dtype) plus autograd fields.
// Copies of a Tensor alias the same data, as in PyTorch. Shapes are NCHW for images; dims
// are int64. Views (reshape, permute, slice) live in ops/ because they have a backward.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "reckon/core/allocator.h"
#include "reckon/core/dtype.h"
#include "reckon/core/error.h"

namespace reckon {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);         // "[8, 3, 32, 32]"
Shape contiguous_strides(const Shape& s);
// Channels-last (NHWC in memory) strides of a 4-D NCHW shape: C varies fastest.
Shape channels_last_strides(const Shape& s);

// How a 4-D activation is laid out in memory (the shape stays N, C, H, W either way):
// contiguous is NCHW; channels_last is NHWC, the layout oneDNN's convolutions read without a
// reorder (PyTorch's torch.channels_last). Ops that take it say so (ops/op.h, kChannelsLast).
enum class MemoryFormat : uint8_t { contiguous, channels_last };

struct Node;  // autograd/node.h
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;       // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;   // the node that made this tensor (null for leaves)
  int output_nr = 0;               // which output of grad_fn
  std::weak_ptr<Node> grad_accumulator;
  std::string name;                // parameter name, for messages and the ledger
};

// The shape and dtype of a tensor that does not exist yet (what inference returns).
struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
  MemoryFormat format = MemoryFormat::contiguous;  // the dispatcher sets it (ops/dispatch.h)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Memory is tagged with current_tag() (see TagGuard).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu,
                      MemoryFormat format = MemoryFormat::contiguous);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device dev = Device::cpu);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device dev = Device::cpu) {
    return full(shape, 1.0, dtype, dev);
  }
  // Copies values (converted to dtype) into a new cpu tensor.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t nbytes() const { return numel() * int64_t(dtype_size(dtype())); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t offset() const { return impl().offset; }
  bool is_contiguous() const;
  // 4-D with channels-last strides (dims of size 1 ignored, as is_contiguous does: a tensor can
  // be both).
  bool is_channels_last() const;
  // Channels-last and not also contiguous: the layout an op that takes both should follow.
  bool prefers_channels_last() const { return dim() == 4 && is_channels_last() && !is_contiguous(); }
  bool is_meta() const { return device() == Device::meta; }
  Storage& storage() const { return *impl().storage; }
  const std::shared_ptr<Storage>& storage_ptr() const { return impl().storage; }
  TensorSpec spec() const { return {shape(), dtype()}; }

  // Typed pointer to the first element (checks the dtype; null on meta).
  template <class T>
  T* data() const;
  void* raw_data() const;

  // Value of element at flat index i of the logical (row-major) order, as double.
  double get(int64_t i) const;
  void set(int64_t i, double v) const;
  double item() const;
  std::vector<double> to_vector() const;  // logical order, as double
  std::string str() const;                // short description: shape, dtype, device

  // Autograd.
  bool requires_grad() const { return defined() && impl().requires_grad; }
  Tensor& set_requires_grad(bool r);
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) const { impl().grad = g.impl_; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  void backward(const Tensor& grad_output = Tensor()) const;  // autograd/engine.cpp
  // A new handle on the same data, cut from the graph.
  Tensor detach() const;
  const std::string& name() const { return impl().name; }
  void set_name(std::string n) const { impl().name = std::move(n); }

  TensorImpl& impl() const {
    RK_CHECK(impl_ != nullptr, "[tensor] use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A tensor sharing t's storage with another shape/strides/offset (no autograd link).
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset);

// Random numbers: a seeded generator with its own normal sampler, so a seed means the same
// numbers on every machine.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};
Generator& default_generator();
void manual_seed(uint64_t seed);

// In-place fills on cpu tensors (no autograd, no-ops on meta).
void fill_uniform_(const Tensor& t, double lo, double hi, Generator& g = default_generator());
void fill_normal_(const Tensor& t, double mean, double stddev, Generator& g = default_generator());
// Raw writes: not ops, so not recorded, costed or captured. They are the kernels of the fill_ and
// copy_ ops (ops/writes.h) and serve core itself (Tensor::full) and code that prepares data
// outside any step (loading files, test fixtures). Code that runs in a step calls the ops.
void raw_fill(const Tensor& t, double value);
void raw_copy(const Tensor& dst, const Tensor& src);  // same numel, any dtypes, any strides

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16_t>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16_t>() { return DType::f16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

template <class T>
T* Tensor::data() const {
  RK_CHECK(dtype() == dtype_of<T>(), "[tensor] data<{}>() on a {} tensor {}",
           dtype_name(dtype_of<T>()), dtype_name(dtype()), shape_str(shape()));
  return static_cast<T*>(raw_data());
}

// Calls f.template operator()<T>() with T the C++ type of a floating dtype.
template <class F>
decltype(auto) visit_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    default:
      throw Error(fmt::format("[{}] no reference kernel for dtype {}", op, dtype_name(t)));
  }
}

}  // namespace reckon
