// The data layer: the real Fashion-MNIST files (Debian's dataset-fashion-mnist), IDX, CIFAR
// and image-folder readers on files built here (good ones, and every kind of bad one, each of
// which must raise a one-line reckon::Error naming the file), the synthetic dataset, and the
// loader: determinism (seed, resume, prefetch), shuffle, drop_last, sharding, normalisation,
// augmentation, tagging, errors from the producer thread, and its speed on Fashion-MNIST.
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <omp.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "reckon/data/dataset.h"
#include "reckon/data/image.h"
#include "reckon/data/loader.h"

#include "test_util.h"

using namespace reckon;
using reckon::test_util::error_of;
using namespace reckon::data;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("reckon_data_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string sub(const std::string& name) const {
    fs::create_directories(dir_ / name);
    return path(name);
  }
  fs::path dir_;
};

void write_raw(const std::string& p, const std::string& bytes) {
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

void write_gz(const std::string& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

std::string read_raw(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string be32(uint32_t n) {
  return {char(n >> 24), char((n >> 16) & 0xff), char((n >> 8) & 0xff), char(n & 0xff)};
}

std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::string s = be32(magic) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) s += char((i * 7 + 3) % 256);
  return s;
}

std::string idx_labels(const std::vector<int>& labels, uint32_t magic = 0x801) {
  std::string s = be32(magic) + be32(uint32_t(labels.size()));
  for (int l : labels) s += char(l);
  return s;
}

// An error must be one line naming `what` (a file) and holding `part`.
#define EXPECT_FILE_ERROR(expr, what, part)                                   \
  do {                                                                        \
    std::string msg_ = error_of([&] { expr; });                               \
    EXPECT_EQ(msg_.find('\n'), std::string::npos) << msg_;                    \
    EXPECT_NE(msg_.find(what), std::string::npos) << msg_ << "\nwant: " << (what); \
    EXPECT_NE(msg_.find(part), std::string::npos) << msg_ << "\nwant: " << (part); \
  } while (0)

std::vector<float> sample(const Dataset& ds, int64_t i, int64_t* y = nullptr) {
  std::vector<float> x(size_t(shape_numel(ds.sample_shape())));
  int64_t label = -1;
  ds.get(i, x.data(), &label);
  if (y) *y = label;
  return x;
}

using reckon::test_util::write_png;

// libjpeg at quality 100; channels 1 or 3, (H, W, C).
void write_jpeg(const std::string& p, int w, int h, int channels, const std::vector<uint8_t>& px,
                bool progressive = false) {
  fs::create_directories(fs::path(p).parent_path());
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  std::FILE* f = std::fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  jpeg_stdio_dest(&c, f);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + size_t(c.next_scanline) * size_t(w * channels));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::fclose(f);
  jpeg_destroy_compress(&c);
}

// A dataset whose sample i is (i, i + 0.5) with label i % k: batches reveal their indices.
class CountingDataset : public Dataset {
 public:
  CountingDataset(int64_t n, int64_t k = 3, int64_t fail_at = -1) : n_(n), k_(k), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 1, 2}; }
  int64_t num_classes() const override { return k_; }
  std::string name() const override { return "counting"; }
  void get(int64_t i, float* x, int64_t* y) const override {
    if (i == fail_at_) throw Error(fmt::format("[counting] sample {} is broken", i));
    x[0] = float(i);
    x[1] = float(i) + 0.5f;
    *y = i % k_;
  }

 private:
  int64_t n_, k_, fail_at_;
};

struct Epoch {
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> ys;
  std::vector<int64_t> index;
  std::vector<Shape> shapes;
};

Epoch run_epoch(Loader& l, int64_t epoch, int64_t skip = 0) {
  Epoch e;
  l.start_epoch(epoch, skip);
  Batch b;
  while (l.next(b)) {
    EXPECT_EQ(b.x.dtype(), DType::f32);
    EXPECT_EQ(b.y.dtype(), DType::i64);
    EXPECT_EQ(b.x.storage().tag(), Tag::input);
    EXPECT_EQ(b.y.storage().tag(), Tag::input);
    const float* x = b.x.data<float>();
    const int64_t* y = b.y.data<int64_t>();
    e.xs.emplace_back(x, x + b.x.numel());
    e.ys.emplace_back(y, y + b.y.numel());
    e.index.push_back(b.index);
    e.shapes.push_back(b.x.shape());
  }
  EXPECT_FALSE(l.next(b));  // stays at the end
  return e;
}

// The dataset indices an epoch of a CountingDataset visited, in order.
std::vector<int64_t> visited(const Epoch& e) {
  std::vector<int64_t> v;
  for (const auto& xs : e.xs)
    for (size_t j = 0; j < xs.size(); j += 2) v.push_back(int64_t(xs[j]));
  return v;
}

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

bool fashion_files_present() {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz"})
    if (!fs::exists(fs::path(kFashionDir) / f)) {
      ADD_FAILURE() << kFashionDir << "/" << f
                    << " is missing: install it with `apt-get install dataset-fashion-mnist` (make test does)";
      return false;
    }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST, the real files

// Values read once with Python from the .gz files:
//   X = np.frombuffer(gzip.open('train-images-idx3-ubyte.gz').read(), np.uint8, offset=16).reshape(-1, 28, 28)
//   train labels[:10] = [9 0 0 3 0 2 7 2 5 5], labels[59999] = 5; X[0,14,14] = 217;
//   X[0,10,13:17] = [193, 228, 218, 213]; X[59999,14,14] = 0
//   test labels[:10] = [9 2 1 1 6 1 4 6 5 7], labels[9999] = 5; Xt[0,14,14] = 110; Xt[9999,20,10] = 57
//   6000 images per class in train, 1000 in test; sum of all test pixels = 573469082
//   (X/255).mean() = 0.2860405969887955, (X/255).std() = 0.35302424451492254
TEST(FashionMnist, RealFiles) {
  if (!fashion_files_present()) return;
  auto train = open_dataset("fashion-mnist", true);
  auto test = open_dataset("fashion-mnist", false);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->sample_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->name(), "fashion-mnist");
  EXPECT_EQ(train->class_names()[0], "T-shirt/top");
  EXPECT_EQ(train->class_names()[9], "Ankle boot");

  int64_t y = -1;
  std::vector<float> x = sample(*train, 0, &y);
  EXPECT_EQ(y, 9);
  EXPECT_EQ(x[14 * 28 + 14], 217.0f / 255.0f);
  const int row10[] = {193, 228, 218, 213};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(x[10 * 28 + 13 + j], float(row10[j]) / 255.0f);
  const int first_labels[] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  for (int i = 0; i < 10; ++i) {
    sample(*train, i, &y);
    EXPECT_EQ(y, first_labels[i]) << i;
  }
  x = sample(*train, 59999, &y);
  EXPECT_EQ(y, 5);
  EXPECT_EQ(x[14 * 28 + 14], 0.0f);
  x = sample(*test, 0, &y);
  EXPECT_EQ(y, 9);
  EXPECT_EQ(x[14 * 28 + 14], 110.0f / 255.0f);
  x = sample(*test, 9999, &y);
  EXPECT_EQ(y, 5);
  EXPECT_EQ(x[20 * 28 + 10], 57.0f / 255.0f);

  std::vector<int64_t> per_class(10, 0);
  int64_t pixel_sum = 0;
  for (int64_t i = 0; i < test->size(); ++i) {
    x = sample(*test, i, &y);
    per_class[size_t(y)]++;
    for (float v : x) pixel_sum += std::lround(v * 255.0f);
  }
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 1000));
  EXPECT_EQ(pixel_sum, 573469082);

  std::vector<float> mean = channel_mean(*train), sd = channel_std(*train);
  ASSERT_EQ(mean.size(), 1u);
  EXPECT_NEAR(mean[0], 0.2860405969887955, 1e-7);
  EXPECT_NEAR(sd[0], 0.35302424451492254, 1e-7);
}

