#!/usr/bin/env python3
"""Golden files: reckon's numerics checked against PyTorch.

Writes small safetensors files that the C++ tests read (they never need Python):

  golden/ops/<case>.safetensors     one op call each: inputs, output, a fixed random upstream
                                    gradient and PyTorch's gradient of every floating input
                                    (tests/test_golden.cpp)
  golden/misc/python_written.safetensors
                                    every dtype reckon reads, written by the `safetensors`
                                    package itself, byte for byte (tests/test_safetensors.cpp);
                                    the other files get their header keys sorted afterwards
                                    so that regenerating them gives the same bytes
  golden/models/<model>_step.safetensors
                                    one SGD training step of a zoo model
                                    (tests/test_golden_models.cpp)

Regenerate (from the repository root; needs torch and `pip install safetensors`, and for the
models `pip install --no-deps torchvision pillow`, see scripts/torch_models.py):

    python3 scripts/make_golden.py            # ops and models (and misc if it is missing)
    python3 scripts/make_golden.py ops misc   # only the groups named

Every case draws its numbers from a generator seeded with the CRC-32 of its own name, so
adding or removing a case never changes the others. Files of a group are deleted before it is
written, so a removed case leaves nothing behind. The numbers depend on PyTorch only in their
last bits (float64 everywhere but the float32 cases), so regenerating with another version
should leave the C++ tests passing; commit the files either way.

Layout of an op file (all names are safetensors tensor names):
  input.<name>        each input as passed to the op (before any in-place update)
  output              the op's output
  grad_output         the upstream gradient given to backward
  grad_input.<name>   PyTorch's gradient of each input that requires grad
  after.<name>        inputs the op updates in place (batch norm running stats), afterwards
metadata: format="reckon-golden-op", version="1", case, op, dtype, inputs (a JSON list of the
input names in call order), args (a JSON object of the op's other arguments). Most cases are
float64 (the reference kernels, compared to ~1e-10); the *_f32 ones reach the fast cpu kernels.

Layout of a model file (batch 4, training mode, cross_entropy mean, SGD lr 0.1 momentum 0.9):
  input, target, logits, loss
  grad.<param>        gradients (every parameter for lenet5, a chosen few for resnet18_cifar)
  updated.<name>      parameters (and batch-norm running stats) after the step, same selection
  grad_norms          float64 L2 norm of every parameter's gradient, in param_order
  init.<name>         lenet5 only: every state_dict entry before the step
  init_sums           resnet18_cifar only: float64 sum of each initial state_dict entry
metadata: format="reckon-golden-model", magic, version, model, weight_init ("stored", or
"hash-v1": see formula_init), batch, lr, momentum, param_order, state_order (PyTorch's
state_dict keys), stored_params.
"""
import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "golden")
OP_FORMAT = "reckon-golden-op"
MODEL_FORMAT = "reckon-golden-model"
VERSION = "1"
f64 = torch.float64
f32 = torch.float32


# ---------------------------------------------------------------------------------------------
# ops
# ---------------------------------------------------------------------------------------------

class Case:
    def __init__(self, name, op, inputs, args, fn, dtype=f64, no_grad=(), after=()):
        self.name, self.op, self.inputs, self.args, self.fn = name, op, inputs, args, fn
        self.dtype, self.no_grad, self.after = dtype, set(no_grad), list(after)


CASES = []


def gen_for(name):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    return g


def randn(g, *shape, dtype=f64, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=f64).mul(scale).to(dtype)


def away_from_zero(g, *shape, dtype=f64):
    """Values in +-[0.5, 1.5): safe divisors and logs of their absolute value."""
    u = torch.rand(*shape, generator=g, dtype=f64) + 0.5
    s = torch.randint(0, 2, shape, generator=g).to(f64) * 2 - 1
    return (u * s).to(dtype)


def case(name, op, make_inputs, args, fn, dtype=f64, no_grad=(), after=()):
    """make_inputs(g, dtype) -> list of (name, tensor); fn(dict of tensors, args) -> output."""
    g = gen_for(name)
    CASES.append(Case(name, op, make_inputs(g, dtype), args, fn, dtype, no_grad, after))


