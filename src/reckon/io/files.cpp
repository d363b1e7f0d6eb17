#include "reckon/io/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "reckon/core/error.h"

namespace reckon::io {

std::FILE* open_output(const std::string& path, int64_t cut_to, const char* who) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    // ENXIO: a FIFO with no reader (O_NONBLOCK makes the open fail instead of waiting for one).
    throw Error(fmt::format("[{}] {}: cannot open for writing: {}", who, path,
                            e == ELOOP   ? "it is a symbolic link (reckon does not follow links in --out)"
                            : e == ENXIO ? "not a regular file (a FIFO, device or directory is not written to)"
                                         : std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("[{}] {}: not a regular file (a FIFO, device or directory is not written to)", who, path));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    ::close(fd);
    throw Error(fmt::format("[{}] {}: cannot set it blocking: {}", who, path, std::strerror(errno)));
  }
  if (cut_to >= 0 && int64_t(st.st_size) > cut_to && ::ftruncate(fd, off_t(cut_to)) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(fmt::format("[{}] {}: cannot cut to {} bytes: {}", who, path, cut_to, std::strerror(e)));
  }
  std::FILE* f = ::fdopen(fd, "ab");
  if (!f) {
    ::close(fd);
    throw Error(fmt::format("[{}] {}: cannot open for writing: {}", who, path, std::strerror(errno)));
  }
  return f;
}

void check_plain_name(const std::string& name, const std::string& what) {
  RK_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
               name.find('\0') == std::string::npos,
           "{} '{}' is not a plain file name (it must name a file inside --out: no '/', no '..')", what, name);
}

DirLock::DirLock(const std::string& dir, const char* who) {
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("[{}] {}: cannot open the lock file: {}", who, path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(fmt::format("[{}] {}: the lock file is not a regular file", who, path));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(fmt::format("[{}] {}: {}", who, dir,
                            e == EWOULDBLOCK ? "another run is writing in this directory (it holds .lock); wait for it "
                                               "or give another --out"
                                             : std::string("cannot lock it: ") + std::strerror(e)));
  }
}
DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() < 6 || name[0] != '.') continue;
    const size_t t = name.rfind(".tmp");
    if (t == std::string::npos || t == 0) continue;
    const std::string tail = name.substr(t + 4);
    // ".tmp-XXXXXX" (mkstemp) or ".tmpPID"
    const bool mkstemp_tail = tail.size() == 7 && tail[0] == '-';
    const bool pid_tail = !tail.empty() && std::all_of(tail.begin(), tail.end(), [](char c) { return std::isdigit(uint8_t(c)); });
    if (!mkstemp_tail && !pid_tail) continue;
    std::error_code sec;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), sec))) continue;
    if (fs::remove(it->path(), sec)) removed.push_back(name);
  }
  return removed;
}

}  // namespace reckon::io
