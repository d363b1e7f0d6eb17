// Must not compile with the ops layer's include tree: ops/ may include core/ and ops/ only, and
// train/ is above it. CMakeLists.txt checks the compiler names the missing header.
#include "reckon/ops/op.h"
#include "reckon/train/trainer.h"