def conv_cases():
    def conv(name, x, w, bias, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, dtype=f64):
        def make(g, dt):
            ins = [("x", randn(g, *x, dtype=dt)), ("w", randn(g, *w, dtype=dt, scale=0.5))]
            if bias:
                ins.append(("b", randn(g, w[0], dtype=dt)))
            return ins
        args = {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}
        case(name, "conv2d", make, args,
             lambda t, a: F.conv2d(t["x"], t["w"], t.get("b"), a["stride"], a["padding"], a["dilation"],
                                   a["groups"]), dtype)

    conv("conv2d_basic", (2, 3, 6, 7), (4, 3, 3, 3), True)
    conv("conv2d_stride2_pad1", (2, 3, 8, 7), (5, 3, 3, 3), True, stride=(2, 2), padding=(1, 1))
    conv("conv2d_asym", (1, 2, 7, 6), (3, 2, 3, 2), True, stride=(2, 1), padding=(0, 2))
    conv("conv2d_dilation2", (2, 2, 8, 8), (3, 2, 3, 3), True, padding=(2, 2), dilation=(2, 2))
    conv("conv2d_groups2", (2, 4, 6, 6), (6, 2, 3, 3), True, padding=(1, 1), groups=2)
    conv("conv2d_depthwise", (2, 4, 7, 7), (4, 1, 3, 3), True, stride=(2, 2), padding=(1, 1), groups=4)
    conv("conv2d_depthwise_mult2", (1, 3, 6, 6), (6, 1, 3, 3), False, padding=(1, 1), groups=3)
    conv("conv2d_1x1_nobias", (2, 5, 4, 4), (3, 5, 1, 1), False)
    conv("conv2d_5x5_stride3", (1, 2, 11, 10), (2, 2, 5, 5), True, stride=(3, 3), padding=(2, 1))
    conv("conv2d_f32", (2, 3, 8, 8), (4, 3, 3, 3), True, padding=(1, 1), dtype=f32)
    conv("conv2d_f32_groups_stride", (2, 4, 9, 9), (6, 2, 3, 3), True, stride=(2, 2), padding=(1, 1),
         groups=2, dtype=f32)


def linear_matmul_cases():
    def linear(name, x, out_features, bias, dtype=f64):
        def make(g, dt):
            ins = [("x", randn(g, *x, dtype=dt)), ("w", randn(g, out_features, x[-1], dtype=dt, scale=0.5))]
            if bias:
                ins.append(("b", randn(g, out_features, dtype=dt)))
            return ins
        case(name, "linear", make, {}, lambda t, a: F.linear(t["x"], t["w"], t.get("b")), dtype)

    linear("linear_basic", (3, 5), 4, True)
    linear("linear_nobias", (4, 6), 3, False)
    linear("linear_3d_input", (2, 3, 5), 4, True)
    linear("linear_f32", (4, 7), 5, True, dtype=f32)

    def matmul(name, a_shape, b_shape, trans_a=False, trans_b=False, dtype=f64):
        def make(g, dt):
            return [("a", randn(g, *a_shape, dtype=dt)), ("b", randn(g, *b_shape, dtype=dt))]

        def fn(t, a):
            x = t["a"].transpose(-1, -2) if a["trans_a"] else t["a"]
            y = t["b"].transpose(-1, -2) if a["trans_b"] else t["b"]
            return torch.matmul(x, y)
        case(name, "matmul", make, {"trans_a": trans_a, "trans_b": trans_b}, fn, dtype)

    matmul("matmul_2d", (3, 4), (4, 5))
    matmul("matmul_trans_a", (4, 3), (4, 5), trans_a=True)
    matmul("matmul_trans_b", (3, 4), (5, 4), trans_b=True)
    matmul("matmul_trans_ab", (4, 3), (5, 4), trans_a=True, trans_b=True)
    matmul("matmul_batched", (2, 3, 4), (2, 4, 5))
    matmul("matmul_batched_trans", (2, 4, 3), (2, 5, 4), trans_a=True, trans_b=True)
    matmul("matmul_batched_shared_b", (2, 3, 4), (4, 5))
    matmul("matmul_batched_shared_b_trans", (2, 3, 4), (5, 4), trans_b=True)
    matmul("matmul_4d", (2, 2, 3, 4), (2, 2, 4, 3))
    matmul("matmul_f32", (5, 6), (6, 4), dtype=f32)


