// An op's ONNX mapping, as code: each exportable op defines
//   static std::vector<std::string> onnx(OnnxArgs& a, const Attrs& attrs);
// which appends the ONNX nodes that compute the op (through a.sink) and returns the names of
// the op's outputs (one per reckon output; "" for an output ONNX has no use for, such as max
// pooling's argmax indices). An op that cannot be exported at the chosen opset, or with these
// attributes, throws OnnxUnsupported saying why: the exporter's pre-flight collects those for
// every node before a byte is written. Ops that are never exportable say so with
// kNotExportable = "why" instead (backward ops, writes, updates, losses).
// The sink is abstract so that ops need no protobuf: the exporter (onnx/export.cpp) writes
// ModelProto nodes, the pre-flight only checks.
// Not here: import (ONNX to reckon), which lives in onnx/import.cpp, because it maps ONNX
// operators onto reckon's functional API, several ops to one and one to several.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "reckon/core/error.h"
#include "reckon/core/tensor.h"

namespace reckon {

struct OnnxAttr {
  std::string name;
  std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>> value;
};

class OnnxSink {
 public:
  virtual ~OnnxSink() = default;
  int opset = 17;
  // The input's first dimension is left symbolic ("batch") in the file: ops whose attributes
  // bake the batch in (reshape) write it as "copy from the input" instead.
  bool dynamic_batch = false;
  // Appends a node and returns the names of its n_outputs outputs (fresh names).
  virtual std::vector<std::string> node(std::string_view op_type, std::vector<std::string> inputs,
                                        std::vector<OnnxAttr> attrs = {}, int n_outputs = 1) = 0;
  // A constant initializer: int64 of shape (v.size()), or a float32 scalar.
  virtual std::string const_i64(const std::vector<int64_t>& v) = 0;
  virtual std::string const_f32(float v) = 0;
  virtual std::string const_f32s(const std::vector<float>& v) = 0;  // shape (v.size())
  // A constant initializer of any type: its ONNX TensorProto.DataType, dims and raw bytes.
  virtual std::string const_raw(int onnx_type, const Shape& dims, const void* data, size_t bytes) = 0;
};

struct OnnxArgs {
  OnnxSink& sink;
  std::vector<std::string> in;  // input names ("" for an undefined optional input)
  std::vector<TensorSpec> in_specs, out_specs;
  std::string one(std::string_view op_type, std::vector<std::string> inputs, std::vector<OnnxAttr> attrs = {}) {
    return sink.node(op_type, std::move(inputs), std::move(attrs), 1)[0];
  }
};

// ONNX's TensorProto.DataType of a reckon dtype.
constexpr int onnx_dtype(DType t) {
  switch (t) {
    case DType::f32: return 1;
    case DType::u8: return 2;
    case DType::i8: return 3;
    case DType::i32: return 6;
    case DType::i64: return 7;
    case DType::f16: return 10;
    case DType::f64: return 11;
    case DType::bf16: return 16;
  }
  return 0;
}

// ONNX's output size of a pooling window along one dim (ceil_mode: the plain ceiling, without
// PyTorch's rule that the last window must start inside the input or its left padding).
constexpr int64_t onnx_window_out(int64_t in, int64_t k, int64_t stride, int64_t pad_begin, int64_t pad_end,
                                  int64_t dilation, bool ceil_mode) {
  const int64_t span = in + pad_begin + pad_end - dilation * (k - 1) - 1;
  return (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
}

// An op call ONNX cannot express (at this opset, with these attributes): the reason.
struct OnnxUnsupported : Error {
  using Error::Error;
};

}  // namespace reckon
