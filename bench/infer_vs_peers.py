#!/usr/bin/env python3
"""Inference speed of reckon's engine next to ONNX Runtime and PyTorch: same model, same .onnx
file, same batch, same threads, in one run.

    python3 bench/infer_vs_peers.py [--reckon build/reckon] [--threads 2] [--repeats 3]
                                    [--cases lenet5:1,lenet5:256,...] [--min-time 2] [--json out.json]

For each case (model, batch), the model is built in PyTorch (scripts/torch_models.py: reckon's zoo
as torch modules; torchvision's for resnet50 and mobilenet_v2) with random weights, and exported
once with torch.onnx.export (opset 17, the batch fixed). Then, each repeat in fresh processes and
in turn (so only one of them runs at a time, and one ONNX Runtime session is alive at a time):
  reckon:       `reckon bench-infer FILE.onnx --batch B --threads T --json` (the engine);
  ONNX Runtime: an InferenceSession on the same file, ORT_ENABLE_ALL, intra-op threads T,
                inter-op 1, sequential execution;
  PyTorch:      the torch module, eval() and no_grad(), torch.set_num_threads(T), channels_last
                and contiguous (the faster kept), under each interpreter that has torch (pip's
                python3 and Debian's /usr/bin/python3), with OPENBLAS_CORETYPE unset and
                OPENBLAS_NUM_THREADS=1; the faster interpreter is kept and named.
Each reports the median latency of single runs (p50) and images/s = batch / p50; the table has
the median over repeats and the ratios reckon / peer (above 1: reckon is faster). Not a test:
nothing here fails on a slow result.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

CASES = [("lenet5", 1), ("lenet5", 256), ("resnet18_cifar", 1), ("resnet18_cifar", 128), ("resnet50", 1),
         ("mobilenet_v2", 1)]


def timed(fn, min_time, warmup=5):
    for _ in range(warmup):
        fn()
    lat = []
    start = time.perf_counter()
    while len(lat) < 10 or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return statistics.median(lat), len(lat)


def worker_ort(path, batch, threads, min_time):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([batch] + list(inp.shape[1:])).astype(np.float32)
    p50, n = timed(lambda: s.run(None, {inp.name: x}), min_time)
    return {"p50_ms": 1e3 * p50, "runs": n, "version": ort.__version__}


def worker_torch(model, batch, threads, min_time):
    import torch
    import torch_models
    torch.set_num_threads(threads)
    net = torch_models.build(model).eval()
    c, h, w = torch_models.input_shape(model)
    best = None
    for fmt in ("channels_last", "contiguous"):
        x = torch.randn(batch, c, h, w)
        m = net
        if fmt == "channels_last":
            m = net.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        else:
            m = net.to(memory_format=torch.contiguous_format)
        with torch.no_grad():
            p50, n = timed(lambda: m(x), min_time)
        if best is None or p50 < best["p50_ms"] / 1e3:
            best = {"p50_ms": 1e3 * p50, "runs": n, "format": fmt}
    best["version"] = torch.__version__
    return best


def export(model, batch, path):
    import torch
    import torch_models
    net = torch_models.build(model).eval()
    c, h, w = torch_models.input_shape(model)
    torch.onnx.export(net, torch.randn(batch, c, h, w), path, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamo=False)


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def torch_env():
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reckon", default=os.path.join(ROOT, "build", "reckon"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--cases", default=",".join(f"{m}:{b}" for m, b in CASES))
    ap.add_argument("--pythons", default=f"{sys.executable},/usr/bin/python3",
                    help="interpreters to run PyTorch under (those without torch are skipped)")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, target, batch = a.worker[0], a.worker[1], int(a.worker[2])
        r = worker_ort(target, batch, a.threads, a.min_time) if kind == "ort" else \
            worker_torch(target, batch, a.threads, a.min_time)
        print(json.dumps(r))
        return
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in a.cases.split(",")]
    pythons = [p for p in a.pythons.split(",")
               if subprocess.run([p, "-c", "import torch"], capture_output=True).returncode == 0]
    results = []
    tmp = tempfile.mkdtemp(prefix="reckon_infer_")
    for model, batch in cases:
        path = os.path.join(tmp, f"{model}_b{batch}.onnx")
        export(model, batch, path)
        runs = {"reckon": [], "ort": []}
        torch_runs = {p: [] for p in pythons}
        info = {}
        for _ in range(a.repeats):
            r = run_json([a.reckon, "bench-infer", path, "--batch", str(batch), "--threads", str(a.threads),
                          "--min-time", str(a.min_time), "--json"])
            if "p50_ms" in r:
                runs["reckon"].append(r["p50_ms"])
                info["reckon"] = {k: r[k] for k in ("reorders_per_run", "arena_bytes", "cpu_isa", "kernel_steps",
                                                     "onednn_steps")}
                info["reckon"]["passes"] = {p["name"]: p["rewrites"] for p in r["passes"]}
            else:
                info["reckon_error"] = r.get("error")
            o = run_json([sys.executable, __file__, "--threads", str(a.threads), "--min-time", str(a.min_time),
                          "--worker", "ort", path, str(batch)])
            if "p50_ms" in o:
                runs["ort"].append(o["p50_ms"])
                info["ort_version"] = o["version"]
            for p in pythons:
                t = run_json([p, __file__, "--threads", str(a.threads), "--min-time", str(a.min_time),
                              "--worker", "torch", model, str(batch)], env=torch_env())
                if "p50_ms" in t:
                    torch_runs[p].append(t["p50_ms"])
                    info[f"torch:{p}"] = {"version": t["version"], "format": t["format"]}
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        best_torch = None
        for p, v in torch_runs.items():
            if v and (best_torch is None or statistics.median(v) < best_torch[1]):
                best_torch = (p, statistics.median(v))
        row = {"model": model, "batch": batch, "threads": a.threads, "reckon_p50_ms": med.get("reckon"),
               "ort_p50_ms": med.get("ort"), "torch_p50_ms": best_torch[1] if best_torch else None,
               "torch": info.get(f"torch:{best_torch[0]}") if best_torch else None, "info": info}
        results.append(row)
        print(json.dumps(row), file=sys.stderr)

    def ips(b, ms):
        return b / (ms / 1e3) if ms else float("nan")

    print(f"\n{a.threads} threads; median of {a.repeats} repeats of p50 latency; images/s = batch / p50")
    print("| case | reckon img/s | ONNX Runtime img/s | PyTorch img/s | reckon / ORT | reckon / PyTorch | reckon p50 ms | ORT p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        b = r["batch"]
        rk, ort, tt = ips(b, r["reckon_p50_ms"]), ips(b, r["ort_p50_ms"]), ips(b, r["torch_p50_ms"])
        tname = f" ({r['torch']['version']}, {r['torch']['format']})" if r["torch"] else ""
        print(f"| {r['model']} batch {b} | {rk:,.1f} | {ort:,.1f} | {tt:,.1f}{tname} | {rk / ort:.2f} | {rk / tt:.2f} | "
              f"{r['reckon_p50_ms'] or float('nan'):.3f} | {r['ort_p50_ms'] or float('nan'):.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
