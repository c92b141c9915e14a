"""Dim normalisation (lazyten/dims.py), the one home of every method's dim / axis checks:
against numpy's own normalisation over hypothesis-drawn dims, and through the Tensor
methods that use it (the same errors, naming the method, the dim and ndim)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from lazyten.dims import as_int, norm_axes, norm_dim
from helpers import fast


@fast(60)
@given(st.integers(-6, 6), st.integers(0, 4))
def test_norm_dim_matches_numpy(dim, ndim):
    try:
        expected = np.lib.array_utils.normalize_axis_index(dim, max(ndim, 1))
    except np.exceptions.AxisError:
        with pytest.raises(IndexError, match=f"dim {dim} is out of range for a tensor with "
                                             f"{ndim} dims"):
            norm_dim(dim, ndim)
        return
    assert norm_dim(dim, ndim) == expected
    assert norm_dim(np.int16(dim), ndim) == expected  # numpy integers are ints


@fast(60)
@given(st.lists(st.integers(-4, 3), max_size=4), st.integers(1, 4))
def test_norm_axes_matches_numpy(axes, ndim):
    try:
        expected = tuple(sorted(np.lib.array_utils.normalize_axis_tuple(axes, ndim)))
    except np.exceptions.AxisError:
        with pytest.raises(IndexError, match="out of range"):
            norm_axes(axes, ndim)
        return
    except ValueError:  # a repeated axis
        with pytest.raises(ValueError, match="repeats a dimension"):
            norm_axes(axes, ndim)
        return
    assert norm_axes(axes, ndim) == expected
    assert norm_axes(None, ndim) == tuple(range(ndim))


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_as_int_refuses_bools_floats_and_the_rest(bad):
    with pytest.raises(TypeError, match=f"count must be an int, got {bad!r}"):
        as_int(bad, "count")
    assert as_int(np.int64(3), "count") == 3 and type(as_int(np.int64(3), "count")) is int


# (call on a (2, 3) tensor with a bad dim, exception, words the message must hold)
BAD_DIMS = [
    (lambda x: x.sort(2), IndexError, "sort: dim 2 is out of range for a tensor with 2 dims"),
    (lambda x: x.cummax(-3), IndexError, "cummax: dim -3 is out of range"),
    (lambda x: x.logcumsumexp(dim=1.0), TypeError, "logcumsumexp: dim must be an int"),
    (lambda x: x.index_select(True, [0]), TypeError, "index_select: dim must be an int"),
    (lambda x: x.roll(1, 5), IndexError, "roll: dim 5 is out of range"),
    (lambda x: x.transpose(0, 2), IndexError, "dim 2 is out of range"),
    (lambda x: x.sum(axis=(0, 4)), IndexError, "axis 4 is out of range"),
    (lambda x: x.sum(axis=(0, -2)), ValueError, "repeats a dimension"),
    (lambda x: x.size(2), IndexError, "size(dim) of shape (2, 3): dim 2 is out of range"),
    (lambda x: Tensor(1.0).size(0), IndexError, "out of range for a 0-d tensor"),
    (lambda x: x.topk(1.5), TypeError, "topk: k must be an int"),
    (lambda x: x.sort(dim=0, axis=1), TypeError, "sort() got both dim= and axis="),
    (lambda x: x.norm(dim=0, axis=0), TypeError, "norm() got both dim= and axis="),
    (lambda x: x.std_mean(dim=0, axis=1), TypeError, "std_mean() got both dim= and axis="),
]


@pytest.mark.parametrize("case", range(len(BAD_DIMS)))
def test_bad_dims_raise_at_the_call_naming_them(case):
    call, exc, words = BAD_DIMS[case]
    with pytest.raises(exc) as info:
        call(Tensor(np.zeros((2, 3), np.float32)))
    assert words in str(info.value), f"{words!r} not in {str(info.value)!r}"


def test_axis_is_dim_for_the_methods_that_take_both_spellings():
    arr = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]], np.float32)
    x = Tensor(arr)
    np.testing.assert_array_equal(x.sort(axis=0).values.numpy(), np.sort(arr, axis=0))
    np.testing.assert_array_equal(x.argsort(axis=0).numpy(), np.argsort(arr, axis=0, kind="stable"))
    np.testing.assert_array_equal(x.cummax(axis=1).values.numpy(), np.maximum.accumulate(arr, 1))
    np.testing.assert_array_equal(x.topk(1, axis=0).values.numpy(), arr.max(0, keepdims=True))
    np.testing.assert_allclose(x.norm(axis=1).numpy(), np.linalg.norm(arr, axis=1), rtol=1e-6)
    var, mean = x.var_mean(axis=0)
    np.testing.assert_allclose(var.numpy(), arr.var(0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(mean.numpy(), arr.mean(0), rtol=1e-6)
