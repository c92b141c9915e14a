"""lazyten/numeric.py against numpy: nan_to_num, addcmul, addcdiv, diff, searchsorted,
bucketize, cdist, logspace, tril_indices and triu_indices, at odd sizes and through views;
gradients against float64 finite differences; bad input raises at the call."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor, dtypes
from lazyten.errors import DTypeError, ShapeError
from tests.gradcheck import check_grad
from tests.helpers import ALL, FLOATS, NP, arrays, assert_tensor, broadcastable, fast, shapes, \
    tensor_and_array


# ---- nan_to_num ----
@fast(15)
@given(st.data(), shapes(0, 3), st.sampled_from(FLOATS))
def test_nan_to_num_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, special=True))
    assert_tensor(x.nan_to_num(), np.nan_to_num(arr), exact=True)
    nan, top, bottom = data.draw(st.tuples(*[st.integers(-50, 50).map(float)] * 3))
    assert_tensor(x.nan_to_num(nan, top, bottom),
                  np.nan_to_num(arr, nan=nan, posinf=top, neginf=bottom), exact=True)


def test_nan_to_num_of_integers_is_a_copy_and_gradient_passes_finite_values():
    ints = Tensor(np.array([3, -1, 7], np.int32))
    assert_tensor(ints.nan_to_num(), np.array([3, -1, 7], np.int32), exact=True)
    check_grad(lambda t: t.nan_to_num(1.0, 2.0, 3.0), np.linspace(-2, 2, 7))
    x = Tensor(np.array([1.0, np.nan, np.inf, -np.inf], np.float32), requires_grad=True)
    x.nan_to_num().sum().backward()  # replaced elements get no gradient, as PyTorch's
    assert_tensor(x.grad, np.array([1, 0, 0, 0], np.float32), exact=True)


# ---- addcmul, addcdiv ----
@fast(15)
@given(st.data(), broadcastable(3, max_dims=3), st.sampled_from([0.5, 1, -2.0]))
def test_addcmul_addcdiv_broadcast_against_numpy(data, shapes3, value):
    (x, a), (y, b), (z, c) = (data.draw(tensor_and_array(s, dtypes.float32)) for s in shapes3)
    c = np.where(np.abs(c) < 0.1, 0.5, c).astype(np.float32)
    z = Tensor(c)
    a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
    assert_tensor(x.addcmul(y, z, value=value), a64 + value * b64 * c64, dtype=dtypes.float32,
                  rtol=1e-5, atol=1e-5)
    assert_tensor(x.addcdiv(y, z, value=value), a64 + value * (b64 / c64), dtype=dtypes.float32,
                  rtol=1e-5, atol=1e-4)


def test_addcmul_promotes_and_addcdiv_refuses_integers():
    i = Tensor(np.array([1, 2, 3], np.int16))
    assert_tensor(i.addcmul(i, i, value=2), np.array([3, 10, 21], np.int16), exact=True)
    assert_tensor(Tensor(np.ones(3, np.float32)).addcmul(i, i), np.array([2, 5, 10], np.float32))
    with pytest.raises(DTypeError, match="addcdiv of integer"):
        i.addcdiv(i, i)
    check_grad(lambda a, b, c: a.addcdiv(b, c, value=0.3).addcmul(b, c), np.arange(4.0),
               np.linspace(-1, 1, 4), np.linspace(1, 2, 4))


# ---- diff ----
@fast(20)
@given(st.data(), shapes(1, 3, max_side=6), st.sampled_from(ALL), st.integers(0, 3))
def test_diff_against_numpy(data, shape, dtype, n):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-9, high=9))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    kw, np_kw = {}, {}
    for side in ("prepend", "append"):
        if data.draw(st.booleans()):
            extra = list(shape)
            extra[dim] = data.draw(st.integers(1, 2))
            part = data.draw(arrays(dtype, tuple(extra), low=-9, high=9))
            kw[side], np_kw[side] = Tensor(part), part
    expected = np.diff(arr, n, axis=dim, **np_kw)
    if dtype != dtypes.bool and not dtype.is_float:  # integers wrap in their own dtype
        expected = expected.astype(NP[dtype])
    assert_tensor(x.diff(n, dim, **kw), expected, exact=not dtype.is_float)


def test_diff_gradient_scalar_padding_and_errors():
    check_grad(lambda t: t.diff(2, 0), np.array([1.0, 4.0, 2.0, 8.0, 3.0]))
    x = Tensor(np.array([[1.0, 3.0, 6.0]], np.float32))
    assert_tensor(x.diff(prepend=0.0, append=10.0), np.array([[1, 2, 3, 4]], np.float32))
    with pytest.raises(ShapeError, match=r"prepend of shape \(2, 1\)"):
        x.diff(prepend=Tensor(np.zeros((2, 1), np.float32)))
    with pytest.raises(ValueError, match="non-negative"):
        x.diff(-1)
    with pytest.raises(ShapeError, match="0-d"):
        Tensor(1.0).diff()


# ---- searchsorted, bucketize ----
@st.composite
def sorted_rows(draw, batch):
    """A sorted float32 sequence with ties, (M,) or batch + (M,), and values (some equal to
    its elements) of shape (K,) or batch + (K,)."""
    m, k = draw(st.integers(1, 7)), draw(st.integers(1, 6))
    grid = st.integers(-4, 4).map(lambda v: v / 2)
    seq = np.sort(np.array(draw(st.lists(grid, min_size=m * max(1, int(np.prod(batch))),
                                         max_size=m * max(1, int(np.prod(batch))))),
                           np.float32).reshape(batch + (m,)), axis=-1)
    values = np.array(draw(st.lists(grid, min_size=k * max(1, int(np.prod(batch))),
                                    max_size=k * max(1, int(np.prod(batch))))),
                      np.float32).reshape(batch + (k,))
    return seq, values


@fast(20)
@given(sorted_rows(()), st.booleans())
def test_searchsorted_and_bucketize_1d_against_numpy(pair, right):
    seq, values = pair
    side = "right" if right else "left"
    expected = np.searchsorted(seq, values, side=side).astype(np.int64)
    assert_tensor(Tensor(seq).searchsorted(Tensor(values), right=right), expected, exact=True)
    assert_tensor(Tensor.searchsorted(Tensor(seq), Tensor(values), side=side), expected, exact=True)
    assert_tensor(Tensor(values).bucketize(Tensor(seq), right=right), expected, exact=True)
    got = Tensor(seq).searchsorted(Tensor(values), right=right, out_int32=True)
    assert_tensor(got, expected.astype(np.int32), exact=True)


@fast(12)
@given(sorted_rows((2, 3)), st.booleans())
def test_searchsorted_rows_against_numpy(pair, right):
    seq, values = pair
    side = "right" if right else "left"
    expected = np.stack([np.searchsorted(s, v, side=side) for s, v in
                         zip(seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1]))])
    got = Tensor(seq).searchsorted(Tensor(values), right=right)
    assert_tensor(got, expected.reshape(values.shape).astype(np.int64), exact=True)


def test_searchsorted_scalars_ints_and_errors():
    seq = Tensor(np.array([1, 3, 5, 7], np.int32))
    assert_tensor(seq.searchsorted(5), np.array(2, np.int64), exact=True)
    assert_tensor(seq.searchsorted(Tensor(np.array([4.5, 7.0], np.float32)), right=True),
                  np.array([2, 4], np.int64), exact=True)
    with pytest.raises(ShapeError, match=r"\(2, 4\).*\(3, 1\)"):
        Tensor(np.zeros((2, 4), np.float32)).searchsorted(Tensor(np.zeros((3, 1), np.float32)))
    with pytest.raises(ValueError, match="disagree"):
        seq.searchsorted(1, right=True, side="left")
    with pytest.raises(ShapeError, match="1-d"):
        seq.bucketize(Tensor(np.zeros((2, 2), np.float32)))


# ---- cdist ----
@fast(15)
@given(st.data(), st.sampled_from([0, 1, 2, 3, 1.5, math.inf]))
def test_cdist_against_numpy(data, p):
    batch = data.draw(st.sampled_from([(), (2,), (1,)]))
    other = data.draw(st.sampled_from([batch, (2,) if batch == (1,) else batch]))
    pn, rn, m = (data.draw(st.integers(1, 5)) for _ in range(3))
    x1, a = data.draw(tensor_and_array(batch + (pn, m), dtypes.float32, low=-3, high=3))
    x2, b = data.draw(tensor_and_array(other + (rn, m), dtypes.float32, low=-3, high=3))
    d = np.abs(a.astype(np.float64)[..., :, None, :] - b.astype(np.float64)[..., None, :, :])
    if p == 0:
        expected = (d != 0).sum(-1)
    elif p == math.inf:
        expected = d.max(-1)
    else:
        expected = (d ** p).sum(-1) ** (1 / p)
    assert_tensor(x1.cdist(x2, p), expected, dtype=dtypes.float32, rtol=1e-4, atol=1e-4)


def test_cdist_gradient_and_zero_distance():
    check_grad(lambda a, b: a.cdist(b), np.array([[0.0, 1.0], [2.0, -1.0], [1.5, 0.5]]),
               np.array([[1.0, 2.0], [-1.0, 0.5]]))
    x = Tensor(np.array([[1.0, 2.0]], np.float32), requires_grad=True)
    x.cdist(Tensor(np.array([[1.0, 2.0], [4.0, 6.0]], np.float32))).sum().backward()
    assert_tensor(x.grad, np.array([[-0.6, -0.8]], np.float32), rtol=1e-6, atol=1e-6)
    with pytest.raises(ShapeError, match=r"\(3, 2\) and \(2, 3\)"):
        Tensor(np.zeros((3, 2), np.float32)).cdist(Tensor(np.zeros((2, 3), np.float32)))
    with pytest.raises(ValueError, match="non-negative"):
        x.cdist(x, -1.0)


# ---- logspace, tril_indices, triu_indices ----
@fast(10)
@given(st.integers(-3, 3), st.integers(-3, 3), st.integers(0, 9), st.sampled_from([10.0, 2.0, 0.5]))
def test_logspace_against_numpy(start, end, steps, base):
    expected = np.logspace(start, end, steps, base=base)
    assert_tensor(Tensor.logspace(start, end, steps, base=base, dtype=dtypes.float64), expected,
                  rtol=1e-12, atol=0)
    assert_tensor(Tensor.logspace(start, end, steps, base=base), expected.astype(np.float32),
                  rtol=1e-6, atol=0)
    made = Tensor.logspace(start, end, steps, base=base, requires_grad=True)
    assert made.is_leaf and made.requires_grad  # as torch.logspace's


@fast(15)
@given(st.integers(0, 6), st.integers(0, 6), st.integers(-7, 7))
def test_triangle_indices_against_numpy(row, col, offset):
    assert_tensor(Tensor.tril_indices(row, col, offset),
                  np.stack(np.tril_indices(row, offset, col)).reshape(2, -1).astype(np.int64),
                  exact=True)
    assert_tensor(Tensor.triu_indices(row, col, offset, dtype=dtypes.int32),
                  np.stack(np.triu_indices(row, offset, col)).reshape(2, -1).astype(np.int32),
                  exact=True)
    with pytest.raises(DTypeError, match="integer"):
        Tensor.tril_indices(row, col, dtype=dtypes.float32)
