#!/usr/bin/env python3
"""Writes golden/amp/grad_scaler.json: torch.amp.GradScaler's scale trajectory on scripted
sequences of overflowing steps, which tests/test_grad_scaler.cpp replays through
reckon::optim::GradScaler and compares (scale and skip flags exactly, parameters and unscaled
gradients bit for bit). The tests need no Python.

Each trajectory is a tiny model of three parameters, in optimizer order
  w (4), b (3), h (2)
and a linear loss  loss = sum(w * cw) + sum(b * cb) + sum(h * ch)  whose coefficients c the
script chooses per step, so the scaled gradient of each parameter is exactly c * scale (one
float32 rounding, in torch and in reckon). A step is

    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()

Steps are written as events: "ok" (coefficients drawn uniformly from [-1, 1)), "inf@w",
"-inf@b", "nan@h" (that parameter's element 1 is non-finite), and "big@h" (h's coefficient is
1e34, so its scaled gradient overflows float32 whenever scale > ~34028: the overflow depends on
the scale itself, as in real fp16 training).

The optimizers keep the parameter comparison exact: SGD with lr 0.125 and momentum 0.5 (powers
of two: every product is exact, so a fused multiply-add rounds as the separate operations do);
AdamW's arithmetic has more than one rounding per element, and torch's CPU kernels and reckon's
loops may contract different pairs into fused multiply-adds, so its parameters are compared
within a few ulps (the test says how many).

Recorded per step: the events, the coefficients, the scale used, whether the optimizer step was
skipped, the scale and growth tracker after update(), the first parameter (optimizer order) whose
scaled gradient was non-finite, the gradients after unscaling, and the parameters after the step.
Non-finite numbers are written as the strings "inf", "-inf", "nan" (JSON has no such numbers);
every other number is a float32 value written exactly (Python's shortest repr of its double).

    python3 scripts/make_amp_golden.py    # from the repository root; needs torch
"""
import json
import math
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "golden", "amp", "grad_scaler.json")
FORMAT = "reckon-golden-amp"
VERSION = 1
PARAMS = [("w", 4), ("b", 3), ("h", 2)]


def num(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def nums(t):
    return [num(v) for v in t.detach().reshape(-1).tolist()]


def coefficients(events, gen):
    """The loss coefficients of one step: uniform [-1, 1) float32, then the events applied."""
    c = {n: (torch.rand(k, generator=gen, dtype=torch.float32) * 2 - 1) for n, k in PARAMS}
    for ev in events.split(","):
        if ev == "ok":
            continue
        kind, name = ev.split("@")
        value = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "big": 1e34}[kind]
        c[name][1] = value
    return c


def run(name, scaler_args, opt_args, events, seed):
    gen = torch.Generator().manual_seed(seed)
    params = []
    for pname, k in PARAMS:
        p = torch.nn.Parameter(torch.rand(k, generator=gen, dtype=torch.float32) * 2 - 1)
        params.append((pname, p))
    init = {n: nums(p) for n, p in params}
    plist = [p for _, p in params]
    if opt_args["type"] == "sgd":
        opt = torch.optim.SGD(plist, lr=opt_args["lr"], momentum=opt_args["momentum"], foreach=False)
    else:
        opt = torch.optim.AdamW(plist, lr=opt_args["lr"], weight_decay=opt_args["weight_decay"], foreach=False)
    scaler = torch.amp.GradScaler("cpu", **scaler_args)
    steps = []
    for ev in events:
        c = coefficients(ev, gen)
        scale_used = scaler.get_scale()
        opt.zero_grad(set_to_none=True)
        loss = sum((p * c[n]).sum() for n, p in params)
        scaler.scale(loss).backward()
        overflow = ""
        for n, p in params:  # the scaled gradients, before step() unscales them
            if not torch.isfinite(p.grad).all():
                overflow = n
                break
        before = [p.detach().clone() for p in plist]
        state_before = {k: {s: v.clone() for s, v in st.items()} for k, st in opt.state.items()}
        scaler.step(opt)
        skipped = bool(sum(v.item() for st in scaler._per_optimizer_states.values()
                           for v in st["found_inf_per_device"].values()))
        if skipped:  # torch's own contract, checked here so the golden file cannot lie
            assert all(torch.equal(a, p) for a, p in zip(before, plist))
            assert all(all(torch.equal(v, opt.state[k][s]) for s, v in st.items())
                       for k, st in state_before.items())
        assert skipped == (overflow != "")
        scaler.update()
        steps.append({
            "events": ev,
            "coef": {n: nums(c[n]) for n, _ in PARAMS},
            "scale_used": scale_used,
            "skipped": skipped,
            "overflow_param": overflow,
            "scale": scaler.get_scale(),
            "growth_tracker": scaler._get_growth_tracker(),
            "grad": {n: nums(p.grad) for n, p in params},
            "params": {n: nums(p) for n, p in params},
        })
    sd = scaler.state_dict()
    return {
        "name": name,
        "scaler": scaler_args,
        "optimizer": opt_args,
        "init": init,
        "steps": steps,
        "state_dict": sd,
    }