def elementwise_cases():
    binary = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
    shapes = {"same": ((2, 3, 4), (2, 3, 4)), "bcast_row": ((2, 3, 4), (4,)),
              "bcast_both": ((2, 1, 4), (3, 1)), "bcast_lead": ((3, 1), (2, 1, 4))}
    for op, f in binary.items():
        for tag, (sa, sb) in shapes.items():
            def make(g, dt, sa=sa, sb=sb, op=op):
                b = away_from_zero(g, *sb, dtype=dt) if op == "div" else randn(g, *sb, dtype=dt)
                return [("a", randn(g, *sa, dtype=dt)), ("b", b)]
            case(f"{op}_{tag}", op, make, {}, lambda t, a, f=f: f(t["a"], t["b"]))

    case("affine", "affine", lambda g, dt: [("x", randn(g, 3, 4, dtype=dt))], {"alpha": -1.75, "beta": 0.5},
         lambda t, a: t["x"] * a["alpha"] + a["beta"])
    case("exp", "exp", lambda g, dt: [("x", randn(g, 3, 4, dtype=dt))], {}, lambda t, a: torch.exp(t["x"]))
    case("log", "log", lambda g, dt: [("x", away_from_zero(g, 3, 4, dtype=dt).abs())], {},
         lambda t, a: torch.log(t["x"]))
    case("square", "square", lambda g, dt: [("x", randn(g, 3, 4, dtype=dt))], {}, lambda t, a: t["x"] * t["x"])

    acts = {
        "relu": (F.relu, {}, 2.0),
        "relu6": (F.relu6, {}, 5.0),  # wide inputs: both kinks are crossed
        "gelu": (F.gelu, {}, 2.0),
        "silu": (F.silu, {}, 2.0),
        "sigmoid": (torch.sigmoid, {}, 3.0),
        "tanh": (torch.tanh, {}, 2.0),
    }
    for op, (f, args, scale) in acts.items():
        case(op, op, lambda g, dt, s=scale: [("x", randn(g, 4, 7, dtype=dt, scale=s))], args,
             lambda t, a, f=f: f(t["x"]))
    case("leaky_relu", "leaky_relu", lambda g, dt: [("x", randn(g, 4, 7, dtype=dt))], {"negative_slope": 0.2},
         lambda t, a: F.leaky_relu(t["x"], a["negative_slope"]))
    for op, f in [("relu", F.relu), ("gelu", F.gelu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh)]:
        case(f"{op}_f32", op, lambda g, dt: [("x", randn(g, 4, 9, dtype=dt, scale=2.0))], {},
             lambda t, a, f=f: f(t["x"]), f32)
    case("add_bcast_both_f32", "add", lambda g, dt: [("a", randn(g, 2, 1, 4, dtype=dt)), ("b", randn(g, 3, 1, dtype=dt))],
         {}, lambda t, a: t["a"] + t["b"], f32)
    case("mul_bcast_row_f32", "mul", lambda g, dt: [("a", randn(g, 2, 3, 4, dtype=dt)), ("b", randn(g, 4, dtype=dt))],
         {}, lambda t, a: t["a"] * t["b"], f32)
    case("leaky_relu_default", "leaky_relu", lambda g, dt: [("x", randn(g, 2, 3, 5, dtype=dt))],
         {"negative_slope": 0.01}, lambda t, a: F.leaky_relu(t["x"], a["negative_slope"]))


def reduction_shape_cases():
    x4 = lambda g, dt: [("x", randn(g, 2, 3, 4, 5, dtype=dt))]
    for name, dims, keep in [("sum_all", [], False), ("sum_dim1", [1], False), ("sum_dims02_keep", [0, 2], True),
                             ("sum_neg_dim", [-1], False), ("sum_dims13", [1, 3], False)]:
        case(name, "sum", x4, {"dims": dims, "keepdim": keep},
             lambda t, a: t["x"].sum(dim=a["dims"] or None, keepdim=a["keepdim"]) if a["dims"] else t["x"].sum())
    case("sum_dims23_f32", "sum", lambda g, dt: [("x", randn(g, 2, 3, 4, 5, dtype=dt))], {"dims": [2, 3], "keepdim": False},
         lambda t, a: t["x"].sum(dim=a["dims"], keepdim=a["keepdim"]), f32)
    for name, dims, keep in [("mean_all", [], False), ("mean_dims23_keep", [2, 3], True),
                             ("mean_neg_dim", [-1], False), ("mean_dim0", [0], False)]:
        case(name, "mean", x4, {"dims": dims, "keepdim": keep},
             lambda t, a: t["x"].mean(dim=a["dims"], keepdim=a["keepdim"]) if a["dims"] else t["x"].mean())

    def cat(name, shapes, dim):
        case(name, "concat", lambda g, dt: [(f"x{i}", randn(g, *s, dtype=dt)) for i, s in enumerate(shapes)],
             {"dim": dim}, lambda t, a: torch.cat([t[f"x{i}"] for i in range(len(shapes))], a["dim"]))
    cat("concat_dim1", [(2, 3, 4), (2, 1, 4), (2, 2, 4)], 1)
    cat("concat_dim0", [(1, 3), (3, 3)], 0)
    cat("concat_neg_dim", [(2, 2, 3), (2, 2, 1)], -1)

    for name, dims in [("permute_nchw_to_nhwc", [0, 2, 3, 1]), ("permute_reverse", [3, 2, 1, 0])]:
        case(name, "permute_contiguous", x4, {"dims": dims}, lambda t, a: t["x"].permute(*a["dims"]).contiguous())
    case("transpose_contiguous", "transpose_contiguous", lambda g, dt: [("x", randn(g, 2, 3, 4, dtype=dt))],
         {"dim0": 0, "dim1": 2}, lambda t, a: t["x"].transpose(a["dim0"], a["dim1"]).contiguous())
    case("reshape", "reshape", x4, {"shape": [6, -1]}, lambda t, a: t["x"].reshape(a["shape"]))
    case("flatten", "flatten", x4, {"start_dim": 1, "end_dim": -1},
         lambda t, a: torch.flatten(t["x"], a["start_dim"], a["end_dim"]))
    case("narrow", "narrow", x4, {"dim": 2, "start": 1, "length": 2},
         lambda t, a: t["x"].narrow(a["dim"], a["start"], a["length"]))
    case("expand", "expand", lambda g, dt: [("x", randn(g, 3, 1, 2, dtype=dt))], {"shape": [2, 3, 4, 2]},
         lambda t, a: t["x"].expand(*a["shape"]))


