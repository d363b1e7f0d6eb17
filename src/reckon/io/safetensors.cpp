// safetensors reader and writer (see safetensors.h). The reader trusts nothing in the file:
// every length, offset and shape is checked before a byte is read or allocated, and every
// failure is a one-line reckon::Error that names the file.
#include "reckon/io/safetensors.h"

#include "reckon/core/file.h"
#include "reckon/core/json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace reckon {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace {

using json = nlohmann::json;
constexpr uint64_t kHeaderLenBytes = 8;
// The reference library's cap on the header; its JSON nests no deeper than kMaxJsonDepth
// (core/json.h), so neither the parse nor a message that prints a value can run out of stack.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string quote_name(const std::string& name) {
  return json(name).dump(-1, ' ', false, json::error_handler_t::replace);
}

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::bf16, "BF16"},
                                 {DType::f16, "F16"}, {DType::i8, "I8"},   {DType::u8, "U8"},
                                 {DType::i32, "I32"}, {DType::i64, "I64"}};

bool find_dtype(const std::string& name, DType& out) {
  for (const auto& d : kDTypes)
    if (name == d.name) {
      out = d.dtype;
      return true;
    }
  return false;
}

// Reads exactly n bytes at offset; false on a read error or an early end of file.
bool pread_all(int fd, void* dst, uint64_t n, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
    ssize_t r = ::pread(fd, p, chunk, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= uint64_t(r);
    offset += uint64_t(r);
  }
  return true;
}

struct FaultPlan {
  int64_t at = 0;
  bool kill = false;
  int err = EIO;
  int64_t passed = 0;
};
FaultPlan& fault_plan() {
  static FaultPlan p = [] {
    FaultPlan f;
    if (const char* e = std::getenv("RECKON_FAULT"); e && *e) {
      const std::string v(e);
      const size_t colon = v.find(':');
      f.at = std::atoll(v.substr(0, colon).c_str());
      const std::string kind = colon == std::string::npos ? "EIO" : v.substr(colon + 1);
      f.kill = kind == "kill";
      f.err = kind == "ENOSPC" ? ENOSPC : EIO;
    }
    return f;
  }();
  return p;
}

// One fault point (see inject_save_fault). True: the step is to fail, errno set. A write passes
// `partial` so that half its bytes reach the file first.
bool fault_here(const std::function<void()>& partial = {}) {
  FaultPlan& f = fault_plan();
  ++f.passed;
  if (f.at <= 0 || f.passed != f.at) return false;
  if (partial) partial();
  if (f.kill) ::raise(SIGKILL);
  errno = f.err;
  return true;
}

bool write_all(int fd, const void* src, uint64_t n) {
  if (fault_here([&] { (void)!::write(fd, src, size_t(std::min<uint64_t>(n / 2, uint64_t(1) << 30))); }))
    return false;
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
    ssize_t r = ::write(fd, p, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= uint64_t(r);
  }
  return true;
}

// A non-negative JSON integer, or false.
bool json_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

// One tensor entry of the header, checked.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // relative to the data section
};

}  // namespace

std::string safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  throw Error(fmt::format("[safetensors] dtype {} has no safetensors name", dtype_name(t)));
}

