"""reckon.ledger and reckon.plan: the CLI's JSON, the textbook's AlexNet figures, and any PyTorch CNN
through an ONNX export."""
import json

import pytest
import torch

import reckon
from conftest import cli, cli_json


# What this process holds once the step is planned (and so its predicted peak) is this process's
# own: Python's interpreter and libraries here, the CLI's there. Everything else is equal.
PROCESS_OWN = ("process_planned_bytes", "process_peak_bytes")


def without_process_own(d):
    d = json.loads(json.dumps(d))
    for k in PROCESS_OWN:
        assert d["memory"].pop(k) > 0, k
    return d


def without_process_lines(text):
    return [l for l in text.splitlines()
            if "process peak resident memory (VmHWM), predicted" not in l and "once the step is planned" not in l]


def test_ledger_equals_the_clis_json():
    want = cli_json("ledger", "resnet18_cifar", "--batch", "8", "--precision", "bf16", "--optimizer", "adamw")
    got = reckon.ledger("resnet18_cifar", batch=8, precision="bf16", optimizer="adamw")
    assert without_process_own(got.to_dict()) == without_process_own(want)
    assert without_process_lines(str(got)) == without_process_lines(
        cli("ledger", "resnet18_cifar", "--batch", "8", "--precision", "bf16", "--optimizer", "adamw").stdout)
    # The allocator's part is the step's, the same in any process.
    assert got.memory["allocator_resident_bytes"] == want["memory"]["allocator_resident_bytes"] > 0
    assert got.rows == want["layers"] and got.memory["peak_bytes"] == want["memory"]["peak_bytes"] > 0
    assert without_process_own(json.loads(got.to_json())) == without_process_own(want)


def test_inference_ledger_equals_the_clis_json():
    # The engine's per-step overhead is part of the cpu's cached calibration, so two processes time
    # the engine alike.
    want = cli_json("ledger", "lenet5", "--batch", "4", "--inference")
    got = reckon.ledger("lenet5", batch=4, inference=True)
    assert got.to_dict() == want
    assert got.rows == want["steps"] and len(got.rows) > 0 and got.totals["predicted_latency_ms"] > 0


def test_alexnet_figures_of_the_textbook():
    # The original AlexNet: 62,378,344 parameters; its convolutions 1.08 GMACs per 224x224 image.
    t = reckon.ledger("alexnet", batch=1).totals
    assert t["params"] == 62_378_344
    assert round(t["conv_macs_per_image"] / 1e9, 2) == 1.08


def test_to_pandas_or_a_clear_error():
    l = reckon.ledger("lenet5", batch=64)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            l.to_pandas()
    else:
        df = l.to_pandas()
        assert list(df["scope"]) == [r["scope"] for r in l.rows]
        assert int(df["fwd_macs"].sum()) == l.totals["fwd_macs"]


def test_a_pytorch_module_through_onnx_equals_the_zoo_twin(torch_models):
    twin = torch_models.build("lenet5")
    via_torch = reckon.ledger(twin, example_input=torch.randn(16, 1, 28, 28))
    zoo = reckon.ledger("lenet5", batch=16)
    for k in ("params", "fwd_macs", "bwd_macs", "saved_bytes", "input_bytes"):
        assert via_torch.totals[k] == zoo.totals[k], k
    assert via_torch.memory["peak_bytes"] == zoo.memory["peak_bytes"]
    assert via_torch.totals["micro_batch"] == 16
    assert via_torch.model == f"{type(twin).__name__} (torch)" and "(torch)" in str(via_torch)
    with pytest.raises(TypeError, match="example_input"):
        reckon.ledger(twin)


def test_a_pytorch_resnet_through_onnx_saves_what_its_zoo_twin_saves(torch_models):
    # Batch norms exported in training mode: their running statistics are outputs of the ONNX node,
    # computed without autograd, so they keep nothing alive for backward.
    twin = torch_models.build("resnet18_cifar")
    via_torch = reckon.ledger(twin, example_input=torch.randn(8, 3, 32, 32))
    zoo = reckon.ledger("resnet18_cifar", batch=8)
    for k in ("params", "fwd_macs", "saved_bytes"):
        assert via_torch.totals[k] == zoo.totals[k], k


def test_plan_equals_the_clis_json():
    want = cli_json("plan", "resnet18_cifar", "--batch", "64", "--memory", "300MiB")
    got = reckon.plan("resnet18_cifar", batch=64, memory="300MiB")
    a, b = got.to_dict(), dict(want)
    a.pop("search_s"), b.pop("search_s")  # the search's own wall time
    assert a == b
    assert got.best == want["ladder"][want["chosen"]]
    assert reckon.plan("resnet18_cifar", batch=64, memory=300 * 2**20).ladder == want["ladder"]


def test_errors_name_the_argument():
    with pytest.raises(reckon.Error, match="nosuchnet"):
        reckon.ledger("nosuchnet", batch=1)
    with pytest.raises(reckon.Error, match="precision"):
        reckon.ledger("lenet5", batch=1, precision="fp8")
    with pytest.raises(reckon.Error, match="memory"):
        reckon.plan("lenet5", batch=8, memory="lots")


def test_results_copy_pickle_and_name_their_fields():
    import copy
    import pickle
    l = reckon.ledger("lenet5", batch=2)
    assert copy.deepcopy(l).to_dict() == l.to_dict() == pickle.loads(pickle.dumps(l)).to_dict()
    with pytest.raises(AttributeError, match="no field 'nosuch'.*totals"):
        l.nosuch