def pool_cases():
    def pool(name, op, x, kernel, stride=None, padding=(0, 0), ceil_mode=False, count_include_pad=True, dtype=f64):
        args = {"kernel": list(kernel), "stride": list(stride or kernel), "padding": list(padding),
                "ceil_mode": ceil_mode, "count_include_pad": count_include_pad}
        if op == "max_pool2d":
            fn = lambda t, a: F.max_pool2d(t["x"], a["kernel"], a["stride"], a["padding"], ceil_mode=a["ceil_mode"])
        else:
            fn = lambda t, a: F.avg_pool2d(t["x"], a["kernel"], a["stride"], a["padding"], a["ceil_mode"],
                                           a["count_include_pad"])
        case(name, op, lambda g, dt: [("x", randn(g, *x, dtype=dt))], args, fn, dtype)

    pool("max_pool2d_k2", "max_pool2d", (2, 3, 6, 6), (2, 2))
    pool("max_pool2d_k3s2_pad1", "max_pool2d", (2, 2, 7, 7), (3, 3), (2, 2), (1, 1))
    pool("max_pool2d_ceil", "max_pool2d", (1, 2, 7, 8), (3, 3), (2, 2), ceil_mode=True)
    pool("max_pool2d_ceil_pad1", "max_pool2d", (1, 2, 6, 6), (3, 3), (2, 2), (1, 1), ceil_mode=True)
    pool("max_pool2d_rect", "max_pool2d", (2, 1, 7, 6), (3, 2), (2, 1), (1, 0))
    pool("avg_pool2d_k2", "avg_pool2d", (2, 3, 6, 6), (2, 2))
    pool("avg_pool2d_k3s2_pad1", "avg_pool2d", (2, 2, 7, 7), (3, 3), (2, 2), (1, 1))
    pool("avg_pool2d_k3s2_pad1_nopadcount", "avg_pool2d", (2, 2, 7, 7), (3, 3), (2, 2), (1, 1),
         count_include_pad=False)
    pool("avg_pool2d_ceil", "avg_pool2d", (1, 2, 7, 8), (3, 3), (2, 2), ceil_mode=True)
    pool("avg_pool2d_ceil_pad1", "avg_pool2d", (1, 2, 6, 6), (3, 3), (2, 2), (1, 1), ceil_mode=True)
    pool("avg_pool2d_ceil_pad1_nopadcount", "avg_pool2d", (1, 2, 6, 6), (3, 3), (2, 2), (1, 1), ceil_mode=True,
         count_include_pad=False)
    pool("avg_pool2d_rect", "avg_pool2d", (2, 1, 7, 6), (3, 2), (2, 1), (1, 0))
    # float32: the fast cpu kernels
    pool("max_pool2d_k3s2_pad1_f32", "max_pool2d", (2, 3, 9, 9), (3, 3), (2, 2), (1, 1), dtype=f32)
    pool("max_pool2d_ceil_f32", "max_pool2d", (1, 2, 7, 8), (3, 3), (2, 2), ceil_mode=True, dtype=f32)
    pool("avg_pool2d_k2_f32", "avg_pool2d", (2, 3, 6, 6), (2, 2), dtype=f32)
    pool("avg_pool2d_ceil_pad1_nopadcount_f32", "avg_pool2d", (1, 2, 6, 6), (3, 3), (2, 2), (1, 1), ceil_mode=True,
         count_include_pad=False, dtype=f32)

    for name, x, out, dtype in [("adaptive_avg_pool2d_5x7_to_3x4", (2, 2, 5, 7), (3, 4), f64),
                                ("adaptive_avg_pool2d_to_1x1", (2, 3, 4, 5), (1, 1), f64),
                                ("adaptive_avg_pool2d_divisible", (1, 2, 6, 6), (3, 2), f64),
                                ("adaptive_avg_pool2d_upsample", (1, 2, 3, 2), (5, 4), f64),
                                ("adaptive_avg_pool2d_to_1x1_f32", (2, 3, 4, 5), (1, 1), f32),
                                ("adaptive_avg_pool2d_5x7_to_3x4_f32", (2, 2, 5, 7), (3, 4), f32)]:
        case(name, "adaptive_avg_pool2d", lambda g, dt, x=x: [("x", randn(g, *x, dtype=dt))], {"output_size": list(out)},
             lambda t, a: F.adaptive_avg_pool2d(t["x"], a["output_size"]), dtype)


