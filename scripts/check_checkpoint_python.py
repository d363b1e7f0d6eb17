#!/usr/bin/env python3
"""Checks that reckon checkpoints and PyTorch state dicts move both ways through safetensors.

    python3 scripts/check_checkpoint_python.py [--reckon build/reckon] [--dir /tmp/x]

1. reckon trains lenet5 for one epoch on Fashion-MNIST (--normalize none) and writes
   last.safetensors;
2. Python's `safetensors` reads it; the model tensors (every key not starting with
   "optimizer.") load into the PyTorch twin (scripts/torch_models.py) with a strict
   load_state_dict; the optimizer tensors ("optimizer.state.<i>.momentum_buffer") load into
   torch.optim.SGD.load_state_dict; the metadata parses (config JSON, step, rng_state);
3. the PyTorch model evaluated on the Fashion-MNIST test split (read from the IDX .gz files)
   gives reckon eval's top-1 accuracy (to 5 images in 10,000: argmax near-ties);
4. PyTorch perturbs the weights and writes them with safetensors.torch.save_file (a plain
   state dict, no metadata); `reckon eval` reads that file and again agrees with PyTorch.

Exit status 0 when everything holds. It does not skip: a missing package or dataset is an
error that says what to install.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FASHION = "/usr/share/datasets/fashion-mnist"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy as np
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover
    fail(f"{e}: pip install torch safetensors numpy")
sys.path.insert(0, HERE)
import torch_models  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def torch_accuracy(net, images, labels):
    net.eval()
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    with torch.no_grad():
        pred = torch.cat([net(x[i:i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
    return (pred.numpy() == labels).mean()


def reckon_eval(reckon, model, ckpt, extra=()):
    r = subprocess.run([reckon, "eval", model, "--checkpoint", ckpt, "--data", "fashion-mnist", "--json", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"reckon eval {ckpt}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reckon", default=os.path.join(ROOT, "build", "reckon"))
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not os.path.exists(args.reckon):
        fail(f"{args.reckon} not found: build it (make build) or pass --reckon")
    if not os.path.exists(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")):
        fail(f"{FASHION} missing: apt-get install dataset-fashion-mnist")
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        check(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="reckon_pycheck_") as work:
            check(args, work)
    print("PASS")


def check(args, work):
    out = os.path.join(work, "run")

    # 1. reckon trains and writes a checkpoint.
    r = subprocess.run([args.reckon, "train", "lenet5", "--data", "fashion-mnist", "--epochs", "1", "--normalize",
                        "none", "--threads", str(args.threads), "--out", out, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"reckon train: {r.stderr.strip()}")
    ckpt = os.path.join(out, "last.safetensors")

    # 2. Python reads it.
    with safe_open(ckpt, framework="pt") as f:
        meta = f.metadata()
    for key in ("format", "model", "optimizer", "step", "epoch", "batch_in_epoch", "rng_state", "config"):
        if key not in meta:
            fail(f"{ckpt}: metadata has no {key!r}")
    if meta["format"] != "reckon.checkpoint" or meta["model"] != "lenet5":
        fail(f"{ckpt}: metadata format/model are {meta['format']!r}/{meta['model']!r}")
    config = json.loads(meta["config"])
    if config["optimizer"] != "sgd" or int(meta["step"]) != 938 or int(meta["epoch"]) != 1:
        fail(f"{ckpt}: unexpected config/step/epoch {config['optimizer']} {meta['step']} {meta['epoch']}")
    sd = load_file(ckpt)
    model_sd = {k: v for k, v in sd.items() if not k.startswith("optimizer.")}
    opt_sd = {k[len("optimizer."):]: v for k, v in sd.items() if k.startswith("optimizer.")}
    net = torch_models.build("lenet5", num_classes=10, in_channels=1)
    net.load_state_dict(model_sd, strict=True)
    print(f"ok: {len(model_sd)} model tensors load into torch (strict), metadata step {meta['step']}")

    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=config["lr"], momentum=config["momentum"], weight_decay=config["weight_decay"])
    state = {}
    for k, v in opt_sd.items():
        _, i, name = k.split(".", 2)
        state.setdefault(int(i), {})[name] = v
    if sorted(state) != list(range(len(params))):
        fail(f"{ckpt}: optimizer state for parameters {sorted(state)}, torch has {len(params)}")
    for i, p in enumerate(params):
        if state[i]["momentum_buffer"].shape != p.shape:
            fail(f"{ckpt}: optimizer.state.{i}.momentum_buffer shape {tuple(state[i]['momentum_buffer'].shape)}")
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
    print(f"ok: {len(opt_sd)} optimizer tensors load into torch.optim.SGD")

    # 3. Same accuracy in PyTorch and in reckon.
    images = read_idx(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    acc_torch = torch_accuracy(net, images, labels)
    acc_reckon = reckon_eval(args.reckon, "lenet5", ckpt)["accuracy"]
    print(f"reckon checkpoint: torch top-1 {acc_torch:.4f}, reckon eval {acc_reckon:.4f}")
    if abs(acc_torch - acc_reckon) > 5e-4:
        fail("accuracies differ")

    # 4. PyTorch writes a state dict; reckon reads it.
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.01 * torch.randn_like(p))
    plain = os.path.join(work, "from_torch.safetensors")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, plain)
    acc_torch2 = torch_accuracy(net, images, labels)
    acc_reckon2 = reckon_eval(args.reckon, "lenet5", plain, ["--normalize", "none"])["accuracy"]
    print(f"torch state dict:  torch top-1 {acc_torch2:.4f}, reckon eval {acc_reckon2:.4f}")
    if abs(acc_torch2 - acc_reckon2) > 5e-4:
        fail("accuracies differ")


if __name__ == "__main__":
    main()
