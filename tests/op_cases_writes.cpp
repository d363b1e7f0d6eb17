// Harness cases for the writes (ops/writes.h) and the optimizer updates and unscale
// (ops/update.h). Their tensors are f32 whatever dtype the harness asks for (the updates are
// defined on f32 master weights); the in-place outputs are the inputs themselves.
#include <cmath>

#include "op_harness.h"
#include "reckon/ops/functional.h"

namespace reckon::harness {
namespace {
using V = std::vector<Tensor>;

Tensor f32(const Shape& s, Generator& g, double lo = -1.0, double hi = 1.0) { return rnd(s, DType::f32, g, lo, hi); }

Register reg[] = {
    Register(Case{"empty", "3x4 f32", [](DType t, Generator&) { return V{}; }, runner<Empty>({{3, 4}, DType::f32}),
                  false, {}, {[] { call<Empty>({}, {{3, -1}}); }}, false}),
    Register(Case{"full", "3x4 of 2.5", [](DType, Generator&) { return V{}; }, runner<Full>({{3, 4}, DType::f32, Device::cpu, 2.5}),
                  false, {}, {[] { call<Full>({Tensor::zeros({2})}, {{2}}); }}}),
    Register(Case{"full", "f64 scalar", [](DType, Generator&) { return V{}; }, runner<Full>({{}, DType::f64, Device::cpu, -1.0}),
                  false, {}, {}}),
    Register(Case{"fill_", "2x3x5", [](DType t, Generator& g) { return V{rnd({2, 3, 5}, t, g)}; }, runner<FillInplace>({0.75}),
                  false, {}, {[] { call<FillInplace>({Tensor()}, {1.0}); }}}),
    Register(Case{"copy_", "strided source, f64 into f32",
                  [](DType t, Generator& g) { return V{f32({3, 4}, g), transpose(rnd({4, 3}, DType::f64, g), 0, 1)}; },
                  runner<CopyInplace>(), false, {},
                  {[] { call<CopyInplace>({Tensor::zeros({3}), Tensor::zeros({4})}); }}}),
    Register(Case{"add_", "2x3x5", [](DType t, Generator& g) { return V{rnd({2, 3, 5}, t, g), rnd({2, 3, 5}, t, g)}; },
                  runner<AddInplace>(), false, {},
                  {[] { call<AddInplace>({Tensor::zeros({3}), Tensor::zeros({4})}); },
                   [] { call<AddInplace>({Tensor::zeros({3}, DType::i64), Tensor::zeros({3}, DType::i64)}); }}}),
    Register(Case{"add_scalar_", "i64 scalar", [](DType, Generator&) { return V{Tensor::full({}, 7, DType::i64)}; },
                  runner<AddScalarInplace>({1.0}), false, {}, {[] { call<AddScalarInplace>({Tensor()}, {1.0}); }}}),
    Register(Case{"sgd_update", "momentum, weight decay, first step",
                  [](DType, Generator& g) { return V{f32({4, 5}, g), f32({4, 5}, g), f32({4, 5}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .weight_decay = 5e-4, .momentum = 0.9, .first = true}), false, {},
                  {[] { call<SgdUpdate>({Tensor::zeros({3}), Tensor::zeros({4}), Tensor()}, {}); },
                   [] { call<SgdUpdate>({Tensor::zeros({3}), Tensor::zeros({3}), Tensor()}, {.momentum = 0.9}); }}}),
    Register(Case{"sgd_update", "nesterov, dampening",
                  [](DType, Generator& g) { return V{f32({7}, g), f32({7}, g), f32({7}, g)}; },
                  runner<SgdUpdate>({.lr = 0.05, .momentum = 0.9, .dampening = 0.0, .nesterov = true}), false, {}, {}}),
    Register(Case{"sgd_update", "no momentum", [](DType, Generator& g) { return V{f32({6}, g), f32({6}, g), Tensor()}; },
                  runner<SgdUpdate>({.lr = 0.5}), false, {}, {}}),
    // Each variant is its own vector loop (kernels/cpu/update.cpp): lengths with a vector body and a tail.
    Register(Case{"sgd_update", "momentum, dampening, weight decay, later step, 37 values",
                  [](DType, Generator& g) { return V{f32({37}, g), f32({37}, g), f32({37}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .weight_decay = 1e-2, .momentum = 0.8, .dampening = 0.25}), false, {}, {}}),
    Register(Case{"sgd_update", "nesterov, weight decay, first step, 53 values",
                  [](DType, Generator& g) { return V{f32({53}, g), f32({53}, g), f32({53}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .weight_decay = 1e-2, .momentum = 0.9, .nesterov = true, .first = true}), false, {}, {}}),
    Register(Case{"sgd_update", "momentum, later step, 37 values",
                  [](DType, Generator& g) { return V{f32({37}, g), f32({37}, g), f32({37}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .momentum = 0.9}), false, {}, {}}),
    Register(Case{"sgd_update", "nesterov, weight decay, later step, 29 values",
                  [](DType, Generator& g) { return V{f32({29}, g), f32({29}, g), f32({29}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .weight_decay = 1e-2, .momentum = 0.9, .nesterov = true}), false, {}, {}}),
    Register(Case{"sgd_update", "momentum, first step, 23 values",
                  [](DType, Generator& g) { return V{f32({23}, g), f32({23}, g), f32({23}, g)}; },
                  runner<SgdUpdate>({.lr = 0.1, .momentum = 0.9, .first = true}), false, {}, {}}),
    Register(Case{"sgd_update", "weight decay, no momentum, 41 values",
                  [](DType, Generator& g) { return V{f32({41}, g), f32({41}, g), Tensor()}; },
                  runner<SgdUpdate>({.lr = 0.3, .weight_decay = 1e-1}), false, {}, {}}),
    Register(Case{"adam_update", "AdamW, step 3",
                  [](DType, Generator& g) { return V{f32({4, 5}, g), f32({4, 5}, g), f32({4, 5}, g), f32({4, 5}, g, 0.0, 1.0)}; },
                  runner<AdamUpdate>({.lr = 1e-2, .weight_decay = 0.01, .decoupled = true, .step = 3}), false, {},
                  {[] { call<AdamUpdate>({Tensor::zeros({3}), Tensor::zeros({3}), Tensor::zeros({3}), Tensor::zeros({2})}, {}); },
                   [] { call<AdamUpdate>({Tensor::zeros({3}), Tensor::zeros({3}), Tensor::zeros({3}), Tensor::zeros({3})}, {.step = 0}); }}}),
    Register(Case{"adam_update", "Adam with L2, step 1",
                  [](DType, Generator& g) { return V{f32({9}, g), f32({9}, g), f32({9}, g), f32({9}, g, 0.0, 1.0)}; },
                  runner<AdamUpdate>({.lr = 1e-3, .weight_decay = 1e-4, .step = 1}), false, {}, {}}),
    Register(Case{"unscale_grad_", "finite",
                  [](DType, Generator& g) { return V{f32({3, 5}, g, -1e4, 1e4), Tensor::zeros({})}; },
                  runner<UnscaleGrad>({1.0 / 65536.0}), false, {},
                  {[] { call<UnscaleGrad>({Tensor::zeros({3}, DType::f64), Tensor::zeros({})}, {}); },
                   [] { call<UnscaleGrad>({Tensor::zeros({3}), Tensor::zeros({2})}, {}); }}}),
};

}  // namespace
}  // namespace reckon::harness
