// The backward engine: runs the graph from the roots in dependency order, sums gradients
// that meet, and releases each node's saved tensors as soon as it has run, so the memory
// timeline of backward is the real one.
#pragma once
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

// requires: roots are defined; grads are empty (then each root must hold one element and
//           gets gradient 1) or one per root with the root's shape.
// ensures:  leaves reached accumulate into .grad; unless retain_graph, saved tensors are freed.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph = false);

}  // namespace reckon