def norm_cases():
    def bn(name, training, momentum=0.1, eps=1e-5, shape=(4, 3, 3, 5), dtype=f64):
        c = shape[1]

        def make(g, dt):
            return [("x", randn(g, *shape, dtype=dt, scale=2.0) + 0.5),
                    ("weight", 1.0 + randn(g, c, dtype=dt, scale=0.2)),
                    ("bias", randn(g, c, dtype=dt, scale=0.2)),
                    ("running_mean", randn(g, c, dtype=dt, scale=0.3)),
                    ("running_var", 0.5 + torch.rand(c, generator=g, dtype=f64).to(dt))]
        case(name, "batch_norm2d", make, {"training": training, "momentum": momentum, "eps": eps},
             lambda t, a: F.batch_norm(t["x"], t["running_mean"], t["running_var"], t["weight"], t["bias"],
                                       a["training"], a["momentum"], a["eps"]),
             dtype, no_grad=("running_mean", "running_var"), after=("running_mean", "running_var"))

    bn("batch_norm2d_train", True)
    bn("batch_norm2d_train_momentum", True, momentum=0.3, eps=1e-3, shape=(2, 4, 3, 3))
    bn("batch_norm2d_eval", False)
    bn("batch_norm2d_train_f32", True, shape=(4, 5, 4, 4), dtype=f32)
    bn("batch_norm2d_eval_f32", False, shape=(2, 5, 3, 3), dtype=f32)

    def lrn(name, shape, size, alpha, beta, k, dtype=f64):
        case(name, "local_response_norm", lambda g, dt: [("x", randn(g, *shape, dtype=dt, scale=2.0))],
             {"size": size, "alpha": alpha, "beta": beta, "k": k},
             lambda t, a: F.local_response_norm(t["x"], a["size"], a["alpha"], a["beta"], a["k"]), dtype)
    lrn("local_response_norm_size3", (2, 5, 3, 3), 3, 0.1, 0.75, 1.0)
    lrn("local_response_norm_size2_even", (1, 4, 2, 3), 2, 0.2, 0.5, 2.0)
    lrn("local_response_norm_alexnet", (2, 7, 2, 2), 5, 1e-4, 0.75, 2.0)
    lrn("local_response_norm_alexnet_f32", (2, 7, 3, 3), 5, 1e-4, 0.75, 2.0, dtype=f32)


