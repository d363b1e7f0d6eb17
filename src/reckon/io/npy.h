// numpy's .npy files (format version 1.0), for handing arrays to Python tools and oracles:
// `reckon eval --dump-outputs`, and the tests that compare reckon with ONNX Runtime.
// Not here: .npz archives, Fortran order, dtypes other than float32 and int64.
#pragma once
#include <string>

#include "reckon/core/tensor.h"

namespace reckon::io {

// Writes t (a cpu tensor, f32 or i64, any shape) to path. Throws naming the file.
void write_npy(const std::string& path, const Tensor& t);
// Reads a little-endian, C-order float32 or int64 .npy. Throws naming the file.
Tensor read_npy(const std::string& path);

}  // namespace reckon::io
