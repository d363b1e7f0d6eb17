#!/usr/bin/env python3
"""Training and inference speed of reckon next to PyTorch: same model, batch and thread count.

    python3 bench/train_vs_pytorch.py [--reckon build/reckon] [--threads 2] [--repeats 3]
                                      [--cases lenet5:64,resnet18_cifar:128] [--modes train,inference]
                                      [--precisions fp32,bf16] [--memory-format auto]
                                      [--torch-pythons auto] [--json results.json]

For each case (model, batch) and mode (train: forward, cross entropy, backward, SGD with
momentum; inference: eval-mode forward under no-grad) it runs, in fresh processes each time,
  reckon:  `reckon bench-train MODEL --batch B --steps S --threads T [--inference]`
  PyTorch: this script's own worker (`--worker`), the same model from scripts/torch_models.py,
           torch.set_num_threads(T), in an environment with OPENBLAS_CORETYPE unset and
           OPENBLAS_NUM_THREADS=1 (that subprocess only), under every Python with torch
           (`--torch-pythons auto`: this one, PyPI's torch 2.x, and Debian's /usr/bin/python3
           with python3-torch 1.13) and in both memory formats (channels_last and contiguous):
           the faster median of the (torch, format) pairs is kept and named, which differs case
           by case,
reckon's convolutions use its default algorithm (oneDNN picks per shape: Winograd for most 3x3
stride-1 f32 convolutions here) unless --conv-algo direct; the report lists the kernels that ran.
Both run on one fixed random batch of the model's default input (data loading is not timed), in
each precision asked for (bf16/fp16: reckon's autocast, `--precision`; PyTorch's
torch.autocast("cpu", dtype), with a GradScaler for fp16 in both), with
a few untimed warm-up steps, and reports the median images/s over the repeats, the ratio
reckon / PyTorch, each process's peak resident memory (getrusage ru_maxrss; PyTorch's
includes its ~300 MiB of libraries) and reckon's peak tracked memory (its allocator's tensors:
parameters, gradients, optimizer state, activations, workspace). reckon's activations take its
default layout (`--memory-format auto`: channels-last in bf16) unless --memory-format says.
Each case's share of the machine's peak: the step's FLOPs from `reckon ledger --json` (train:
forward, backward and update; inference: forward) times images/s, over the peak that
bench/fma_peak.c measures here with the same threads (f32 FMA for fp32 and fp16, which computes
in f32 on this cpu; bf16 dot products for bf16). Not a test: nothing here fails on a slow result.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
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


def measured_peaks(threads):
    """{"fp32_gflops", "bf16_gflops"} of this cpu with `threads` threads (bench/fma_peak.c), or {}."""
    exe = os.path.join(tempfile.mkdtemp(prefix="reckon_fma_"), "fma_peak")
    build = subprocess.run(["cc", "-O2", "-mavx512f", "-mavx512bf16", "-fopenmp", os.path.join(HERE, "fma_peak.c"),
                            "-o", exe], capture_output=True, text=True)
    if build.returncode != 0:
        return {}
    run = subprocess.run([exe, str(threads)], capture_output=True, text=True)
    return json.loads(run.stdout) if run.returncode == 0 else {}


def flops_per_image(reckon, model, batch, mode, prec):
    """FLOPs of one image's step as reckon's ledger counts them (train) or its forward (inference)."""
    r = subprocess.run([reckon, "ledger", model, "--batch", str(batch), "--precision", prec, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return 0.0
    t = json.loads(r.stdout)["totals"]
    if mode == "train":
        return t["flops"] / batch
    return 2.0 * t["fwd_macs_per_image"]


def torch_pythons(spec):
    """The Python interpreters with torch to compare against: (path, torch version)."""
    cands = [sys.executable, "/usr/bin/python3"] if spec == "auto" else spec.split(",")
    out, seen = [], set()
    for py in cands:
        if not os.path.exists(py) or os.path.realpath(py) in seen:
            continue
        r = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        if r.returncode == 0:
            seen.add(os.path.realpath(py))
            out.append((py, r.stdout.strip()))
    return out


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
    ap.add_argument("--memory-format", default="auto", choices=["auto", "contiguous", "channels_last"],
                    help="reckon's activations in training (auto: channels-last in bf16)")
    ap.add_argument("--torch-pythons", default="auto",
                    help="comma list of Python interpreters with torch (auto: this one and /usr/bin/python3)")
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

    pythons = torch_pythons(args.torch_pythons)
    if not pythons:
        raise SystemExit("no Python with torch found")
    peaks = measured_peaks(args.threads)
    print(f"torch: {', '.join(f'{v} ({p})' for p, v in pythons)}; measured peak, {args.threads} threads: "
          f"{peaks.get('fp32_gflops', 0):.0f} GFLOP/s f32 FMA, {peaks.get('bf16_gflops', 0):.0f} bf16 dot "
          f"(bench/fma_peak.c)", file=sys.stderr, flush=True)

    results = []
    for model, batch, mode, prec in [(m, b, mo, p) for m, b in cases for mo in modes
                                     for p in args.precisions.split(",")]:
        steps = max(1, int(round(STEPS.get((model, mode), 10) * args.steps_scale)))
        warm = WARMUP.get(model, 2)
        flag = ["--inference"] if mode == "inference" else []
        formats = ["channels_last", "contiguous"] if args.torch_format == "best" else [args.torch_format]
        configs = [(py, ver, f) for py, ver in pythons for f in formats]
        rk, pts = [], {c: [] for c in configs}
        for _ in range(args.repeats):
            rk.append(run_json([args.reckon, "bench-train", model, "--batch", str(batch), "--steps", str(steps),
                                "--warmup", str(warm), "--threads", str(args.threads), "--precision", prec,
                                "--memory-format", args.memory_format,
                                *(["--conv-algo", args.conv_algo] if args.conv_algo else []), *flag]))
            for c in configs:
                pts[c].append(run_json([c[0], os.path.abspath(__file__), "--worker", "--model", model,
                                        "--batch", str(batch), "--steps", str(steps), "--warmup", str(warm),
                                        "--threads", str(args.threads), "--torch-format", c[2],
                                        "--precision", prec, *flag],
                                       env=torch_env))
        # PyTorch at its best: the (torch, memory format) with the higher median.
        best = max(configs, key=lambda c: statistics.median(r["images_per_s"] for r in pts[c]))
        torch_format = f"{best[1]} {best[2]}"
        pt = pts[best]
        fpi = flops_per_image(args.reckon, model, batch, mode, prec)
        peak = peaks.get("bf16_gflops" if prec == "bf16" else "fp32_gflops", 0.0) * 1e9
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
            "pytorch_format_medians": {f"{c[1]} {c[2]}": statistics.median(r["images_per_s"] for r in pts[c])
                                       for c in configs},
            "reckon_memory_format": rk[0].get("memory_format", "contiguous"),
            "flops_per_image": fpi, "peak_gflops": peak / 1e9,
        }
        row["ratio"] = row["reckon_images_per_s"] / row["pytorch_images_per_s"]
        row["reckon_peak_share"] = row["reckon_images_per_s"] * fpi / peak if peak > 0 else 0.0
        row["pytorch_peak_share"] = row["pytorch_images_per_s"] * fpi / peak if peak > 0 else 0.0
        results.append(row)
        print(f"  {model} batch {batch} {mode} {prec}: reckon {row['reckon_images_per_s']:.0f} img/s, "
              f"pytorch {row['pytorch_images_per_s']:.0f} img/s", file=sys.stderr, flush=True)

    print(f"\n{args.threads} threads, PyTorch at its best of {', '.join(v for _, v in pythons)} x memory format "
          f"{args.torch_format}, median of {args.repeats} runs each (images/s; share of the measured peak: "
          f"{peaks.get('fp32_gflops', 0):.0f} GFLOP/s f32, {peaks.get('bf16_gflops', 0):.0f} bf16; peak RSS in MiB)\n")
    hdr = f"| {'model':<15} | {'batch':>5} | {'mode':<9} | {'prec':<4} | {'reckon img/s':>12} | " \
          f"{'pytorch img/s':>13} | {'best pytorch':<26} | {'ratio':>5} | {'reckon peak':>11} | " \
          f"{'pytorch peak':>12} | {'reckon RSS':>10} | {'pytorch RSS':>11} | {'reckon tracked':>14} |"
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    for r in results:
        print(f"| {r['model']:<15} | {r['batch']:>5} | {r['mode']:<9} | {r['precision']:<4} | "
              f"{r['reckon_images_per_s']:>12.0f} | {r['pytorch_images_per_s']:>13.0f} | {r['pytorch_format']:<26} | "
              f"{r['ratio']:>5.2f} | {100 * r['reckon_peak_share']:>10.0f}% | {100 * r['pytorch_peak_share']:>11.0f}% | "
              f"{r['reckon_peak_rss_mib']:>10.0f} | {r['pytorch_peak_rss_mib']:>11.0f} | "
              f"{r['reckon_peak_tracked_mib']:>14.0f} |")
    # Which kernels ran: reckon's oneDNN convolutions (implementation and call kind); PyTorch's
    # convolutions go through its own oneDNN (mkldnn) build.
    print("\nreckon's convolution kernels (oneDNN 2.6 implementations; reckon small_direct: its own), per case:")
    for r in results:
        print(f"  {r['model']} {r['batch']} {r['mode']} {r['precision']} ({r['reckon_memory_format']}): "
              f"{', '.join(r['reckon_conv_kernels']) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