def softmax_loss_cases():
    for op, f in [("softmax", F.softmax), ("log_softmax", F.log_softmax)]:
        for tag, shape, dim, dtype in [("dim1", (3, 5), 1, f64), ("dim0_3d", (3, 2, 4), 0, f64),
                                       ("neg_dim", (2, 3, 4), -1, f64), ("dim1_f32", (4, 10), 1, f32)]:
            case(f"{op}_{tag}", op, lambda g, dt, s=shape: [("x", randn(g, *s, dtype=dt, scale=2.0))], {"dim": dim},
                 lambda t, a, f=f: f(t["x"], dim=a["dim"]), dtype)

    def targets(g, n, c, ignore=None, n_ignored=0):
        t = torch.randint(0, c, (n,), generator=g, dtype=torch.int64)
        if n_ignored:
            t[1:1 + n_ignored] = ignore
        return t

    def ce(name, reduction="mean", label_smoothing=0.0, ignore_index=-100, n_ignored=0, n=6, c=4, dtype=f64):
        def make(g, dt):
            return [("logits", randn(g, n, c, dtype=dt, scale=2.0)),
                    ("target", targets(g, n, c, ignore_index, n_ignored))]
        case(name, "cross_entropy", make,
             {"reduction": reduction, "label_smoothing": label_smoothing, "ignore_index": ignore_index},
             lambda t, a: F.cross_entropy(t["logits"], t["target"], reduction=a["reduction"],
                                          label_smoothing=a["label_smoothing"], ignore_index=a["ignore_index"]),
             dtype)
    ce("cross_entropy_mean")
    ce("cross_entropy_sum", "sum")
    ce("cross_entropy_none", "none")
    ce("cross_entropy_label_smoothing", label_smoothing=0.1)
    ce("cross_entropy_label_smoothing_sum", "sum", label_smoothing=0.2)
    ce("cross_entropy_label_smoothing_none", "none", label_smoothing=0.1)
    ce("cross_entropy_ignore_default", n_ignored=2)
    ce("cross_entropy_ignore_index2", ignore_index=2, n_ignored=2)
    ce("cross_entropy_ignore_smoothing", ignore_index=1, n_ignored=2, label_smoothing=0.1)
    ce("cross_entropy_ignore_smoothing_sum", "sum", ignore_index=1, n_ignored=2, label_smoothing=0.1)
    ce("cross_entropy_mean_f32", n=8, c=10, dtype=f32)
    ce("cross_entropy_label_smoothing_f32", label_smoothing=0.1, n=8, c=10, dtype=f32)

    def nll(name, reduction="mean", ignore_index=-100, n_ignored=0, n=5, c=3):
        def make(g, dt):
            return [("logp", torch.log_softmax(randn(g, n, c, dtype=dt, scale=2.0), 1)),
                    ("target", targets(g, n, c, ignore_index, n_ignored))]
        case(name, "nll_loss", make, {"reduction": reduction, "ignore_index": ignore_index},
             lambda t, a: F.nll_loss(t["logp"], t["target"], reduction=a["reduction"], ignore_index=a["ignore_index"]))
    nll("nll_loss_mean")
    nll("nll_loss_sum", "sum")
    nll("nll_loss_none", "none")
    nll("nll_loss_ignore", ignore_index=0, n_ignored=2)

    for red in ["mean", "sum", "none"]:
        case(f"mse_loss_{red}", "mse_loss",
             lambda g, dt: [("a", randn(g, 3, 4, dtype=dt)), ("b", randn(g, 3, 4, dtype=dt))],
             {"reduction": red}, lambda t, a: F.mse_loss(t["a"], t["b"], reduction=a["reduction"]))


def run_case(c):
    g = gen_for(c.name + "/grad")
    originals = [(k, v.clone()) for k, v in c.inputs]
    live = {k: v.clone() for k, v in c.inputs}
    for k, v in live.items():
        if v.is_floating_point() and k not in c.no_grad:
            v.requires_grad_(True)
    out = c.fn(live, c.args)
    grad_out = torch.randn(out.shape, generator=g, dtype=f64).to(out.dtype)
    out.backward(grad_out)
    t = {}
    for k, v in originals:
        t["input." + k] = v
    t["output"] = out.detach()
    t["grad_output"] = grad_out
    for k, v in live.items():
        if v.requires_grad:
            assert v.grad is not None, f"{c.name}: no gradient reached {k}"
            t["grad_input." + k] = v.grad
    for k in c.after:
        t["after." + k] = live[k].detach()
    meta = {"format": OP_FORMAT, "version": VERSION, "case": c.name, "op": c.op,
            "dtype": str(c.dtype).replace("torch.", ""), "inputs": json.dumps([k for k, _ in c.inputs]),
            "args": json.dumps(c.args, sort_keys=True)}
    return {k: v.detach().contiguous().clone() for k, v in t.items()}, meta


def write_ops():
    CASES.clear()
    conv_cases()
    linear_matmul_cases()
    elementwise_cases()
    reduction_shape_cases()
    pool_cases()
    norm_cases()
    softmax_loss_cases()
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    out_dir = os.path.join(GOLDEN, "ops")
    clear_dir(out_dir)
    total = 0
    for c in CASES:
        tensors, meta = run_case(c)
        path = os.path.join(out_dir, c.name + ".safetensors")
        save_file(tensors, path, meta)
        canonicalize(path)
        total += os.path.getsize(path)
    print(f"golden/ops: {len(CASES)} files, {total / 1024:.1f} KiB")