DType safetensors_dtype(const std::string& name) {
  DType t;
  RK_CHECK(find_dtype(name, t), "[safetensors] unknown dtype {} (supported: F32 F64 BF16 F16 I8 U8 I32 I64)",
           quote_name(name));
  return t;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string file = one_line(path);
  auto fail = [&](const std::string& what) { return Error(one_line(fmt::format("[safetensors] {}: {}", file, what))); };

  RegularFile f(path, "safetensors");  // a FIFO or a directory is refused before anything blocks
  const uint64_t file_size = f.size();
  if (file_size < kHeaderLenBytes)
    throw fail(fmt::format("file is {} bytes, too short for the 8-byte header length at byte 0", file_size));

  unsigned char len_bytes[kHeaderLenBytes];
  if (!pread_all(f.fd(), len_bytes, kHeaderLenBytes, 0)) throw fail("cannot read the header length at byte 0");
  // What torch.save writes is a pickle: a zip archive since PyTorch 1.6, a bare pickle stream
  // before. Their first 8 bytes read as a header length past any real one; such a file is named
  // for what it is (never unpickled: a pickle can run code), with the conversion.
  const bool zip = std::memcmp(len_bytes, "PK\x03\x04", 4) == 0;
  const bool pickle = len_bytes[0] == 0x80 && len_bytes[1] >= 2 && len_bytes[1] <= 5;
  auto not_safetensors = [&] {
    return fail(fmt::format(
        "this is {}, not safetensors: PyTorch's torch.save writes one, and reckon never unpickles (a pickle can run "
        "code). Convert it in Python: from safetensors.torch import save_file; save_file(torch.load(PATH, "
        "weights_only=True), 'model.safetensors')",
        zip ? "a zip archive (PyTorch's .pt/.pth format since 1.6)" : "a Python pickle (PyTorch's legacy .pt format)"));
  };
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if ((zip || pickle) && (header_len > kMaxHeaderBytes || header_len > file_size - kHeaderLenBytes))
    throw not_safetensors();
  if (header_len > kMaxHeaderBytes)
    throw fail(fmt::format("header length {} (at byte 0) is over the format's limit of {} bytes", header_len,
                           kMaxHeaderBytes));
  if (header_len > file_size - kHeaderLenBytes)
    throw fail(fmt::format("header length {} (at byte 0) runs past the end of the file ({} bytes)", header_len,
                           file_size));
  const uint64_t data_start = kHeaderLenBytes + header_len;
  const uint64_t data_size = file_size - data_start;

  std::string header(size_t(header_len), '\0');
  if (!pread_all(f.fd(), header.data(), header_len, kHeaderLenBytes))
    throw fail(fmt::format("cannot read the {}-byte header at byte 8", header_len));

  // Parse, noting repeated top-level keys (nlohmann would keep the last silently).
  std::string duplicate;
  bool has_duplicate = false;
  std::set<std::string> top_keys;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth >= kMaxJsonDepth)
      throw Error(fmt::format("[safetensors] {}: the header nests JSON deeper than {} levels", file, kMaxJsonDepth));
    if (ev == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second &&
        !has_duplicate) {
      has_duplicate = true;
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json h;
  try {
    h = json::parse(header, cb);
  } catch (const json::parse_error& e) {
    // nlohmann's text quotes the bytes last read: keep them ASCII, and drop its own prefix.
    std::string why = e.what();
    if (auto p = why.find("syntax error"); p != std::string::npos) why = why.substr(p);
    for (char& c : why)
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    throw fail(fmt::format("bad JSON header at byte {}: {}", kHeaderLenBytes + (e.byte > 0 ? e.byte - 1 : 0), why));
  } catch (const json::exception& e) {
    throw fail(fmt::format("bad JSON header at byte 8: {}", e.what()));
  }
  if (!h.is_object()) throw fail(fmt::format("the header at byte 8 is a JSON {}, not an object", h.type_name()));
  if (has_duplicate) throw fail(fmt::format("tensor {}: the name appears twice in the header", quote_name(duplicate)));

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) throw fail(fmt::format("\"__metadata__\" is a JSON {}, not an object", v.type_name()));
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw fail(fmt::format("metadata {} is a JSON {}, not a string", quote_name(m.key()), m.value().type_name()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tn = "tensor " + quote_name(key);
    if (!v.is_object()) throw fail(fmt::format("{}: entry is a JSON {}, not an object", tn, v.type_name()));
    Entry e;
    e.name = key;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw fail(fmt::format("{}: missing or non-string \"dtype\"", tn));
    if (!find_dtype(dt->get<std::string>(), e.dtype))
      throw fail(fmt::format("{}: unknown dtype {} (supported: F32 F64 BF16 F16 I8 U8 I32 I64)", tn,
                             quote_name(dt->get<std::string>())));
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw fail(fmt::format("{}: missing or non-array \"shape\"", tn));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      uint64_t n;
      if (!json_u64(d, n) || n > uint64_t(std::numeric_limits<int64_t>::max()))
        throw fail(fmt::format("{}: shape {} holds something other than a non-negative integer", tn, sh->dump()));
      e.shape.push_back(int64_t(n));
      overflow = overflow || __builtin_mul_overflow(numel, n, &numel);
    }
    uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes);
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !json_u64((*off)[0], e.begin) ||
        !json_u64((*off)[1], e.end))
      throw fail(fmt::format("{}: \"data_offsets\" must be two non-negative integers", tn));
    if (e.begin > e.end)
      throw fail(fmt::format("{}: data_offsets [{}, {}] end before they begin (byte {})", tn, e.begin, e.end,
                             data_start + e.begin));
    if (e.end > data_size)
      throw fail(fmt::format("{}: data_offsets [{}, {}] (bytes {}..{} of the file) run past the {}-byte data "
                             "section ending at byte {}",
                             tn, e.begin, e.end, data_start + e.begin, data_start + e.end, data_size, file_size));
    if (overflow || e.end - e.begin != nbytes)
      throw fail(fmt::format("{}: data_offsets [{}, {}] (byte {}) hold {} bytes but {} {} needs {}", tn, e.begin,
                             e.end, data_start + e.begin, e.end - e.begin, dt->get<std::string>(),
                             sh->dump(), overflow ? std::string("more than 2^64") : std::to_string(nbytes)));
    entries.push_back(std::move(e));
  }

  // No two tensors may share a byte.
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry &a = *by_offset[i - 1], &b = *by_offset[i];
    if (b.begin < a.end)
      throw fail(fmt::format("tensor {}: data_offsets [{}, {}] overlap those of tensor {} [{}, {}] at byte {}",
                             quote_name(b.name), b.begin, b.end, quote_name(a.name), a.begin, a.end, data_start + b.begin));
  }

  // ... and together they cover the data exactly, as the format requires (the reference library
  // refuses holes and trailing bytes too): a header length off by a few bytes would otherwise
  // read every tensor shifted.
  uint64_t covered = 0;
  for (const Entry* e : by_offset) {
    if (e->begin != covered)
      throw fail(fmt::format("tensor {}: data_offsets [{}, {}] leave bytes {}..{} of the data to no tensor (the "
                             "header length or the offsets are wrong)",
                             quote_name(e->name), e->begin, e->end, covered, e->begin));
    covered = e->end;
  }
  if (covered != data_size)
    throw fail(fmt::format("the tensors' data_offsets cover {} bytes but the data after the {}-byte header is {} "
                           "bytes (the header length or the offsets are wrong)",
                           covered, header_len, data_size));

  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    uint64_t n = e.end - e.begin;
    if (n > 0 && !pread_all(f.fd(), t.raw_data(), n, data_start + e.begin))
      throw fail(fmt::format("tensor {}: cannot read {} bytes at byte {}", quote_name(e.name), n, data_start + e.begin));
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string file = one_line(path);
  auto fail = [&](const std::string& what) { return Error(one_line(fmt::format("[safetensors] {}: {}", file, what))); };

  // Header first: every check happens before the file system is touched.
  json h = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw fail(fmt::format("tensor name {} is reserved or empty", quote_name(name)));
    if (!names.insert(name).second) throw fail(fmt::format("tensor {} is given twice", quote_name(name)));
    if (!t.defined()) throw fail(fmt::format("tensor {} is undefined", quote_name(name)));
    if (t.device() != Device::cpu)
      throw fail(fmt::format("tensor {} is on the {} device; only cpu tensors hold data to write", quote_name(name),
                             device_name(t.device())));
    uint64_t nbytes = uint64_t(t.nbytes());
    h[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
               {"shape", t.shape()},
               {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string header;
  try {
    header = h.dump();
  } catch (const json::exception& e) {
    throw fail(fmt::format("cannot encode the header: {}", e.what()));
  }
  header.append((8 - header.size() % 8) % 8, ' ');

  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> tmp_name(tmpl.begin(), tmpl.end());
  tmp_name.push_back('\0');
  int fd = fault_here() ? -1 : ::mkstemp(tmp_name.data());
  if (fd < 0) throw fail(fmt::format("cannot create a temporary file in {}: {}", dir.string(), std::strerror(errno)));
  const std::string tmp(tmp_name.data());
  auto abandon = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return fail(fmt::format("{}: {}", what, std::strerror(err)));
  };

  struct stat st {};
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  if (::fchmod(fd, mode) != 0) throw abandon("cannot set the file mode");
  unsigned char len_bytes[kHeaderLenBytes];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  if (!write_all(fd, len_bytes, kHeaderLenBytes) || !write_all(fd, header.data(), header.size()))
    throw abandon("cannot write the header");
  for (const auto& [name, t] : tensors) {
    if (t.numel() == 0) continue;
    Tensor c = t;
    if (!t.is_contiguous()) {
      try {
        c = Tensor::empty(t.shape(), t.dtype());
        raw_copy(c, t);
      } catch (const Error& e) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw fail(fmt::format("tensor {}: {}", quote_name(name), e.what()));
      }
    }
    if (!write_all(fd, c.raw_data(), uint64_t(c.nbytes())))
      throw abandon(fmt::format("cannot write tensor {}", quote_name(name)));
  }
  if (fault_here() || ::fsync(fd) != 0) throw abandon("cannot fsync");
  if (fault_here()) {
    ::close(fd);
    errno = fault_plan().err;
    fd = -1;
    throw abandon("cannot close");
  }
  if (::close(fd) != 0) {
    fd = -1;
    throw abandon("cannot close");
  }
  fd = -1;
  if (fault_here() || ::rename(tmp.c_str(), path.c_str()) != 0)
    throw abandon(fmt::format("cannot rename {} over it", tmp));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw fail(fmt::format("cannot open directory {} to fsync it: {}", dir.string(), std::strerror(errno)));
  int rc = fault_here() ? -1 : ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0) throw fail(fmt::format("cannot fsync directory {}: {}", dir.string(), std::strerror(err)));
}

void inject_save_fault(int64_t at, bool kill, int err) {
  FaultPlan& f = fault_plan();
  f.at = at > 0 ? f.passed + at : 0;  // counted from now
  f.kill = kill;
  f.err = err;
}
int64_t fault_points_passed() { return fault_plan().passed; }

}  // namespace reckon
