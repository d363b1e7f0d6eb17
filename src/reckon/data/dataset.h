// Datasets: a sample source of fixed-shape images (C, H, W) with integer labels in [0, K).
// open_dataset() turns a spec string ("fashion-mnist", "cifar10:DIR", "synthetic:3x32x32", ...)
// into one. File-backed datasets are read and validated once, at open, into memory as u8
// pixels; get() converts one sample to floats. Every malformed input is a one-line
// reckon::Error naming the file (and byte offset where it applies); nothing here crashes on
// a bad file.
// This is not a streaming reader (a dataset must fit in memory) and does no augmentation or
// normalisation: that is the loader's job (loader.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;  // (C, H, W)
  virtual int64_t num_classes() const = 0;
  virtual std::string name() const = 0;    // the spec it was opened from, e.g. "cifar10:/d/c10"
  virtual std::vector<std::string> class_names() const;  // default "0".."K-1"
  // requires: 0 <= i < size(); x has room for C*H*W floats.
  // ensures:  x holds sample i in CHW order scaled to [0, 1] (pixel / 255, exactly as
  //           PyTorch's ToTensor), *y its label in [0, K). Thread-safe (const, no state), so
  //           a loader's background thread may call it while others do too.
  virtual void get(int64_t i, float* x, int64_t* y) const = 0;
};

// A dataset held in memory as u8 pixels (N, C, H, W) and labels: what the IDX, CIFAR and
// image-folder readers build. Public so tools and tests can make one from their own bytes.
class MemoryDataset : public Dataset {
 public:
  // requires: pixels.size() == N*C*H*W with N = labels.size() and shape = (C, H, W) all > 0;
  //           every label in [0, num_classes); class_names empty or of num_classes entries.
  MemoryDataset(std::string name, Shape shape, int64_t num_classes, std::vector<uint8_t> pixels,
                std::vector<int32_t> labels, std::vector<std::string> class_names = {});
  int64_t size() const override { return int64_t(labels_.size()); }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return name_; }
  std::vector<std::string> class_names() const override;
  void get(int64_t i, float* x, int64_t* y) const override;
  const uint8_t* pixels(int64_t i) const { return pixels_.data() + i * sample_numel_; }  // C*H*W bytes
  int64_t label(int64_t i) const { return labels_[size_t(i)]; }

 private:
  std::string name_;
  Shape shape_;
  int64_t sample_numel_;
  int64_t num_classes_;
  std::vector<uint8_t> pixels_;  // (N, C, H, W)
  std::vector<int32_t> labels_;  // (N)
  std::vector<std::string> class_names_;
};

// spec (the split is chosen by train):
//   "fashion-mnist[:DIR]"  Debian's /usr/share/datasets/fashion-mnist (IDX, .gz), 10 named classes
//   "mnist:DIR"            train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
//                          t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz] in DIR; 10 classes
//   "idx:DIR"              the same files, K = 1 + the largest label of either split
//   "cifar10:DIR"          data_batch_1..5.bin / test_batch.bin (in DIR or DIR/cifar-10-batches-bin)
//   "cifar100:DIR"         train.bin / test.bin (in DIR or DIR/cifar-100-binary); fine labels
//   "folder:DIR"           DIR/train/<class>/*.png|jpg and DIR/test/<class>/..., or DIR/<class>/
//                          for both splits when there is no DIR/train; classes = sorted folder names
//   "synthetic:CxHxW[:N[:K]]"  N (default 1024) deterministic images from seed, K (default 10)
//                          classes; each class has its own pixel template plus per-sample noise,
//                          so labels are learnable. The test split holds other N samples.
// throws reckon::Error (one line) on an unknown spec or any missing or malformed file.
std::unique_ptr<Dataset> open_dataset(const std::string& spec, bool train, uint64_t seed = 0);

// A seeded hold-out (--val-split): round(fraction * N) samples of ds (at least 1, and at least
// 1 left) drawn by a permutation that depends only on seed, as `held`; the others, in ds's
// order, as `kept`. Both read through ds, which they share. Their names say which part they are.
// requires: 0 < fraction < 1 and ds.size() >= 2; else throws naming --val-split.
struct Split {
  std::unique_ptr<Dataset> kept, held;
};
Split split_dataset(std::shared_ptr<const Dataset> ds, double fraction, uint64_t seed);

// Per-channel mean and (population) standard deviation of get()'s values over the whole
// dataset, for --normalize auto. Deterministic: the same figures on any thread count.
std::vector<float> channel_mean(const Dataset& ds);
std::vector<float> channel_std(const Dataset& ds);

// The readers behind open_dataset, for callers that already know the kind.
// fixed_classes > 0 fixes K (labels >= K are errors); 0 infers K = 1 + the largest label.
std::unique_ptr<MemoryDataset> open_idx(const std::string& dir, bool train, int64_t fixed_classes,
                                        const std::string& name,
                                        std::vector<std::string> class_names = {},
                                        const std::string& missing_hint = "");
std::unique_ptr<MemoryDataset> open_cifar(const std::string& dir, bool train, bool cifar100,
                                          const std::string& name);
std::unique_ptr<MemoryDataset> open_image_folder(const std::string& dir, bool train,
                                                 const std::string& name);

}  // namespace reckon::data
