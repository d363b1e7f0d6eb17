"""Writes golden/ledger/macs.json: for every zoo model (scripts/torch_models.py) at its default
config, the parameter count and the forward multiply-accumulates of one image counted by an
independent, widely used counter: fvcore's FlopCountAnalysis (which, despite its name, counts
one fused multiply-add as one "flop", i.e. MACs). tests/test_ledger.cpp compares reckon's ledger
against this file; the tests need no Python.

Compare like with like: fvcore counts convolutions ("conv"), linear layers ("linear" / "addmm")
and matrix products ("matmul", "bmm"), and a few normalisations and poolings by its own rules
(batch_norm, adaptive_avg_pool2d, ...), and it skips others outright (relu, max_pool2d, add,
dropout, local_response_norm, ...; listed per model under "fvcore_unsupported_ops"). reckon
declares MACs for conv, linear and matmul only and counts the rest as other FLOPs, so the golden
figures the test checks are conv MACs and linear MACs; fvcore's per-operator totals are kept
for reference.

A second count from forward hooks on nn.Conv2d / nn.Linear (out.numel() x fan-in per output)
must agree with fvcore's, so the golden figures rest on two counters.

    pip install fvcore                       # and torch, torchvision (see torch_models.py)
    python3 scripts/make_ledger_golden.py    # from the repository root
"""
import json
import os
import re
import sys
import warnings

import torch
from torch import nn

try:
    from fvcore.nn import FlopCountAnalysis
    import fvcore
except ImportError:  # pragma: no cover - says what to install
    raise SystemExit("fvcore is needed: pip install fvcore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "golden", "ledger", "macs.json")

CONV_KEYS = ("conv",)
LINEAR_KEYS = ("linear", "addmm", "matmul", "bmm", "mm")


def hook_macs(model, shape):
    """Conv and linear MACs for one input from forward hooks (the second counter)."""
    conv, lin = [0], [0]

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            conv[0] += out.numel() * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        else:
            lin[0] += out.numel() * mod.in_features

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    for h in hs:
        h.remove()
    return conv[0], lin[0]


def describe(name):
    m = torch_models.build(name)
    m.eval()
    shape = torch_models.input_shape(name)
    x = torch.zeros(1, *shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fca = FlopCountAnalysis(m, x)
        fca.unsupported_ops_warnings(False)
        fca.uncalled_modules_warnings(False)
        by_op = dict(fca.by_operator())
        total = fca.total()
        unsupported = dict(fca.unsupported_ops())
    conv = sum(v for k, v in by_op.items() if k in CONV_KEYS)
    lin = sum(v for k, v in by_op.items() if k in LINEAR_KEYS)
    hconv, hlin = hook_macs(m, shape)
    if (conv, lin) != (hconv, hlin):
        raise SystemExit(f"{name}: fvcore counts conv {conv} linear {lin}, hooks count conv {hconv} linear {hlin}")
    return {
        "input_shape": list(shape),
        "num_parameters": sum(p.numel() for p in m.parameters()),
        "conv_macs": conv,
        "linear_macs": lin,
        "conv_linear_macs": conv + lin,
        "fvcore_total": total,
        "fvcore_by_operator": {k: by_op[k] for k in sorted(by_op)},
        "fvcore_unsupported_ops": {k: unsupported[k] for k in sorted(unsupported)},
    }


def main():
    doc = {
        "counter": f"fvcore {getattr(fvcore, '__version__', '?')} FlopCountAnalysis (1 fused multiply-add = 1)",
        "torch_version": torch.__version__,
        "batch": 1,
        "note": "compare conv_macs and linear_macs: fvcore skips or counts by its own rules every other op",
        "models": {},
    }
    for name in torch_models.MODELS:
        d = describe(name)
        doc["models"][name] = d
        print(f"{name:16s} {d['num_parameters']:>12,d} params  conv {d['conv_macs']:>15,d}  "
              f"linear {d['linear_macs']:>12,d} MACs  (fvcore skips: {', '.join(d['fvcore_unsupported_ops']) or '-'})")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    text = json.dumps(doc, indent=1)
    # Lists of numbers (input shapes) on one line.
    text = re.sub(r"\[\s+([-\d.,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    json.loads(text)
    with open(OUT, "w") as f:
        f.write(text + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
