"""Writes golden/param_counts.json: for every zoo model (scripts/torch_models.py) at its default
config, the parameter count, the ordered parameter names and shapes, the buffers, the
state_dict keys in PyTorch's order, the logits shape and the multiply-accumulates of its conv
and linear layers for one image of the default input. A few non-default configs
(num_classes, in_channels) are listed under "variants" with their counts only.
tests/test_nn.cpp compares reckon's zoo against this file.

    python3 scripts/make_param_counts.py        # from the repository root
"""
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "golden", "param_counts.json")

VARIANTS = [  # (name, num_classes, in_channels)
    ("tinycnn", 100, 3),
    ("lenet5", 26, 1),
    ("alexnet", 10, 1),
    ("resnet18", 10, 1),
    ("resnet50", 100, 3),
    ("vgg11", 10, 1),
    ("mobilenet_v2", 10, 1),
    ("resnet18_cifar", 100, 3),
]


def conv_linear_macs(model, shape):
    """MACs of Conv2d and Linear layers for one input of shape (C, H, W)."""
    total = [0]

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            k = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
            total[0] += out.numel() * k
        else:
            total[0] += out.numel() * mod.in_features

    hs = [m.register_forward_hook(hook) for m in model.modules()
          if isinstance(m, (nn.Conv2d, nn.Linear))]
    model.eval()
    with torch.no_grad():
        y = model(torch.zeros(1, *shape))
    for h in hs:
        h.remove()
    return total[0], list(y.shape)


def describe(name):
    m = torch_models.build(name)
    k, c, _ = torch_models.DEFAULTS[name]
    shape = torch_models.input_shape(name)
    macs, out_shape = conv_linear_macs(m, shape)
    return {
        "num_classes": k,
        "in_channels": c,
        "input_shape": list(shape),
        "output_shape": out_shape,
        "num_parameters": sum(p.numel() for p in m.parameters()),
        "conv_linear_macs": macs,
        "parameters": [[n, list(p.shape)] for n, p in m.named_parameters()],
        "buffers": [[n, list(b.shape)] for n, b in m.named_buffers()],
        "state_dict": list(m.state_dict().keys()),
    }


def dump(doc):
    """JSON with one parameter per line (readable diffs)."""
    lines = ["{", f' "torch_version": {json.dumps(doc["torch_version"])},', ' "models": {']
    names = list(doc["models"])
    for i, name in enumerate(names):
        d = doc["models"][name]
        lines.append(f"  {json.dumps(name)}: {{")
        items = list(d.items())
        for j, (key, val) in enumerate(items):
            comma = "," if j + 1 < len(items) else ""
            if isinstance(val, list) and val and isinstance(val[0], (list, str)):
                lines.append(f"   {json.dumps(key)}: [")
                lines += [f"    {json.dumps(v)}" + ("," if q + 1 < len(val) else "")
                          for q, v in enumerate(val)]
                lines.append("   ]" + comma)
            else:
                lines.append(f"   {json.dumps(key)}: {json.dumps(val)}{comma}")
        lines.append("  }" + ("," if i + 1 < len(names) else ""))
    lines.append(" },")
    lines.append(' "variants": [')
    lines += [f"  {json.dumps(v)}" + ("," if q + 1 < len(doc["variants"]) else "")
              for q, v in enumerate(doc["variants"])]
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    torch.manual_seed(0)
    doc = {"torch_version": torch.__version__, "models": {}, "variants": []}
    for name in torch_models.MODELS:
        doc["models"][name] = describe(name)
        print(f"{name:16s} {doc['models'][name]['num_parameters']:>12,d} params  "
              f"{doc['models'][name]['conv_linear_macs']:>15,d} MACs")
    for name, k, c in VARIANTS:
        m = torch_models.build(name, num_classes=k, in_channels=c)
        doc["variants"].append({"model": name, "num_classes": k, "in_channels": c,
                                "num_parameters": sum(p.numel() for p in m.parameters())})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    text = dump(doc)
    json.loads(text)  # the hand-made layout must still be JSON
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
