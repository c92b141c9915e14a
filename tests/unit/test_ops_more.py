"""Inverse trigonometric functions, copysign, logsigmoid, selu, idiv (lazyten/pointwise.py),
scatter, scatter_reduce, masked_select, unfold, max_unpool2d (lazyten/scatter.py) and the
tinygrad initialisers: forward against numpy (ulps for the trigonometric ones, direct loops
for the scatters), special values as numpy, gradients against float64 finite differences."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor
from gradcheck import check_grad, spaced
from helpers import FLOATS, NP, assert_tensor, fast, shapes, tensor_and_array
from test_ops_math import ulps

# name: (numpy float64 reference, value range, float32 ulps, float64 ulps); measured maxima
# (docs/numerics.md) plus about 1
TRIG = {"asin": (np.arcsin, (-1, 1), 3.5, 5), "acos": (np.arccos, (-1, 1), 3.5, 4),
        "atan": (np.arctan, (-1e4, 1e4), 3, 5)}
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 1e30,
                  -1e30, 1e-40, 0.2679491924311227, 0.99999994])


@pytest.mark.parametrize("name", list(TRIG))
@given(data=st.data(), shape=shapes(max_dims=2, max_side=6), dtype=st.sampled_from(FLOATS))
@fast(6)
def test_trig_within_documented_ulps(name, data, shape, dtype):
    ref, (low, high), ulp32, ulp64 = TRIG[name]
    t, arr = data.draw(tensor_and_array(shape, dtype, low=low, high=high))
    out = getattr(t, name)()
    assert out.dtype == dtype and out.shape == arr.shape
    bound = {dtypes.float16: 1.0, dtypes.float32: ulp32, dtypes.float64: ulp64}[dtype]
    err = ulps(out.numpy(), ref(arr.astype(np.float64)), dtype)
    assert (err <= bound).all(), f"{name}: {err.max():.2f} ulps at {arr.flat[np.argmax(err)]!r}"


@pytest.mark.parametrize("name", list(TRIG))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_trig_dense_sweep(name, dtype):
    """Uniform, log-spaced (down to 1e-30) and near-1 points."""
    ref, (low, high), ulp32, ulp64 = TRIG[name]
    rng = np.random.default_rng(3)
    tiny = np.exp(rng.uniform(np.log(1e-30), np.log(1.0), 8000)) * rng.choice([-1, 1], 8000)
    near_one = (1 - rng.uniform(0, 1e-3, 4000)) * rng.choice([-1, 1], 4000)
    x = np.concatenate([tiny, near_one, rng.uniform(low, high, 8000), rng.uniform(-3, 3, 4000)])
    x = x[(x >= low) & (x <= high)].astype(NP[dtype])
    err = ulps(getattr(Tensor(x), name)().numpy(), ref(x.astype(np.float64)), dtype)
    bound = ulp32 if dtype == dtypes.float32 else ulp64
    assert err.max() <= bound, f"{name}: {err.max():.2f} ulps at x={x[np.argmax(err)]!r}"


@pytest.mark.parametrize("name", list(TRIG) + ["arcsin", "arccos", "arctan"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_trig_special_values_match_numpy(name, dtype):
    """nan, +-inf, signed zeros and the domain edges (asin(|x| > 1) = nan) as numpy."""
    ref = getattr(np, name if name.startswith("arc") else "arc" + name[1:])
    with np.errstate(all="ignore"):
        arr = EDGES.astype(NP[dtype])
        want = ref(arr.astype(np.float64)).astype(NP[dtype])
    got = getattr(Tensor(arr), name)().numpy()
    assert_tensor(Tensor(got), want, rtol=2e-7 if dtype != dtypes.float16 else 1e-3, atol=0)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


def test_trig_of_integers_is_float32():
    got = Tensor([0, 1, -1]).asin()
    assert_tensor(got, np.arcsin(np.array([0, 1, -1], np.float32)), dtype=dtypes.float32)


SIGNED = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -1e-40, 3e38])


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_atan2_and_copysign_every_pair_of_special_values(dtype):
    """Signed zeros and infinities in both arguments, as C (numpy) gives them."""
    with np.errstate(all="ignore"):
        arr = SIGNED.astype(NP[dtype])
    y, x = (a.ravel() for a in np.meshgrid(arr, arr))
    for name, ref in (("atan2", np.arctan2), ("copysign", np.copysign)):
        got, want = getattr(Tensor(y), name)(Tensor(x)).numpy(), ref(y, x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype != dtypes.float16 else 1e-3,
                                   err_msg=name)
        number = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))


@given(data=st.data(), dtype=st.sampled_from([dtypes.float32, dtypes.float64]))
@fast(6)
def test_atan2_within_3_ulps(data, dtype):
    y, ya = data.draw(tensor_and_array((5, 7), dtype, low=-1e3, high=1e3))
    x, xa = data.draw(tensor_and_array((7,), dtype, low=-1e3, high=1e3))
    err = ulps(y.atan2(x).numpy(), np.arctan2(ya.astype(np.float64), xa.astype(np.float64)), dtype)
    assert err.max() <= 3.5


def test_trig_gradients():
    rng = np.random.default_rng(0)
    x, y = spaced(rng, (3, 4), (3, 4))
    check_grad(lambda t: (t * 0.6).asin(), x)
    check_grad(lambda t: (t * 0.6).acos(), x)
    check_grad(lambda t: (t * 5).atan(), x)
    check_grad(lambda a, b: (a * 3).atan2(b * 2 + 0.1), x, y)
    check_grad(lambda a, b: a.copysign(b), x, y, wrt=[0])


def test_copysign_gradient_is_zero_at_zero_and_for_other():
    x = Tensor([0.0, 2.0, -3.0], requires_grad=True)
    s = Tensor([-1.0, -1.0, 1.0], requires_grad=True)
    x.copysign(s).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, -1.0, -1.0])
    np.testing.assert_array_equal(s.grad.numpy(), [0.0, 0.0, 0.0])


def _logsigmoid(x):
    return -np.logaddexp(0, -x)


def _selu(x):
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


@pytest.mark.parametrize("name,ref", [("logsigmoid", _logsigmoid), ("selu", _selu)])
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
@fast(6)
def test_activations_match_numpy(name, ref, data, dtype):
    t, arr = data.draw(tensor_and_array((4, 5), dtype, low=-60, high=60))
    want = ref(arr.astype(np.float64))
    tol = {dtypes.float16: 2e-3, dtypes.float32: 2e-6, dtypes.float64: 1e-14}[dtype]
    assert_tensor(getattr(t, name)(), want.astype(NP[dtype]), rtol=tol, atol=tol * 1e-30)


def test_logsigmoid_keeps_relative_precision_and_activations_differentiate():
    x = np.array([20.0, 40.0, 80.0, -200.0, 1e30, -1e30], np.float32)
    np.testing.assert_allclose(Tensor(x).logsigmoid().numpy(), _logsigmoid(x.astype(np.float64)),
                               rtol=1e-6)
    np.testing.assert_allclose(Tensor(x).selu().numpy(), _selu(x.astype(np.float64)), rtol=1e-6)
    rng = np.random.default_rng(1)
    (a,) = spaced(rng, (3, 5), amp=8)
    check_grad(lambda t: t.logsigmoid(), a)
    check_grad(lambda t: t.selu(), a)
    big = Tensor([100.0, 1000.0], requires_grad=True)
    big.selu().sum().backward()
    assert np.isfinite(big.grad.numpy()).all()


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8])
def test_idiv_truncates_toward_zero(dtype):
    a = np.array([-4, 7, 5, 4, -7, 8, -1, 0]) if dtype != dtypes.uint8 else np.arange(8) * 7
    b = np.array([2, -3, 8, -2, 3, 5, 4, 3]) if dtype != dtypes.uint8 else np.arange(1, 9)
    a, b = a.astype(NP[dtype]), b.astype(NP[dtype])
    want = (np.trunc(a.astype(np.float64) / b)).astype(NP[dtype])
    assert_tensor(Tensor(a).idiv(Tensor(b)), want, dtype=dtype, exact=True)
    with pytest.raises(TypeError, match="idiv"):
        Tensor([1.0]).idiv(2)


# ---- scatter ----
def _scatter_ref(x, dim, index, src, reduce=None, include_self=True):
    """A direct loop over the index, PyTorch's definitions (write order: row-major)."""
    out = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
    seen = np.zeros(x.shape, bool)
    count = np.where(include_self, 1, 0) * np.ones(x.shape, np.int64)
    for pos in np.ndindex(*index.shape):
        target = list(pos)
        target[dim] = index[pos]
        target, v = tuple(target), src[pos]
        first = not seen[target] and not include_self
        seen[target] = True
        count[target] += 1
        if reduce is None:
            out[target] = v
        elif reduce in ("sum", "mean"):
            out[target] = v if first else out[target] + v
        elif reduce == "prod":
            out[target] = v if first else out[target] * v
        elif reduce == "amax":
            out[target] = v if first else max(out[target], v)
        elif reduce == "amin":
            out[target] = v if first else min(out[target], v)
    if reduce == "mean":
        div = np.maximum(count, 1)
        out = np.where(seen, out / div if x.dtype.kind == "f" else out // div, out)
    return out.astype(x.dtype)


@st.composite
def scatter_case(draw, unique: bool = False):
    shape = draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    dim = draw(st.integers(0, len(shape) - 1))
    ishape = tuple(draw(st.integers(1, s)) for s in shape)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    if unique:  # a permutation per line along dim: no position written twice
        ishape = ishape[:dim] + (min(ishape[dim], shape[dim]),) + ishape[dim + 1:]
        perms = rng.permuted(np.broadcast_to(np.arange(shape[dim]), ishape[:dim] + ishape[dim + 1:]
                                             + (shape[dim],)), axis=-1)
        index = np.moveaxis(perms[..., :ishape[dim]], -1, dim)
    else:
        index = rng.integers(0, shape[dim], ishape)
    sshape = tuple(i + draw(st.integers(0, 1)) for i in ishape)
    values = rng.integers(-5, 6, shape), rng.integers(-5, 6, sshape)
    return shape, dim, np.ascontiguousarray(index), *values


@given(case=scatter_case(unique=True),
       dtype=st.sampled_from([dtypes.float32, dtypes.int32, dtypes.bool]))
@fast(10)
def test_scatter_matches_loop(case, dtype):
    shape, dim, index, x, src = case
    x, src = x.astype(NP[dtype]), src.astype(NP[dtype])
    assert_tensor(Tensor(x).scatter(dim, Tensor(index), Tensor(src)),
                  _scatter_ref(x, dim, index, src), dtype=dtype, exact=True)
    assert_tensor(Tensor(x).scatter(dim - len(shape), Tensor(index), value=3),
                  _scatter_ref(x, dim, index, np.full(index.shape, 3, NP[dtype])), exact=True)


def test_scatter_with_repeated_indices_keeps_the_last_write():
    x, src = np.zeros((3, 2)), np.arange(6.0).reshape(3, 2)
    index = np.array([[0, 2], [0, 2], [1, 2]])
    assert_tensor(Tensor(x).scatter(0, Tensor(index), Tensor(src)), _scatter_ref(x, 0, index, src))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@given(case=scatter_case(), include_self=st.booleans(),
       dtype=st.sampled_from([dtypes.float32, dtypes.int32, dtypes.float64]))
@fast(8)
def test_scatter_reduce_matches_loop(reduce, case, include_self, dtype):
    shape, dim, index, x, src = case
    x, src = x.astype(NP[dtype]), src.astype(NP[dtype])
    got = Tensor(x).scatter_reduce(dim, Tensor(index), Tensor(src), reduce,
                                   include_self=include_self)
    want = _scatter_ref(x, dim, index, src, reduce, include_self)
    assert_tensor(got, want, dtype=dtype, rtol=1e-6, atol=1e-6)


def test_scatter_old_reduce_names():
    x, src = np.ones((3, 4)), np.arange(8.0).reshape(2, 4)
    index = np.array([[0, 1, 2, 0], [0, 1, 2, 2]])
    assert_tensor(Tensor(x).scatter(0, Tensor(index), Tensor(src), reduce="add"),
                  _scatter_ref(x, 0, index, src, "sum"))
    assert_tensor(Tensor(x).scatter(0, Tensor(index), Tensor(src), reduce="multiply"),
                  _scatter_ref(x, 0, index, src, "prod"))


def test_scatter_gradients():
    rng = np.random.default_rng(2)
    x, src = spaced(rng, (4, 3), (3, 3))
    index = np.array([[0, 1, 3], [2, 1, 0], [0, 3, 3]])
    for reduce in ("sum", "mean", "amax"):
        for inc in (True, False):
            check_grad(lambda a, b: a.scatter_reduce(0, Tensor(index), b, reduce, include_self=inc),
                       x, src)
    unique = np.array([[0, 1, 3], [2, 0, 1], [3, 3, 0]])
    check_grad(lambda a, b: a.scatter(0, Tensor(unique), b), x, src)
    t = Tensor(x, requires_grad=True)
    t.scatter(0, Tensor(unique), 0.0).sum().backward()
    hit = np.zeros(x.shape, bool)
    hit[unique, np.arange(3)] = True
    np.testing.assert_array_equal(t.grad.numpy(), np.where(hit, 0.0, 1.0))


def test_scatter_bad_input():
    x, src = Tensor.zeros(3, 4), Tensor.ones(2, 4)
    with pytest.raises(IndexError, match="out of range"):
        x.scatter(0, Tensor([[0, 1, 3, 0]]), src).numpy()
    with pytest.raises(IndexError, match="out of range"):
        x.scatter_reduce(1, Tensor([[0, -1]]), src, "sum").numpy()
    with pytest.raises(TypeError, match="integer"):
        x.scatter(0, Tensor([[0.0]]), src)
    with pytest.raises(RuntimeError, match="same number of dims"):
        x.scatter(0, Tensor([0, 1]), src)
    with pytest.raises(RuntimeError, match="exceeds"):
        x.scatter(0, Tensor([[0, 1, 2, 0, 1]]), src)
    with pytest.raises(RuntimeError, match="reduce"):
        x.scatter_reduce(0, Tensor([[0]]), src, "max")
    with pytest.raises(RuntimeError, match="dtype"):
        x.half().scatter_reduce(0, Tensor([[0]]), src, "sum")
    with pytest.raises(IndexError):
        x.scatter(2, Tensor([[0]]), src)


# ---- masked_select, unfold, max_unpool2d ----
@given(data=st.data(), shape=shapes(max_dims=3, max_side=4))
@fast(8)
def test_masked_select_broadcasts_and_differentiates(data, shape):
    t, arr = data.draw(tensor_and_array(shape, dtypes.float32))
    mask = data.draw(st.lists(st.booleans(), min_size=shape[-1] if shape else 1,
                              max_size=shape[-1] if shape else 1))
    mask = np.array(mask)
    want = np.broadcast_to(arr, np.broadcast_shapes(arr.shape, mask.shape))[
        np.broadcast_to(mask, np.broadcast_shapes(arr.shape, mask.shape))]
    assert_tensor(t.masked_select(Tensor(mask)), want, exact=True)
    if want.size:
        check_grad(lambda a: a.masked_select(Tensor(mask)), arr.astype(np.float64) + 0)
    with pytest.raises(TypeError, match="bool"):
        t.masked_select(Tensor([1]))


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3, max_side=7))
@fast(10)
def test_unfold_matches_sliding_windows(data, shape):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = data.draw(st.integers(0, shape[dim]))
    step = data.draw(st.integers(1, 4))
    t, arr = data.draw(tensor_and_array(shape, dtypes.float32))
    axis = dim % len(shape)
    windows = np.lib.stride_tricks.sliding_window_view(arr, size, axis=axis)
    want = np.take(windows, np.arange(0, windows.shape[axis], step), axis=axis)
    assert_tensor(t.unfold(dim, size, step), want, exact=True)
    if size:
        check_grad(lambda a: a.unfold(dim, size, step), arr.astype(np.float64))


