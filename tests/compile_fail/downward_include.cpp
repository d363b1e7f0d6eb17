// Compiles with the ops layer's include tree: what ops/ may include (core/, ops/).
#include "reckon/core/tensor.h"
#include "reckon/ops/dispatch.h"
