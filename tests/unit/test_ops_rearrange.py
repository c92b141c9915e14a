"""roll, tile and repeat_interleave against numpy (np.roll, np.tile, np.repeat) over
hypothesis-drawn shapes, dtypes and layouts; gradients against float64 finite differences."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from gradcheck import check_grad, spaced
from helpers import ALL, arrays, assert_tensor, fast, make_layout, shapes

LAYOUT = st.sampled_from(("contiguous", "permute", "flip", "step"))


@st.composite
def array_and_tensor(draw, min_dims=0, max_dims=3):
    dtype = draw(st.sampled_from(ALL))
    a = draw(arrays(dtype, draw(shapes(min_dims=min_dims, max_dims=max_dims)), low=-50,
                    high=50))
    return a, make_layout(a, draw(LAYOUT)), dtype


@given(data=st.data())
@fast(14)
def test_roll_matches_numpy(data):
    a, t, dtype = data.draw(array_and_tensor())
    if a.ndim == 0 or data.draw(st.booleans()):
        shift = data.draw(st.integers(-9, 9))
        assert_tensor(t.roll(shift), np.roll(a, shift), dtype=dtype, exact=True)
        return
    dims = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=3))
    shifts = data.draw(st.lists(st.integers(-9, 9), min_size=len(dims), max_size=len(dims)))
    assert_tensor(t.roll(tuple(shifts), tuple(dims)), np.roll(a, shifts, dims), dtype=dtype,
                  exact=True)
    assert_tensor(t.roll(shifts[0], dims[0]), np.roll(a, shifts[0], dims[0]), dtype=dtype,
                  exact=True)


def test_roll_bad_arguments():
    t = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="2 shifts for 1 dims"):
        t.roll((1, 2), 0)
    with pytest.raises(ValueError, match="need dims"):
        t.roll((1, 2))
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        t.roll(1, 2)
    with pytest.raises(TypeError, match="shift must be an int"):
        t.roll(1.5, 0)


@given(data=st.data())
@fast(12)
def test_tile_matches_numpy(data):
    a, t, dtype = data.draw(array_and_tensor())
    reps = tuple(data.draw(st.lists(st.integers(0, 3), max_size=4)))
    assert_tensor(t.tile(reps), np.tile(a, reps), dtype=dtype, exact=True)
    if reps:
        assert_tensor(t.tile(*reps), np.tile(a, reps), dtype=dtype, exact=True)


@given(data=st.data())
@fast(14)
def test_repeat_interleave_matches_numpy_repeat(data):
    a, t, dtype = data.draw(array_and_tensor(min_dims=1))
    axis = data.draw(st.one_of(st.none(), st.integers(-a.ndim, a.ndim - 1)))
    n = a.size if axis is None else a.shape[axis]
    kind = data.draw(st.sampled_from(["int", "list", "tensor", "lazy", "one"]))
    if kind == "int":
        repeats = data.draw(st.integers(0, 3))
        expected = np.repeat(a, repeats, axis=axis)
        assert_tensor(t.repeat_interleave(repeats, dim=axis), expected, dtype=dtype, exact=True)
        return
    if kind == "one":
        count = data.draw(st.integers(0, 3))
        expected = np.repeat(a, count, axis=axis)
        assert_tensor(t.repeat_interleave(Tensor([count]), dim=axis), expected, dtype=dtype,
                      exact=True)
        return
    counts = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    expected = np.repeat(a, counts, axis=axis)
    if kind == "list":
        out = t.repeat_interleave(counts, dim=axis)
    elif kind == "tensor":
        out = t.repeat_interleave(Tensor(counts), dim=axis)
    else:
        out = t.repeat_interleave(Tensor(counts), dim=axis, output_size=sum(counts))
    assert_tensor(out, expected, dtype=dtype, exact=True)


def test_repeat_interleave_bad_arguments():
    t = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="2 repeats for dim 1 of size 3"):
        t.repeat_interleave([1, 2], dim=1)
    with pytest.raises(ValueError, match="non-negative"):
        t.repeat_interleave(-1)
    with pytest.raises(ValueError, match="non-negative"):
        t.repeat_interleave([1, -1], dim=0)
    with pytest.raises(TypeError, match="1-d integer"):
        t.repeat_interleave(Tensor([1.0, 2.0]), dim=0)
    with pytest.raises(IndexError, match="out of range"):  # output_size larger than the sum
        t.repeat_interleave(Tensor([1, 1]), dim=0, output_size=3).numpy()


@pytest.mark.parametrize("fn", [
    lambda x: x.roll((1, -2), (0, 1)), lambda x: x.roll(5), lambda x: x.tile((2, 1, 2)),
    lambda x: x.repeat_interleave(2, dim=1), lambda x: x.repeat_interleave([2, 0, 1], dim=0),
    lambda x: x.repeat_interleave(Tensor([1, 3, 1]), dim=0, output_size=5)])
def test_rearrange_gradients(fn):
    check_grad(fn, *spaced(np.random.default_rng(4), (3, 4)))


def test_roll_and_tile_are_views():
    t = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    for out in (t.roll(1, 1), t.tile(2, 1), t.repeat_interleave(2, dim=0)):
        assert out.lazydata.base is t.lazydata.base, "expected a view of the input buffer"
