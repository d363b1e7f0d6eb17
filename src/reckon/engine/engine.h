// The inference engine: a program (program.h), rewritten by the passes (passes.h), compiled once
// into a list of steps that run with no dispatch, no allocation and no decision left:
//  - layouts chosen once: each convolution, pooling, normalisation and elementwise step is a
//    oneDNN primitive built for the layout its input already has (convolutions choose their
//    blocked formats, and what follows keeps them), weights are reordered into the layout their
//    primitive wants when the engine is built, and a reorder step is placed only where a consumer
//    needs another layout (a flatten, an op with no oneDNN primitive, the output);
//  - a static memory plan: every value's lifetime comes from the step list, values are packed
//    into one arena by offset (greedy by size), an elementwise step or a residual add writes into
//    its input when that input dies there, and each primitive's scratchpad is a buffer of the
//    plan too. The arena's size is known when the engine is built (on the meta device as well:
//    the deployment ledger plans a model it has no weights for), and run() allocates nothing:
//    it binds the caller's input and output and executes the steps.
// A convolution of few channels (a first layer) runs reckon's direct loops on NCHW (kernels/cpu/
// conv_small.h), its scratch a buffer of the arena. Ops without a oneDNN lowering run their own cpu
// (or reference) kernel on plain views of the arena; their kernel workspace, if any, is the one
// allocation a run may make (steps() says which steps are kernels).
// int8 programs (quantize.h, or a QDQ file after the fuse_qdq pass) run their int8 ops as oneDNN's
// int8 primitives in the same plan; add_int8 runs its own kernel over the bytes of any layout.
// Not here: bf16 execution, several inputs or outputs, dynamic shapes (an engine is built for one
// input shape; build one per batch size).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reckon/engine/passes.h"
#include "reckon/engine/program.h"

namespace reckon::engine {

struct EngineOptions {
  std::vector<std::string> passes = {"all"};  // run_passes names; {} runs none
  // false: every value between steps is kept plain (NCHW) and each convolution reorders its input
  // and output as eager mode does (the layout choice's ablation).
  bool blocked_layouts = true;
};

// One step of the compiled program, as the deployment ledger prints it.
struct StepInfo {
  std::string name;       // the layer (module scope) it computes, or what a reorder is for
  std::string op;         // "conv2d+bias+relu", "max_pool2d", "reorder nChw8c -> nchw"
  std::string kind;       // "onednn" (a primitive), "direct" (a kernel of reckon's own, its scratch planned
                          // in the arena), "kernel" (an op's own kernel), "reorder", "view"
  int node = -1;          // the program node it runs (-1: a reorder or the output copy)
  Cost cost;              // the op's declared cost (reorders: bytes only)
  int64_t bytes_moved = 0;    // bytes its inputs, weights and outputs take in the layouts they are stored in
  int64_t weight_bytes = 0;   // of those, constants (weights, biases, statistics)
  int64_t out_offset = -1;    // the arena offset of its output (-1: outside the arena)
  int64_t out_bytes = 0;
  int64_t scratch_bytes = 0;  // its primitive's scratchpad (a buffer of the arena)
  std::string impl;           // the implementation oneDNN chose, or the kernel that runs
  double lane_use = 1.0;      // the share of the vector lanes it fills (KernelCtx::lane_use; reckon's direct loops)
  bool int8_in_f32 = false;   // an int8 product computed in f32 arithmetic (exact integers: reckon's direct loops of a
                              // first layer), which the deployment ledger times at the fp32 peak, not the int8 one
  // A convolution's width (the fewer of its output channels and input channels per group) and
  // output pixels (H x W), which the deployment ledger's time classes it by; 0 for other steps.
  int64_t conv_width = 0, conv_out_hw = 0;
  // A convolution's taps that read the input rather than its padding, as a share of the taps its
  // declared MACs count (a 3x3 layer on a 1x1 input reads 1 of 9), and the share of its kernel's
  // taps that some output reads (there: the centre's weights alone); 1 for other steps. oneDNN's
  // direct kernels skip the rest, reckon's own (kind "direct"), Winograd and gemm compute it: the
  // deployment ledger times each so (engine_step_time).
  double conv_tap_share = 1.0, conv_weight_share = 1.0;
  bool in_place = false;      // writes its output over an input that dies here
  bool reorder_between_convs = false;  // a reorder whose input a convolution made and a convolution reads
};

class Engine {
 public:
  // Runs the passes, chooses layouts, plans the arena and (with data) allocates it and reorders
  // the weights. requires: p has one input and one f32 output.
  explicit Engine(Program p, const EngineOptions& o = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // y = the program's output for x. x: input_shape(), f32, dense; y: output_shape(), f32, dense.
  // Allocates nothing (see above). Throws naming the argument on a shape or dtype mismatch, or
  // when the program has no data.
  void run(const Tensor& x, Tensor& y);
  Tensor run(const Tensor& x);  // allocates y
  // As run(x, y), timing each step: seconds per step, in steps() order.
  std::vector<double> run_timed(const Tensor& x, Tensor& y);

  const std::vector<StepInfo>& steps() const;
  const std::vector<PassReport>& passes() const;
  const Program& program() const;  // after the passes
  const Shape& input_shape() const;
  const Shape& output_shape() const;
  int64_t arena_bytes() const;      // the plan's arena (values and scratchpads)
  int64_t weight_bytes() const;     // constants in the layouts their steps read
  int64_t values_bytes() const;     // sum of every value's bytes, were nothing shared (what the plan saves against)
  int reorders() const;             // reorder steps per run (layout changes; the output copy excluded)
  bool can_run() const;             // the program has data
  bool blocked_layouts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- the memory plan (a pure function, tested on its own) ----
struct Buffer {
  int64_t bytes = 0;
  int first = 0, last = 0;  // steps that write it first and read it last (inclusive)
  int64_t offset = -1;      // set by plan_arena
};
// Gives each buffer an offset so that buffers whose lifetimes overlap never overlap in memory:
// largest first, each at the lowest aligned offset that fits between those already placed.
// Returns the arena's size.
int64_t plan_arena(std::vector<Buffer>& buffers, int64_t align = 64);

}  // namespace reckon::engine
