// The ONNX importer: protobuf parsing, the model checks, and (when the model has one input)
// building the module on the meta device and running its forward there, which runs every
// node's shape rules with no data.
#include <algorithm>

#include "fuzz_util.h"
#include "reckon/onnx/import.h"
#include "reckon/onnx/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    auto m = std::make_shared<const onnx::Model>(onnx::parse(bytes, "fuzz.onnx", ""));
    if (m->inputs.size() != 1) return;
    onnx::OnnxModule mod(m, Device::meta);
    Shape in;
    for (int64_t d : mod.input().dims) in.push_back(d < 0 ? 1 : std::min<int64_t>(d, 4096));
    (void)mod.forward(Tensor::empty(in, DType::f32, Device::meta));
  });
  return 0;
}
