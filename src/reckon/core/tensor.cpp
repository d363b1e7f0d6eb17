#include "reckon/core/tensor.h"

#include <cmath>
#include <limits>

namespace reckon {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw Error(fmt::format("[shape] {} has more elements than a 64-bit size holds", shape_str(s)));
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Shape channels_last_strides(const Shape& s) {
  RK_CHECK(s.size() == 4, "[channels_last] needs a 4-D shape, got {}", shape_str(s));
  const int64_t c = s[1], h = s[2], w = s[3];
  return {h * w * c, 1, w * c, c};
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev, MemoryFormat format) {
  for (auto d : shape) RK_CHECK(d >= 0, "[empty] negative dimension in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(dev, checked_mul(shape_numel(shape), int64_t(dtype_size(dtype)),
                                                        fmt::format("[empty] bytes of {}", shape_str(shape))),
                                            current_tag());
  impl->shape = shape;
  impl->strides = format == MemoryFormat::channels_last ? channels_last_strides(shape) : contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) { return full(shape, 0.0, dtype, dev); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  raw_fill(t, value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  RK_CHECK(int64_t(values.size()) == shape_numel(shape),
           "[from_vector] {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) t.set(int64_t(i), values[i]);
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape) {
  RK_CHECK(int64_t(values.size()) == shape_numel(shape),
           "[from_floats] {} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::f32);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  RK_CHECK(d >= 0 && d < n, "[tensor] dimension {} out of range for shape {}", d, shape_str(shape()));
  return shape()[d];
}

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    if (s[i] != 1 && st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

bool Tensor::is_channels_last() const {
  if (dim() != 4) return false;
  const Shape want = channels_last_strides(shape());
  for (size_t i = 0; i < 4; ++i)
    if (shape()[i] != 1 && strides()[i] != want[i]) return false;
  return true;
}

void* Tensor::raw_data() const {
  auto& im = impl();
  if (!im.storage->data()) return nullptr;
  return static_cast<char*>(im.storage->data()) + im.offset * int64_t(dtype_size(im.dtype));
}

namespace {
// Storage index of logical flat index i.
int64_t strided_index(const TensorImpl& im, int64_t i) {
  int64_t off = 0;
  for (int64_t d = int64_t(im.shape.size()) - 1; d >= 0; --d) {
    int64_t n = im.shape[d];
    off += (i % n) * im.strides[d];
    i /= n;
  }
  return off;
}

double load(const void* p, DType t, int64_t k) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[k];
    case DType::f64: return static_cast<const double*>(p)[k];
    case DType::bf16: return float(static_cast<const bf16_t*>(p)[k]);
    case DType::f16: return float(static_cast<const f16_t*>(p)[k]);
    case DType::i8: return static_cast<const int8_t*>(p)[k];
    case DType::u8: return static_cast<const uint8_t*>(p)[k];
    case DType::i32: return static_cast<const int32_t*>(p)[k];
    case DType::i64: return double(static_cast<const int64_t*>(p)[k]);
  }
  return 0;
}

// An integer element takes only a value its type holds: a double out of range (or a NaN) has no
// integer conversion in C++ (undefined behaviour, UBSan's report), so it is an error here.
template <class I>
I to_int(double v, DType t) {
  // 2^63 is exactly representable; every double below it converts to int64.
  const double lo = double(std::numeric_limits<I>::min()), hi_excl = double(std::numeric_limits<I>::max()) + 1.0;
  const double w = std::trunc(v);  // the conversion truncates toward zero; NaN fails both tests
  RK_CHECK(w >= lo && w < hi_excl, "[tensor] the value {} does not fit in {}", v, dtype_name(t));
  return I(w);
}

void store(void* p, DType t, int64_t k, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[k] = float(v); break;
    case DType::f64: static_cast<double*>(p)[k] = v; break;
    case DType::bf16: static_cast<bf16_t*>(p)[k] = bf16_t(float(v)); break;
    case DType::f16: static_cast<f16_t*>(p)[k] = f16_t(float(v)); break;
    case DType::i8: static_cast<int8_t*>(p)[k] = to_int<int8_t>(v, t); break;
    case DType::u8: static_cast<uint8_t*>(p)[k] = to_int<uint8_t>(v, t); break;
    case DType::i32: static_cast<int32_t*>(p)[k] = to_int<int32_t>(v, t); break;
    case DType::i64: static_cast<int64_t*>(p)[k] = to_int<int64_t>(v, t); break;
  }
}
}  // namespace

double Tensor::get(int64_t i) const {
  RK_CHECK(!is_meta(), "[tensor] reading values of a meta tensor {}", shape_str(shape()));
  RK_CHECK(i >= 0 && i < numel(), "[tensor] index {} out of range for {}", i, shape_str(shape()));
  return load(raw_data(), dtype(), strided_index(impl(), i));
}

void Tensor::set(int64_t i, double v) const {
  RK_CHECK(!is_meta(), "[tensor] writing values of a meta tensor {}", shape_str(shape()));
  RK_CHECK(i >= 0 && i < numel(), "[tensor] index {} out of range for {}", i, shape_str(shape()));
  store(raw_data(), dtype(), strided_index(impl(), i), v);
}

double Tensor::item() const {
  RK_CHECK(numel() == 1, "[item] tensor of shape {} has {} elements, not 1", shape_str(shape()), numel());
  return get(0);
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> r(static_cast<size_t>(numel()));
  if (is_contiguous()) {
    const void* p = raw_data();
    RK_CHECK(p || numel() == 0, "[tensor] reading values of a meta tensor");
    for (int64_t i = 0; i < numel(); ++i) r[size_t(i)] = load(p, dtype(), i);
  } else {
    for (int64_t i = 0; i < numel(); ++i) r[size_t(i)] = get(i);
  }
  return r;
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor({}, {}, {})", shape_str(shape()), dtype_name(dtype()), device_name(device()));
}

Tensor& Tensor::set_requires_grad(bool r) {
  RK_CHECK(!r || is_floating(dtype()), "[requires_grad] only floating tensors can require grad ({})",
           dtype_name(dtype()));
  RK_CHECK(is_leaf() || r, "[requires_grad] cannot turn off requires_grad of a non-leaf tensor");
  impl().requires_grad = r;
  return *this;
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage_ptr();
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

// xoshiro256** seeded through splitmix64.
void Generator::manual_seed(uint64_t seed) {
  for (auto& w : s_) {
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    w = z ^ (z >> 31);
  }
}

uint64_t Generator::next_u64() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  // Box-Muller, one value per call so the stream position is easy to reason about.
  double u1 = uniform(), u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

void fill_uniform_(const Tensor& t, double lo, double hi, Generator& g) {
  if (t.is_meta()) return;
  if (t.dtype() == DType::f32 && t.is_contiguous()) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(lo + (hi - lo) * g.uniform());
    return;
  }
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, lo + (hi - lo) * g.uniform());
}

void fill_normal_(const Tensor& t, double mean, double stddev, Generator& g) {
  if (t.is_meta()) return;
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, mean + stddev * g.normal());
}

void raw_fill(const Tensor& t, double value) {
  if (t.is_meta()) return;
  if (t.dtype() == DType::f32 && t.is_contiguous()) {
    std::fill_n(t.data<float>(), t.numel(), float(value));
    return;
  }
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, value);
}

void raw_copy(const Tensor& dst, const Tensor& src) {
  RK_CHECK(dst.numel() == src.numel(), "[copy_] {} elements into {}", src.numel(), dst.numel());
  if (dst.is_meta() || src.is_meta()) return;
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), size_t(dst.nbytes()));
    return;
  }
  for (int64_t i = 0; i < dst.numel(); ++i) dst.set(i, src.get(i));
}

}  // namespace reckon
