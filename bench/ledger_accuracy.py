#!/usr/bin/env python3
"""How right the ledger's cpu step time is on models and sizes it was not tuned on (issue 15).

    python3 bench/ledger_accuracy.py [--reckon build/reckon] [--models lenet5,resnet18_cifar,...]
                                     [--batches 1,8,32,128] [--inputs default,3x64x64,...]
                                     [--precisions fp32,bf16] [--optimizers sgd,adamw]
                                     [--threads 1,2] [--measure-steps 3] [--max-case-seconds 60]
                                     [--json results.json]

For every case (model, batch, input, precision, optimizer, threads) it runs, in a fresh process
with OMP_NUM_THREADS set to the thread count,
    reckon ledger MODEL --batch B [--input CxHxW] --precision P --optimizer O --measure --json
and prints the predicted cpu step time (the time model: `time`, device cpu) against the
measured one (`measured.step_s`: each op's best over the timed steps, summed), the error predicted / measured
- 1, the cpu's speed just after (its fp32 peak then, over the calibration's: `measured.cpu_speed`;
a shared machine moves by a third within minutes, and the measured step with it), and, for the
layers that take more than 5% of the measured step, how many are predicted
within 30% (the issue's targets: every case within 15%, those layers within 30%). A case the
ledger predicts to take longer than --max-case-seconds for its steps is not measured (listed as
skipped, with its prediction); one that fails (an input too small for the model, memory) is
listed with its error. The calibration is whatever the cache holds for each thread count (run
`reckon ledger lenet5 --batch 1 --recalibrate` first on a quiet machine, once per thread
count). Not a test: nothing here fails on a wrong prediction. The machine is shared: run it
quiet, and repeat the cases that look off.

    python3 bench/ledger_accuracy.py --inference [--models ...] [--batches 1,32] [--precisions fp32,int8]

does the same for the deployment ledger: `reckon ledger MODEL --batch B --inference --precision P
--measure --json`, its predicted latency against the engine's measured p50.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Inputs other than the defaults, per model family (tinycnn another grey size; lenet5 none: its
# first linear layer fixes 28x28; the ImageNet models smaller squares; the cifar resnet a colour
# 32x32 and a larger grey one).
OTHER_INPUTS = {
    "tinycnn": ["1x32x32"],
    "lenet5": [],
    "resnet18_cifar": ["3x32x32", "1x64x64"],
    "mobilenet_v2": ["3x96x96", "3x160x160"],
    "alexnet": ["3x160x160"],
    "alexnet_tv": ["3x160x160"],
    "vgg11": ["3x64x64"],
    "vgg16": ["3x64x64"],
    "resnet18": ["3x64x64", "3x160x160"],
    "resnet34": ["3x64x64"],
    "resnet50": ["3x64x64"],
}


def run_ledger(reckon, model, batch, inp, precision, optimizer, threads, measure, steps, timeout):
    cmd = [reckon, "ledger", model, "--batch", str(batch), "--precision", precision, "--optimizer", optimizer,
           "--json"]
    if inp != "default":
        cmd += ["--input", inp]
    if measure:
        cmd += ["--measure", "--measure-steps", str(steps)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
    return json.loads(p.stdout)


def inference_grid(a, models):
    """The deployment ledger's latency (`reckon ledger M --inference --measure`): predicted
    against the engine's measured p50, per model, batch, input, precision and thread count."""
    print("| model | batch | input | precision | threads | predicted ms | measured p50 ms | error |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    rows = []
    for model in models:
        inputs = a.inputs.split(",") if a.inputs else ["default"]
        for batch in [int(b) for b in a.batches.split(",")]:
            for inp in inputs:
                for prec in a.precisions.split(","):
                    for th in [int(t) for t in a.threads.split(",")]:
                        row = {"model": model, "batch": batch, "input": inp, "precision": prec, "threads": th}
                        cmd = [a.reckon, "ledger", model, "--batch", str(batch), "--inference", "--precision", prec,
                               "--measure", "--json"] + ([] if inp == "default" else ["--input", inp])
                        head = f"| {model} | {batch} | {inp} | {prec} | {th} |"
                        try:
                            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                                               env=dict(os.environ, OMP_NUM_THREADS=str(th)))
                            if p.returncode != 0:
                                raise RuntimeError((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
                            d = json.loads(p.stdout)
                            row["predicted_s"] = d["totals"]["predicted_latency_ms"] / 1e3
                            row["measured_s"] = d["measured"]["p50_ms"] / 1e3
                            row["error"] = row["predicted_s"] / row["measured_s"] - 1
                            print(head + f" {1e3 * row['predicted_s']:.3f} | {1e3 * row['measured_s']:.3f} | "
                                  f"{100 * row['error']:+.0f}% |", flush=True)
                        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
                            row.pop("measured_s", None)
                            row["failed"] = str(e)[:120]
                            print(head + f" | | failed: {row['failed']} |", flush=True)
                        rows.append(row)
    return rows


def summary(rows):
    done = [r for r in rows if "measured_s" in r]
    if not done:
        return
    within = sum(1 for r in done if abs(r["error"]) <= 0.15)
    errs = [abs(r["error"]) for r in done]
    line = (f"\n{len(done)} cases measured ({len(rows) - len(done)} skipped or failed): {within} within 15% "
            f"(median |error| {100 * statistics.median(errs):.0f}%, worst {100 * max(errs):.0f}%)")
    if all("big_layers" in r for r in done):
        line += (f"; layers over 5% of their step: {sum(r['big_layers_within_30'] for r in done)} of "
                 f"{sum(r['big_layers'] for r in done)} within 30%")
    print(line)


def cpu_time(d):
    for t in d["time"]:
        if t["device"] == "cpu":
            return t
    raise RuntimeError("no cpu entry in the ledger's time")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reckon", default=os.path.join(ROOT, "build", "reckon"))
    ap.add_argument("--models", default="")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--inputs", default="", help="comma list (default: each model's default and OTHER_INPUTS)")
    ap.add_argument("--precisions", default=None, help="comma list (default fp32,bf16; with --inference fp32,int8)")
    ap.add_argument("--optimizers", default="sgd,adamw")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--measure-steps", type=int, default=3)
    ap.add_argument("--inference", action="store_true",
                    help="the deployment ledger instead (precisions fp32,int8 unless given; no optimizer; "
                         "--max-case-seconds and --measure-steps do not apply: the engine times its own runs)")
    ap.add_argument("--max-case-seconds", type=float, default=60.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    if a.models:
        models = a.models.split(",")
    else:
        out = subprocess.run([a.reckon, "models", "--json"], capture_output=True, text=True, check=True).stdout
        models = [m["name"] for m in json.loads(out)]
    if a.precisions is None:
        a.precisions = "fp32,int8" if a.inference else "fp32,bf16"
    if a.inference:
        rows = inference_grid(a, models)
        summary(rows)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    rows = []
    print("| model | batch | input | precision | optimizer | threads | predicted ms | measured ms | error | "
          "cpu speed | "
          "layers > 5% within 30% | worst such layer |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for model in models:
        inputs = a.inputs.split(",") if a.inputs else ["default"] + OTHER_INPUTS.get(model, [])
        for batch in [int(b) for b in a.batches.split(",")]:
            for inp in inputs:
                for prec in a.precisions.split(","):
                    for opt in a.optimizers.split(","):
                        for th in [int(t) for t in a.threads.split(",")]:
                            row = {"model": model, "batch": batch, "input": inp, "precision": prec,
                                   "optimizer": opt, "threads": th}
                            try:
                                plan = run_ledger(a.reckon, model, batch, inp, prec, opt, th, False, 0, 600)
                                pred = cpu_time(plan)["step_s"]
                                row["predicted_s"] = pred
                                # warm-up and timed steps, each about the predicted time (or more)
                                if pred * (a.measure_steps + 2) > a.max_case_seconds:
                                    row["skipped"] = f"predicted {pred:.1f} s a step"
                                else:
                                    d = run_ledger(a.reckon, model, batch, inp, prec, opt, th, True,
                                                   a.measure_steps, max(600, 20 * a.max_case_seconds))
                                    m = d["measured"]["step_s"]
                                    row["measured_s"] = m
                                    row["error"] = cpu_time(d)["step_s"] / m - 1
                                    row["predicted_s"] = cpu_time(d)["step_s"]
                                    # how fast the cpu ran just after, against its calibration
                                    if d["measured"].get("cpu_speed", 0) > 0:
                                        row["cpu_speed"] = d["measured"]["cpu_speed"]
                                    layers = [(l["scope"], l.get("cpu_time_s", l["time_s"]), l["measured_s"])
                                              for l in d["layers"] if l.get("measured_s")]
                                    total = sum(x[2] for x in layers)
                                    big = [(s, p, mm) for s, p, mm in layers if total > 0 and mm > 0.05 * total]
                                    errs = [(p / mm - 1, s) for s, p, mm in big]
                                    row["big_layers"] = len(big)
                                    row["big_layers_within_30"] = sum(1 for e, _ in errs if abs(e) <= 0.30)
                                    if errs:
                                        e, s = max(errs, key=lambda x: abs(x[0]))
                                        row["worst_layer"] = {"scope": s, "error": e}
                            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                                row["failed"] = str(e)[:120]
                            rows.append(row)
                            print(fmt_row(row), flush=True)

    summary(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def fmt_row(r):
    head = f"| {r['model']} | {r['batch']} | {r['input']} | {r['precision']} | {r['optimizer']} | {r['threads']} |"
    if "failed" in r:
        return head + f" | | | | | failed: {r['failed']} |"
    if "skipped" in r:
        return head + f" {1e3 * r['predicted_s']:.1f} | | | | | skipped ({r['skipped']}) |"
    w = r.get("worst_layer")
    worst = f"{w['scope']} {100 * w['error']:+.0f}%" if w else ""
    speed = f"{100 * r['cpu_speed']:.0f}%" if "cpu_speed" in r else ""
    return (head + f" {1e3 * r['predicted_s']:.1f} | {1e3 * r['measured_s']:.1f} | {100 * r['error']:+.0f}% | "
            f"{speed} | {r['big_layers_within_30']} of {r['big_layers']} | {worst} |")


if __name__ == "__main__":
    sys.exit(main())
