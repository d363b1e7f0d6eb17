// The inference engine's graph passes. Each is a small function over a program (a forward
// graph and its constants) that rewrites it and returns how many rewrites it made; each has a
// name the ledger prints, and each is checked on its own: a program's outputs with and without
// it agree (tests/test_engine.cpp). They run in this order:
//   fold_constants        nodes whose inputs are all constants run once, now; their outputs
//                         become constants
//   remove_identities     eval-mode dropout, casts to the same dtype, reshapes to the same shape
//   fold_batch_norm       an eval-mode batch norm after a conv or linear layer (its only reader)
//                         goes into that layer's weight and bias (computed in double)
//   fuse_elementwise      x*sigmoid(x) -> silu, x*clamp(x/6+1/2, 0, 1) -> hardswish; chains of
//                         elementwise ops -> one elementwise_fused loop
//   fuse_post_ops         conv/linear + (activations)* + the residual add + (activations)* ->
//                         one conv2d_fused / linear_fused (oneDNN post-ops)
//   fuse_qdq              a QDQ-format int8 model (DequantizeLinear -> float op -> QuantizeLinear):
//                         each pattern -> the int8 op computing it (conv2d_int8, linear_int8,
//                         pool2d_int8, add_int8); fold_constants leaves a dequantize of a constant
//                         for it, and it folds those it does not fuse (fuse_qdq.cpp)
//   eliminate_dead_values nodes nothing reads, and the values only they read
// On a program without data (meta) they rewrite the structure all the same: folded constants
// are meta tensors of the right shapes.
// Not here: layouts and memory (engine.h chooses them when it compiles a program).
#pragma once
#include <string>
#include <vector>

#include "reckon/engine/program.h"

namespace reckon::engine {

// What a pass changed: rewrites, and the graph's nodes, bytes moved (read + written, as the
// ops' costs declare them) and FLOPs (2 x MACs + other) before and after.
struct PassReport {
  std::string name;
  int rewrites = 0;
  int nodes_before = 0, nodes_after = 0;
  int64_t bytes_before = 0, bytes_after = 0;
  int64_t flops_before = 0, flops_after = 0;
};

int fold_constants(Program& p);
int remove_identities(Program& p);
int fold_batch_norm(Program& p);
int fuse_elementwise(Program& p);
int fuse_post_ops(Program& p);
int fuse_qdq(Program& p);
int eliminate_dead_values(Program& p);

struct PassInfo {
  const char* name;
  int (*run)(Program&);
};
// Every pass, in the order run_passes runs them.
const std::vector<PassInfo>& all_passes();
// The names of all_passes().
std::vector<std::string> pass_names();
// Runs the named passes (all of them when `names` holds "all"), in all_passes() order, and
// reports each. Throws naming an unknown pass and the known ones.
std::vector<PassReport> run_passes(Program& p, const std::vector<std::string>& names = {"all"});

}  // namespace reckon::engine