def expand(spec):
    """'ok*3 inf@w ok' -> ['ok', 'ok', 'ok', 'inf@w', 'ok']"""
    out = []
    for tok in spec.split():
        ev, _, n = tok.partition("*")
        out += [ev] * (int(n) if n else 1)
    return out


TRAJECTORIES = [
    # Default factors, growth every 3 clean steps; scripted infs/NaNs in every parameter, two
    # at once (the first in optimizer order is named), and "big" steps whose overflow depends
    # on the scale: 1e34 * 65536 overflows, 1e34 * 32768 does not.
    ("sgd_momentum",
     {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3},
     {"type": "sgd", "lr": 0.125, "momentum": 0.5},
     "ok*4 inf@w ok*2 nan@b ok*3 -inf@h ok big@h ok*2 big@h big@h ok*3 nan@b,inf@h ok*2 "
     "inf@w,nan@h ok*5 nan@w ok*6", 1),
    # AdamW; a run of overflows pushes the scale below 1 (the warning), then it grows back.
    # Skipped steps must not advance Adam's step count (its bias correction would show it).
    ("adamw_below_one",
     {"init_scale": 4.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2},
     {"type": "adamw", "lr": 0.01, "weight_decay": 0.01},
     "ok*2 inf@w nan@b inf@h -inf@w nan@w ok*3 inf@b ok*4 nan@h ok*5 inf@w ok*6", 2),
    # Factors that are not powers of two (0.3 is not a float32): the scale update is done in
    # double and rounded to float32 as torch's kernel does, and unscaling multiplies by
    # float(1 / double(scale)), which differs from dividing by the scale.
    ("odd_factors",
     {"init_scale": 1000.0, "growth_factor": 3.0, "backoff_factor": 0.3, "growth_interval": 2},
     {"type": "sgd", "lr": 0.125, "momentum": 0.5},
     "ok*5 inf@b ok nan@w ok*4 big@h ok*2 big@h ok big@h ok*3 inf@h,nan@w ok*7 big@h ok*4", 3),
]


def dump(doc):
    """One step per line block: small, readable diffs."""
    lines = ["{"]
    for key in ("format", "version", "torch_version", "note", "params"):
        lines.append(f" {json.dumps(key)}: {json.dumps(doc[key])},")
    lines.append(' "trajectories": [')
    for i, t in enumerate(doc["trajectories"]):
        lines.append("  {")
        for key in ("name", "scaler", "optimizer", "init", "state_dict"):
            lines.append(f"   {json.dumps(key)}: {json.dumps(t[key])},")
        lines.append('   "steps": [')
        for j, s in enumerate(t["steps"]):
            lines.append("    " + json.dumps(s) + ("," if j + 1 < len(t["steps"]) else ""))
        lines.append("   ]")
        lines.append("  }" + ("," if i + 1 < len(doc["trajectories"]) else ""))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "torch_version": torch.__version__,
        "note": "torch.amp.GradScaler('cpu') trajectories; see scripts/make_amp_golden.py",
        "params": [[n, k] for n, k in PARAMS],
        "trajectories": [run(n, s, o, expand(e), seed) for n, s, o, e, seed in TRAJECTORIES],
    }
    text = dump(doc)
    json.loads(text)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    for t in doc["trajectories"]:
        scales = [s["scale"] for s in t["steps"]]
        print(f"{t['name']:16s} {len(t['steps'])} steps, {sum(s['skipped'] for s in t['steps'])} skipped, "
              f"scale min {min(scales):g} max {max(scales):g} final {scales[-1]:g}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
