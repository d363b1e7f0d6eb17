// IDX files (MNIST, Fashion-MNIST): a big-endian header — magic 0x00000803 (u8, 3 dims) for
// images with dims (N, rows, cols), 0x00000801 (u8, 1 dim) for labels with dim (N) — then the
// u8 data. Read through zlib's gzread, which takes a .gz file or a raw one alike. Nothing in a
// file is trusted: every header field, the length of the data, the absence of trailing bytes
// (which is also where gzip's CRC is checked) and every label are validated, and each failure
// is one line naming the file and the (uncompressed) byte offset.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include "reckon/data/dataset.h"
#include "reckon/data/detail.h"

namespace reckon::data {

namespace {

namespace fs = std::filesystem;
using detail::file_error;

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint64_t kMaxBytes = uint64_t(1) << 40;

// A gzip (or raw) file read front to back, tracking the uncompressed offset.
class GzReader {
 public:
  explicit GzReader(std::string path) : path_(std::move(path)) {
    RegularFile file(path_, "idx");  // a FIFO or a directory is refused before anything blocks
    read_claimed_size(file.fd());
    errno = 0;
    f_ = gzdopen(file.fd(), "rb");
    if (!f_) throw file_error("idx", path_, fmt::format("cannot open: {}", std::strerror(errno ? errno : ENOMEM)));
    file.release();  // gzclose closes it
    gzbuffer(f_, 1 << 20);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }

  // Reads up to n bytes; fewer only at the end of the data. Throws on corrupt gzip data.
  uint64_t read_some(void* dst, uint64_t n) {
    auto* p = static_cast<char*>(dst);
    uint64_t got = 0;
    while (got < n) {
      unsigned chunk = unsigned(std::min<uint64_t>(n - got, uint64_t(1) << 30));
      int r = gzread(f_, p + got, chunk);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(f_, &errnum);
        if (errnum == Z_ERRNO)
          throw file_error("idx", path_, fmt::format("read error near offset {}: {}", offset_, std::strerror(errno)));
        throw file_error("idx", path_,
                         fmt::format("corrupt gzip data near offset {} (uncompressed): {}", offset_, msg ? msg : "?"));
      }
      got += uint64_t(r);
      offset_ += uint64_t(r);
      if (unsigned(r) < chunk) break;
    }
    if (got < n) {
      // gzread stops early on a clean end of file and on a cut gzip stream (Z_BUF_ERROR); a
      // corrupt stream after some bytes shows up here as an error too.
      int errnum = 0;
      const char* msg = gzerror(f_, &errnum);
      if (errnum != Z_OK && errnum != Z_BUF_ERROR)
        throw file_error("idx", path_,
                         fmt::format("corrupt gzip data near offset {} (uncompressed): {}", offset_, msg ? msg : "?"));
      cut_stream_ = errnum == Z_BUF_ERROR;
    }
    return got;
  }

  // Whether the file says its uncompressed length is offset() + n: a raw file by its size; a
  // gzip file by its trailer's ISIZE (the length mod 2^32), believed only up to 64 times the
  // compressed size (Fashion-MNIST's images are 1.8:1, MNIST's 4.8:1). It only reserves address
  // space: the length is still checked as the data is read, and pages are touched as it arrives.
  bool claims_length(uint64_t n) const {
    const uint64_t total = offset_ + n;
    if (!gzip_) return total == file_bytes_;
    return claimed_isize_ == uint32_t(total) && total <= 64 * file_bytes_;
  }

  // " (the gzip stream ends early)" when the compressed data itself was cut short.
  std::string cut_note() const { return cut_stream_ ? " (the gzip stream is cut short)" : ""; }

  uint32_t read_u32_be(const char* what) {
    unsigned char b[4];
    const uint64_t at = offset_;
    uint64_t got = read_some(b, 4);
    if (got < 4)
      throw file_error("idx", path_,
                       fmt::format("truncated at offset {}: the file ends inside the {} (a 4-byte field at offset {}){}",
                                   at + got, what, at, cut_note()));
    return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
  }

  // The n data bytes the header declares (described by `declared` in messages), then the end
  // of the file. Memory grows with what is actually read, so a header claiming terabytes in a
  // small file fails on truncation, not on allocation.
  std::vector<uint8_t> read_body(uint64_t n, const std::string& declared) {
    std::vector<uint8_t> v;
    uint64_t have = 0;
    // When the file's length agrees with the header the vector is reserved once and filled in
    // place, 4 MiB at a time; else it grows by doubling. Either way memory follows what is really
    // there, but the doubling's last copy holds 1.7x the data for a moment (80 MiB for
    // Fashion-MNIST's 47 MiB of images: the training run's peak resident memory).
    bool reserved = false;
    if (claims_length(n)) {
      try {
        v.reserve(size_t(n));
        reserved = true;
      } catch (const std::bad_alloc&) {  // no address space for it: by doubling
      }
    }
    while (have < n) {
      uint64_t want = reserved ? std::min(n, have + (uint64_t(4) << 20))
                               : std::min(n, std::max<uint64_t>(have * 2, uint64_t(4) << 20));
      v.resize(size_t(want));
      have += read_some(v.data() + have, want - have);
      if (have < want)
        throw file_error("idx", path_,
                         fmt::format("truncated at offset {}: the header declares {} ({} bytes of data from offset {}){}",
                                     offset_, declared, n, offset_ - have, cut_note()));
    }
    unsigned char extra;
    if (read_some(&extra, 1) != 0)
      throw file_error("idx", path_,
                       fmt::format("unexpected bytes after offset {}: the header declares {} and the file is longer",
                                   offset_ - 1, declared));
    return v;
  }

