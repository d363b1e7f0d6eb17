"""The zoo and Module from Python: state_dict into and out of the PyTorch twins (scripts/torch_models.py),
the forward against PyTorch's, ONNX export run by ONNX Runtime and read back."""
import numpy as np
import pytest
import torch

import reckon
from conftest import cli_json


def test_models_are_the_clis():
    names = reckon.models()
    assert "lenet5" in names and "resnet18_cifar" in names
    listed = cli_json("models")
    listed_names = [m["name"] if isinstance(m, dict) else m for m in (listed["models"] if isinstance(listed, dict) else listed)]
    assert names == listed_names


@pytest.mark.parametrize("name", ["lenet5", "resnet18_cifar", "mobilenet_v2"])
def test_state_dict_loads_into_the_pytorch_twin_and_forwards_agree(name, torch_models):
    m = reckon.model(name, classes=10)
    m.eval()
    sd = m.state_dict()
    twin = torch_models.build(name, num_classes=10).eval()
    twin.load_state_dict({k: torch.from_dlpack(v) for k, v in sd.items()}, strict=True)
    chw = reckon.input_shape(name)
    hw = (32, 32) if name == "mobilenet_v2" else chw[1:]
    x = torch.randn(2, chw[0], *hw, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = twin(x).numpy()
    got = np.asarray(m.forward(x))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_torch_weights_load_into_reckon(torch_models):
    torch.manual_seed(1)
    twin = torch_models.build("resnet18_cifar").eval()
    for mod in twin.modules():  # batch norm statistics other than the defaults
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
    m = reckon.model("resnet18_cifar")
    missing, unexpected = m.load_state_dict(twin.state_dict())
    assert missing == [] and unexpected == []
    m.eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        want = twin(x).numpy()
    np.testing.assert_allclose(np.asarray(m.forward(x)), want, rtol=1e-4, atol=1e-4)


def test_state_dict_tensors_are_the_modules_memory():
    m = reckon.model("lenet5")
    m.eval()
    x = np.ones((1, 1, 28, 28), dtype=np.float32)
    before = np.asarray(m.forward(x)).copy()
    b = m.state_dict()["classifier.5.bias"]
    np.asarray(b)[:] += 1.0  # the last layer's bias, written in place through numpy
    np.testing.assert_allclose(np.asarray(m.forward(x)), before + 1.0, rtol=1e-5, atol=1e-5)


def test_load_state_dict_reports_keys_and_shapes():
    m = reckon.model("lenet5")
    sd = {k: np.asarray(v).copy() for k, v in m.state_dict().items()}
    extra = dict(sd, **{"module.unused": np.zeros(3, dtype=np.float32)})
    del extra["features.0.bias"]
    with pytest.raises(reckon.Error, match="features.0.bias"):
        m.load_state_dict(extra)
    missing, unexpected = m.load_state_dict(extra, strict=False)
    assert missing == ["features.0.bias"] and unexpected == ["module.unused"]
    bad = dict(sd, **{"features.0.weight": np.zeros((6, 1, 3, 3), dtype=np.float32)})
    with pytest.raises(reckon.Error, match=r"features\.0\.weight"):
        m.load_state_dict(bad)


def test_export_runs_in_onnx_runtime_and_reads_back(tmp_path):
    import onnxruntime as ort
    m = reckon.model("lenet5")
    m.eval()
    path = reckon.export_onnx(m, tmp_path / "lenet5.onnx", batch="dynamic", input=(1, 28, 28))
    x = np.random.default_rng(0).standard_normal((5, 1, 28, 28)).astype(np.float32)
    want = np.asarray(m.forward(x))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    back = reckon.model(path)
    np.testing.assert_allclose(np.asarray(back.forward(x)), want, rtol=1e-5, atol=1e-5)
    assert reckon.input_shape(path) == (1, 28, 28)


def test_unknown_model_is_named():
    with pytest.raises(reckon.Error, match="nosuchnet"):
        reckon.model("nosuchnet")


def test_version_is_the_clis():
    from conftest import cli
    assert reckon.version() == cli("--version").stdout.strip()
