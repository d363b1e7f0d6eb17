"""reckon: what a training run will cost (memory, MACs, time), before it runs; then the run.

The same verbs as the ``reckon`` command line, over the same C++ library (the ``_reckon``
module), so the figures here are the figures the CLI prints::

    import reckon
    l = reckon.ledger("resnet18_cifar", batch=32)        # a training step, predicted on no data
    print(l)                                              # the CLI's report
    l.memory["peak_bytes"], l.totals["fwd_macs"]          # the CLI's JSON, as dicts
    l.to_pandas()                                         # the per-layer table (needs pandas)

    p = reckon.plan("resnet18", batch=256, memory="8GiB") # the ladder that fits a budget
    r = reckon.train("lenet5", epochs=2, callback=lambda s: print(s["loss"]))

    m = reckon.model("lenet5")                            # the zoo, or an .onnx file
    sd = m.state_dict()                                   # name -> reckon.Tensor (the model's memory)
    torch_twin.load_state_dict({k: torch.from_dlpack(v) for k, v in sd.items()})
    m.load_state_dict(torch_twin.state_dict())            # torch tensors in, no copy on the way

    reckon.ledger(torch_module, example_input=x)          # any PyTorch CNN, through an ONNX export

    e = reckon.Engine(reckon.model("model.int8.onnx"), (1, 3, 32, 32))  # the inference engine
    y = e.run(x)                                          # (a QDQ file runs its int8 kernels)

Tensors share memory with numpy and PyTorch both ways (DLPack and the buffer protocol):
``numpy.asarray(t)``, ``torch.from_dlpack(t)``, ``reckon.tensor(numpy_or_torch)``.
Errors from the library are ``reckon.Error`` (a RuntimeError) with the CLI's one-line message.
"""
from __future__ import annotations

import copy
import json
import os
import tempfile
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import _reckon
from ._reckon import Engine, Error, Module, Tensor, tensor

__all__ = [
    "Engine", "Error", "Module", "Tensor", "tensor", "from_numpy", "from_dlpack", "models", "model", "input_shape",
    "Ledger", "ledger", "Plan", "plan", "TrainResult", "train", "train_options", "export_onnx", "version",
]

__version__ = "0.1.0"


def version() -> str:
    """What ``reckon --version`` prints: version, build type, oneDNN version, CUDA yes/no."""
    return _reckon._version()


# ---- tensors ----

def from_numpy(array) -> Tensor:
    """A reckon.Tensor on a numpy array's memory (no copy; the tensor keeps the array alive)."""
    return tensor(array)


def from_dlpack(obj) -> Tensor:
    """A reckon.Tensor on the memory of any cpu object with ``__dlpack__`` (a torch tensor, ...)."""
    return tensor(obj)


# ---- the zoo ----

def models() -> list[str]:
    """The zoo's model names (``reckon models``)."""
    return list(_reckon.model_names())


def model(name: Union[str, os.PathLike], classes: Optional[int] = None, in_channels: Optional[int] = None) -> Module:
    """A zoo model by name, or the model in an .onnx file, with fresh weights on the cpu.

    classes and in_channels default to the model's own (lenet5: 10 and 1)."""
    return _reckon._make_model(os.fspath(name), classes or 0, in_channels or 0)


def input_shape(name: Union[str, os.PathLike], in_channels: Optional[int] = None) -> tuple[int, int, int]:
    """One sample's (C, H, W) for a zoo model or an .onnx file."""
    return tuple(_reckon._model_input_shape(os.fspath(name), in_channels or 0))


def export_onnx(m: Union[Module, str], path: Union[str, os.PathLike], batch: Union[int, str] = 1,
                input: Optional[Sequence[int]] = None, opset: int = 17) -> str:
    """Writes a reckon model (a Module, or a zoo name with fresh weights) as ONNX, as ``reckon export``:
    checked by the ONNX library, written through a temporary file. batch is a number or "dynamic";
    input is one sample's (C, H, W) (default: the model's). Returns the path."""
    if isinstance(m, str):
        chw = tuple(input) if input else input_shape(m)
        m = model(m, in_channels=chw[0])
    else:
        if not input:
            raise TypeError("export_onnx(): give input=(C, H, W) for a Module")
        chw = tuple(input)
    dynamic = batch == "dynamic"
    n = 1 if dynamic else int(batch)
    m.export_onnx(os.fspath(path), [n, *chw], opset, dynamic)
    return os.fspath(path)


# ---- results: the CLI's JSON as attributes, its text as str() ----

