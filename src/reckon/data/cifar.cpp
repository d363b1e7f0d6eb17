// CIFAR-10 and CIFAR-100 binary versions (https://www.cs.toronto.edu/~kriz/cifar.html):
// a file is a run of records, each a label byte (CIFAR-100: coarse then fine) and 3072 pixel
// bytes (1024 red, 1024 green, 1024 blue, rows of 32) — already (C, H, W). A file that is not
// a whole number of records, or holds a label out of range, is an error naming the offset.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "reckon/data/dataset.h"
#include "reckon/data/detail.h"

namespace reckon::data {

namespace {

namespace fs = std::filesystem;
using detail::file_error;

constexpr int64_t kPixels = 3 * 32 * 32;

const std::vector<std::string> kCifar10Classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                  "dog",      "frog",       "horse", "ship", "truck"};
const std::vector<std::string> kCifar100Classes = {
    "apple",       "aquarium_fish", "baby",       "bear",       "beaver",       "bed",
    "bee",         "beetle",        "bicycle",    "bottle",     "bowl",         "boy",
    "bridge",      "bus",           "butterfly",  "camel",      "can",          "castle",
    "caterpillar", "cattle",        "chair",      "chimpanzee", "clock",        "cloud",
    "cockroach",   "couch",         "crab",       "crocodile",  "cup",          "dinosaur",
    "dolphin",     "elephant",      "flatfish",   "forest",     "fox",          "girl",
    "hamster",     "house",         "kangaroo",   "keyboard",   "lamp",         "lawn_mower",
    "leopard",     "lion",          "lizard",     "lobster",    "man",          "maple_tree",
    "motorcycle",  "mountain",      "mouse",      "mushroom",   "oak_tree",     "orange",
    "orchid",      "otter",         "palm_tree",  "pear",       "pickup_truck", "pine_tree",
    "plain",       "plate",         "poppy",      "porcupine",  "possum",       "rabbit",
    "raccoon",     "ray",           "road",       "rocket",     "rose",         "sea",
    "seal",        "shark",         "shrew",      "skunk",      "skyscraper",   "snail",
    "snake",       "spider",        "squirrel",   "streetcar",  "sunflower",    "sweet_pepper",
    "table",       "tank",          "telephone",  "television", "tiger",        "tractor",
    "train",       "trout",         "tulip",      "turtle",     "wardrobe",     "whale",
    "willow_tree", "wolf",          "woman",      "worm"};

// Non-empty lines of a text file (the class-name files shipped with the binary versions).
std::vector<std::string> read_lines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

}  // namespace

std::unique_ptr<MemoryDataset> open_cifar(const std::string& dir_arg, bool train, bool cifar100,
                                          const std::string& name) {
  const char* tag = cifar100 ? "cifar100" : "cifar10";
  std::vector<std::string> files;
  if (cifar100)
    files = {train ? "train.bin" : "test.bin"};
  else if (train)
    files = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
  else
    files = {"test_batch.bin"};

  // DIR, or the folder the official archive unpacks to inside it.
  std::error_code ec;
  fs::path dir = dir_arg;
  if (!fs::exists(dir / files[0], ec)) {
    fs::path sub = dir / (cifar100 ? "cifar-100-binary" : "cifar-10-batches-bin");
    if (fs::exists(sub / files[0], ec)) dir = sub;
  }
  if (!fs::is_directory(dir, ec)) throw file_error(tag, dir_arg, "no such directory");

  const int64_t label_bytes = cifar100 ? 2 : 1;
  const int64_t record = label_bytes + kPixels;
  const int64_t num_classes = cifar100 ? 100 : 10;
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& file : files) {
    const std::string path = (dir / file).string();
    std::vector<uint8_t> bytes = detail::read_whole_file(tag, path);
    const int64_t size = int64_t(bytes.size());
    if (size == 0) throw file_error(tag, path, "empty file (no records)");
    if (size % record != 0)
      throw file_error(tag, path,
                       fmt::format("truncated: {} bytes is not a whole number of {}-byte records "
                                   "(the last record starts at offset {} and has {} bytes)",
                                   size, record, size / record * record, size % record));
    const int64_t n = size / record;
    pixels.reserve(pixels.size() + size_t(n * kPixels));
    for (int64_t r = 0; r < n; ++r) {
      const uint8_t* rec = bytes.data() + r * record;
      if (cifar100 && rec[0] >= 20)
        throw file_error(tag, path,
                         fmt::format("coarse label {} at offset {} (record {}) is out of range for 20 classes",
                                     rec[0], r * record, r));
      const int64_t label = rec[label_bytes - 1];
      if (label >= num_classes)
        throw file_error(tag, path,
                         fmt::format("label {} at offset {} (record {}) is out of range for {} classes", label,
                                     r * record + label_bytes - 1, r, num_classes));
      labels.push_back(int32_t(label));
      pixels.insert(pixels.end(), rec + label_bytes, rec + record);
    }
  }

  std::vector<std::string> names = read_lines(dir / (cifar100 ? "fine_label_names.txt" : "batches.meta.txt"));
  if (int64_t(names.size()) != num_classes) names = cifar100 ? kCifar100Classes : kCifar10Classes;
  return std::make_unique<MemoryDataset>(name, Shape{3, 32, 32}, num_classes, std::move(pixels), std::move(labels),
                                         std::move(names));
}

}  // namespace reckon::data
