// open_dataset (the spec parser), the in-memory dataset, the synthetic dataset and the
// per-channel statistics. The file readers are idx.cpp, cifar.cpp and image_folder.cpp.
#include "reckon/data/dataset.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "reckon/data/detail.h"
#include "reckon/data/random.h"

namespace reckon::data {

using detail::one_line;

namespace {
// Samples `indices` of a shared dataset.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices, std::string part)
      : base_(std::move(base)), indices_(std::move(indices)), part_(std::move(part)) {}
  int64_t size() const override { return int64_t(indices_.size()); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  std::string name() const override { return base_->name() + " (" + part_ + ")"; }
  std::vector<std::string> class_names() const override { return base_->class_names(); }
  void get(int64_t i, float* x, int64_t* y) const override { base_->get(indices_[size_t(i)], x, y); }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  std::string part_;
};
}  // namespace

Split split_dataset(std::shared_ptr<const Dataset> ds, double fraction, uint64_t seed) {
  const int64_t n = ds->size();
  RK_CHECK(fraction > 0 && fraction < 1, "--val-split must be in (0, 1) (got {})", fraction);
  RK_CHECK(n >= 2, "--val-split: {} has {} training sample(s), too few to hold any out", ds->name(), n);
  const int64_t held_n = std::clamp<int64_t>(std::llround(fraction * double(n)), 1, n - 1);
  // Fisher-Yates with counter-based draws (random.h): the same hold-out for a seed on any machine.
  constexpr uint64_t kSplitStream = 0x76616c5f73706c74ull;  // "val_splt"
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  for (int64_t j = n - 1; j > 0; --j)
    std::swap(order[size_t(j)], order[size_t(bounded(hash64(seed, kSplitStream, uint64_t(j)), uint64_t(j) + 1))]);
  std::vector<int64_t> held(order.begin(), order.begin() + held_n), kept(order.begin() + held_n, order.end());
  std::sort(held.begin(), held.end());
  std::sort(kept.begin(), kept.end());
  Split s;
  s.kept = std::make_unique<Subset>(ds, std::move(kept), fmt::format("training part, {} held out", held_n));
  s.held = std::make_unique<Subset>(ds, std::move(held), fmt::format("validation part, seed {}", seed));
  return s;
}

std::vector<std::string> Dataset::class_names() const {
  std::vector<std::string> names;
  for (int64_t k = 0; k < num_classes(); ++k) names.push_back(std::to_string(k));
  return names;
}

// ---------------------------------------------------------------------------------------------
// MemoryDataset

MemoryDataset::MemoryDataset(std::string name, Shape shape, int64_t num_classes,
                             std::vector<uint8_t> pixels, std::vector<int32_t> labels,
                             std::vector<std::string> class_names)
    : name_(std::move(name)),
      shape_(std::move(shape)),
      num_classes_(num_classes),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)),
      class_names_(std::move(class_names)) {
  RK_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] > 0 && shape_[2] > 0,
           "[dataset] {}: sample shape {} is not (C, H, W) with every size > 0", name_,
           shape_str(shape_));
  RK_CHECK(num_classes_ > 0, "[dataset] {}: {} classes", name_, num_classes_);
  sample_numel_ = shape_numel(shape_);
  RK_CHECK(int64_t(pixels_.size()) == int64_t(labels_.size()) * sample_numel_,
           "[dataset] {}: {} pixel bytes for {} samples of {}", name_, pixels_.size(),
           labels_.size(), shape_str(shape_));
  for (size_t i = 0; i < labels_.size(); ++i)
    RK_CHECK(labels_[i] >= 0 && labels_[i] < num_classes_,
             "[dataset] {}: label {} of sample {} is out of range for {} classes", name_,
             labels_[i], i, num_classes_);
  RK_CHECK(class_names_.empty() || int64_t(class_names_.size()) == num_classes_,
           "[dataset] {}: {} class names for {} classes", name_, class_names_.size(), num_classes_);
}

std::vector<std::string> MemoryDataset::class_names() const {
  return class_names_.empty() ? Dataset::class_names() : class_names_;
}

void MemoryDataset::get(int64_t i, float* x, int64_t* y) const {
  RK_CHECK(i >= 0 && i < size(), "[dataset] {}: sample {} out of range [0, {})", name_, i, size());
  const uint8_t* src = pixels(i);
  // A true division, as PyTorch's ToTensor (x.float().div(255)); the compiler vectorises it.
  for (int64_t j = 0; j < sample_numel_; ++j) x[j] = float(src[j]) / 255.0f;
  *y = labels_[size_t(i)];
}