# ---------------------------------------------------------------------------------------------
# misc: a file written by the safetensors package, for the reader's interop test
# ---------------------------------------------------------------------------------------------

def write_misc():
    out_dir = os.path.join(GOLDEN, "misc")
    clear_dir(out_dir)
    # Values are exact in their dtype; tests/test_safetensors.cpp spells the same ones.
    t = {
        "f32": (torch.arange(6, dtype=f32).reshape(2, 3) * 0.5 - 1.0),
        "f64": torch.arange(4, dtype=f64) / 3.0,
        "bf16": torch.tensor([1.0, -2.5, 0.15625, 256.0, -0.0078125], dtype=torch.bfloat16),
        "f16": torch.tensor([0.5, -1.25, 65504.0, 2.0 ** -14], dtype=torch.float16),
        "i8": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 200, 255], dtype=torch.uint8),
        "i32": torch.tensor([-2 ** 31, 0, 2 ** 31 - 1], dtype=torch.int32),
        "i64": torch.tensor([-2 ** 63, 1, 2 ** 62 + 1], dtype=torch.int64),
        "scalar": torch.tensor(3.5, dtype=f32),
        "empty": torch.zeros(0, 3, dtype=f32),
        "nested.name/with.dots": torch.tensor([[7]], dtype=torch.int32),
    }
    meta = {"written_by": "safetensors (python)", "purpose": "reckon interop test", "unicode": "\u03bc\u2713"}
    path = os.path.join(out_dir, "python_written.safetensors")
    save_file(t, path, meta)
    os.chmod(path, 0o644)
    print(f"golden/misc: {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------------
# models: one SGD step
# ---------------------------------------------------------------------------------------------

MODEL_BATCH = 4
MODEL_LR = 0.1
MODEL_MOMENTUM = 0.9
# resnet18_cifar is too large to store (45 MB of f32 weights): its weights come from a formula
# that tests/test_golden_models.cpp computes the same way, and only these parameters' gradients
# and updated values are stored (with the norm of every parameter's gradient).
RESNET_CHOSEN = ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.bn1.weight", "layer2.0.bn2.weight",
                 "layer3.0.downsample.1.bias", "layer4.1.bn2.weight", "layer4.1.bn2.bias", "fc.weight", "fc.bias"]
RESNET_CHOSEN_BUFFERS = ["bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_mean",
                         "layer4.1.bn2.running_var"]


