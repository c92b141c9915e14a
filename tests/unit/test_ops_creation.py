"""linspace against PyTorch's formula (first half from start, second half from end) and
numpy's linspace; meshgrid against numpy's meshgrid, in both indexings."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor
from helpers import FLOATS, INTS, NP, assert_tensor, fast


def torch_linspace(start: float, end: float, steps: int) -> list[float]:
    """PyTorch's CPU linspace in Python floats (doubles); one step is start."""
    if steps == 1:
        return [start]
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    return [start + i * step if i < steps // 2 else end - (steps - 1 - i) * step
            for i in range(steps)]


finite = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False)


@given(start=finite, end=finite, steps=st.integers(0, 40))
@fast(25)
def test_linspace_float64_is_pytorchs_formula(start, end, steps):
    out = Tensor.linspace(start, end, steps, dtype=dtypes.float64)
    assert_tensor(out, np.array(torch_linspace(start, end, steps)), dtype=dtypes.float64,
                  exact=True)


@given(start=finite, end=finite, steps=st.integers(1, 40), dtype=st.sampled_from(FLOATS))
@fast(20)
def test_linspace_has_exact_endpoints_and_numpys_values(start, end, steps, dtype):
    out = Tensor.linspace(start, end, steps, dtype=dtype).numpy()
    assert out.dtype == NP[dtype] and out.shape == (steps,)
    assert out[0] == NP[dtype](start), f"first value {out[0]} != start {start}"
    if steps > 1:
        assert out[-1] == NP[dtype](end), f"last value {out[-1]} != end {end}"
    expected = np.linspace(start, end, steps)
    scale = max(abs(start), abs(end), 1e-3)
    tol = {dtypes.float16: 2e-2, dtypes.float32: 1e-6, dtypes.float64: 1e-14}[dtype] * scale
    if dtype == dtypes.float16 and scale > 6e4:
        return
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=0, atol=4 * tol)


def test_linspace_defaults_and_integer_dtypes():
    assert Tensor.linspace(0, 1, 5).dtype == dtypes.float32
    assert Tensor.linspace(0, 1, 5).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    for dtype in INTS:  # start and end are truncated to the dtype first, as PyTorch
        ref = np.trunc(torch_linspace(0.0, 3.0, 4)).astype(NP[dtype])
        assert_tensor(Tensor.linspace(0.5, 3.7, 4, dtype=dtype), ref, dtype=dtype)
    assert Tensor.linspace(-10, 10, 7, dtype=dtypes.int32).tolist() == \
        [int(v) for v in torch_linspace(-10.0, 10.0, 7)]
    assert Tensor.linspace(3, 7, 1).tolist() == [3.0]
    assert Tensor.linspace(3, 7, 0).shape == (0,)
    with pytest.raises(ValueError, match="non-negative"):
        Tensor.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="steps must be an int"):
        Tensor.linspace(0, 1, 2.0)


@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       indexing=st.sampled_from(["ij", "xy"]))
@fast(12)
def test_meshgrid_matches_numpy(sizes, indexing):
    arrays = [np.arange(n, dtype=np.float32) * (k + 1) - k for k, n in enumerate(sizes)]
    grids = Tensor.meshgrid(*[Tensor(a) for a in arrays], indexing=indexing)
    expected = np.meshgrid(*arrays, indexing=indexing)
    assert len(grids) == len(expected)
    for got, want in zip(grids, expected):
        assert_tensor(got, want, dtype=dtypes.float32, exact=True)


def test_meshgrid_forms_views_and_errors():
    x, y = Tensor([1, 2, 3]).realize(), Tensor([4, 5]).realize()
    gx, gy = Tensor.meshgrid([x, y])  # a list works, 'ij' is the default
    assert gx.shape == (3, 2) and gx.lazydata.base is x.lazydata.base
    mx, my = x.meshgrid(y, indexing="xy")  # tinygrad's spelling: the tensor itself first
    assert mx.tolist() == [[1, 2, 3]] * 2 and my.tolist() == [[4, 4, 4], [5, 5, 5]]
    assert Tensor.meshgrid(Tensor(7), y)[0].shape == (1, 2)
    with pytest.raises(ValueError, match="'ij' or 'xy'"):
        Tensor.meshgrid(x, y, indexing="ji")
    with pytest.raises(ValueError, match="0-d or 1-d"):
        Tensor.meshgrid(x, Tensor([[1]]))
    with pytest.raises(TypeError, match="share a dtype"):
        Tensor.meshgrid(x, Tensor([1.0]))
    with pytest.raises(TypeError, match="takes tensors"):
        Tensor.meshgrid(x, [1, 2])
