#!/usr/bin/env python3
"""The ONNX oracle for reckon's tests: checks a model with the onnx package (full check, with
shape inference) and runs it in ONNX Runtime on given inputs, comparing with reckon's outputs.

usage: onnx_ort_check.py MODEL.onnx X1.npy Y1.npy [X2.npy Y2.npy ...]
       onnx_ort_check.py --run MODEL.onnx X.npy OUT.npy     (ONNX Runtime's output, written)

Passes when max |ort - reckon| <= 1e-4 * max |ort| for every pair (fp32). ONNX Runtime runs
as a peer should: ORT_ENABLE_ALL, 2 intra-op threads, one session at a time.
Exit status 0 when all pairs agree, 1 otherwise, 2 when onnx or onnxruntime is missing."""
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:  # the test reports this as a failure, not a skip
    print(f"onnx_ort_check: {e} (pip install onnx onnxruntime numpy)", file=sys.stderr)
    sys.exit(2)


def session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main(argv):
    if argv and argv[0] == "--run":
        path, x, out = argv[1:4]
        s = session(path)
        y = s.run(None, {s.get_inputs()[0].name: np.load(x)})[0]
        np.save(out, y)
        return 0
    path, pairs = argv[0], argv[1:]
    onnx.checker.check_model(onnx.load(path), full_check=True)
    s = session(path)
    name = s.get_inputs()[0].name
    ok = True
    for x_path, y_path in zip(pairs[0::2], pairs[1::2]):
        x, want = np.load(x_path), np.load(y_path)
        got = s.run(None, {name: x})[0]
        if got.shape != want.shape:
            print(f"{path}: input {x.shape}: ONNX Runtime gives shape {got.shape}, reckon {want.shape}")
            ok = False
            continue
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        scale = float(np.max(np.abs(got))) if got.size else 0.0
        good = err <= 1e-4 * max(scale, 1e-30)
        print(f"{path}: input {x.shape}: max |ort - reckon| = {err:.3g} of max |ort| = {scale:.3g}"
              f" -> {'ok' if good else 'DIFFERENT'}")
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
