#include "reckon/core/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "reckon/core/error.h"

namespace reckon {

std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return s;
}

Error file_error(const char* tag, const std::string& file, const std::string& what) {
  return Error(one_line(fmt::format("[{}] {}: {}", tag, file, what)));
}

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a plain file";
}

}  // namespace

RegularFile::RegularFile(const std::string& path, const char* tag) : path_(path), tag_(tag) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    throw file_error(tag, path, e == ENOENT ? std::string("no such file") : fmt::format("cannot open: {}", std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw file_error(tag, path, fmt::format("cannot stat: {}", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw file_error(tag, path, fmt::format("not a regular file ({})", kind_of(st.st_mode)));
  }
  // Reads of a regular file never block; clear the flag anyway so that library readers see a
  // plain descriptor.
  const int fl = ::fcntl(fd_, F_GETFL);
  if (fl >= 0) ::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
  size_ = uint64_t(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

int RegularFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string RegularFile::read_all() const {
  std::string bytes(size_t(size_), '\0');
  uint64_t got = 0;
  while (got < size_) {
    const ssize_t r = ::pread(fd_, bytes.data() + got, size_t(size_ - got), off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw file_error(tag_, path_, fmt::format("read error at offset {}: {}", got, std::strerror(errno)));
    if (r == 0) throw file_error(tag_, path_, fmt::format("file shrank to {} bytes while it was read", got));
    got += uint64_t(r);
  }
  return bytes;
}

std::string read_regular_file(const std::string& path, const char* tag, uint64_t max_bytes) {
  RegularFile f(path, tag);
  if (f.size() > max_bytes)
    throw file_error(tag, path, fmt::format("{} bytes, over the {} bytes this reader takes", f.size(), max_bytes));
  return f.read_all();
}

}  // namespace reckon
