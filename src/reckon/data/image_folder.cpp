// The image-folder dataset: DIR/train/<class>/* and DIR/test/<class>/*, or DIR/<class>/* for
// both splits when DIR has no train folder. Classes are the sorted sub-folder names of the
// train split (a test class the train split lacks is an error); files are taken in sorted
// order, PNG or JPEG by extension (.png .jpg .jpeg, any case; other files are ignored). The
// first train image fixes (C, H, W): C is 1 when it is gray (with or without alpha), else 3.
// Images are decoded once, in parallel, into memory.
#include <algorithm>
#include <exception>
#include <filesystem>

#include "reckon/data/dataset.h"
#include "reckon/data/detail.h"
#include "reckon/data/image.h"

namespace reckon::data {

namespace {

namespace fs = std::filesystem;
using detail::file_error;

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::string> sorted_subdirs(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && e.is_directory(ec)) names.push_back(name);
  }
  if (ec) throw file_error("folder", dir.string(), fmt::format("cannot list: {}", ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> sorted_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.empty() && name[0] != '.' && is_image_name(e.path()) && e.is_regular_file(ec))
      files.push_back(e.path().string());
  }
  if (ec) throw file_error("folder", dir.string(), fmt::format("cannot list: {}", ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

struct Listing {
  std::vector<std::string> files;
  std::vector<int32_t> labels;
};

// The images under split_dir, labelled by their folder's index in classes.
Listing list_split(const fs::path& split_dir, const std::vector<std::string>& classes) {
  Listing l;
  for (const std::string& c : sorted_subdirs(split_dir)) {
    auto it = std::find(classes.begin(), classes.end(), c);
    if (it == classes.end())
      throw file_error("folder", (split_dir / c).string(), "a test class that the train split does not have");
    for (std::string& f : sorted_images(split_dir / c)) {
      l.files.push_back(std::move(f));
      l.labels.push_back(int32_t(it - classes.begin()));
    }
  }
  return l;
}

}  // namespace

std::unique_ptr<MemoryDataset> open_image_folder(const std::string& dir_arg, bool train, const std::string& name) {
  std::error_code ec;
  const fs::path dir = dir_arg;
  if (!fs::is_directory(dir, ec)) throw file_error("folder", dir_arg, "no such directory");
  const bool has_splits = fs::is_directory(dir / "train", ec);
  const fs::path train_dir = has_splits ? dir / "train" : dir;
  const fs::path split_dir = has_splits && !train ? dir / "test" : train_dir;
  if (!fs::is_directory(split_dir, ec))
    throw file_error("folder", split_dir.string(), "no such directory (DIR/train exists, so DIR/test must too)");

  const std::vector<std::string> classes = sorted_subdirs(train_dir);
  if (classes.empty()) throw file_error("folder", train_dir.string(), "no class sub-folders");
  const Listing train_list = list_split(train_dir, classes);
  if (train_list.files.empty())
    throw file_error("folder", train_dir.string(), "no .png, .jpg or .jpeg images in the class sub-folders");
  const Listing split_list = split_dir == train_dir ? train_list : list_split(split_dir, classes);
  if (split_list.files.empty())
    throw file_error("folder", split_dir.string(), "no .png, .jpg or .jpeg images in the class sub-folders");

  // The first train image fixes the sample shape.
  const std::string& first = train_list.files[0];
  const Image ref = read_image(first);
  const int64_t c_n = ref.channels >= 3 ? 3 : 1, h = ref.height, w = ref.width;
  const int64_t numel = c_n * h * w;
  const int64_t n = int64_t(split_list.files.size());

  std::vector<uint8_t> pixels(size_t(n * numel));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    try {
      const std::string& file = split_list.files[size_t(i)];
      const Image img = read_image(file);
      if (img.height != h || img.width != w)
        throw file_error("folder", file,
                         fmt::format("image is {}x{} (WxH) but the dataset's images are {}x{}, as {}", img.width,
                                     img.height, w, h, first));
      image_to_planes(img, c_n, pixels.data() + i * numel);
    } catch (...) {
      errors[size_t(i)] = std::current_exception();
    }
  }
  for (const auto& e : errors)  // the first failing file in order, whatever the thread timing
    if (e) std::rethrow_exception(e);

  return std::make_unique<MemoryDataset>(name, Shape{c_n, h, w}, int64_t(classes.size()), std::move(pixels),
                                         std::vector<int32_t>(split_list.labels), classes);
}

}  // namespace reckon::data