// A whole epoch of the real training split, without and with the prefetch thread: 938 batches
// (the last one short), the same images and labels in the same order. Its speed is a benchmark
// (bench/bench_data.cpp), not an assertion here.
TEST(FashionMnist, LoaderEpochIsTheSameWithPrefetch) {
  if (!fashion_files_present()) return;
  auto train = open_dataset("fashion-mnist", true);
  std::vector<double> sums[2];
  std::vector<int64_t> labels[2];
  for (int k = 0; k < 2; ++k) {
    Loader l(*train, {.batch = 64, .shuffle = true, .seed = 1, .normalize = {{0.2860f}, {0.3530f}},
                      .prefetch = k == 0 ? 0 : 2});
    l.start_epoch(1);
    Batch b;
    int64_t images = 0;
    while (l.next(b)) {
      images += b.x.shape()[0];
      double s = 0;
      const float* x = b.x.data<float>();
      for (int64_t i = 0; i < b.x.numel(); ++i) s += x[i];
      sums[k].push_back(s);
      const int64_t* y = b.y.data<int64_t>();
      labels[k].insert(labels[k].end(), y, y + b.y.numel());
    }
    EXPECT_EQ(sums[k].size(), 938u);
    EXPECT_EQ(images, 60000);
  }
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(labels[0], labels[1]);
}

// ---------------------------------------------------------------------------------------------
// IDX

TEST_F(DataFiles, IdxGoodRawAndGzip) {
  const std::string raw = sub("raw"), gz = sub("gz");
  write_raw(raw + "/train-images-idx3-ubyte", idx_images(3, 4, 5));
  write_raw(raw + "/train-labels-idx1-ubyte", idx_labels({1, 0, 9}));
  write_raw(raw + "/t10k-images-idx3-ubyte", idx_images(2, 4, 5));
  write_raw(raw + "/t10k-labels-idx1-ubyte", idx_labels({12, 3}));
  write_gz(gz + "/train-images-idx3-ubyte.gz", idx_images(3, 4, 5));
  write_gz(gz + "/train-labels-idx1-ubyte.gz", idx_labels({1, 0, 9}));
  for (const std::string& d : {raw, gz}) {
    auto ds = open_dataset("mnist:" + d, true);
    EXPECT_EQ(ds->size(), 3);
    EXPECT_EQ(ds->sample_shape(), (Shape{1, 4, 5}));
    EXPECT_EQ(ds->num_classes(), 10);
    EXPECT_EQ(ds->name(), "mnist:" + d);
    EXPECT_EQ(ds->class_names()[3], "3");
    for (int64_t i = 0; i < 3; ++i) {
      int64_t y;
      std::vector<float> x = sample(*ds, i, &y);
      EXPECT_EQ(y, (std::vector<int64_t>{1, 0, 9})[size_t(i)]);
      for (int64_t j = 0; j < 20; ++j) ASSERT_EQ(x[size_t(j)], float(((i * 20 + j) * 7 + 3) % 256) / 255.0f);
    }
  }
  // idx:DIR infers the classes from both splits (largest label 12 is in the test split).
  EXPECT_EQ(open_dataset("idx:" + raw, true)->num_classes(), 13);
  EXPECT_EQ(open_dataset("idx:" + raw, false)->num_classes(), 13);
  // The same label 12 is out of range for mnist's 10 classes.
  EXPECT_FILE_ERROR(open_dataset("mnist:" + raw, false), raw + "/t10k-labels-idx1-ubyte",
                    "label 12 at offset 8 (sample 0) is out of range for 10 classes");
  // Wrong sample index.
  auto ds = open_dataset("mnist:" + raw, true);
  std::vector<float> x(20);
  int64_t y;
  EXPECT_THROW(ds->get(3, x.data(), &y), Error);
  EXPECT_THROW(ds->get(-1, x.data(), &y), Error);
}

TEST_F(DataFiles, IdxMissing) {
  EXPECT_FILE_ERROR(open_dataset("mnist:" + path("nowhere"), true), path("nowhere"), "no such directory");
  const std::string d = sub("half");
  write_raw(d + "/train-labels-idx1-ubyte", idx_labels({1, 2, 3}));
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte[.gz]", "no such file");
  // The Fashion-MNIST reader says how to get the files.
  EXPECT_FILE_ERROR(open_idx(d, true, 10, "fashion-mnist", {}, "apt-get install dataset-fashion-mnist"),
                    "train-images-idx3-ubyte", "apt-get install dataset-fashion-mnist");
  EXPECT_FILE_ERROR(open_dataset("mnist", true), "mnist", "needs a directory");
}

TEST_F(DataFiles, IdxTruncatedAtSeveralOffsets) {
  const std::string images = idx_images(3, 4, 5);  // 16 + 60 bytes
  const std::string labels = idx_labels({1, 2, 3});  // 8 + 3 bytes
  for (bool gz : {false, true}) {
    auto write = [&](const std::string& p, const std::string& b) { gz ? write_gz(p + ".gz", b) : write_raw(p, b); };
    const std::string ext = gz ? ".gz" : "";
    for (size_t cut : {size_t(0), size_t(3), size_t(6), size_t(12), size_t(16), size_t(40), size_t(75)}) {
      const std::string d = sub(fmt::format("img_{}_{}", gz, cut));
      write(d + "/train-images-idx3-ubyte", images.substr(0, cut));
      write(d + "/train-labels-idx1-ubyte", labels);
      EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte" + ext,
                        fmt::format("truncated at offset {}", cut));
    }
    for (size_t cut : {size_t(0), size_t(2), size_t(7), size_t(8), size_t(10)}) {
      const std::string d = sub(fmt::format("lab_{}_{}", gz, cut));
      write(d + "/train-images-idx3-ubyte", images);
      write(d + "/train-labels-idx1-ubyte", labels.substr(0, cut));
      EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-labels-idx1-ubyte" + ext,
                        fmt::format("truncated at offset {}", cut));
    }
    // Bytes after the declared data.
    const std::string d = sub(fmt::format("long_{}", gz));
    write(d + "/train-images-idx3-ubyte", images + "xy");
    write(d + "/train-labels-idx1-ubyte", labels);
    EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte" + ext,
                      "unexpected bytes after offset 76");
  }
}

