// Opening the files a run writes inside its --out directory (metrics, TensorBoard events) so
// that a name there cannot send the writes elsewhere: a symbolic link at the name is refused
// (O_NOFOLLOW), and so is anything that is not a regular file (a FIFO would block an open for
// writing; O_NONBLOCK, then fstat). Cutting a file back for a resume goes through the same
// checked descriptor (ftruncate), never through the name again.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace reckon::io {

// Opens (creating if missing) path for appending. cut_to >= 0 cuts a longer file to that many
// bytes first; cut_to == 0 empties it. Throws naming `who`, the file and why.
std::FILE* open_output(const std::string& path, int64_t cut_to, const char* who);

// A name read from a file (a checkpoint's metadata) that must be a plain file name inside the
// run's directory: no '/', not "." or "..", not empty. Throws naming `what` and the value.
void check_plain_name(const std::string& name, const std::string& what);

// An exclusive lock on a run's directory, held while the object lives: flock on dir/.lock
// (created if missing, never followed through a symbolic link), so two runs writing one --out
// cannot interleave their files. Throws naming `who` and the directory when another process
// holds it. The lock goes with the process, so a killed run leaves none behind.
class DirLock {
 public:
  DirLock(const std::string& dir, const char* who);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what an interrupted atomic write left in dir: regular files named ".NAME.tmp-XXXXXX"
// (safetensors' and the ONNX writer's temporaries; symbolic links are left alone). Call it
// holding the directory's lock. Returns the names removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace reckon::io
