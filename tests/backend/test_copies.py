"""Copies between host and devices, for every dtype: the allocator's copyin/copyout, and
COPY between devices (`t.to(...)`) in both directions, mixed with kernels."""
import numpy as np
import pytest

from codegen.dtypes import dtypes
from lazyten import Tensor
from lazyten.creation import to_numpy_dtype
from tests.helpers import rne_bf16

NP = {d: to_numpy_dtype(d) for d in dtypes.all()}


def values(dtype, n=37):
    x = np.random.default_rng(0).standard_normal(n) * 50
    if dtype == dtypes.bfloat16:  # its values, as float32
        return rne_bf16(x)
    return (x > 0) if dtype == dtypes.bool else x.astype(NP[dtype])


@pytest.mark.null_ok
@pytest.mark.parametrize("dtype", dtypes.all(), ids=str)
def test_roundtrip_every_dtype(device, dtype):
    x = values(dtype)
    got = Tensor(x, device=device, dtype=dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), x)
    moved = Tensor(x, dtype=dtype).to(device)  # CPU -> device -> CPU
    assert moved.device == device
    np.testing.assert_array_equal(moved.to("CPU").numpy(), x)


@pytest.mark.null_ok
def test_empty_and_scalar(device):
    assert Tensor(np.zeros((0, 3), np.float32), device=device).to("CPU").numpy().shape == (0, 3)
    assert Tensor(np.float32(2.5), device=device).numpy() == np.float32(2.5)


def test_compute_across_devices(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    on_device = Tensor(x, device="CPU").to(device) * 2           # computed on the device
    back = on_device.to("CPU") + 1                               # then on the CPU
    np.testing.assert_array_equal(back.numpy(), x * 2 + 1)
    there = (Tensor(x, device="CPU") - 1).to(device).sum(axis=0)  # CPU result used on device
    np.testing.assert_array_equal(there.numpy(), (x - 1).sum(axis=0))


def test_copy_of_a_view(device):
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    view = Tensor(x, device=device).T[::2]                      # non-contiguous source
    np.testing.assert_array_equal(view.to("CPU").numpy(), x.T[::2])


def test_gradient_flows_back_across_devices(device):
    w = Tensor(np.array([1.0, -2.0, 3.0], np.float32), device="CPU", requires_grad=True)
    (w.to(device) * 3).sum().backward()
    assert w.grad.device == "CPU"
    np.testing.assert_array_equal(w.grad.numpy(), np.full(3, 3.0, np.float32))