def formula_init(index, name, shape):
    """The 'hash-v1' initial weights: pseudo-random numbers from a formula simple enough to
    compute the same way in C++ (tests/test_golden_models.cpp). For entry k of the state_dict
    (PyTorch's order) and flat index i within it:
      u = splitmix64((k << 32) + i) >> 11, as a double times 2^-53, in [0, 1); r = 2u - 1
      running_mean: 0; running_var: 1; num_batches_tracked: 0
      tensors of 2+ dims: sqrt(6 / fan_in) * r, fan_in = numel / shape[0] (Kaiming uniform)
      1-dim '*.weight':   1 + 0.1 * r
      1-dim '*.bias':     0.1 * r
    computed in float64 (a * r, then + c, each rounded once) and rounded to float32.
    (A smooth formula such as sin(0.37 i + k) makes the weights so correlated that batch norm
    divides by near-zero variances and float32 results lose their digits.)"""
    n = math.prod(shape)
    if name.endswith("running_mean"):
        return torch.zeros(shape, dtype=f32)
    if name.endswith("running_var"):
        return torch.ones(shape, dtype=f32)
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if len(shape) >= 2:
        a, c = math.sqrt(6.0 / (n // shape[0])), 0.0
    elif name.endswith("weight"):
        a, c = 0.1, 1.0
    else:
        a, c = 0.1, 0.0
    with np.errstate(over="ignore"):
        z = (np.uint64(index) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    r = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53 * 2.0 - 1.0
    return torch.from_numpy(a * r + c).to(f32).reshape(shape)


def model_step(name, store_weights, chosen=None, chosen_buffers=()):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import torch_models
    torch.manual_seed(0)
    net = torch_models.build(name)
    sd = net.state_dict()
    if store_weights:
        g = gen_for(name + "/weights")
        init = {}
        for k, v in sd.items():
            if k.endswith("running_var"):
                init[k] = torch.ones_like(v)
            elif k.endswith("running_mean") or k.endswith("num_batches_tracked"):
                init[k] = torch.zeros_like(v)
            elif v.dim() >= 2:
                fan_in = v.numel() // v.shape[0]
                init[k] = (torch.rand(v.shape, generator=g, dtype=f64) * 2 - 1).mul(1 / math.sqrt(fan_in)).to(f32)
            else:
                init[k] = (torch.rand(v.shape, generator=g, dtype=f64) * 0.2 - 0.1).to(f32)
        weight_init = "stored"
    else:
        init = {k: formula_init(i, k, tuple(v.shape)) for i, (k, v) in enumerate(sd.items())}
        weight_init = "hash-v1"
    net.load_state_dict(init)
    net.train()
    g = gen_for(name + "/data")
    c, h, w = torch_models.input_shape(name)
    num_classes = torch_models.DEFAULTS[name][0]
    x = torch.randn(MODEL_BATCH, c, h, w, generator=g, dtype=f64).to(f32)
    target = torch.randint(0, num_classes, (MODEL_BATCH,), generator=g, dtype=torch.int64)
    opt = torch.optim.SGD(net.parameters(), lr=MODEL_LR, momentum=MODEL_MOMENTUM)
    opt.zero_grad()
    logits = net(x)
    loss = F.cross_entropy(logits, target)
    loss.backward()
    params = dict(net.named_parameters())
    grads = {k: p.grad.detach().clone() for k, p in params.items()}
    opt.step()
    after = net.state_dict()

    t = {"input": x, "target": target, "logits": logits.detach(), "loss": loss.detach()}
    keep = list(params) if chosen is None else chosen
    for k in keep:
        t["grad." + k] = grads[k]
        t["updated." + k] = after[k]
    bufs = [k for k in after if k not in params and not k.endswith("num_batches_tracked")]
    for k in (bufs if chosen is None else chosen_buffers):
        t["updated." + k] = after[k]
    if store_weights:
        for k, v in init.items():
            t["init." + k] = v
    else:  # the sum of each initial tensor: a failure can tell a wrong formula from wrong math
        t["init_sums"] = torch.stack([init[k].to(f64).sum() for k in sd])
    order = list(params)
    t["grad_norms"] = torch.stack([grads[k].to(f64).norm() for k in order])
    meta = {"format": MODEL_FORMAT, "magic": "20260517", "version": VERSION, "model": name,
            "weight_init": weight_init, "batch": str(MODEL_BATCH), "lr": repr(MODEL_LR),
            "momentum": repr(MODEL_MOMENTUM), "loss": "cross_entropy mean", "train": "true",
            "param_order": json.dumps(order), "state_order": json.dumps(list(sd.keys())),
            "stored_params": json.dumps(keep)}
    t = {k: v.detach().contiguous().clone() for k, v in t.items()}
    path = os.path.join(GOLDEN, "models", f"{name}_step.safetensors")
    save_file(t, path, meta)
    canonicalize(path)
    print(f"golden/models/{name}_step: {os.path.getsize(path) / 1024:.1f} KiB, loss {loss.item():.6f}")


def write_models():
    clear_dir(os.path.join(GOLDEN, "models"))
    model_step("lenet5", store_weights=True)
    model_step("resnet18_cifar", store_weights=False, chosen=RESNET_CHOSEN, chosen_buffers=RESNET_CHOSEN_BUFFERS)


# ---------------------------------------------------------------------------------------------

def canonicalize(path):
    """Rewrites the header of a file written by save_file with sorted keys: the package stores
    metadata in a hash map, so its key order (and the file's bytes) would change on every run."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.dumps(json.loads(raw[8:8 + n]), separators=(",", ":"), sort_keys=True).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + raw[8 + n:])
    os.chmod(path, 0o644)


def clear_dir(d):
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.endswith(".safetensors"):
            os.remove(os.path.join(d, f))


def main(argv):
    # misc is rewritten only when asked for or missing: the package orders its metadata at
    # random, so each run would change the committed bytes of a file that never changes.
    misc_missing = not os.path.exists(os.path.join(GOLDEN, "misc", "python_written.safetensors"))
    groups = argv or (["ops", "misc", "models"] if misc_missing else ["ops", "models"])
    torch.set_num_threads(1)  # the same summation order on every machine
    for grp in groups:
        {"ops": write_ops, "misc": write_misc, "models": write_models}[grp]()


if __name__ == "__main__":
    main(sys.argv[1:])
