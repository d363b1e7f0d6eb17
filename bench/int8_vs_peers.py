#!/usr/bin/env python3
"""int8 inference speed: reckon's int8 engine next to reckon's fp32 engine, ONNX Runtime's int8
(its own quantize_static QDQ model of the same file) and PyTorch's int8 backend, same model,
same batch, same threads, in one run.

    python3 bench/int8_vs_peers.py [--reckon build/reckon] [--threads 2] [--repeats 3]
                                   [--cases resnet18_cifar:1,...] [--min-time 2] [--json out.json]

For each case (model, batch) the model is built in PyTorch (scripts/torch_models.py) with random
weights and exported once to ONNX (opset 17, the batch fixed), as bench/infer_vs_peers.py does.
ONNX Runtime quantizes it once (scripts/ort_quantize.py: quant_pre_process, then quantize_static:
QDQ, per-channel s8 weights, u8 activations, min-max calibration on 8 random batches). Then, each
repeat in fresh processes and in turn (one runs at a time):
  reckon fp32:       `reckon bench-infer FILE --precision fp32 --json`;
  reckon int8:       `reckon bench-infer FILE --precision int8 --json` (reckon's own quantization:
                     min-max on random batches, s8 per-channel weights, u8/s8 activations, zero
                     point 0);
  reckon, ORT's file: `reckon bench-infer QDQ_FILE --json`: ONNX Runtime's own int8 model, which
                     reckon's fuse_qdq pass runs with its int8 kernels (the same file as the next);
  ORT int8:          that QDQ file in ONNX Runtime, ORT_ENABLE_ALL, intra-op threads T, one
                     session alive at a time;
  PyTorch int8:      torch.ao.quantization's FX graph mode, calibrated on 8 random batches, under
                     each interpreter that has torch, with its best engine (x86 where it has one,
                     onednn on Debian's 1.13, which has no fbgemm), the faster kept and named; a model it cannot trace
                     is reported as n/a.
Each reports the median of single-run latencies (p50); images/s = batch / p50; the table has the
median over repeats, reckon int8's ratio to each peer (above 1: reckon is faster) and its share of
the machine's int8 peak: bench/vnni_peak.c (vpdpbusd in 16 chains per thread, compiled and run here
on T threads) unless --int8-peak (G MAC/s over all threads) is given, taken of two counts of the
fp32 model's MACs (`reckon ledger --inference`): all declared taps, padding included, and the taps
that read the input (its `macs_read`; oneDNN's direct kernels skip the rest). Not a test: nothing
here fails on a slow result.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import infer_vs_peers as base  # noqa: E402

CASES = [("lenet5", 256), ("resnet18_cifar", 1), ("resnet18_cifar", 128), ("resnet50", 1), ("mobilenet_v2", 1)]


def random_batches(shape, n, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def quantize_ort(src, dst, batch):
    import onnx
    from ort_quantize import quantize_static_qdq
    shape = [d.dim_value for d in onnx.load(src).graph.input[0].type.tensor_type.shape.dim]
    quantize_static_qdq(src, dst, random_batches(shape, 8))


def worker_torch_int8(model, batch, threads, min_time):
    import torch
    import torch_models
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    torch.set_num_threads(threads)
    # x86 (fbgemm and onednn chosen per op) from torch 2.0; Debian's 1.13 has onednn (no fbgemm)
    qengine = next(e for e in ("x86", "fbgemm", "onednn", "qnnpack") if e in torch.backends.quantized.supported_engines)
    torch.backends.quantized.engine = qengine
    net = torch_models.build(model).eval()
    c, h, w = torch_models.input_shape(model)
    x = torch.randn(batch, c, h, w)
    prepared = prepare_fx(net, get_default_qconfig_mapping(qengine), example_inputs=(x,))
    with torch.no_grad():
        for xb in random_batches([batch, c, h, w], 8):
            prepared(torch.from_numpy(xb))
    q = convert_fx(prepared)
    with torch.no_grad():
        p50, n = base.timed(lambda: q(x), min_time)
    return {"p50_ms": 1e3 * p50, "runs": n, "version": f"{torch.__version__} {qengine}"}


def measured_int8_peak(threads):
    """G MAC/s of vpdpbusd on this cpu with `threads` threads (bench/vnni_peak.c), or 0."""
    exe = os.path.join(tempfile.mkdtemp(prefix="reckon_vnni_"), "vnni_peak")
    build = subprocess.run(["cc", "-O2", "-mavx512f", "-mavx512bw", "-mavx512vnni", "-fopenmp",
                            os.path.join(HERE, "vnni_peak.c"), "-o", exe], capture_output=True, text=True)
    if build.returncode != 0:
        return 0.0
    run = subprocess.run([exe, str(threads)], capture_output=True, text=True)
    return float(run.stdout.strip()) if run.returncode == 0 else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reckon", default=os.path.join(ROOT, "build", "reckon"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--cases", default=",".join(f"{m}:{b}" for m, b in CASES))
    ap.add_argument("--pythons", default=f"{sys.executable},/usr/bin/python3")
    ap.add_argument("--int8-peak", type=float, default=0.0, help="the machine's measured int8 G MAC/s (all threads)")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, target, batch = a.worker[0], a.worker[1], int(a.worker[2])
        r = base.worker_ort(target, batch, a.threads, a.min_time) if kind == "ort" else \
            worker_torch_int8(target, batch, a.threads, a.min_time)
        print(json.dumps(r))
        return
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cases.split(",")]
    pythons = [p for p in a.pythons.split(",")
               if subprocess.run([p, "-c", "import torch"], capture_output=True).returncode == 0]
    tmp = tempfile.mkdtemp(prefix="reckon_int8_")
    results = []
    for model, batch in cases:
        fp32 = os.path.join(tmp, f"{model}_b{batch}.onnx")
        qdq = os.path.join(tmp, f"{model}_b{batch}.qdq.onnx")
        base.export(model, batch, fp32)
        quantize_ort(fp32, qdq, batch)
        runs = {"reckon_fp32": [], "reckon_int8": [], "reckon_ortfile": [], "ort_int8": []}
        torch_runs = {p: [] for p in pythons}
        info = {}
        for _ in range(a.repeats):
            for key, path, prec in (("reckon_fp32", fp32, "fp32"), ("reckon_int8", fp32, "int8"),
                                    ("reckon_ortfile", qdq, "fp32")):
                r = base.run_json([a.reckon, "bench-infer", path, "--batch", str(batch), "--threads", str(a.threads),
                                   "--min-time", str(a.min_time), "--precision", prec, "--json"])
                if "p50_ms" in r:
                    runs[key].append(r["p50_ms"])
                    info[key] = {k: r.get(k) for k in ("reorders_per_run", "kernel_steps", "direct_steps", "cpu_isa",
                                                       "weight_bytes", "arena_bytes")}
                else:
                    info[f"{key}_error"] = r.get("error")
            o = base.run_json([sys.executable, __file__, "--threads", str(a.threads), "--min-time", str(a.min_time),
                               "--worker", "ort", qdq, str(batch)])
            if "p50_ms" in o:
                runs["ort_int8"].append(o["p50_ms"])
                info["ort_version"] = o["version"]
            else:
                info["ort_error"] = o.get("error")
            for p in pythons:
                t = base.run_json([p, __file__, "--threads", str(a.threads), "--min-time", str(a.min_time),
                                   "--worker", "torch", model, str(batch)], env=base.torch_env())
                if "p50_ms" in t:
                    torch_runs[p].append(t["p50_ms"])
                    info[f"torch:{p}"] = {"version": t["version"]}
                else:
                    info[f"torch_error:{p}"] = t.get("error")
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        best = None
        for p, v in torch_runs.items():
            if v and (best is None or statistics.median(v) < best[1]):
                best = (p, statistics.median(v))
        out = subprocess.run([a.reckon, "ledger", fp32, "--batch", str(batch), "--inference", "--json"],
                             capture_output=True, text=True)
        macs = json.loads(out.stdout) if out.returncode == 0 else {}
        row = {"model": model, "batch": batch, "threads": a.threads, **{f"{k}_p50_ms": v for k, v in med.items()},
               "torch_int8_p50_ms": best[1] if best else None,
               "torch": info.get(f"torch:{best[0]}") if best else None,
               "macs": macs.get("totals", {}).get("macs"), "macs_read": macs.get("totals", {}).get("macs_read"),
               "info": info}
        results.append(row)
        print(json.dumps(row), file=sys.stderr)

    def ips(b, ms):
        return b / (ms / 1e3) if ms else float("nan")

    peak = a.int8_peak or measured_int8_peak(a.threads)
    print(f"\n{a.threads} threads; median of {a.repeats} repeats of p50 latency; images/s = batch / p50; "
          f"int8 peak (vpdpbusd, {a.threads} threads): {peak:.0f} G MAC/s")
    print("| case | reckon fp32 | reckon int8 | reckon on ORT's file | ORT int8 | PyTorch int8 | int8 / fp32 "
          "| reckon / ORT | ORT's file: reckon / ORT | reckon / PyTorch | reckon int8 share of peak: all taps, taps read |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        b = r["batch"]
        f, i = ips(b, r.get("reckon_fp32_p50_ms")), ips(b, r.get("reckon_int8_p50_ms"))
        rf, o = ips(b, r.get("reckon_ortfile_p50_ms")), ips(b, r.get("ort_int8_p50_ms"))
        t = ips(b, r.get("torch_int8_p50_ms"))
        tname = f" ({r['torch']['version']})" if r["torch"] else " (n/a)"
        share = "n/a"
        if peak and r["macs"] and r.get("reckon_int8_p50_ms"):
            rate = 1e3 / r["reckon_int8_p50_ms"] / 1e9 / peak
            share = f"{r['macs'] * rate:.0%}" + (f", {r['macs_read'] * rate:.0%}" if r.get("macs_read") else "")
        print(f"| {r['model']} batch {b} | {f:,.1f} | {i:,.1f} | {rf:,.1f} | {o:,.1f} | {t:,.1f}{tname} | "
              f"{i / f:.2f} | {i / o:.2f} | {rf / o:.2f} | {i / t:.2f} | {share} |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
