// safetensors: the tensor file format of Hugging Face's `safetensors` package, read and written.
// A file is an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// and then the raw little-endian data; offsets count from the first byte after the header.
// This is not a lazy or memory-mapped reader: load_safetensors reads every tensor into memory.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" map ({} when absent)
};

// The safetensors name of a dtype ("F32", "BF16", ...), and back (throws on an unknown name).
std::string safetensors_dtype_name(DType t);
DType safetensors_dtype(const std::string& name);

// requires: path names a safetensors file holding only F32, F64, BF16, F16, I8, U8, I32, I64.
// ensures:  every tensor is a new contiguous cpu tensor allocated with current_tag() (callers
//           choose the tag with TagGuard). Any malformed input (missing or short file, header
//           length past the end, bad JSON, unknown dtype, offsets out of range, overlapping or
//           not matching shape x itemsize) throws reckon::Error with a one-line message naming
//           the file and, where it applies, the byte offset and the tensor.
SafetensorsFile load_safetensors(const std::string& path);

// requires: names are unique, non-empty and not "__metadata__"; tensors are defined cpu
//           tensors of a supported dtype (any strides: they are written in logical order).
// ensures:  path holds the file, or is unchanged when this throws: the bytes go to a temporary
//           file in the same directory, which is fsynced, renamed over path, and the directory
//           fsynced. Data is laid out in the order given; the header is padded with spaces to a
//           multiple of 8 bytes, as the Python package does. "__metadata__" is written only
//           when metadata is not empty.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Fault injection, for the crash-consistency tests (issue 14). Every step of save_safetensors
// that can fail is a numbered fault point, counted over the process: creating the temporary
// file, each write (the header length, the header, each tensor), the fsync, the close, the
// rename and the directory's fsync. With a plan set, the point numbered `at` (1-based) either
// fails with errno `err` (a write first writes half its bytes, as a full disk does) or, when
// `kill` is set, kills the process with SIGKILL (a write again after half its bytes).
// The environment sets a plan for a whole process: RECKON_FAULT=K:kill, K:ENOSPC or K:EIO.
// at == 0 disables injection. fault_points_passed() counts the points reached so far.
void inject_save_fault(int64_t at, bool kill, int err);
int64_t fault_points_passed();

}  // namespace reckon