// ---------------------------------------------------------------------------------------------
// Synthetic: pixel p of sample i of class k is template(k, p) in [48, 208) plus noise(i, p)
// in [-48, 48), both from counter-based hashes, so any sample is computed on demand in O(CHW)
// with no table (a 3x224x224, 1000-class set costs nothing to open).

namespace {

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(Shape shape, int64_t n, int64_t k, uint64_t seed, bool train, std::string name)
      : shape_(std::move(shape)), n_(n), k_(k), name_(std::move(name)) {
    numel_ = shape_numel(shape_);
    template_key_ = hash64(seed, 0x7e3d1a7e);
    sample_key_ = hash64(seed, train ? 0x7a1 : 0x7e57);
  }
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return k_; }
  std::string name() const override { return name_; }
  void get(int64_t i, float* x, int64_t* y) const override {
    RK_CHECK(i >= 0 && i < n_, "[dataset] {}: sample {} out of range [0, {})", name_, i, n_);
    const uint64_t label = bounded(hash64(sample_key_, uint64_t(i), 0), uint64_t(k_));
    for (int64_t p0 = 0; p0 < numel_; p0 += 8) {
      const uint64_t t = hash64(template_key_, label, uint64_t(p0));
      const uint64_t r = hash64(sample_key_, uint64_t(i), uint64_t(p0) + 1);
      const int64_t end = std::min<int64_t>(8, numel_ - p0);
      for (int64_t j = 0; j < end; ++j) {
        int tb = int((t >> (8 * j)) & 0xff), nb = int((r >> (8 * j)) & 0xff);
        int v = 48 + ((tb * 160) >> 8) + ((nb - 128) * 3) / 8;  // in [0, 255]
        x[p0 + j] = float(v) / 255.0f;
      }
    }
    *y = int64_t(label);
  }

 private:
  Shape shape_;
  int64_t n_, k_, numel_;
  std::string name_;
  uint64_t template_key_, sample_key_;
};

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return parts;
    start = p + 1;
  }
}

std::unique_ptr<Dataset> open_synthetic(const std::string& spec, const std::string& rest, bool train,
                                        uint64_t seed) {
  auto bad = [&](const std::string& why) {
    return Error(one_line(fmt::format(
        "[data] bad dataset spec '{}': {} (want synthetic:CxHxW[:N[:K]], e.g. synthetic:3x32x32:1024:10)",
        spec, why)));
  };
  std::vector<std::string> parts = split(rest, ':');
  if (parts.size() > 3) throw bad("too many fields");
  std::vector<std::string> dims = split(parts[0], 'x');
  if (dims.size() != 3) throw bad(fmt::format("shape '{}' is not CxHxW", parts[0]));
  Shape shape;
  for (const auto& d : dims) {
    int64_t v = 0;
    if (!parse_int(d, v) || v < 1 || v > 65536) throw bad(fmt::format("bad size '{}' in the shape", d));
    shape.push_back(v);
  }
  if (shape_numel(shape) > (int64_t(1) << 28)) throw bad("the image is too large");
  int64_t n = 1024, k = 10;
  if (parts.size() > 1 && (!parse_int(parts[1], n) || n < 1 || n > (int64_t(1) << 40)))
    throw bad(fmt::format("bad sample count '{}'", parts[1]));
  if (parts.size() > 2 && (!parse_int(parts[2], k) || k < 1 || k > (int64_t(1) << 31)))
    throw bad(fmt::format("bad class count '{}'", parts[2]));
  std::string name = fmt::format("synthetic:{}x{}x{}:{}:{}", shape[0], shape[1], shape[2], n, k);
  return std::make_unique<SyntheticDataset>(shape, n, k, seed, train, name);
}

const std::vector<std::string> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace

std::unique_ptr<Dataset> open_dataset(const std::string& spec, bool train, uint64_t seed) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto need_dir = [&]() {
    RK_CHECK(!rest.empty(), "[data] bad dataset spec '{}': {} needs a directory ({}:DIR)",
             one_line(spec), kind, kind);
  };
  if (kind == "fashion-mnist") {
    std::string dir = rest.empty() ? kFashionMnistDir : rest;
    return open_idx(dir, train, 10, rest.empty() ? "fashion-mnist" : spec, kFashionMnistClasses,
                    rest.empty() ? "Debian ships it: apt-get install dataset-fashion-mnist" : "");
  }
  if (kind == "mnist") {
    need_dir();
    return open_idx(rest, train, 10, spec);
  }
  if (kind == "idx") {
    need_dir();
    return open_idx(rest, train, 0, spec);
  }
  if (kind == "cifar10" || kind == "cifar100") {
    need_dir();
    return open_cifar(rest, train, kind == "cifar100", spec);
  }
  if (kind == "folder") {
    need_dir();
    return open_image_folder(rest, train, spec);
  }
  if (kind == "synthetic") {
    RK_CHECK(!rest.empty(), "[data] bad dataset spec '{}': synthetic needs a shape (synthetic:CxHxW[:N[:K]])",
             one_line(spec));
    return open_synthetic(spec, rest, train, seed);
  }
  throw Error(one_line(fmt::format(
      "[data] unknown dataset '{}' (want fashion-mnist, mnist:DIR, idx:DIR, cifar10:DIR, "
      "cifar100:DIR, folder:DIR or synthetic:CxHxW[:N[:K]])",
      spec)));
}