class _Report:
    """The CLI's JSON for one verb (``to_dict()``, ``to_json()``, keys as attributes) and its text report
    (``str()``)."""

    def __init__(self, data: dict, text: str):
        self._data = data
        self._text = text

    def __getattr__(self, key: str) -> Any:
        data = self.__dict__.get("_data", {})  # (empty while a copy or an unpickling is under way)
        if key in data:
            return data[key]
        raise AttributeError(f"{type(self).__name__} has no field {key!r} (fields: {', '.join(data)})")

    def __dir__(self) -> Iterable[str]:
        return list(super().__dir__()) + list(self._data)

    def to_dict(self) -> dict:
        """A deep copy of the JSON the CLI prints with --json."""
        return copy.deepcopy(self._data)

    def to_json(self, indent: Optional[int] = None) -> str:
        return json.dumps(self._data, indent=indent)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<reckon.{type(self).__name__} {self._summary()}>"

    def _summary(self) -> str:
        return ""


class Ledger(_Report):
    """What one training step (or, with inference=True, one forward of the inference engine) costs:
    the JSON of ``reckon ledger --json`` as attributes (``totals``, ``memory``, ``time``, ``layers``;
    inference: ``totals``, ``steps``, ``passes``), its text report as ``str()``, and the per-layer
    table as ``rows`` and ``to_pandas()``."""

    @property
    def rows(self) -> list[dict]:
        """One dict per layer (training: the module scopes) or per engine step (inference)."""
        return self._data["layers"] if "layers" in self._data else self._data["steps"]

    def to_pandas(self):
        """The per-layer table as a pandas DataFrame (one row per layer, the JSON's columns)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Ledger.to_pandas() needs pandas (pip install pandas); to_dict() needs nothing") from e
        return pd.DataFrame(self.rows)

    def _summary(self) -> str:
        d = self._data
        batch = d["config"]["batch"] if "config" in d else d.get("batch")
        return f"{d['model']} batch {batch}"


class Plan(_Report):
    """The ladder of ``reckon plan``: every rung tried (``ladder``), and the chosen one (``best``)."""

    @property
    def best(self) -> Optional[dict]:
        c = self._data.get("chosen", -1)
        return self._data["ladder"][c] if c is not None and c >= 0 else None

    def _summary(self) -> str:
        b = self.best
        return "nothing fits" if b is None else f"micro-batch {b['micro_batch']} x {b['accum']}, {b['precision']}"


class TrainResult(_Report):
    """What ``reckon.train`` ran: per-epoch figures (``epochs``), the last test accuracy
    (``test_accuracy``), the step losses (``losses``), the checkpoint written (``checkpoint``)."""

    def _summary(self) -> str:
        return f"{self._data['steps']} steps, test accuracy {100 * self._data['test_accuracy']:.2f}%"


# ---- ledger ----

def _torch_to_onnx(module, example_input, directory: str) -> str:
    """Exports a torch.nn.Module with the TorchScript exporter (opset 17; batch norms kept, so the
    training ledger sees them), the way most published ONNX CNNs were written."""
    import torch
    import warnings

    path = os.path.join(directory, "model.onnx")
    was_training = module.training
    kwargs = dict(opset_version=17, training=torch.onnx.TrainingMode.PRESERVE, input_names=["input"],
                  output_names=["output"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(module, example_input, path, dynamo=False, **kwargs)
            except TypeError:  # torch 1.x: no dynamo argument
                torch.onnx.export(module, example_input, path, **kwargs)
    finally:
        module.train(was_training)
    return path


def _model_arg(model, example_input, directory: str) -> tuple[str, Optional[int], Optional[list[int]]]:
    """(name or path, batch from the example, (C, H, W) from the example) for any model argument."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), None, None
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if example_input is None:
            raise TypeError("ledger(): a torch.nn.Module needs example_input (a batch, e.g. torch.randn(8, 3, 32, 32))")
        shape = list(example_input.shape)
        if len(shape) != 4:
            raise ValueError(f"ledger(): example_input must be (N, C, H, W), got {shape}")
        return _torch_to_onnx(model, example_input, directory), shape[0], shape[1:]
    raise TypeError(f"ledger(): model must be a zoo name, an .onnx path or a torch.nn.Module, not {type(model).__name__}")