// Counts whose product passes 2^64 (16 x (2^32 - 1)^2) must not wrap to a small size.
TEST_F(DataFiles, IdxHeaderWhoseSizeWrapsPast64Bits) {
  const std::string d = sub("wrap");
  const std::string header = be32(0x803) + be32(16) + be32(0xffffffffu) + be32(0xffffffffu);
  write_raw(d + "/train-images-idx3-ubyte", header + std::string(64, '\0'));
  write_raw(d + "/train-labels-idx1-ubyte", idx_labels(std::vector<int>(16, 1)));
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte", "past 2^64 bytes");
}

TEST_F(DataFiles, IdxCorruptGzip) {
  // A big enough image file that its compressed stream is many bytes long.
  const std::string images = idx_images(50, 28, 28);
  const std::vector<int> labels(50, 1);
  const std::string good = sub("good");
  write_gz(good + "/train-images-idx3-ubyte.gz", images);
  const std::string compressed = read_raw(good + "/train-images-idx3-ubyte.gz");
  ASSERT_GT(compressed.size(), 100u);
  // The compressed stream cut short, and one with a flipped byte in the middle (caught by the
  // deflate decoder or the CRC at the end).
  const std::string cut = sub("cut"), flip = sub("flip");
  write_raw(cut + "/train-images-idx3-ubyte.gz", compressed.substr(0, compressed.size() / 2));
  std::string flipped = compressed;
  flipped[flipped.size() / 2] = char(flipped[flipped.size() / 2] ^ 0x55);
  write_raw(flip + "/train-images-idx3-ubyte.gz", flipped);
  for (const std::string& d : {cut, flip}) {
    write_gz(d + "/train-labels-idx1-ubyte.gz", idx_labels(labels));
    std::string msg = error_of([&] { open_dataset("mnist:" + d, true); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(d + "/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("truncated at offset") != std::string::npos ||
                msg.find("corrupt gzip data near offset") != std::string::npos)
        << msg;
  }
}

TEST_F(DataFiles, IdxWrongMagic) {
  const std::string d = sub("m");
  write_gz(d + "/train-images-idx3-ubyte.gz", idx_images(2, 3, 3));
  write_gz(d + "/train-labels-idx1-ubyte.gz", idx_labels({1, 2}, 0x803));
  EXPECT_EQ(error_of([&] { open_dataset("mnist:" + d, true); }),
            "[idx] " + d + "/train-labels-idx1-ubyte.gz: wrong magic 0x00000803 at offset 0 (want 0x00000801 for labels)");
  write_gz(d + "/train-labels-idx1-ubyte.gz", idx_labels({1, 2}));
  write_gz(d + "/train-images-idx3-ubyte.gz", idx_images(2, 3, 3, 0x0d03));
  EXPECT_EQ(error_of([&] { open_dataset("mnist:" + d, true); }),
            "[idx] " + d + "/train-images-idx3-ubyte.gz: wrong magic 0x00000d03 at offset 0 (want 0x00000803 for images)");
}

TEST_F(DataFiles, IdxCountMismatchAndBadLabel) {
  const std::string d = sub("c");
  write_raw(d + "/train-images-idx3-ubyte", idx_images(3, 2, 2));
  write_raw(d + "/train-labels-idx1-ubyte", idx_labels({1, 2}));
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-labels-idx1-ubyte",
                    "2 labels but " + d + "/train-images-idx3-ubyte has 3 images");
  write_raw(d + "/train-labels-idx1-ubyte", idx_labels({1, 10, 2}));
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-labels-idx1-ubyte",
                    "label 10 at offset 9 (sample 1) is out of range for 10 classes");
  // Zero images, zero-sized images, a count claiming terabytes in a small file.
  write_raw(d + "/train-labels-idx1-ubyte", idx_labels({1, 2, 3}));
  write_raw(d + "/train-images-idx3-ubyte", idx_images(3, 0, 2));
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte", "declares 0x2 images");
  write_raw(d + "/train-images-idx3-ubyte", be32(0x803) + be32(3) + be32(100000) + be32(100000) + "abc");
  EXPECT_FILE_ERROR(open_dataset("mnist:" + d, true), d + "/train-images-idx3-ubyte", "truncated at offset 19");
}

// ---------------------------------------------------------------------------------------------
// CIFAR

namespace {
// `n` CIFAR records; pixel j of record r is (r * 31 + j) % 256; labels given.
std::string cifar_records(const std::vector<int>& labels, bool cifar100, int coarse = 3) {
  std::string s;
  for (size_t r = 0; r < labels.size(); ++r) {
    if (cifar100) s += char(coarse);
    s += char(labels[r]);
    for (int j = 0; j < 3072; ++j) s += char((int(r) * 31 + j) % 256);
  }
  return s;
}
}  // namespace

