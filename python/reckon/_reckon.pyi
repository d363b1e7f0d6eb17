"""reckon's C++ library (the Python package wraps it: import reckon)"""

from collections.abc import Sequence

from numpy.typing import NDArray


class Error(RuntimeError):
    pass

class Tensor:
    """
    A reckon tensor. numpy and PyTorch share its memory without a copy: numpy.asarray(t), t.numpy(), torch.from_dlpack(t), memoryview(t).
    """

    @property
    def shape(self) -> list[int]: ...

    @property
    def strides(self) -> list[int]: ...

    @property
    def dtype(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def data_ptr(self) -> int:
        """the address of the first element (for checking that memory is shared)"""

    def numel(self) -> int: ...

    def numpy(self) -> NDArray:
        """
        a numpy array on the same memory (no copy); bf16 has no numpy dtype: use torch.from_dlpack
        """

    def __array__(self, dtype: object | None = None, copy: object | None = None) -> object: ...

    def __dlpack__(self, **kwargs) -> object: ...

    def __dlpack_device__(self) -> tuple: ...

    def __repr__(self) -> str: ...

def tensor(array: object) -> Tensor:
    """
    A reckon.Tensor on the memory of a numpy array, a torch tensor (cpu) or any object with DLPack or the buffer protocol: no copy; the tensor keeps the array alive.
    """

class Module:
    """A reckon model: a named tree of layers with parameters and buffers."""

    @property
    def type_name(self) -> str: ...

    def named_parameters(self) -> list[tuple[str, Tensor]]: ...

    def named_buffers(self) -> list[tuple[str, Tensor]]: ...

    def num_parameters(self) -> int: ...

    def state_dict(self) -> dict:
        """
        name -> Tensor in PyTorch's order; each tensor is the module's own memory (writing it writes the module)
        """

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> tuple[list[str], list[str]]:
        """
        copies matching entries (reckon tensors, numpy arrays or torch tensors) into the module; returns (missing_keys, unexpected_keys); strict raises on either, and a shape mismatch always raises
        """

    def train(self, mode: bool = True) -> None: ...

    def eval(self) -> None: ...

    @property
    def training(self) -> bool: ...

    def forward(self, x: object) -> Tensor:
        """
        the forward on a batch (N, C, H, W), without autograd (as under torch.no_grad())
        """

    def export_onnx(self, path: str, input: Sequence[int], opset: int = 17, dynamic_batch: bool = False) -> None: ...

    def __repr__(self) -> str: ...

def model_names() -> list[str]: ...

class LedgerConfig:
    """the settings of reckon ledger (ledger/ledger.h)"""

    def __init__(self) -> None: ...

    @property
    def batch(self) -> int: ...

    @batch.setter
    def batch(self, arg: int, /) -> None: ...

    @property
    def input(self) -> list[int]: ...

    @input.setter
    def input(self, arg: Sequence[int], /) -> None: ...

    @property
    def num_classes(self) -> int: ...

    @num_classes.setter
    def num_classes(self, arg: int, /) -> None: ...

    @property
    def precision(self) -> str: ...

    @precision.setter
    def precision(self, arg: str, /) -> None: ...

    @property
    def accum(self) -> int: ...

    @accum.setter
    def accum(self, arg: int, /) -> None: ...

    @property
    def recompute(self) -> bool: ...

    @recompute.setter
    def recompute(self, arg: bool, /) -> None: ...

    @property
    def conv_algo(self) -> str: ...

    @conv_algo.setter
    def conv_algo(self, arg: str, /) -> None: ...

    @property
    def memory_format(self) -> str: ...

    @memory_format.setter
    def memory_format(self, arg: str, /) -> None: ...

    @property
    def grad_scaler(self) -> str: ...

    @grad_scaler.setter
    def grad_scaler(self, arg: str, /) -> None: ...

    @property
    def optimizer(self) -> str: ...

    @optimizer.setter
    def optimizer(self, arg: str, /) -> None: ...

    @property
    def freeze(self) -> list[str]: ...

    @freeze.setter
    def freeze(self, arg: Sequence[str], /) -> None: ...

    @property
    def momentum(self) -> float: ...

    @momentum.setter
    def momentum(self, arg: float, /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def dataset_size(self) -> int: ...

    @dataset_size.setter
    def dataset_size(self, arg: int, /) -> None: ...

    @property
    def epochs(self) -> int: ...

    @epochs.setter
    def epochs(self, arg: int, /) -> None: ...

    @property
    def measure(self) -> bool: ...

    @measure.setter
    def measure(self, arg: bool, /) -> None: ...

    @property
    def measure_steps(self) -> int: ...

    @measure_steps.setter
    def measure_steps(self, arg: int, /) -> None: ...

class InferenceConfig:
    """the settings of reckon ledger --inference (ledger/inference.h)"""

    def __init__(self) -> None: ...

    @property
    def batch(self) -> int: ...

    @batch.setter
    def batch(self, arg: int, /) -> None: ...

    @property
    def input(self) -> list[int]: ...

    @input.setter
    def input(self, arg: Sequence[int], /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def precision(self) -> str: ...

    @precision.setter
    def precision(self, arg: str, /) -> None: ...

    @property
    def measure(self) -> bool: ...

    @measure.setter
    def measure(self, arg: bool, /) -> None: ...

class PlanConfig:
    """the settings of reckon plan (ledger/plan.h)"""

    def __init__(self) -> None: ...

    @property
    def model(self) -> str: ...

    @model.setter
    def model(self, arg: str, /) -> None: ...

    @property
    def batch(self) -> int: ...

    @batch.setter
    def batch(self, arg: int, /) -> None: ...

    @property
    def memory_bytes(self) -> int: ...

    @memory_bytes.setter
    def memory_bytes(self, arg: int, /) -> None: ...

    @property
    def device(self) -> str: ...

    @device.setter
    def device(self, arg: str, /) -> None: ...

    @property
    def input(self) -> list[int]: ...

    @input.setter
    def input(self, arg: Sequence[int], /) -> None: ...

    @property
    def num_classes(self) -> int: ...

    @num_classes.setter
    def num_classes(self, arg: int, /) -> None: ...

    @property
    def optimizer(self) -> str: ...

    @optimizer.setter
    def optimizer(self, arg: str, /) -> None: ...

    @property
    def momentum(self) -> float: ...

    @momentum.setter
    def momentum(self, arg: float, /) -> None: ...

    @property
    def precisions(self) -> list[str]: ...

    @precisions.setter
    def precisions(self, arg: Sequence[str], /) -> None: ...

    @property
    def allow_recompute(self) -> bool: ...

    @allow_recompute.setter
    def allow_recompute(self, arg: bool, /) -> None: ...

    @property
    def allow_direct_conv(self) -> bool: ...

    @allow_direct_conv.setter
    def allow_direct_conv(self, arg: bool, /) -> None: ...
