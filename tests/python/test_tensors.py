"""reckon.Tensor and numpy / PyTorch: the same memory both ways (DLPack and the buffer protocol), no copy."""
import array
import gc

import numpy as np
import pytest
import torch

import reckon


def test_numpy_in_shares_memory():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = reckon.tensor(a)
    assert t.data_ptr == a.ctypes.data
    assert t.shape == [2, 3, 4] and t.dtype == "f32" and t.device == "cpu"
    a[1, 2, 3] = -7.5  # a write through numpy is seen through reckon
    assert np.asarray(t)[1, 2, 3] == -7.5


def test_numpy_out_shares_memory():
    t = reckon.tensor(np.zeros((3, 5), dtype=np.float64))
    n = t.numpy()
    m = np.asarray(t)
    assert n.ctypes.data == t.data_ptr and m.ctypes.data == t.data_ptr
    n[0, 0] = 4.0
    assert m[0, 0] == 4.0 and n.dtype == np.float64


def test_torch_both_ways_share_memory():
    x = torch.randn(4, 3, 8, 8)
    t = reckon.from_dlpack(x)
    assert t.data_ptr == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(x, y)
    y.mul_(2)  # one memory: the write shows in x
    assert torch.equal(x, y)


def test_numpy_reckon_torch_round_trip_is_one_buffer():
    a = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    y = torch.from_dlpack(reckon.tensor(a))
    assert y.data_ptr() == a.ctypes.data
    assert np.array_equal(y.numpy(), a)


def test_strided_views_keep_their_strides():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T  # (4, 3), strides (1, 4) in elements
    t = reckon.tensor(a)
    assert t.shape == [4, 3] and t.strides == [1, 4]
    assert np.array_equal(np.asarray(t), a)
    with pytest.raises(reckon.Error, match="negative strides"):
        reckon.tensor(np.arange(5, dtype=np.float32)[::-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                                   torch.uint8, torch.int32, torch.int64])
def test_every_dtype_round_trips_through_torch(dtype):
    x = (torch.arange(10) - 3).to(dtype)
    if dtype == torch.uint8:
        x = torch.arange(10, dtype=dtype)
    y = torch.from_dlpack(reckon.tensor(x))
    assert y.dtype == dtype and torch.equal(x, y) and y.data_ptr() == x.data_ptr()


def test_buffer_protocol_objects_are_taken():
    buf = array.array("f", [1.0, 2.0, 3.5])
    t = reckon.tensor(buf)
    assert t.shape == [3] and t.dtype == "f32"
    assert t.data_ptr == buf.buffer_info()[0]
    assert np.asarray(t).tolist() == [1.0, 2.0, 3.5]


def test_unsupported_input_names_the_type():
    with pytest.raises(TypeError, match="str"):
        reckon.tensor("not an array")
    with pytest.raises(reckon.Error, match="no reckon dtype"):
        reckon.tensor(np.zeros(3, dtype=np.complex64))
    with pytest.raises(ValueError, match="read-only"):
        reckon.tensor(np.frombuffer(b"\0" * 8, dtype=np.float32))


def test_the_tensor_keeps_the_array_alive():
    a = np.full((1000,), 3.0, dtype=np.float32)
    t = reckon.tensor(a)
    del a
    gc.collect()
    np.asarray(t)[:] += 1  # the memory is still numpy's, kept by the tensor
    assert float(np.asarray(t).sum()) == 4000.0


def test_the_array_keeps_the_tensor_alive():
    m = reckon.model("lenet5")
    w = m.state_dict()["features.0.weight"]
    n = np.asarray(w)
    before = n.copy()
    del m, w
    gc.collect()
    assert np.array_equal(n, before)  # still readable: the array holds the module's storage


def test_buffer_protocol_out_shares_memory():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = reckon.tensor(a)
    m = memoryview(t)
    assert m.shape == (3, 4) and m.strides == (16, 4) and m.format == "i" and not m.readonly
    b = np.frombuffer(m, dtype=np.int32)
    assert b.ctypes.data == a.ctypes.data
    m[1, 2] = 99  # a write through the buffer is seen by the array underneath
    assert a[1, 2] == 99
    s = memoryview(reckon.tensor(a.T))  # strided: shape and byte strides as they are
    assert s.shape == (4, 3) and s.strides == (4, 16) and not s.c_contiguous
    with pytest.raises(BufferError, match="bf16"):
        memoryview(reckon.tensor(torch.zeros(2, dtype=torch.bfloat16)))
