#!/usr/bin/env python3
"""torchvision's CNNs as torch's exporter writes them, for reckon's import tests.

usage: export_torchvision.py OUTDIR [NAME ...]

Writes OUTDIR/NAME.onnx (random weights, eval mode, opset 17, a dynamic batch),
OUTDIR/NAME.x.npy (a batch of 2 random inputs) and OUTDIR/NAME.json (what the test checks). Models that are also
in reckon's zoo are written at the zoo's input size (so their parameter counts and MACs can be
compared); the others at a small input that keeps the test fast. The exporter is torch's
TorchScript-based one (torch.onnx.export with dynamo=False), what most published ONNX CNNs
were written with."""
import json
import os
import sys
import warnings

import numpy as np
import torch
import torchvision.models as tvm

# name -> (constructor, input (C, H, W), the zoo model it equals or None)
MODELS = {
    "alexnet": (lambda: tvm.alexnet(), (3, 224, 224), "alexnet_tv"),
    "vgg11": (lambda: tvm.vgg11(), (3, 224, 224), "vgg11"),
    "vgg16": (lambda: tvm.vgg16(), (3, 224, 224), "vgg16"),
    "resnet18": (lambda: tvm.resnet18(), (3, 224, 224), "resnet18"),
    "resnet50": (lambda: tvm.resnet50(), (3, 224, 224), "resnet50"),
    "mobilenet_v2": (lambda: tvm.mobilenet_v2(), (3, 224, 224), "mobilenet_v2"),
    "squeezenet1_1": (lambda: tvm.squeezenet1_1(), (3, 96, 96), None),
    "googlenet": (lambda: tvm.googlenet(aux_logits=False, init_weights=True), (3, 96, 96), None),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(), (3, 96, 96), None),
    "efficientnet_b0": (lambda: tvm.efficientnet_b0(), (3, 96, 96), None),
    "shufflenet_v2_x1_0": (lambda: tvm.shufflenet_v2_x1_0(), (3, 96, 96), None),
    "densenet121": (lambda: tvm.densenet121(), (3, 64, 64), None),
}


def main(argv):
    out = argv[0]
    names = argv[1:] or list(MODELS)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name in names:
        make, chw, zoo = MODELS[name]
        m = make().eval()
        # BatchNorm's running statistics away from 0 / 1, so a wrong import shows, and every
        # parameter a little off its init: the exporter shares initializers whose values are
        # equal (all the zero biases, all the unit batch-norm scales), which would tie them.
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
            for mod in m.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.running_mean.uniform_(-0.1, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
        x = torch.randn(2, *chw)
        path = os.path.join(out, name + ".onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The zoo's models keep their batch norms (PRESERVE: no folding into the convolutions),
            # so parameter counts compare; the others are folded, as a default export writes them.
            mode = torch.onnx.TrainingMode.PRESERVE if zoo else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(m, x[:1], path, opset_version=17, dynamo=False, training=mode, input_names=["input"],
                              output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        np.save(os.path.join(out, name + ".x.npy"), x.numpy())
        entry = {"name": name, "input": list(chw), "zoo": zoo, "params": sum(p.numel() for p in m.parameters()),
                 "bn_folded": zoo is None, "torch": torch.__version__}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(entry, f, indent=1)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