TEST_F(DataFiles, Cifar10) {
  const std::string d = sub("c10");
  for (int b = 1; b <= 5; ++b) write_raw(fmt::format("{}/data_batch_{}.bin", d, b), cifar_records({b, 9 - b}, false));
  write_raw(d + "/test_batch.bin", cifar_records({0, 1, 2}, false));
  auto train = open_dataset("cifar10:" + d, true);
  EXPECT_EQ(train->size(), 10);
  EXPECT_EQ(train->sample_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->class_names()[0], "airplane");
  EXPECT_EQ(train->class_names()[9], "truck");
  int64_t y;
  std::vector<float> x = sample(*train, 7, &y);  // batch 4, record 1
  EXPECT_EQ(y, 5);
  for (int j : {0, 1023, 1024, 3071}) EXPECT_EQ(x[size_t(j)], float((31 + j) % 256) / 255.0f);
  auto test = open_dataset("cifar10:" + d, false);
  EXPECT_EQ(test->size(), 3);
  sample(*test, 2, &y);
  EXPECT_EQ(y, 2);

  // Class names from batches.meta.txt, and the folder the archive unpacks to.
  const std::string outer = sub("outer");
  fs::copy(d, outer + "/cifar-10-batches-bin");
  write_raw(outer + "/cifar-10-batches-bin/batches.meta.txt", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n");
  auto nested = open_dataset("cifar10:" + outer, false);
  EXPECT_EQ(nested->size(), 3);
  EXPECT_EQ(nested->class_names()[1], "b");

  // Truncated: one record and 100 bytes.
  write_raw(d + "/test_batch.bin", cifar_records({0, 1}, false).substr(0, 3073 + 100));
  EXPECT_FILE_ERROR(open_dataset("cifar10:" + d, false), d + "/test_batch.bin",
                    "the last record starts at offset 3073 and has 100 bytes");
  write_raw(d + "/test_batch.bin", "");
  EXPECT_FILE_ERROR(open_dataset("cifar10:" + d, false), d + "/test_batch.bin", "empty file");
  write_raw(d + "/test_batch.bin", cifar_records({0, 10}, false));
  EXPECT_FILE_ERROR(open_dataset("cifar10:" + d, false), d + "/test_batch.bin",
                    "label 10 at offset 3073 (record 1) is out of range for 10 classes");
  fs::remove(d + "/data_batch_3.bin");
  EXPECT_FILE_ERROR(open_dataset("cifar10:" + d, true), d + "/data_batch_3.bin", "no such file");
  EXPECT_FILE_ERROR(open_dataset("cifar10:" + path("none"), true), path("none"), "no such directory");
}

TEST_F(DataFiles, Cifar100) {
  const std::string d = sub("c100");
  write_raw(d + "/train.bin", cifar_records({99, 0, 42}, true));
  write_raw(d + "/test.bin", cifar_records({7}, true));
  auto train = open_dataset("cifar100:" + d, true);
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(train->num_classes(), 100);
  EXPECT_EQ(train->class_names()[0], "apple");
  EXPECT_EQ(train->class_names()[99], "worm");
  int64_t y;
  std::vector<float> x = sample(*train, 2, &y);
  EXPECT_EQ(y, 42);  // the fine label
  EXPECT_EQ(x[100], float((2 * 31 + 100) % 256) / 255.0f);
  EXPECT_EQ(open_dataset("cifar100:" + d, false)->size(), 1);
  write_raw(d + "/test.bin", cifar_records({7, 100}, true));
  EXPECT_FILE_ERROR(open_dataset("cifar100:" + d, false), d + "/test.bin",
                    "label 100 at offset 3075 (record 1) is out of range for 100 classes");
  write_raw(d + "/test.bin", cifar_records({7}, true, 20));
  EXPECT_FILE_ERROR(open_dataset("cifar100:" + d, false), d + "/test.bin", "coarse label 20 at offset 0");
  write_raw(d + "/test.bin", cifar_records({7}, true) + "x");
  EXPECT_FILE_ERROR(open_dataset("cifar100:" + d, false), d + "/test.bin", "not a whole number of 3074-byte records");
}

// ---------------------------------------------------------------------------------------------
// Image folders

namespace {
// (H, W, C) pixels with a pattern that depends on (seed, y, x, c).
std::vector<uint8_t> pattern(int h, int w, int c, int seed) {
  std::vector<uint8_t> px(size_t(h * w * c));
  for (int i = 0; i < h * w * c; ++i) px[size_t(i)] = uint8_t((i * 13 + seed * 29) % 256);
  return px;
}
}  // namespace

TEST_F(DataFiles, ImageFolderTrainTest) {
  const std::string d = sub("imgs");
  const int h = 4, w = 6;
  write_png(d + "/train/dog/a.png", w, h, 3, pattern(h, w, 3, 1));
  write_png(d + "/train/dog/b.PNG", w, h, 1, pattern(h, w, 1, 2));   // gray -> RGB
  write_png(d + "/train/cat/x.png", w, h, 4, pattern(h, w, 4, 3));   // RGBA -> RGB
  std::vector<uint8_t> flat(size_t(h * w * 3));
  for (int p = 0; p < h * w; ++p) flat[size_t(p * 3)] = 200, flat[size_t(p * 3 + 1)] = 100, flat[size_t(p * 3 + 2)] = 50;
  write_jpeg(d + "/train/cat/y.jpg", w, h, 3, flat);
  write_raw(d + "/train/cat/notes.txt", "not an image");
  write_png(d + "/test/dog/c.png", w, h, 3, pattern(h, w, 3, 5));

  auto train = open_dataset("folder:" + d, true);
  EXPECT_EQ(train->size(), 4);
  EXPECT_EQ(train->sample_shape(), (Shape{3, h, w}));  // the first image (cat/x.png) is RGBA
  EXPECT_EQ(train->class_names(), (std::vector<std::string>{"cat", "dog"}));
  int64_t y;
  // Order: cat/x.png, cat/y.jpg, dog/a.png, dog/b.PNG.
  std::vector<float> x = sample(*train, 0, &y);
  EXPECT_EQ(y, 0);
  std::vector<uint8_t> rgba = pattern(h, w, 4, 3);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < h * w; ++p) ASSERT_EQ(x[size_t(c * h * w + p)], rgba[size_t(p * 4 + c)] / 255.0f);
  x = sample(*train, 1, &y);
  EXPECT_EQ(y, 0);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < h * w; ++p)
      ASSERT_NEAR(x[size_t(c * h * w + p)] * 255.0f, (std::vector<int>{200, 100, 50})[size_t(c)], 3.0);
  x = sample(*train, 2, &y);
  EXPECT_EQ(y, 1);
  std::vector<uint8_t> rgb = pattern(h, w, 3, 1);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < h * w; ++p) ASSERT_EQ(x[size_t(c * h * w + p)], rgb[size_t(p * 3 + c)] / 255.0f);
  x = sample(*train, 3, &y);
  std::vector<uint8_t> gray = pattern(h, w, 1, 2);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < h * w; ++p) ASSERT_EQ(x[size_t(c * h * w + p)], gray[size_t(p)] / 255.0f);

  auto test = open_dataset("folder:" + d, false);
  EXPECT_EQ(test->size(), 1);
  EXPECT_EQ(test->num_classes(), 2);  // from the train split
  sample(*test, 0, &y);
  EXPECT_EQ(y, 1);

  // A test class the train split lacks; a size mismatch; a broken PNG; no test folder.
  write_png(d + "/test/emu/e.png", w, h, 3, pattern(h, w, 3, 6));
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, false), d + "/test/emu", "train split does not have");
  fs::remove_all(d + "/test/emu");
  write_png(d + "/train/dog/c.png", w + 1, h, 3, pattern(h, w + 1, 3, 7));
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, true), d + "/train/dog/c.png", "image is 7x4 (WxH) but the dataset's images are 6x4");
  const std::string png = read_raw(d + "/train/dog/a.png");
  write_raw(d + "/train/dog/c.png", png.substr(0, png.size() - 20));
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, true), d + "/train/dog/c.png", "bad PNG");
  const std::string jpg = read_raw(d + "/train/cat/y.jpg");
  write_raw(d + "/train/dog/c.png", jpg.substr(0, jpg.size() / 2));  // a JPEG by content, cut short
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, true), d + "/train/dog/c.png", "JPEG");
  write_raw(d + "/train/dog/c.png", "GIF89a....");
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, true), d + "/train/dog/c.png", "not a PNG or JPEG file");
  fs::remove(d + "/train/dog/c.png");
  fs::remove_all(d + "/test");
  EXPECT_FILE_ERROR(open_dataset("folder:" + d, false), d + "/test", "no such directory");
  EXPECT_FILE_ERROR(open_dataset("folder:" + path("none"), true), path("none"), "no such directory");
}

