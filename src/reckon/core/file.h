// Reading a file named by a user or found on disk, so that what sits at the name cannot hang or
// crash the reader (issue 14's non-regular-file class): the open is non-blocking (a FIFO would
// otherwise block open() itself until a writer appears), the descriptor is fstat'ed, anything
// but a regular file is refused, and only then is it read. Errors read "[tag] FILE: why" on one
// line, whatever bytes the file name holds.
#pragma once
#include <cstdint>
#include <string>

namespace reckon {

// s with control characters turned into spaces, so a message stays one line.
std::string one_line(std::string s);

// "[tag] file: what" as a reckon::Error, on one line.
struct Error;
Error file_error(const char* tag, const std::string& file, const std::string& what);

// A read-only descriptor on a regular file, closed with the object.
class RegularFile {
 public:
  // Throws "[tag] path: no such file | not a regular file (a FIFO) | cannot open: ...".
  RegularFile(const std::string& path, const char* tag);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // All of its bytes (size() of them, read from offset 0).
  std::string read_all() const;
  // Hands the descriptor over (to gzdopen, say); the object no longer closes it.
  int release();

 private:
  std::string path_;
  const char* tag_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file. Refused, naming the sizes, when it is over max_bytes.
std::string read_regular_file(const std::string& path, const char* tag, uint64_t max_bytes = uint64_t(1) << 34);

}  // namespace reckon
