// The optimizers' updates and the loss scaler's unscale as ops: the parameters, gradients and
// state are inputs, the parameters and state are written in place (outputs alias them), and
// each update declares its cost, so the ledger times the optimizer like any other op and a
// captured training step replays it. The arithmetic is PyTorch's single-tensor path, in f32
// (optim/optim.h states the formulas); the scalars that change from step to step (Adam's bias
// corrections, the learning rate) are attributes of the call.
#pragma once
#include "reckon/ops/op.h"

namespace reckon {

struct SgdAttrs {
  double lr = 0.01, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer was just created: buf = g (PyTorch's first step)
  RK_FIELDS(lr, weight_decay, momentum, dampening, nesterov, first)
};

// in = (p, g, buf or undefined), f32, same shape, dense -> (p) or (p, buf), in place:
//   d = g + wd p; with momentum: buf = first ? d : momentum buf + (1 - dampening) d,
//   d = nesterov ? d + momentum buf : buf; p -= lr d.
struct SgdUpdate {
  static constexpr std::string_view kName = "sgd_update";
  static constexpr std::string_view kNotExportable = "an optimizer's update";
  static constexpr std::string_view kNoGradient = "an optimizer's update";
  static constexpr OpClass kClass = OpClass::update;
  static int alias_of(int out, const SgdAttrs&) { return out == 0 ? 0 : out == 1 ? 2 : -1; }
  RK_OP_DECLS(SgdAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

struct AdamAttrs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = false;  // AdamW: p *= 1 - lr wd before the update (else g += wd p)
  int64_t step = 1;        // this update's step count t (bias corrections 1 - beta^t)
  RK_FIELDS(lr, beta1, beta2, eps, weight_decay, decoupled, step)
};

// in = (p, g, m, v), f32, same shape, dense -> (p, m, v), in place:
//   m += (1 - b1) (d - m); v = b2 v + (1 - b2) d^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamUpdate {
  static constexpr std::string_view kName = "adam_update";
  static constexpr std::string_view kNotExportable = "an optimizer's update";
  static constexpr std::string_view kNoGradient = "an optimizer's update";
  static constexpr OpClass kClass = OpClass::update;
  static int alias_of(int out, const AdamAttrs&) { return out == 0 ? 0 : out == 1 ? 2 : out == 2 ? 3 : -1; }
  RK_OP_DECLS(AdamAttrs);
  RK_OP_REF;
  RK_OP_CPU;
};

// torch's _amp_foreach_non_finite_check_and_unscale_ on one gradient:
// in = (g f32, found_inf f32 scalar) -> (g, found_inf), in place: g *= inv_scale (every element,
// finite or not); found_inf = 1 if any element of g was inf or NaN (else it keeps its value).
struct UnscaleGrad {
  static constexpr std::string_view kName = "unscale_grad_";
  static constexpr std::string_view kNotExportable = "the loss scaler's unscale";
  static constexpr std::string_view kNoGradient = "the loss scaler's unscale";
  static constexpr OpClass kClass = OpClass::write;
  static constexpr bool kTakesStrided = true;
  struct A {
    double inv_scale = 1.0;  // applied as a float (torch: float(1 / double(scale)))
    RK_FIELDS(inv_scale)
  };
  static int alias_of(int out, const A&) { return out < 2 ? out : -1; }
  RK_OP_DECLS(A);
  RK_OP_REF;
  RK_OP_CPU;
};

}  // namespace reckon

#define RK_UPDATE_OPS(X) X(SgdUpdate) X(AdamUpdate) X(UnscaleGrad)
