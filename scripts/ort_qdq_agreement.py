#!/usr/bin/env python3
"""The ONNX Runtime oracle of reckon's int8 export: runs a QDQ .onnx file (written by
`reckon quantize --out`) on the Fashion-MNIST test split, normalised as reckon normalised it, and
compares its top-1 predictions with reckon's int8 logits (`reckon quantize --dump-outputs`).

usage: ort_qdq_agreement.py MODEL.onnx RECKON_LOGITS.npy MEAN STD [DATASET_DIR]
       ort_qdq_agreement.py --quantize FP32.onnx QDQ.onnx ORT_LOGITS.npy MEAN STD [DATASET_DIR]

MEAN and STD are the per-channel normalisation (comma separated; empty for none). The first form
prints one JSON line: agreement (share of images whose argmax is the same), the two top-1
accuracies, the largest logit difference and the ops ONNX Runtime's optimised graph runs. The
second quantizes FP32.onnx with ONNX Runtime's own quantize_static (after quant_pre_process: QDQ,
per-channel s8 weights, u8 activations, min-max on the first 800 training images), writes it and
its logits on the test split, and prints the scale of the output's last quantization (one step of
the logits). Exit status 0, or 2 when onnx, onnxruntime or numpy is missing. ONNX Runtime runs as a
peer should: ORT_ENABLE_ALL, 2 threads."""
import collections
import gzip
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:
    print(f"ort_qdq_agreement: {e} (pip install onnx onnxruntime numpy)", file=sys.stderr)
    sys.exit(2)


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def images(root, split, mean, std):
    x = idx(os.path.join(root, f"{split}-images-idx3-ubyte.gz")).astype(np.float32)[:, None] / 255.0
    if mean:
        m = np.array([float(v) for v in mean.split(",")], np.float32).reshape(1, -1, 1, 1)
        s = np.array([float(v) for v in std.split(",")], np.float32).reshape(1, -1, 1, 1)
        x = (x - m) / s
    return x


def session(path, optimized=""):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    if optimized:
        so.optimized_model_filepath = optimized
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run_all(sess, x):
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: x[i:i + 500]})[0] for i in range(0, len(x), 500)])


def ort_quantize(argv):
    from ort_quantize import output_step, quantize_static_qdq
    fp32, qdq, out, mean, std = argv[2:7]
    root = argv[7] if len(argv) > 7 else "/usr/share/datasets/fashion-mnist"
    xt = images(root, "train", mean, std)[:800]
    quantize_static_qdq(fp32, qdq, [xt[i:i + 100] for i in range(0, len(xt), 100)])
    np.save(out, run_all(session(qdq), images(root, "t10k", mean, std)))
    print(json.dumps({"output_step": output_step(qdq) or 0.0}))
    return 0


def main(argv):
    if argv[1] == "--quantize":
        return ort_quantize(argv)
    model, logits, mean, std = argv[1:5]
    root = argv[5] if len(argv) > 5 else "/usr/share/datasets/fashion-mnist"
    x = images(root, "t10k", mean, std)
    y = idx(os.path.join(root, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    opt = os.path.join(tempfile.mkdtemp(), "optimized.onnx")
    so.optimized_model_filepath = opt
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    out = np.concatenate([sess.run(None, {name: x[i:i + 500]})[0] for i in range(0, len(x), 500)])
    rk = np.load(logits)
    n = min(len(rk), len(out))
    ops = collections.Counter(node.op_type for node in onnx.load(opt).graph.node)
    print(json.dumps({
        "images": int(n),
        "agreement": float(np.mean(out[:n].argmax(1) == rk[:n].argmax(1))),
        "ort_accuracy": float(np.mean(out[:n].argmax(1) == y[:n])),
        "reckon_accuracy": float(np.mean(rk[:n].argmax(1) == y[:n])),
        "max_abs_logit_diff": float(np.abs(out[:n] - rk[:n]).max()),
        "ort_ops": dict(ops),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