def test_unfold_bad_input_and_0d():
    assert_tensor(Tensor(2.0).unfold(0, 1, 1), np.array([2.0], np.float32))
    for size, step in ((9, 3), (2, 0), (1, -1)):
        with pytest.raises(RuntimeError, match="unfold"):
            Tensor.zeros(8).unfold(0, size, step)
    with pytest.raises(IndexError):
        Tensor.zeros(8).unfold(1, 2, 1)


def _pool_with_indices(x, k, s, p):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    vals, idx = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int64)
    for a, b, i, j in np.ndindex(n, c, oh, ow):
        best = (-np.inf, 0)
        for di, dj in np.ndindex(k, k):
            r, q = i * s - p + di, j * s - p + dj
            if 0 <= r < h and 0 <= q < w and x[a, b, r, q] > best[0]:
                best = (x[a, b, r, q], r * w + q)
        vals[a, b, i, j], idx[a, b, i, j] = best
    return vals, idx


@pytest.mark.parametrize("k,s,p,hw", [(2, 2, 0, (6, 8)), (3, 3, 1, (7, 9)), (3, 2, 1, (6, 6))])
def test_max_unpool2d_puts_values_back(k, s, p, hw):
    rng = np.random.default_rng(4)
    x = rng.permutation(2 * 3 * hw[0] * hw[1]).reshape((2, 3) + hw).astype(np.float64)
    vals, idx = _pool_with_indices(x, k, s, p)
    want = np.zeros((2, 3, hw[0] * hw[1]))
    np.put_along_axis(want, idx.reshape(2, 3, -1), vals.reshape(2, 3, -1), axis=-1)
    got = Tensor(vals).max_unpool2d(Tensor(idx), kernel_size=k, stride=s, padding=p,
                                   output_size=(9, 9) + hw)
    assert_tensor(got, want.reshape((2, 3) + hw), exact=True)
    default = Tensor(vals).max_unpool2d(Tensor(idx), kernel_size=k, stride=s, padding=p)
    assert default.shape[-2:] == tuple((o - 1) * s - 2 * p + k for o in vals.shape[-2:])
    check_grad(lambda v: v.max_unpool2d(Tensor(idx), k, s, padding=p, output_size=hw), vals)


