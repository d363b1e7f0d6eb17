// What the build knows about CUDA. Builds without the cuda backend link the stub in
// kernels/stub/, which says "no device", so every caller can ask the same question.
#pragma once
#include <string>

namespace reckon {

bool cuda_available();      // a usable GPU and a build with the cuda backend
std::string cuda_status();  // one line: why not, or which device

}  // namespace reckon
