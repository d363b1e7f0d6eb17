// The cuda stub: linked when reckon is built without its cuda backend (the default), so the
// interface stays honest and callers get a clear answer instead of a link error.
#include "reckon/core/cuda.h"

namespace reckon {

bool cuda_available() { return false; }
std::string cuda_status() { return "this build has no cuda backend (configure with -DRECKON_CUDA=ON)"; }

}  // namespace reckon