def ledger(model, batch: Optional[int] = None, *, example_input=None, input: Optional[Sequence[int]] = None,
           classes: Optional[int] = None, precision: str = "fp32", accum: int = 1, recompute: bool = False,
           conv_algo: str = "", memory_format: str = "auto", grad_scaler: str = "auto", optimizer: str = "sgd",
           momentum: float = 0.9,
           freeze: Sequence[str] = (), device: str = "cpu", dataset_size: int = 0, epochs: int = 1,
           measure: bool = False, measure_steps: int = 3, inference: bool = False,
           progress: bool = False, html: Optional[Union[str, os.PathLike]] = None) -> Ledger:
    """What one training step of ``model`` costs, predicted on the meta device (``reckon ledger``).

    model: a zoo name, an .onnx path, or a torch.nn.Module with ``example_input`` (exported to ONNX
    first; its batch is the example's unless ``batch`` is given). The options are the CLI's
    (``reckon ledger --help``); inference=True gives the deployment ledger (``--inference``),
    measure=True runs the step on this cpu too, html="report.html" also writes the page of
    ``--html`` (memory timeline, roofline, per-layer table). Returns a Ledger whose ``to_dict()``
    equals ``reckon ledger ... --json``."""
    if inference and html is not None:
        raise Error("[ledger] html= draws the training step; not with inference=True")
    with tempfile.TemporaryDirectory(prefix="reckon-") as tmp:
        name, ex_batch, ex_chw = _model_arg(model, example_input, tmp)
        b = batch if batch is not None else (ex_batch if ex_batch is not None else 1)
        chw = list(input) if input is not None else (ex_chw or [])
        if inference:
            data, text = _reckon._inference_ledger(
                name, _config(_reckon.InferenceConfig(), batch=b, input=chw, device=device, precision=precision,
                              measure=measure), progress)
        else:
            cfg = _config(_reckon.LedgerConfig(), batch=b, input=chw, num_classes=classes or 0, precision=precision,
                          accum=accum, recompute=recompute, conv_algo=conv_algo, memory_format=memory_format,
                          grad_scaler=grad_scaler,
                          optimizer=optimizer, momentum=momentum, freeze=list(freeze), device=device,
                          dataset_size=dataset_size, epochs=epochs, measure=measure, measure_steps=measure_steps)
            data, text = _reckon._ledger(name, cfg, os.fspath(html) if html is not None else "", progress)
        if ex_batch is not None:  # a torch module: named by its class, not by the temporary file
            label = f"{type(model).__name__} (torch)"
            data, text = data.replace(json.dumps(name)[1:-1], label), text.replace(name, label)
    return Ledger(json.loads(data), text)


def _config(cfg, **fields):
    """cfg (a bound C++ config) with its fields set by name."""
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def _bytes(v: Union[int, str], what: str) -> int:
    return int(v) if isinstance(v, int) else _reckon._parse_bytes(str(v), what)


def plan(model: str, batch: int, memory: Union[int, str], *, device: str = "cpu",
         input: Optional[Sequence[int]] = None, classes: Optional[int] = None, optimizer: str = "sgd",
         momentum: float = 0.9, precisions: Sequence[str] = ("fp32", "bf16", "fp16"),
         allow_recompute: bool = True, allow_direct_conv: bool = True, progress: bool = False) -> Plan:
    """The fastest way to train ``model`` at an effective ``batch`` within ``memory`` (bytes, or "8GiB"):
    the ladder of ``reckon plan`` (micro-batch, precision, accumulation, recomputation)."""
    cfg = _config(_reckon.PlanConfig(), model=model, batch=int(batch), memory_bytes=_bytes(memory, "memory"),
                  device=device, input=list(input) if input is not None else [], num_classes=classes or 0,
                  optimizer=optimizer, momentum=momentum, precisions=list(precisions),
                  allow_recompute=allow_recompute, allow_direct_conv=allow_direct_conv)
    data, text = _reckon._plan(cfg, progress)
    return Plan(json.loads(data), text)


# ---- train ----

def train_options() -> dict[str, tuple[Any, str]]:
    """The options train() takes: name -> (default, help), the fields of ``reckon train --help``."""
    return {name: (default, help) for name, default, help in _reckon._train_options()}


def train(model: str = "lenet5", *, callback: Optional[Callable[[dict], Optional[bool]]] = None,
          **options) -> TrainResult:
    """Trains a zoo model as ``reckon train`` does, with the same options by name (``train_options()``:
    data, epochs, batch, lr, optimizer, precision, accum, max_memory="4GiB", out, resume, init, seed,
    threads, val_split, ...).

    callback(step) is called after every optimizer step with a dict (step, epoch, batch, batches,
    loss, lr, samples); returning False stops the run with a checkpoint (as Ctrl-C does).
    The log and progress go to stderr as in the CLI (verbose=0: none; progress=0/1: the bar off/on,
    -1: when stderr is a terminal). Raises reckon.Error
    with the CLI's message for a bad option, file or dataset."""
    opts = dict(options, model=model)
    result = _reckon._train(opts, callback)
    return TrainResult(result, _train_text(result))


def _train_text(r: dict) -> str:
    lines = [f"epoch {e['epoch']}: train loss {e['train_loss']:.4f}, test accuracy {100 * e['test_accuracy']:.2f}%"
             for e in r["epochs"]]
    lines.append(f"final test accuracy {100 * r['test_accuracy']:.2f}% (loss {r['test_loss']:.4f}); "
                 f"checkpoint: {r['checkpoint']}")
    return "\n".join(lines)
