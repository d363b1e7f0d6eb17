#!/usr/bin/env python3
"""Training and inference speed of reckon next to PyTorch: same model, batch and thread count.

    python3 bench/train_vs_pytorch.py [--reckon build/reckon] [--threads 2] [--repeats 3]
                                      [--cases lenet5:64,resnet18_cifar:128] [--modes train,inference]
                                      [--precisions fp32,bf16] [--json results.json]

For each case (model, batch) and mode (train: forward, cross entropy, backward, SGD with
momentum; inference: eval-mode forward under no-grad) it runs, in fresh processes each time,
  reckon:  `reckon bench-train MODEL --batch B --steps S --threads T [--inference]`
  PyTorch: this script's own worker (`--worker`), the same model from scripts/torch_models.py,
           torch.set_num_threads(T), in an environment with OPENBLAS_CORETYPE unset and
           OPENBLAS_NUM_THREADS=1 (that subprocess only), in both memory formats (channels_last
           and contiguous; the faster median is kept: at its best, which differs case by case
           for lenet5),
reckon's convolutions use its default algorithm (oneDNN picks per shape: Winograd for most 3x3
stride-1 f32 convolutions here) unless --conv-algo direct; the report lists the kernels that ran.
Both run on one fixed random batch of the model's default input (data loading is not timed), in
each precision asked for (bf16/fp16: reckon's autocast, `--precision`; PyTorch's
torch.autocast("cpu", dtype), with a GradScaler for fp16 in both), with
a few untimed warm-up steps, and reports the median images/s over the repeats, the ratio
reckon / PyTorch, each process's peak resident memory (getrusage ru_maxrss; PyTorch's
includes its ~300 MiB of libraries) and reckon's peak tracked memory (its allocator's tensors:
parameters, gradients, optimizer state, activations, workspace). Not a test: nothing here
fails on a slow result.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The cases, plus torchvision's AlexNet (alexnet_tv: no LRN, 0.71 G MACs per image
# against the original's 1.14 G), since "alexnet" in PyTorch usually means that one.
CASES = [("lenet5", 64), ("lenet5", 256), ("resnet18_cifar", 128), ("alexnet", 16), ("alexnet_tv", 16)]
STEPS = {
    ("lenet5", "train"): 300, ("lenet5", "inference"): 500,
    ("resnet18_cifar", "train"): 4, ("resnet18_cifar", "inference"): 8,
    ("alexnet", "train"): 5, ("alexnet", "inference"): 10,
    ("alexnet_tv", "train"): 5, ("alexnet_tv", "inference"): 10,
}
WARMUP = {"lenet5": 5, "resnet18_cifar": 1, "alexnet": 2, "alexnet_tv": 2}


def worker(args):
    """The PyTorch side, run in its own process: prints one JSON line."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import torch_models

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = torch_models.build(args.model)
    classes, in_ch, (h, w) = torch_models.DEFAULTS[args.model]
    x = torch.randn(args.batch, in_ch, h, w)
    y = torch.arange(args.batch) % classes
    if args.torch_format == "channels_last":
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cpu") if args.precision == "fp16" else None
    times = []
    if args.inference:
        net.eval()
    else:
        net.train()
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        if args.inference:
            with torch.no_grad(), torch.autocast("cpu", dtype=low, enabled=low is not None):
                out = net(x)
            last = float(out[0, 0])
        else:
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=low, enabled=low is not None):
                loss = F.cross_entropy(net(x), y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            last = float(loss)
        dt = time.perf_counter() - t0
        if s >= args.warmup:
            times.append(dt)
    total = sum(times)
    print(json.dumps({
        "framework": "pytorch", "torch": torch.__version__, "memory_format": args.torch_format,
        "model": args.model, "batch": args.batch,
        "mode": "inference" if args.inference else "train", "steps": args.steps, "threads": torch.get_num_threads(),
        "precision": args.precision,
        "seconds": total, "images_per_s": args.batch * args.steps / total,
        "median_step_ms": 1e3 * statistics.median(times),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "last_value": last,
    }))


def run_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reckon", default=os.path.join(ROOT, "build", "reckon"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=None, help="comma list of MODEL:BATCH (default: the issue's four)")
    ap.add_argument("--modes", default="train,inference")
    ap.add_argument("--steps-scale", type=float, default=1.0, help="multiply every step count")
    ap.add_argument("--torch-format", default="best", choices=["best", "channels_last", "contiguous"],
                    help="PyTorch's memory format for the model and input; best (default): run both, "
                         "keep the faster median")
    ap.add_argument("--precisions", default="fp32", help="comma list of fp32, bf16, fp16")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--conv-algo", default=None, choices=["auto", "direct"],
                    help="reckon's convolution algorithm (default: reckon's own default, auto)")
    # worker mode
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--inference", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    if not os.path.exists(args.reckon):
        raise SystemExit(f"{args.reckon} not found: build it (make build) or pass --reckon")
    cases = CASES
    if args.cases:
        cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",")]
    modes = args.modes.split(",")
    torch_env = dict(os.environ)
    torch_env.pop("OPENBLAS_CORETYPE", None)
    torch_env["OPENBLAS_NUM_THREADS"] = "1"

    results = []
    for model, batch, mode, prec in [(m, b, mo, p) for m, b in cases for mo in modes
                                     for p in args.precisions.split(",")]:
        steps = max(1, int(round(STEPS.get((model, mode), 10) * args.steps_scale)))
        warm = WARMUP.get(model, 2)
        flag = ["--inference"] if mode == "inference" else []
        formats = ["channels_last", "contiguous"] if args.torch_format == "best" else [args.torch_format]
        rk, pts = [], {f: [] for f in formats}
        for _ in range(args.repeats):
            rk.append(run_json([args.reckon, "bench-train", model, "--batch", str(batch), "--steps", str(steps),
                                "--warmup", str(warm), "--threads", str(args.threads), "--precision", prec,
                                *(["--conv-algo", args.conv_algo] if args.conv_algo else []), *flag]))
            for f in formats:
                pts[f].append(run_json([sys.executable, os.path.abspath(__file__), "--worker", "--model", model,
                                        "--batch", str(batch), "--steps", str(steps), "--warmup", str(warm),
                                        "--threads", str(args.threads), "--torch-format", f,
                                        "--precision", prec, *flag],
                                       env=torch_env))
        # PyTorch at its best: the memory format with the higher median.
        torch_format = max(formats, key=lambda f: statistics.median(r["images_per_s"] for r in pts[f]))
        pt = pts[torch_format]
        row = {
            "model": model, "batch": batch, "mode": mode, "precision": prec, "steps": steps,
            "threads": args.threads,
            "reckon_peak_tracked_mib": statistics.median(r["peak_tracked_mib"] for r in rk),
            "reckon_images_per_s": statistics.median(r["images_per_s"] for r in rk),
            "pytorch_images_per_s": statistics.median(r["images_per_s"] for r in pt),
            "reckon_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in rk),
            "pytorch_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in pt),
            "reckon_runs": [r["images_per_s"] for r in rk], "pytorch_runs": [r["images_per_s"] for r in pt],
            "reckon_conv_kernels": sorted(rk[0].get("conv_kernels", {})),
            "pytorch_format": torch_format,
            "pytorch_format_medians": {f: statistics.median(r["images_per_s"] for r in pts[f]) for f in formats},
        }
        row["ratio"] = row["reckon_images_per_s"] / row["pytorch_images_per_s"]
        results.append(row)
        print(f"  {model} batch {batch} {mode} {prec}: reckon {row['reckon_images_per_s']:.0f} img/s, "
              f"pytorch {row['pytorch_images_per_s']:.0f} img/s", file=sys.stderr, flush=True)

    print(f"\n{args.threads} threads, PyTorch memory format {args.torch_format}, median of {args.repeats} runs each "
          f"(images/s; peak RSS in MiB)\n")
    hdr = f"| {'model':<15} | {'batch':>5} | {'mode':<9} | {'prec':<4} | {'reckon img/s':>12} | " \
          f"{'pytorch img/s':>13} | {'torch format':<13} | {'ratio':>5} | {'reckon RSS':>10} | {'pytorch RSS':>11} | " \
          f"{'reckon tracked':>14} |"
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for r in results:
        print(f"| {r['model']:<15} | {r['batch']:>5} | {r['mode']:<9} | {r['precision']:<4} | "
              f"{r['reckon_images_per_s']:>12.0f} | {r['pytorch_images_per_s']:>13.0f} | {r['pytorch_format']:<13} | "
              f"{r['ratio']:>5.2f} | "
              f"{r['reckon_peak_rss_mib']:>10.0f} | {r['pytorch_peak_rss_mib']:>11.0f} | "
              f"{r['reckon_peak_tracked_mib']:>14.0f} |")
    # Which kernels ran: reckon's oneDNN convolutions (implementation and call kind); PyTorch's
    # convolutions go through its own oneDNN (mkldnn) build.
    print("\nreckon's convolution kernels (oneDNN 2.6 implementations; reckon small_direct: its own), per case:")
    for r in results:
        print(f"  {r['model']} {r['batch']} {r['mode']} {r['precision']}: "
              f"{', '.join(r['reckon_conv_kernels']) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