// Found by fuzz_image: a few hundred bytes of progressive JPEG whose frame header claims
// 65,000 x 65,000 pixels. libjpeg allocates the whole image's coefficients (25 GB) in
// jpeg_start_decompress, so the size must be refused before it, as it is for a PNG.
TEST_F(DataFiles, ImageClaimingAHugeSizeIsRefusedBeforeDecoding) {
  const int h = 8, w = 8;
  const std::string src = sub("huge") + "/small.jpg";
  write_jpeg(src, w, h, 3, std::vector<uint8_t>(size_t(h * w * 3), 90), /*progressive=*/true);
  std::string jpg = read_raw(src);
  const size_t sof = jpg.find("\xff\xc2");
  ASSERT_NE(sof, std::string::npos) << "no progressive frame header";
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width: big-endian u16 after length and precision
    jpg[at] = char(0xfd);
    jpg[at + 1] = char(0xe8);
  }
  const std::string p = sub("huge") + "/huge.jpg";
  write_raw(p, jpg);
  EXPECT_FILE_ERROR(read_image(p), p, "unsupported size 65000x65000");
  // The same claim in a PNG's header.
  write_png(sub("huge") + "/small.png", w, h, 3, std::vector<uint8_t>(size_t(h * w * 3), 90));
  std::string png = read_raw(sub("huge") + "/small.png");
  png.replace(16, 8, be32(65000) + be32(65000));  // IHDR's width and height, then its CRC made right
  const uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17));
  png.replace(29, 4, be32(crc));
  write_raw(p, png);
  EXPECT_FILE_ERROR(read_image(p), p, "unsupported size 65000x65000");
}

TEST_F(DataFiles, ImageFolderFlatGray) {
  const std::string d = sub("flat");
  const int h = 3, w = 2;
  write_jpeg(d + "/b/1.jpeg", w, h, 1, std::vector<uint8_t>(size_t(h * w), 77));  // first: gray
  write_png(d + "/b/2.png", w, h, 3, pattern(h, w, 3, 4));                       // RGB -> luma
  write_png(d + "/a/1.png", w, h, 2, pattern(h, w, 2, 8));                       // gray+alpha
  // a/1.png comes first in sorted order: gray with alpha, so the dataset has one channel.
  auto train = open_dataset("folder:" + d, true);
  auto test = open_dataset("folder:" + d, false);
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(test->size(), 3);
  EXPECT_EQ(train->sample_shape(), (Shape{1, h, w}));
  int64_t y;
  std::vector<float> x = sample(*train, 0, &y);
  std::vector<uint8_t> ga = pattern(h, w, 2, 8);
  EXPECT_EQ(y, 0);
  for (int p = 0; p < h * w; ++p) EXPECT_EQ(x[size_t(p)], ga[size_t(2 * p)] / 255.0f);
  x = sample(*train, 1, &y);
  EXPECT_EQ(y, 1);
  for (int p = 0; p < h * w; ++p) EXPECT_NEAR(x[size_t(p)] * 255.0f, 77.0f, 1.0f);
  x = sample(*train, 2, &y);
  std::vector<uint8_t> rgb = pattern(h, w, 3, 4);
  for (int p = 0; p < h * w; ++p) {
    const int luma = (299 * rgb[size_t(3 * p)] + 587 * rgb[size_t(3 * p + 1)] + 114 * rgb[size_t(3 * p + 2)] + 500) / 1000;
    EXPECT_EQ(x[size_t(p)], float(luma) / 255.0f);
  }
  // Empty folders.
  const std::string e = sub("empty/a");
  EXPECT_FILE_ERROR(open_dataset("folder:" + path("empty"), true), path("empty"), "no .png, .jpg or .jpeg images");
  (void)e;
}

// Random damage to every kind of file: each open either succeeds or raises a one-line
// reckon::Error; no other exception, no crash (run under ASan to see memory errors too).
TEST_F(DataFiles, DamagedFilesNeverCrash) {
  const int h = 9, w = 11;
  const std::string src = sub("src");
  write_png(src + "/rgb.png", w, h, 3, pattern(h, w, 3, 1));
  write_jpeg(src + "/rgb.jpg", w, h, 3, pattern(h, w, 3, 2));
  write_gz(src + "/images.gz", idx_images(4, h, w));
  const std::string png = read_raw(src + "/rgb.png"), jpg = read_raw(src + "/rgb.jpg"),
                    gz = read_raw(src + "/images.gz"), cifar = cifar_records({1, 2}, false);
  const std::string labels = idx_labels({1, 2, 3, 4});
  uint64_t state = 12345;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  auto damage = [&](std::string s) {
    const int edits = 1 + int(rnd(4));
    for (int e = 0; e < edits; ++e) {
      switch (rnd(3)) {
        case 0: s[rnd(s.size())] = char(rnd(256)); break;                  // a byte changed
        case 1: s = s.substr(0, rnd(s.size())); break;                      // cut short
        default: s.insert(rnd(s.size() + 1), 1, char(rnd(256))); break;  // a byte inserted
      }
      if (s.empty()) break;
    }
    return s;
  };
  int errors = 0;
  for (int round = 0; round < 100; ++round) {
    const std::string d = sub(fmt::format("r{}", round));
    write_raw(d + "/folder/train/a/x.png", damage(png));
    write_raw(d + "/folder/train/b/y.jpg", damage(jpg));
    write_raw(d + "/idx/train-images-idx3-ubyte.gz", damage(gz));
    write_raw(d + "/idx/train-labels-idx1-ubyte", damage(labels));
    write_raw(d + "/cifar/test_batch.bin", damage(cifar));
    for (const std::string& spec : {"folder:" + d + "/folder", "mnist:" + d + "/idx", "cifar10:" + d + "/cifar"}) {
      try {
        auto ds = open_dataset(spec, spec[0] != 'c');
        for (int64_t i = 0; i < ds->size(); ++i) sample(*ds, i);
      } catch (const Error& e) {
        ++errors;
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(d), std::string::npos) << e.what();
      }
    }
    fs::remove_all(d);
  }
  EXPECT_GT(errors, 100);  // most damage is noticed
}

// ---------------------------------------------------------------------------------------------
// Synthetic