// ---------------------------------------------------------------------------------------------
// Per-channel statistics. Samples are summed in fixed chunks whose partial sums are added in
// chunk order, so the result does not depend on the number of threads. For a MemoryDataset the
// sums are exact integers over the u8 pixels.

namespace {

struct ChannelStats {
  std::vector<double> mean, std;
};

constexpr int64_t kStatsChunk = 256;  // samples per partial sum

ChannelStats stats_u8(const MemoryDataset& ds) {
  const Shape s = ds.sample_shape();
  const int64_t c_n = s[0], hw = s[1] * s[2], n = ds.size();
  const int64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  std::vector<int64_t> sum(size_t(chunks * c_n), 0), sumsq(size_t(chunks * c_n), 0);
#pragma omp parallel for schedule(dynamic)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    for (int64_t i = ch * kStatsChunk; i < std::min(n, (ch + 1) * kStatsChunk); ++i) {
      const uint8_t* px = ds.pixels(i);
      for (int64_t c = 0; c < c_n; ++c) {
        int64_t a = 0, b = 0;
        for (int64_t j = 0; j < hw; ++j) {
          int64_t v = px[c * hw + j];
          a += v;
          b += v * v;
        }
        sum[size_t(ch * c_n + c)] += a;
        sumsq[size_t(ch * c_n + c)] += b;
      }
    }
  }
  ChannelStats st;
  for (int64_t c = 0; c < c_n; ++c) {
    __int128 a = 0, b = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      a += sum[size_t(ch * c_n + c)];
      b += sumsq[size_t(ch * c_n + c)];
    }
    const __int128 count = __int128(n) * hw;
    const __int128 var_num = count * b - a * a;  // count^2 * 255^2 * variance, exact
    st.mean.push_back(double(a) / double(count) / 255.0);
    st.std.push_back(std::sqrt(double(var_num)) / double(count) / 255.0);
  }
  return st;
}

ChannelStats stats_generic(const Dataset& ds) {
  const Shape s = ds.sample_shape();
  const int64_t c_n = s[0], hw = s[1] * s[2], n = ds.size();
  const int64_t chunks = (n + kStatsChunk - 1) / kStatsChunk;
  std::vector<double> sum(size_t(chunks * c_n), 0), sumsq(size_t(chunks * c_n), 0);
  std::exception_ptr error;
#pragma omp parallel
  {
    Tensor buf = Tensor::empty({c_n * hw});
    float* x = buf.data<float>();
#pragma omp for schedule(dynamic)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      try {
        for (int64_t i = ch * kStatsChunk; i < std::min(n, (ch + 1) * kStatsChunk); ++i) {
          int64_t y = 0;
          ds.get(i, x, &y);
          for (int64_t c = 0; c < c_n; ++c) {
            double a = 0, b = 0;
            for (int64_t j = 0; j < hw; ++j) {
              double v = x[c * hw + j];
              a += v;
              b += v * v;
            }
            sum[size_t(ch * c_n + c)] += a;
            sumsq[size_t(ch * c_n + c)] += b;
          }
        }
      } catch (...) {
#pragma omp critical
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  ChannelStats st;
  for (int64_t c = 0; c < c_n; ++c) {
    double a = 0, b = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) {
      a += sum[size_t(ch * c_n + c)];
      b += sumsq[size_t(ch * c_n + c)];
    }
    const double count = double(n) * double(hw);
    const double mean = a / count;
    st.mean.push_back(mean);
    st.std.push_back(std::sqrt(std::max(0.0, b / count - mean * mean)));
  }
  return st;
}

ChannelStats channel_stats(const Dataset& ds) {
  RK_CHECK(ds.size() > 0, "[dataset] {}: channel statistics of an empty dataset", ds.name());
  if (const auto* m = dynamic_cast<const MemoryDataset*>(&ds)) return stats_u8(*m);
  return stats_generic(ds);
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace

std::vector<float> channel_mean(const Dataset& ds) { return to_float(channel_stats(ds).mean); }
std::vector<float> channel_std(const Dataset& ds) { return to_float(channel_stats(ds).std); }

}  // namespace reckon::data
