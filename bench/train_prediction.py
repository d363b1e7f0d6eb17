#!/usr/bin/env python3
"""What `reckon train` predicted for itself before its first step, against what it measured.

    python3 bench/train_prediction.py [--reckon build/reckon] [--threads 2] [--md] [--only NAME,...]

Each case is one `reckon train` in a fresh process (its VmHWM is its own), with OMP_NUM_THREADS
and --threads set; the run prints the ledger's prediction (step time on this cpu, the process's
peak resident memory in parts) before its first step and sets the measured figures beside it at
the end (the median step after the first 3, VmHWM). This script collects those lines, and the
process's peak from /usr/bin/time as a second witness when it is there. Not a test: nothing here
fails. The memory is what the tests hold to 5% (tests/test_ledger.cpp, LedgerTrainProcess); the
step time is the ledger's time model, and the machine is shared: run it quiet.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# (name, arguments after `reckon train`): real data where the run is short, synthetic data where
# a real data set would take minutes; two epochs where the evaluation between them matters.
CASES = [
    ("lenet5, Fashion-MNIST, 1 epoch", ["lenet5", "--epochs", "1"]),
    ("lenet5, Fashion-MNIST, batch 256, bf16", ["lenet5", "--epochs", "1", "--batch", "256", "--precision", "bf16"]),
    ("tinycnn b32 bf16 AdamW", ["tinycnn", "--data", "synthetic:3x32x32:2000:10", "--epochs", "2", "--batch", "32",
                                "--precision", "bf16", "--optimizer", "adamw"]),
    ("resnet18_cifar b64", ["resnet18_cifar", "--data", "synthetic:3x32x32:1024:10", "--epochs", "2", "--batch", "64"]),
    ("resnet18_cifar b64, --eval-batch 500", ["resnet18_cifar", "--data", "synthetic:3x32x32:1024:10", "--epochs", "2",
                                              "--batch", "64", "--eval-batch", "500"]),
    ("resnet18_cifar b32 x accum 2, recompute", ["resnet18_cifar", "--data", "synthetic:3x32x32:512:10", "--epochs",
                                                 "2", "--batch", "32", "--accum", "2", "--recompute"]),
    ("mobilenet_v2 b32", ["mobilenet_v2", "--data", "synthetic:3x32x32:1024:10", "--epochs", "2", "--batch", "32"]),
    ("mobilenet_v2 b16, 3x96x96, --val-split 0.2", ["mobilenet_v2", "--data", "synthetic:3x96x96:300:10", "--epochs",
                                                    "2", "--batch", "16", "--val-split", "0.2"]),
    ("lenet5, Fashion-MNIST, --val-split 0.5, --eval-batch 20000", ["lenet5", "--epochs", "1", "--val-split", "0.5",
                                                                    "--eval-batch", "20000"]),
    ("alexnet_tv b16, 3x64x64", ["alexnet_tv", "--data", "synthetic:3x64x64:256:10", "--epochs", "2", "--batch", "16"]),
    ("vgg11 b8, 3x64x64", ["vgg11", "--data", "synthetic:3x64x64:128:10", "--epochs", "2", "--batch", "8"]),
]

HEAD = re.compile(r"predicted \(reckon ledger\): ([0-9.]+) ms per step on this cpu; process peak memory ([0-9.]+) MiB"
                  r" = this process ([0-9.]+) MiB \(the data ([0-9.]+) MiB\) \+ reckon's allocator ([0-9.]+) MiB"
                  r" \+ running the kernels ([0-9.]+) MiB")
TAIL = re.compile(r"predicted against measured: step ([0-9.]+) ms / ([0-9.]+) ms .*process peak memory \(VmHWM\)"
                  r" ([0-9.]+) MiB / ([0-9.]+) MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reckon", default=os.path.join(os.path.dirname(__file__), "..", "build", "reckon"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma list of case name prefixes")
    ap.add_argument("--md", action="store_true", help="print a Markdown table")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows = []
    for name, args in CASES:
        if a.only and not any(name.startswith(p) for p in a.only.split(",")):
            continue
        with tempfile.TemporaryDirectory() as d:
            cmd = [a.reckon, "train", *args, "--threads", str(a.threads), "--no-progress", "--out", os.path.join(d, "run")]
            timed = os.path.exists("/usr/bin/time")
            if timed:
                cmd = ["/usr/bin/time", "-f", "maxrss_kb %M", *cmd]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        text = p.stdout + p.stderr
        h, t = HEAD.search(text), TAIL.search(text)
        if p.returncode != 0 or not h or not t:
            print(f"{name}: failed (exit {p.returncode})\n{text[-2000:]}", file=sys.stderr)
            continue
        rss = re.search(r"maxrss_kb (\d+)", text)
        row = dict(case=name, args=" ".join(args), step_pred=float(t.group(1)), step_meas=float(t.group(2)),
                   planned=float(h.group(3)), data=float(h.group(4)), alloc=float(h.group(5)),
                   kernels=float(h.group(6)), peak_pred=float(t.group(3)), peak_meas=float(t.group(4)),
                   time_maxrss=int(rss.group(1)) / 1024 if rss else None)
        rows.append(row)
        print(f"{name}: step {row['step_pred']:.2f} / {row['step_meas']:.2f} ms "
              f"({100 * (row['step_pred'] / row['step_meas'] - 1):+.0f}%), process peak {row['peak_pred']:.1f} / "
              f"{row['peak_meas']:.1f} MiB ({100 * (row['peak_pred'] / row['peak_meas'] - 1):+.1f}%)", file=sys.stderr)
    if a.md:
        print("| case | `reckon train` arguments | step predicted ms | measured ms | error | once planned (data) MiB "
              "| allocator MiB | kernels MiB | process peak predicted MiB | VmHWM MiB | error |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['case']} | `{r['args']}` | {r['step_pred']:.2f} | {r['step_meas']:.2f} | "
                  f"{100 * (r['step_pred'] / r['step_meas'] - 1):+.0f}% | {r['planned']:.1f} ({r['data']:.1f}) | "
                  f"{r['alloc']:.1f} | {r['kernels']:.1f} | {r['peak_pred']:.1f} | {r['peak_meas']:.1f} | "
                  f"{100 * (r['peak_pred'] / r['peak_meas'] - 1):+.1f}% |")


if __name__ == "__main__":
    main()
