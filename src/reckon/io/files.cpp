#include "reckon/io/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace reckon::io