TEST(Synthetic, DeterministicAndLearnable) {
  auto a = open_dataset("synthetic:1x8x8:2000:4", true, 7);
  auto b = open_dataset("synthetic:1x8x8:2000:4", true, 7);
  auto c = open_dataset("synthetic:1x8x8:2000:4", true, 8);
  auto t = open_dataset("synthetic:1x8x8:2000:4", false, 7);
  EXPECT_EQ(a->size(), 2000);
  EXPECT_EQ(a->num_classes(), 4);
  EXPECT_EQ(a->sample_shape(), (Shape{1, 8, 8}));
  EXPECT_EQ(a->name(), "synthetic:1x8x8:2000:4");
  int64_t ya, yb;
  EXPECT_EQ(sample(*a, 5, &ya), sample(*b, 5, &yb));
  EXPECT_EQ(ya, yb);
  EXPECT_NE(sample(*a, 5), sample(*c, 5));
  EXPECT_NE(sample(*a, 5), sample(*t, 5));
  EXPECT_NE(sample(*a, 5), sample(*a, 6));

  // Labels in range, values on the u8 grid in [0, 1], all classes present; and learnable: the
  // nearest class centroid of the train split classifies the test split well.
  std::vector<std::vector<double>> centroid(4, std::vector<double>(64, 0.0));
  std::vector<int64_t> count(4, 0);
  for (int64_t i = 0; i < a->size(); ++i) {
    int64_t y;
    std::vector<float> x = sample(*a, i, &y);
    ASSERT_TRUE(y >= 0 && y < 4);
    count[size_t(y)]++;
    for (size_t j = 0; j < 64; ++j) {
      ASSERT_TRUE(x[j] >= 0.0f && x[j] <= 1.0f);
      ASSERT_EQ(x[j], float(std::lround(x[j] * 255.0f)) / 255.0f);
      centroid[size_t(y)][j] += x[j];
    }
  }
  for (int k = 0; k < 4; ++k) {
    ASSERT_GT(count[size_t(k)], 300);
    for (double& v : centroid[size_t(k)]) v /= double(count[size_t(k)]);
  }
  int64_t right = 0;
  for (int64_t i = 0; i < t->size(); ++i) {
    int64_t y;
    std::vector<float> x = sample(*t, i, &y);
    int best = 0;
    double best_d = 1e30;
    for (int k = 0; k < 4; ++k) {
      double dist = 0;
      for (size_t j = 0; j < 64; ++j) dist += (x[j] - centroid[size_t(k)][j]) * (x[j] - centroid[size_t(k)][j]);
      if (dist < best_d) best_d = dist, best = k;
    }
    right += best == y;
  }
  EXPECT_GT(double(right) / double(t->size()), 0.95);

  auto d = open_dataset("synthetic:3x32x32", true);
  EXPECT_EQ(d->size(), 1024);
  EXPECT_EQ(d->num_classes(), 10);
}

TEST(Synthetic, BadSpecs) {
  for (const char* spec : {"synthetic:3x32", "synthetic:0x2x2", "synthetic:1x2x2:abc", "synthetic:1x2x2:0",
                           "synthetic:1x2x2:5:0", "synthetic:1x2x2:5:2:9", "synthetic"})
    EXPECT_FILE_ERROR(open_dataset(spec, true), spec, "synthetic");
  EXPECT_FILE_ERROR(open_dataset("imagenet:/x", true), "imagenet:/x", "unknown dataset");
}

// ---------------------------------------------------------------------------------------------
// Channel statistics

TEST(ChannelStats, MemoryAndGeneric) {
  // Two channels of 2 pixels, 3 samples.
  std::vector<uint8_t> px = {0, 255, 10, 20, 51, 102, 30, 40, 255, 255, 50, 60};
  MemoryDataset m("tiny", {2, 1, 2}, 2, px, {0, 1, 1});
  std::vector<double> v0 = {0, 255, 51, 102, 255, 255}, v1 = {10, 20, 30, 40, 50, 60};
  auto stats = [](const std::vector<double>& v) {
    double mean = 0, var = 0;
    for (double a : v) mean += a / 255.0;
    mean /= double(v.size());
    for (double a : v) var += (a / 255.0 - mean) * (a / 255.0 - mean);
    return std::pair<double, double>{mean, std::sqrt(var / double(v.size()))};
  };
  std::vector<float> mean = channel_mean(m), sd = channel_std(m);
  EXPECT_NEAR(mean[0], stats(v0).first, 1e-7);
  EXPECT_NEAR(sd[0], stats(v0).second, 1e-7);
  EXPECT_NEAR(mean[1], stats(v1).first, 1e-7);
  EXPECT_NEAR(sd[1], stats(v1).second, 1e-7);

  // The generic path (any Dataset) agrees, and does not depend on the thread count.
  auto syn = open_dataset("synthetic:2x5x5:1000:3", true, 3);
  std::vector<float> m_all = channel_mean(*syn), s_all = channel_std(*syn);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> m_one = channel_mean(*syn), s_one = channel_std(*syn);
  omp_set_num_threads(threads);
  EXPECT_EQ(m_all, m_one);
  EXPECT_EQ(s_all, s_one);
  std::vector<double> c0;
  for (int64_t i = 0; i < syn->size(); ++i) {
    std::vector<float> x = sample(*syn, i);
    for (int j = 0; j < 25; ++j) c0.push_back(double(x[size_t(j)]) * 255.0);
  }
  EXPECT_NEAR(m_all[0], stats(c0).first, 1e-6);
  EXPECT_NEAR(s_all[0], stats(c0).second, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// Loader

TEST(Loader, EpochOrderIsAPermutation) {
  for (int64_t n : {1, 2, 7, 1000}) {
    std::vector<int64_t> a = epoch_order(n, 42, 3, true);
    std::vector<int64_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[size_t(i)], i);
    EXPECT_EQ(a, epoch_order(n, 42, 3, true));
    if (n >= 7) {
      EXPECT_NE(a, epoch_order(n, 42, 4, true));
      EXPECT_NE(a, epoch_order(n, 43, 3, true));
    }
    EXPECT_EQ(epoch_order(n, 42, 3, false), sorted);
  }
  // Every position is reachable: over many epochs each index visits each of 5 slots.
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t e = 0; e < 400; ++e) {
    auto o = epoch_order(5, 1, e, true);
    for (int64_t p = 0; p < 5; ++p) seen.insert({o[size_t(p)], p});
  }
  EXPECT_EQ(seen.size(), 25u);
}

