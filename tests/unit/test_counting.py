"""bincount, histc and unique against numpy (lazyten/counting.py): sizes, values, weights
and dtypes drawn by hypothesis; on a CPU the counts are scatter kernels (D153)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.scatter import is_scatter
from lazyten import Tensor
from lazyten.errors import ArgumentError, DTypeError, ShapeError
from lazyten.schedule import create_schedule
from tests.helpers import fast


@fast(25)
@given(n=st.integers(0, 300), high=st.integers(0, 60), minlength=st.integers(0, 80),
       weighted=st.sampled_from([None, np.float32, np.float64, np.int32]),
       seed=st.integers(0, 999))
def test_bincount(n, high, minlength, weighted, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, high + 1, n)
    w = None if weighted is None else (rng.standard_normal(n) * 5).astype(weighted)
    out = Tensor(x).bincount(None if w is None else Tensor(w), minlength=minlength)
    ref = np.bincount(x, None if w is None else w.astype(np.float64), minlength=minlength)
    want = np.int64 if w is None else np.float32 if weighted is np.float32 else np.float64
    assert out.numpy().dtype == want
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-4)


@fast(25)
@given(n=st.integers(1, 400), bins=st.integers(1, 40), low=st.floats(-3, 1),
       width=st.sampled_from([0.0, 0.5, 2.0, 7.0]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 999))
def test_histc(n, bins, low, width, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[rng.integers(0, n, n // 10)] = dtype(low)  # values on the lower edge
    high = low + width
    out = Tensor(x).histc(bins, low, high).numpy()
    lo, hi = (low, high) if width else (float(x.min()), float(x.max()))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    # PyTorch's rounding: (x - min) * bins / (max - min) in x's dtype, truncated
    pos = ((x - dtype(lo)) * dtype(bins) / (dtype(hi) - dtype(lo))).astype(np.int64)
    inside = (x >= dtype(lo)) & (x <= dtype(hi))
    ref = np.bincount(np.clip(pos[inside], 0, bins - 1), minlength=bins).astype(dtype)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, ref)


@fast(20)
@given(shape=st.lists(st.integers(1, 6), min_size=0, max_size=3), high=st.integers(0, 9),
       seed=st.integers(0, 999))
def test_unique(shape, high, seed):
    x = np.random.default_rng(seed).integers(-high, high + 1, shape)
    values, inverse, counts = Tensor(x).unique(return_inverse=True, return_counts=True)
    ref = np.unique(x, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(values.numpy(), ref[0])
    np.testing.assert_array_equal(inverse.numpy(), ref[1].reshape(x.shape))
    np.testing.assert_array_equal(counts.numpy(), ref[2])
    np.testing.assert_array_equal(Tensor(x).unique().numpy(), ref[0])


def test_counts_are_scatters():
    """One add per element: the count is a scatter kernel, not a (values x bins) sum."""
    x = Tensor(np.arange(1000) % 37, device="CPU")  # a loop target's rule
    for out in (x.bincount(), x.cast("float32").histc(10, 0, 40)):
        items = [i for i in create_schedule([out.lazydata]) if i.ast is not None]
        assert sum(is_scatter(i.ast) for i in items) == 1


def test_counting_checks_its_arguments():
    with pytest.raises(DTypeError, match="float32"):
        Tensor(np.ones(3, np.float32)).bincount()
    with pytest.raises(DTypeError, match=r"\(2, 2\)"):
        Tensor(np.ones((2, 2), np.int64)).bincount()
    with pytest.raises(ValueError, match="-1"):
        Tensor(np.array([0, -1])).bincount()
    with pytest.raises(ShapeError, match=r"\(3,\)"):
        Tensor(np.array([0, 1, 2])).bincount(Tensor(np.ones(2, np.float32)))
    with pytest.raises(ArgumentError):
        Tensor(np.array([0])).bincount(minlength=-1)
    with pytest.raises(DTypeError, match="int64"):
        Tensor(np.array([1, 2])).histc()
    with pytest.raises(ArgumentError, match="max"):
        Tensor(np.ones(3, np.float32)).histc(4, 2, 1)
    with pytest.raises(ArgumentError, match="dim"):
        Tensor(np.ones(3, np.float32)).unique(dim=0)
