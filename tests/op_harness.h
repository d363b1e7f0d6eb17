// The op harness's case table: each op in op_list.h gets one or more cases (inputs + attrs)
// here; tests/test_ops.cpp runs every case through the same checks. An op without a case
// fails the harness, so adding an op to the list means adding its case.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/op_list.h"

namespace reckon::harness {

struct Case {
  std::string op;     // Op::kName
  std::string label;  // what this case exercises
  // Makes the inputs in the given floating dtype (integer inputs keep their own dtype).
  std::function<std::vector<Tensor>(DType, Generator&)> inputs;
  // Runs the op through the dispatcher.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;
  bool differentiable = false;
  std::vector<int> no_grad_inputs;  // floating inputs excluded from the gradient check
  // Bad arguments for this op: each must throw reckon::Error mentioning "[op".
  std::vector<std::function<void()>> bad;
  // False only for `empty`, whose output is uninitialised by definition: the harness then does
  // not require the reference to write every element.
  bool writes_outputs = true;
};

template <class Op>
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> runner(typename Op::Attrs attrs = {}) {
  return [attrs](const std::vector<Tensor>& in) { return call<Op>(in, attrs); };
}

// Random tensor with values in [lo, hi).
inline Tensor rnd(const Shape& s, DType t, Generator& g, double lo = -1.0, double hi = 1.0) {
  Tensor x = Tensor::empty(s, t);
  fill_uniform_(x, lo, hi, g);
  return x;
}

std::vector<Case>& cases();
struct Register {
  explicit Register(Case c) { cases().push_back(std::move(c)); }
};

}  // namespace reckon::harness