TEST(Loader, ShuffleBatchesAndDropLast) {
  CountingDataset ds(10);
  Loader l(ds, {.batch = 4, .shuffle = true, .seed = 5});
  EXPECT_EQ(l.num_batches(), 3);
  EXPECT_EQ(l.num_samples(), 10);
  Epoch e = run_epoch(l, 0);
  ASSERT_EQ(e.shapes.size(), 3u);
  EXPECT_EQ(e.shapes[0], (Shape{4, 1, 1, 2}));
  EXPECT_EQ(e.shapes[2], (Shape{2, 1, 1, 2}));
  EXPECT_EQ(e.index, (std::vector<int64_t>{0, 1, 2}));
  std::vector<int64_t> v = visited(e);
  EXPECT_EQ(v, l.epoch_indices(0));
  std::vector<int64_t> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_NE(v, sorted);  // shuffled (a fixed seed, so not by luck)
  for (size_t b = 0; b < e.xs.size(); ++b)
    for (size_t j = 0; j < e.ys[b].size(); ++j) {
      EXPECT_EQ(e.xs[b][2 * j + 1], e.xs[b][2 * j] + 0.5f);
      EXPECT_EQ(e.ys[b][j], int64_t(e.xs[b][2 * j]) % 3);
    }
  EXPECT_NE(visited(run_epoch(l, 1)), v);  // another epoch, another order

  Loader d(ds, {.batch = 4, .shuffle = false, .drop_last = true});
  EXPECT_EQ(d.num_batches(), 2);
  EXPECT_EQ(d.num_samples(), 8);
  Epoch de = run_epoch(d, 0);
  EXPECT_EQ(visited(de), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(de.shapes[1], (Shape{4, 1, 1, 2}));
  Loader exact(ds, {.batch = 5, .drop_last = true});
  EXPECT_EQ(exact.num_batches(), 2);
  Loader big(ds, {.batch = 64, .drop_last = true});
  EXPECT_EQ(big.num_batches(), 0);
  EXPECT_TRUE(run_epoch(big, 0).xs.empty());
}

TEST(Loader, ShardsCoverTheEpochOnce) {
  CountingDataset ds(10);
  for (int64_t world : {1, 2, 3, 4, 11}) {
    std::vector<int64_t> all;
    for (int64_t rank = 0; rank < world; ++rank) {
      Loader l(ds, {.batch = 2, .shuffle = true, .seed = 9, .prefetch = int(rank % 2), .rank = rank, .world = world});
      std::vector<int64_t> v = visited(run_epoch(l, 2));
      EXPECT_EQ(int64_t(v.size()), l.num_samples());
      EXPECT_EQ(int64_t(v.size()), (10 - rank + world - 1) / world);
      // Positions rank, rank + world, ... of the shared epoch order.
      std::vector<int64_t> order = epoch_order(10, 9, 2, true);
      for (size_t j = 0; j < v.size(); ++j) EXPECT_EQ(v[j], order[size_t(rank) + j * size_t(world)]);
      all.insert(all.end(), v.begin(), v.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})) << "world " << world;
  }
}

TEST(Loader, DeterministicResumeAndPrefetch) {
  auto ds = open_dataset("synthetic:3x6x5:103:4", true, 11);
  auto opts = [](int prefetch, uint64_t seed) {
    LoaderOptions o;
    o.batch = 8;
    o.seed = seed;
    o.prefetch = prefetch;
    o.normalize = {{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}};
    o.augment = {.crop_padding = 2, .hflip = true};
    return o;
  };
  Loader ref(*ds, opts(0, 1));
  EXPECT_EQ(ref.num_batches(), 13);
  const Epoch e0 = run_epoch(ref, 0), e1 = run_epoch(ref, 1);
  EXPECT_NE(e0.xs, e1.xs);
  for (int prefetch : {0, 1, 3}) {
    Loader l(*ds, opts(prefetch, 1));
    Epoch a = run_epoch(l, 1), b = run_epoch(l, 0);
    EXPECT_EQ(a.xs, e1.xs) << "prefetch " << prefetch;
    EXPECT_EQ(a.ys, e1.ys);
    EXPECT_EQ(b.xs, e0.xs);
    // Resume: start_epoch(e, k) gives batches k.. of the uninterrupted epoch.
    for (int64_t k : {1, 5, 12, 13}) {
      Epoch r = run_epoch(l, 1, k);
      ASSERT_EQ(r.xs.size(), size_t(13 - k));
      for (size_t j = 0; j < r.xs.size(); ++j) {
        EXPECT_EQ(r.index[j], k + int64_t(j));
        EXPECT_EQ(r.xs[j], e1.xs[size_t(k) + j]);
        EXPECT_EQ(r.ys[j], e1.ys[size_t(k) + j]);
      }
    }
  }
  Loader other(*ds, opts(2, 2));
  EXPECT_NE(run_epoch(other, 0).xs, e0.xs);
  // A new epoch started mid-way through another, and a loader destroyed mid-epoch, stop cleanly.
  Loader l(*ds, opts(2, 1));
  l.start_epoch(0);
  Batch b;
  ASSERT_TRUE(l.next(b));
  EXPECT_EQ(run_epoch(l, 1).xs, e1.xs);
  l.start_epoch(0);
  ASSERT_TRUE(l.next(b));
  EXPECT_THROW(l.start_epoch(0, 14), Error);
  EXPECT_THROW(l.start_epoch(-1), Error);
  // A loader moved mid-epoch carries on where it was.
  l.start_epoch(1);
  ASSERT_TRUE(l.next(b));
  Loader moved = std::move(l);
  Epoch rest;
  while (moved.next(b)) rest.xs.emplace_back(b.x.data<float>(), b.x.data<float>() + b.x.numel());
  ASSERT_EQ(rest.xs.size(), 12u);
  for (size_t j = 0; j < 12; ++j) EXPECT_EQ(rest.xs[j], e1.xs[j + 1]);
  moved = Loader(*ds, opts(2, 1));  // assigning stops the old producer
  EXPECT_EQ(run_epoch(moved, 0).xs, e0.xs);
}

TEST(Loader, ImplicitFirstEpoch) {
  CountingDataset ds(5);
  Loader l(ds, {.batch = 2, .seed = 3});
  Batch b;
  int64_t n = 0;
  while (l.next(b)) ++n;
  EXPECT_EQ(n, 3);
  Loader m(ds, {.batch = 2, .seed = 3});
  EXPECT_EQ(visited(run_epoch(m, 0)), l.epoch_indices(0));
}

TEST(Loader, Normalize) {
  std::vector<uint8_t> px = {0, 51, 102, 255, 10, 20, 30, 40};  // 2 samples of (2, 1, 2)
  MemoryDataset m("tiny", {2, 1, 2}, 2, px, {1, 0});
  const std::vector<float> mean = {0.25f, 0.5f}, sd = {0.5f, 0.125f};
  Loader l(m, {.batch = 2, .shuffle = false, .normalize = {mean, sd}, .prefetch = 1});
  Epoch e = run_epoch(l, 0);
  ASSERT_EQ(e.xs.size(), 1u);
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 2; ++c)
      for (int p = 0; p < 2; ++p) {
        const float raw = float(px[size_t(i * 4 + c * 2 + p)]) / 255.0f;
        EXPECT_EQ(e.xs[0][size_t(i * 4 + c * 2 + p)], (raw - mean[size_t(c)]) / sd[size_t(c)]);
      }
  EXPECT_EQ(e.ys[0], (std::vector<int64_t>{1, 0}));
}

