"""ONNX Runtime's own int8 models run in reckon at int8 speed: a PyTorch model exported to ONNX,
quantized by ONNX Runtime's quantize_static (QDQ: per-channel s8 weights, asymmetric u8
activations, its Relu and Clip removed into the quantization), then opened in reckon.Engine. The
engine's fuse_qdq pass turns every Conv and Gemm between DequantizeLinear and QuantizeLinear into an
int8 kernel (no float convolution is left), and its outputs are ONNX Runtime's: the same top-1, and
logits within one step of the output's quantization (the issue's bound). reckon's int8 arithmetic is
ONNX Runtime's where the two could differ: the requantization multiplier in float32, the output's
zero point added after the rounding, QLinearAdd's float32 form; on these models and seeds the
logits came out identical (2026-12-05)."""
import os
import sys

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

import reckon  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "scripts"))
from ort_quantize import output_step, quantize_static_qdq  # noqa: E402

CASES = [  # model, input (C, H, W), batch, largest logit difference allowed, in output steps
    ("lenet5", (1, 28, 28), 4, 1),
    ("resnet18_cifar", (3, 32, 32), 2, 1),
    ("mobilenet_v2", (3, 32, 32), 2, 1),
]


def session(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = 2
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name,chw,batch,max_steps", CASES)
def test_ort_quantize_static_model_runs_int8_and_agrees(tmp_path, torch_models, name, chw, batch, max_steps):
    torch.manual_seed(0)
    net = torch_models.build(name).eval()
    shape = (batch, *chw)
    fp32, qdq = str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}.qdq.onnx")
    torch.onnx.export(net, torch.randn(*shape), fp32, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamo=False)
    rng = np.random.default_rng(1)
    quantize_static_qdq(fp32, qdq, [rng.standard_normal(shape).astype(np.float32) for _ in range(4)])

    import onnx
    convs = sum(n.op_type == "Conv" for n in onnx.load(qdq).graph.node)
    e = reckon.Engine(reckon.model(qdq), shape)
    ops = [s["op"] for s in e.steps()]
    assert sum(o.startswith("conv2d int8") for o in ops) == convs, ops
    assert not [o for o in ops if o.startswith("conv2d") and "int8" not in o], ops  # no float convolution left
    assert any(o.startswith("linear int8") or o == "linear_int8" for o in ops), ops

    step = output_step(qdq)
    assert step and step > 0
    s = session(qdq)
    worst = 0.0
    for seed in range(4):
        x = np.random.default_rng(10 + seed).standard_normal(shape).astype(np.float32)
        y_ort = s.run(None, {"x": x})[0]
        y = np.asarray(e.run(x))
        assert (y.argmax(1) == y_ort.argmax(1)).all(), (seed, y, y_ort)
        worst = max(worst, float(np.abs(y - y_ort).max()) / step)
    assert worst <= max_steps * 1.001, f"{worst:.3f} output steps from ONNX Runtime"


def test_a_float_model_has_no_int8_step(tmp_path, torch_models):
    """The pass leaves a model without QuantizeLinear/DequantizeLinear as it is."""
    net = torch_models.build("lenet5").eval()
    path = str(tmp_path / "lenet5.onnx")
    torch.onnx.export(net, torch.randn(2, 1, 28, 28), path, opset_version=17, input_names=["x"], output_names=["y"],
                      dynamo=False)
    e = reckon.Engine(reckon.model(path), (2, 1, 28, 28))
    assert not [s for s in e.steps() if "int8" in s["op"]]
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(e.run(x)), net(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-4)
