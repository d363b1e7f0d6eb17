// Recomputation (activation checkpointing): a block's forward runs without keeping anything
// for backward, and runs again inside backward to rebuild what its own backward needs.
// The memory saved and the MACs paid show in the ledger by themselves: the block's saved
// tensors are never allocated during the forward (only the block's input is kept), and the
// second forward's ops are reported with OpRecord.recompute = true, backward = false.
// Not here: which blocks to recompute (nn/recompute.h) and saving the module's training mode
// (nn::Module does that); this file knows tensors and ops only.
#pragma once
#include <functional>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

// A block: one tensor in, one tensor out.
using BlockFn = std::function<Tensor(const Tensor&)>;

// Runs fn(x) with grad off and returns its result behind one autograd node ("checkpoint")
// whose only edge is x's gradient edge. When backward reaches the node, it runs fn again on a
// detached copy of x with grad on, then backward through that nested graph with the incoming
// gradient: parameters reached by fn accumulate into their .grad there, and the gradient of x
// is what reaches the copy. The nested graph's saved tensors are freed as it runs.
//
// requires: fn computes the same thing when run again given the same x, the same default
//           generator state (restored before the rerun, so dropout draws the same mask) and
//           the same autocast state (saved at the forward, set again for the rerun); fn must
//           not write into x.
//           params: tensors fn reads besides x that may need gradients (a module's
//           parameters). They only decide whether a node is needed: with grad enabled and x
//           or one of params requiring grad. Otherwise (or while recomputing(): blocks inside
//           a recomputed block are not checkpointed again) fn(x) runs plainly.
// ensures:  the result equals fn(x); x is kept (as an activation) until the node has run.
//           While the rerun lives: in_backward() is false, recomputing() is true, grad is on,
//           current_scope() is the scope the forward ran in (module ScopeGuards inside fn add
//           to it as in the forward). The nested backward's ops are backward ops as usual.
//           After the node (also when fn throws): the default generator's state, the scope
//           stack, grad mode, recomputing() and the autocast state are as before.
//           Backward through the node a second time needs retain_graph on the first.
// Known limit: if backward is called inside a ScopeGuard whose path is not a prefix of the
// forward's scope, the rerun's ops get that outer path in front of their own.
Tensor checkpoint(BlockFn fn, const Tensor& x, const std::vector<Tensor>& params = {});

}  // namespace reckon