TEST(Loader, Augment) {
  // One channel of 3x4, distinct values; crop padding 1 and flips, batch 1, no shuffle.
  const int64_t h = 3, w = 4, p = 1, n = 6;
  std::vector<uint8_t> px(size_t(n * h * w));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(10 + i);
  MemoryDataset m("tiny", {1, h, w}, 2, px, {0, 1, 0, 1, 0, 1});
  const Augment aug{.crop_padding = p, .hflip = true};
  const Normalize norm{{0.1f}, {0.5f}};
  Loader l(m, {.batch = 1, .shuffle = false, .seed = 4, .normalize = norm, .augment = aug, .prefetch = 2});
  std::set<std::tuple<int64_t, int64_t, bool>> draws;
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    Epoch e = run_epoch(l, epoch);
    ASSERT_EQ(e.xs.size(), size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const AugmentDraw d = augment_draw(4, epoch, i, aug);
      ASSERT_TRUE(d.dy >= 0 && d.dy <= 2 * p && d.dx >= 0 && d.dx <= 2 * p);
      draws.insert({d.dy, d.dx, d.flip});
      // The definition: pad with p zeros, crop (h, w) at (dy, dx), then mirror the columns;
      // normalisation after (so the padding becomes (0 - mean) / std).
      std::vector<float> padded(size_t((h + 2 * p) * (w + 2 * p)), 0.0f);
      for (int64_t yy = 0; yy < h; ++yy)
        for (int64_t xx = 0; xx < w; ++xx)
          padded[size_t((yy + p) * (w + 2 * p) + xx + p)] = float(px[size_t(i * h * w + yy * w + xx)]) / 255.0f;
      for (int64_t yy = 0; yy < h; ++yy)
        for (int64_t xx = 0; xx < w; ++xx) {
          const int64_t cx = d.flip ? w - 1 - xx : xx;
          const float v = padded[size_t((yy + d.dy) * (w + 2 * p) + cx + d.dx)];
          ASSERT_EQ(e.xs[size_t(i)][size_t(yy * w + xx)], (v - 0.1f) / 0.5f)
              << "epoch " << epoch << " sample " << i << " at " << yy << "," << xx;
        }
    }
  }
  EXPECT_EQ(draws.size(), 18u);  // all 3 x 3 offsets, with and without a flip

  // The centre crop without a flip is the identity; no augmentation draws nothing.
  const AugmentDraw none = augment_draw(4, 0, 0, Augment{});
  EXPECT_EQ(none.dy, 0);
  EXPECT_EQ(none.dx, 0);
  EXPECT_FALSE(none.flip);
  Loader flip_only(m, {.batch = 6, .shuffle = false, .augment = {.hflip = true}});
  Epoch f = run_epoch(flip_only, 0);
  int flips = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool flip = augment_draw(0, 0, i, {.hflip = true}).flip;
    flips += flip;
    for (int64_t yy = 0; yy < h; ++yy)
      for (int64_t xx = 0; xx < w; ++xx)
        ASSERT_EQ(f.xs[0][size_t(i * h * w + yy * w + xx)],
                  float(px[size_t(i * h * w + yy * w + (flip ? w - 1 - xx : xx))]) / 255.0f);
  }
  EXPECT_GT(flips, 0);
  EXPECT_LT(flips, n);
}

TEST(Loader, ErrorsFromTheProducerAreRethrown) {
  for (int prefetch : {0, 1, 4}) {
    CountingDataset ds(20, 3, /*fail_at=*/13);
    Loader l(ds, {.batch = 4, .shuffle = false, .prefetch = prefetch});
    l.start_epoch(0);
    Batch b;
    int64_t good = 0;
    std::string msg;
    try {
      while (l.next(b)) ++good;
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_EQ(good, 3) << "prefetch " << prefetch;  // batches 0..2; batch 3 holds sample 13
    EXPECT_EQ(msg, "[counting] sample 13 is broken");
    EXPECT_FALSE(l.next(b));
    // A fresh epoch starting after the broken batch works.
    l.start_epoch(0, 4);
    ASSERT_TRUE(l.next(b));
    EXPECT_EQ(b.index, 4);
    EXPECT_EQ(b.x.data<float>()[0], 16.0f);
  }
}

TEST(Loader, BadOptions) {
  CountingDataset ds(10);
  EXPECT_FILE_ERROR(Loader(ds, {.batch = 0}), "[loader]", "batch must be >= 1");
  EXPECT_FILE_ERROR(Loader(ds, {.rank = 2, .world = 2}), "[loader]", "rank 2");
  EXPECT_FILE_ERROR(Loader(ds, {.prefetch = -1}), "[loader]", "prefetch");
  EXPECT_FILE_ERROR(Loader(ds, {.augment = {.crop_padding = -1}}), "[loader]", "crop padding");
  EXPECT_FILE_ERROR(Loader(ds, {.normalize = {{0.5f, 0.5f}, {1.0f, 1.0f}}}), "[loader]", "1 channels");
  EXPECT_FILE_ERROR(Loader(ds, {.normalize = {{0.5f}, {}}}), "[loader]", "1 means but 0 stds");
  EXPECT_FILE_ERROR(Loader(ds, {.normalize = {{0.5f}, {0.0f}}}), "[loader]", "must be > 0");
}

// --val-split's hold-out: the two parts are disjoint and together the whole split, in the base's
// order; the held part's size is the rounded fraction; the same seed gives the same part, another
// seed another; a fraction outside (0, 1) or a one-sample dataset is refused naming --val-split.
TEST(Split, SeededHoldOutIsDisjointCompleteAndReproducible) {
  const int64_t n = 250;  // sample i has pixel value i: get() tells which sample a part gave
  std::vector<uint8_t> px(static_cast<size_t>(n));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) px[size_t(i)] = uint8_t(i), labels[size_t(i)] = int32_t(i % 10);
  auto base = std::make_shared<MemoryDataset>("mem", Shape{1, 1, 1}, 10, px, labels);
  auto ids = [](const Dataset& d) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < d.size(); ++i) {
      float x = 0;
      int64_t y = 0;
      d.get(i, &x, &y);
      const int64_t id = std::lround(x * 255);
      EXPECT_EQ(y, id % 10);
      v.push_back(id);
    }
    return v;
  };
  Split a = split_dataset(base, 0.1, 7), b = split_dataset(base, 0.1, 7), c = split_dataset(base, 0.1, 8);
  EXPECT_EQ(a.held->size(), 25);
  EXPECT_EQ(a.kept->size(), 225);
  EXPECT_EQ(ids(*a.held), ids(*b.held));
  EXPECT_NE(ids(*a.held), ids(*c.held));
  EXPECT_EQ(a.held->num_classes(), 10);
  EXPECT_NE(a.held->name().find("mem (validation part"), std::string::npos) << a.held->name();
  std::vector<int64_t> held = ids(*a.held), kept = ids(*a.kept);
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));  // the base's order
  std::vector<int64_t> all = held;
  all.insert(all.end(), kept.begin(), kept.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = i;
  EXPECT_EQ(all, want);  // disjoint, and together the whole split
  // Not the first or last 25: drawn from the whole range.
  EXPECT_LT(held.front(), 100);
  EXPECT_GT(held.back(), 150);
  EXPECT_EQ(split_dataset(base, 0.0001, 1).held->size(), 1);  // at least one held out
  EXPECT_EQ(split_dataset(base, 0.9999, 1).kept->size(), 1);  // at least one kept
  for (double f : {0.0, 1.0, -0.5})
    EXPECT_NE(error_of([&] { split_dataset(base, f, 0); }).find("--val-split"), std::string::npos) << f;
  auto one = std::make_shared<MemoryDataset>("one", Shape{1, 1, 1}, 10, std::vector<uint8_t>{1}, std::vector<int32_t>{0});
  EXPECT_NE(error_of([&] { split_dataset(one, 0.5, 0); }).find("too few"), std::string::npos);
}