# ---- initialisers ----
@pytest.mark.parametrize("name", ["scaled_uniform", "glorot_uniform", "kaiming_normal",
                                  "kaiming_uniform"])
def test_initialisers_spread_and_bad_shapes(name):
    shape = (64, 32, 3)
    values = getattr(Tensor, name)(*shape).numpy()
    assert values.shape == shape and values.dtype == np.float32
    values = values.astype(np.float64)
    fan_in = 32 * 3
    std = {"scaled_uniform": math.prod(shape) ** -0.5 / math.sqrt(3),
           "glorot_uniform": math.sqrt(6 / (64 + fan_in)) / math.sqrt(3),
           "kaiming_normal": math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(fan_in),
           "kaiming_uniform": math.sqrt(2 / (1 + 0.01 ** 2)) / math.sqrt(fan_in)}[name]
    assert abs(values.std() / std - 1) < 0.03 and abs(values.mean()) < 0.05 * std
    if "uniform" in name:
        assert np.abs(values).max() <= std * math.sqrt(3) * (1 + 1e-6)
    assert getattr(Tensor, name)((4, 5), dtype=dtypes.float64).dtype == dtypes.float64
    for bad in ((-3, 3), ((-3, 3), 3), ((-3, -3), 3)):
        with pytest.raises(ValueError):
            getattr(Tensor, name)(*bad)