 private:
  void read_claimed_size(int fd) {
    struct stat st {};
    if (fstat(fd, &st) != 0) return;
    file_bytes_ = uint64_t(st.st_size);
    unsigned char b[4];
    gzip_ = file_bytes_ >= 18 && pread(fd, b, 2, 0) == 2 && b[0] == 0x1f && b[1] == 0x8b;
    if (gzip_ && pread(fd, b, 4, off_t(file_bytes_ - 4)) == 4)
      claimed_isize_ = uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
  }

  std::string path_;
  uint64_t file_bytes_ = 0;
  bool gzip_ = false;
  uint32_t claimed_isize_ = 0;
  gzFile f_ = nullptr;
  uint64_t offset_ = 0;
  bool cut_stream_ = false;
};

void check_magic(GzReader& r, uint32_t want, const char* kind) {
  uint32_t magic = r.read_u32_be("magic number");
  if (magic != want)
    throw file_error("idx", r.path(),
                     fmt::format("wrong magic 0x{:08x} at offset 0 (want 0x{:08x} for {})", magic, want, kind));
}

struct Labels {
  std::string path;
  std::vector<uint8_t> values;
};

Labels read_labels(const std::string& path) {
  GzReader r(path);
  check_magic(r, kLabelsMagic, "labels");
  uint32_t n = r.read_u32_be("label count");
  if (n == 0) throw file_error("idx", path, "the header at offset 4 declares 0 labels");
  return {path, r.read_body(n, fmt::format("{} labels", n))};
}

// The first existing file among the usual names of one IDX file, or "" when there is none.
std::string find_file(const std::string& dir, const std::string& stem) {
  std::string dotted = stem;  // "train-images.idx3-ubyte", as some downloads name them
  if (size_t p = dotted.find("-idx"); p != std::string::npos) dotted[p] = '.';
  for (const std::string& name : {stem, stem + ".gz", dotted, dotted + ".gz"}) {
    std::error_code ec;
    fs::path p = fs::path(dir) / name;
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

std::string require_file(const std::string& dir, const std::string& stem, const std::string& hint) {
  std::string p = find_file(dir, stem);
  if (!p.empty()) return p;
  const std::string suffix = hint.empty() ? "" : " (" + hint + ")";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw file_error("idx", dir, "no such directory" + suffix);
  throw file_error("idx", (fs::path(dir) / stem).string() + "[.gz]", "no such file" + suffix);
}

}  // namespace

std::unique_ptr<MemoryDataset> open_idx(const std::string& dir, bool train, int64_t fixed_classes,
                                        const std::string& name, std::vector<std::string> class_names,
                                        const std::string& missing_hint) {
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = require_file(dir, split + "-images-idx3-ubyte", missing_hint);
  const std::string labels_path = require_file(dir, split + "-labels-idx1-ubyte", missing_hint);

  Labels labels = read_labels(labels_path);

  // The number of classes: fixed, or inferred from both splits so train and test agree.
  int64_t num_classes = fixed_classes;
  if (num_classes <= 0) {
    int64_t max_label = *std::max_element(labels.values.begin(), labels.values.end());
    const std::string other = find_file(dir, std::string(train ? "t10k" : "train") + "-labels-idx1-ubyte");
    if (!other.empty()) {
      Labels o = read_labels(other);
      max_label = std::max<int64_t>(max_label, *std::max_element(o.values.begin(), o.values.end()));
    }
    num_classes = max_label + 1;
  }
  std::vector<int32_t> label_values(labels.values.size());
  for (size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= num_classes)
      throw file_error("idx", labels_path,
                       fmt::format("label {} at offset {} (sample {}) is out of range for {} classes",
                                   labels.values[i], 8 + i, i, num_classes));
    label_values[i] = labels.values[i];
  }

  GzReader r(images_path);
  check_magic(r, kImagesMagic, "images");
  const uint32_t n = r.read_u32_be("image count");
  const uint32_t rows = r.read_u32_be("row count");
  const uint32_t cols = r.read_u32_be("column count");
  if (n == 0) throw file_error("idx", images_path, "the header at offset 4 declares 0 images");
  if (rows == 0 || cols == 0)
    throw file_error("idx", images_path, fmt::format("the header at offset 8 declares {}x{} images", rows, cols));
  if (n != labels.values.size())
    throw file_error("idx", labels_path,
                     fmt::format("{} labels but {} has {} images (counts at offset 4 disagree)",
                                 labels.values.size(), images_path, n));
  // Checked: three 32-bit counts can multiply past 2^64 and wrap to a small, plausible size.
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t(n), uint64_t(rows), &bytes) || __builtin_mul_overflow(bytes, uint64_t(cols), &bytes))
    bytes = UINT64_MAX;
  if (bytes > kMaxBytes)
    throw file_error("idx", images_path,
                     fmt::format("the header declares {} images of {}x{}{}: more than this reader takes", n, rows,
                                 cols, bytes == UINT64_MAX ? " (past 2^64 bytes)" : fmt::format(", {} bytes", bytes)));
  std::vector<uint8_t> pixels = r.read_body(bytes, fmt::format("{} images of {}x{}", n, rows, cols));

  return std::make_unique<MemoryDataset>(name, Shape{1, int64_t(rows), int64_t(cols)}, num_classes,
                                         std::move(pixels), std::move(label_values), std::move(class_names));
}

}  // namespace reckon::data
