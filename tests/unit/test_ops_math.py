"""Special functions (lazyten/mathfn.py), gelu, bitwise ops and shifts, classification,
masked_fill, isclose/allclose, any/all (lazyten/logic.py, reduce.py): forward values against
numpy (erf/erfc: math.erf per element) in ulps, special values as numpy, gradients against
float64 finite differences, integer semantics as PyTorch (which numpy shares here)."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor
from gradcheck import check_grad, spaced
from helpers import FLOATS, INTS, NP, arrays, assert_tensor, fast, shapes, tensor_and_array

_erf, _erfc = np.vectorize(math.erf, otypes=[float]), np.vectorize(math.erfc, otypes=[float])

# name: (numpy float64 reference, value range drawn, float32 ulps, float64 ulps); the bounds
# are the measured maxima of docs/numerics.md plus 1 (numpy's float64 is itself ~1 ulp off)
SPECIAL = {
    "expm1": (np.expm1, (-20, 20), 4.5, 4), "log1p": (np.log1p, (-0.99, 50), 5, 4),
    "sinh": (np.sinh, (-20, 20), 5, 3.5), "cosh": (np.cosh, (-20, 20), 3, 2.5),
    "asinh": (np.arcsinh, (-1e6, 1e6), 4.5, 3.5), "acosh": (np.arccosh, (1, 1e6), 5, 4),
    "atanh": (np.arctanh, (-0.999, 0.999), 5, 4), "erf": (_erf, (-5, 5), 3.5, 3.5),
    "erfc": (_erfc, (-5, 9.5), 6, 5.5),
}


def ulps(got: np.ndarray, want: np.ndarray, dtype) -> np.ndarray:
    """|got - want| in units of the spacing of want rounded to dtype (normal numbers);
    0 where want overflows dtype and got is that infinity."""
    with np.errstate(over="ignore"):
        rounded = want.astype(NP[dtype])
    finite = np.isfinite(rounded)
    tiny = np.finfo(NP[dtype]).tiny
    spacing = np.spacing(np.maximum(np.abs(np.where(finite, rounded, 1)), tiny))
    err = np.abs(got.astype(np.float64) - want) / spacing.astype(np.float64)
    return np.where(finite, err, np.where(got == rounded, 0.0, np.inf))


@pytest.mark.parametrize("name", list(SPECIAL))
@given(data=st.data(), shape=shapes(max_dims=2, max_side=6), dtype=st.sampled_from(FLOATS))
@fast(6)
def test_special_function_within_documented_ulps(name, data, shape, dtype):
    ref, (low, high), ulp32, ulp64 = SPECIAL[name]
    t, arr = data.draw(tensor_and_array(shape, dtype, low=low, high=high))
    want = ref(arr.astype(np.float64))
    out = getattr(t, name)()
    assert out.dtype == dtype and out.shape == arr.shape
    bound = {dtypes.float16: 1.0, dtypes.float32: ulp32, dtypes.float64: ulp64}[dtype]
    err = ulps(out.numpy(), want, dtype)
    assert (err <= bound).all(), \
        f"{name} {dtype.name}: {err.max():.2f} ulps > {bound} at x={arr.flat[np.argmax(err)]!r}"


@pytest.mark.parametrize("name", list(SPECIAL))
def test_special_function_dense_float32_sweep(name):
    """20,000 log-spaced and uniform points over the whole range, including tiny |x|."""
    ref, (low, high), ulp32, _ = SPECIAL[name]
    rng = np.random.default_rng(7)
    tiny = np.exp(rng.uniform(np.log(1e-30), np.log(1.0), 10000)) * rng.choice([-1, 1], 10000)
    x = np.concatenate([tiny, rng.uniform(low, high, 10000)])
    x = x[(x >= low) & (x <= high)].astype(np.float32)
    err = ulps(getattr(Tensor(x), name)().numpy(), ref(x.astype(np.float64)), dtypes.float32)
    assert err.max() <= ulp32, f"{name}: {err.max():.2f} ulps at x={x[np.argmax(err)]!r}"


def test_tiny_arguments_keep_relative_precision():
    """log(1 + x) and exp(x) - 1 would give 0 (or one ulp of 1) here."""
    for dtype, rtol in ((np.float32, 2e-7), (np.float64, 4e-16)):
        x = np.array([1e-10, -1e-10, 3e-8, -2e-20, 1e-5], dtype)
        for name, ref in (("log1p", np.log1p), ("expm1", np.expm1), ("sinh", np.sinh),
                          ("asinh", np.arcsinh), ("atanh", np.arctanh), ("erf", _erf)):
            np.testing.assert_allclose(getattr(Tensor(x), name)().numpy(),
                                       ref(x.astype(np.float64)), rtol=rtol, err_msg=name)


def test_erfc_tail_is_relatively_accurate():
    x = np.array([0.5, 1.0, 3.0, 5.0, 9.0, 10.0], np.float32)
    want = _erfc(x.astype(np.float64))  # down to 2e-44: a subnormal at the end
    got = Tensor(x).erfc().numpy().astype(np.float64)
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=5e-7)
    x64 = np.array([0.5, 2.0, 6.0, 12.0, 20.0, 26.0])
    np.testing.assert_allclose(Tensor(x64).erfc().numpy(), _erfc(x64), rtol=2e-15)


def test_chebyshev_series_in_powers_matches_the_series():
    """erfc's float32 series is evaluated in powers of u (Horner): the same polynomial as
    its Chebyshev form, at every u in [-1, 1]."""
    from numpy.polynomial import chebyshev
    from lazyten.mathfn import ERFCX_CHEB, ERFCX_POWERS_F32, _chebyshev_to_powers
    u = np.linspace(-1, 1, 1001)
    for coeffs in ([1.0], [0.5, -2.0], ERFCX_CHEB[:14], ERFCX_CHEB):
        powers = _chebyshev_to_powers(list(coeffs))
        np.testing.assert_allclose(np.polynomial.polynomial.polyval(u, powers),
                                   chebyshev.chebval(u, coeffs), rtol=1e-14, atol=1e-15)
    assert ERFCX_POWERS_F32 == _chebyshev_to_powers(ERFCX_CHEB[:14])


EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.5, 1e30, -1e30,
                  88.5, -89.0, 700.0, 1e-40])


@pytest.mark.parametrize("name", list(SPECIAL))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_special_values_match_numpy(name, dtype):
    """nan, +-inf, signed zeros, overflow and the domain edges (acosh(x < 1) = nan,
    atanh(+-1) = +-inf, log1p(-1) = -inf) as numpy and PyTorch give them."""
    ref = SPECIAL[name][0]
    with np.errstate(all="ignore"):
        arr = EDGES.astype(NP[dtype])
        want = ref(arr.astype(np.float64)).astype(NP[dtype])
    got = getattr(Tensor(arr), name)().numpy()
    assert_tensor(Tensor(got), want, rtol=1e-5, atol=0)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]),
                                  err_msg=f"{name}: sign of zero")


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.bool, dtypes.uint8])
def test_special_functions_of_integers_are_float32(dtype):
    arr = np.array([0, 1, 1, 0, 1]).astype(NP[dtype])
    for name, (ref, *_) in SPECIAL.items():
        with np.errstate(all="ignore"):
            want = ref(arr.astype(np.float64)).astype(np.float32)
        assert_tensor(getattr(Tensor(arr), name)(), want, dtype=dtypes.float32, rtol=1e-6)


GRAD = {  # inputs from spaced(): values in about (-1, 1), apart from each other
    "expm1": lambda x: (x * 3).expm1(), "log1p": lambda x: (x * 0.9).log1p(),
    "sinh": lambda x: (x * 3).sinh(), "cosh": lambda x: (x * 3).cosh(),
    "asinh": lambda x: (x * 5).asinh(), "acosh": lambda x: (x.abs() * 4 + 1.05).acosh(),
    "atanh": lambda x: (x * 0.9).atanh(), "erf": lambda x: (x * 3).erf(),
    "erfc": lambda x: (x * 4).erfc(), "gelu": lambda x: (x * 4).gelu(),
    "gelu_tanh": lambda x: (x * 4).gelu(approximate="tanh"),
}


@pytest.mark.parametrize("name", list(GRAD))
@given(shape=st.sampled_from([(7,), (2, 3)]), seed=st.integers(0, 2 ** 16))
@fast(3)
def test_gradients_match_finite_differences(name, shape, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    check_grad(GRAD[name], x, seed=seed)


def test_gradients_at_domain_edges_follow_pytorch():
    x = Tensor(np.array([-1.0, 1.0, 0.0]), requires_grad=True)
    x.atanh().sum().backward()  # 1 / (1 - x^2)
    np.testing.assert_array_equal(x.grad.numpy(), [np.inf, np.inf, 1.0])
    y = Tensor(np.array([-1.0, 0.0]), requires_grad=True)
    y.log1p().sum().backward()  # 1 / (1 + x)
    np.testing.assert_array_equal(y.grad.numpy(), [np.inf, 1.0])
    z = Tensor(np.array([1e200, -1e200]), requires_grad=True)
    z.asinh().sum().backward()  # rsqrt(x^2 + 1): x^2 is inf, so 0 as in PyTorch
    np.testing.assert_array_equal(z.grad.numpy(), [0.0, 0.0])


# ---- logaddexp ----
@given(data=st.data(), shape=shapes(max_dims=2), dtype=st.sampled_from(FLOATS))
@fast(8)
def test_logaddexp_matches_numpy(data, shape, dtype):
    x = data.draw(arrays(dtype, shape, low=-80, high=80, special=True))
    y = data.draw(arrays(dtype, shape[1:], low=-80, high=80, special=True))  # broadcast
    with np.errstate(all="ignore"):
        want, want2 = np.logaddexp(x, y), np.logaddexp2(x, y)
    rtol = {dtypes.float16: 1e-3, dtypes.float32: 5e-7, dtypes.float64: 1e-15}[dtype]
    assert_tensor(Tensor(x).logaddexp(Tensor(y)), want, rtol=rtol, atol=rtol)
    assert_tensor(Tensor(x).logaddexp2(Tensor(y)), want2, rtol=rtol, atol=rtol)


def test_logaddexp_gradients_and_scalars():
    a, b = spaced(np.random.default_rng(3), (2, 3), (3,), amp=6.0)
    check_grad(lambda x, y: x.logaddexp(y), a, b)
    check_grad(lambda x, y: x.logaddexp2(y), a, b)
    assert_tensor(Tensor(np.float32([0.0, 1.0])).logaddexp(2.0),
                  np.logaddexp(np.float32([0.0, 1.0]), np.float32(2.0)), rtol=5e-7)


# ---- gelu ----
def test_gelu_default_is_exact_and_tanh_is_the_approximation():
    x = np.linspace(-12, 6, 301)
    exact = 0.5 * x * _erfc(-x / math.sqrt(2))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(Tensor(x).gelu(approximate="tanh").numpy(), tanh, rtol=1e-12,
                               atol=1e-15)
    # rounding x / sqrt 2 costs up to x^2 * eps / 2 relative in erfc's tail (PyTorch's too)
    for dtype, eps in ((np.float64, 2.0 ** -52), (np.float32, 2.0 ** -23)):
        got = Tensor(x.astype(dtype)).gelu().numpy().astype(np.float64)
        err = np.abs(got - exact) / np.maximum(np.abs(exact), 1e-300)
        bound = (8 + x * x) * eps
        assert (err <= bound).all(), f"gelu {dtype.__name__}: x={x[np.argmax(err / bound)]}"
    with pytest.raises(ValueError, match="approximate"):
        Tensor(x).gelu(approximate="erf")



def test_gelu_float32_special_values_as_pytorch():
    """float32 gelu's one-fit form [D137] at the values its fit does not cover: +-inf as
    PyTorch (inf; nan, since -inf * Phi(-inf) is -inf * 0), nan, huge magnitudes (x * x
    overflows: e^(-x^2 / 2) is 0), and -0.0 kept; the slope Phi + x phi likewise."""
    x = np.float32([np.inf, -np.inf, np.nan, 1e20, -1e20, 3e38, -3e38, 0.0, -0.0])
    t = Tensor(x, requires_grad=True)
    y = t.gelu()
    y.sum().backward()
    got, slope = y.numpy(), t.grad.numpy()
    want = np.float32([np.inf, np.nan, np.nan, 1e20, -0.0, 3e38, -0.0, 0.0, -0.0])
    np.testing.assert_array_equal(got, want)
    assert list(np.signbit(got[[4, 6, 7, 8]])) == [True, True, False, True]
    np.testing.assert_array_equal(slope, np.float32([np.nan, np.nan, np.nan, 1, 0, 1, 0, 0.5, 0.5]))


def test_gelu_float32_across_the_fit_domain_edge():
    """The fit covers |x| <= 14.5, where gelu reaches the smallest subnormal; beyond, its
    extrapolated series is multiplied by e^(-x^2 / 2) = 0. Every float32 value from -20 to
    -12 within 8 + 2x^2 ulps (subnormal results: within 64 smallest subnormals)."""
    x = np.linspace(-20, -12, 200_001).astype(np.float32)
    xd = x.astype(np.float64)
    want = 0.5 * xd * _erfc(-xd / math.sqrt(2))
    got = Tensor(x).gelu().numpy().astype(np.float64)
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    spacing = np.spacing(np.abs(want[normal]).astype(np.float32)).astype(np.float64)
    assert (np.abs(got - want)[normal] / spacing <= 8 + 2 * xd[normal] ** 2).all()
    assert (np.abs(got - want)[~normal] <= 64 * 2.0 ** -149).all()
    assert (got[xd < -14.5] == 0).all() and np.signbit(got[xd < -14.5]).all()


@pytest.mark.parametrize("name, most", [("gelu", 45), ("erf", 65)])
def test_float32_gelu_and_erf_trace_short_programs(name, most):
    """float32 gelu is one branch and erf's tail takes the same fit (D137): gelu's erfc
    form was 150 ops (two branches, each a series), erf's 90 (an exact-square split and a
    14-term series its absolute precision does not need), their kernels 2x and 1.4x as
    slow."""
    from lazyten.traced import Pointwise
    y = getattr(Tensor(np.ones(8, np.float32)), name)().lazydata
    program = y.base.arg if isinstance(y.base.arg, Pointwise) else None
    assert program is not None and program.ops <= most, program


# ---- bitwise ops and shifts ----
def _ints(dtype):
    return st.sampled_from(INTS) if dtype is None else st.just(dtype)


@given(data=st.data(), dtype=st.sampled_from(INTS + [dtypes.bool]), shape=shapes(max_dims=2))
@fast(12)
def test_bitwise_ops_match_numpy(data, dtype, shape):
    x, y = data.draw(arrays(dtype, shape)), data.draw(arrays(dtype, shape))
    t, u = Tensor(x), Tensor(y)
    assert_tensor(t.bitwise_and(u), x & y, exact=True)
    assert_tensor(t.bitwise_or(u), x | y, exact=True)
    assert_tensor(t.bitwise_xor(u), x ^ y, exact=True)
    assert_tensor(t.bitwise_not(), ~x, exact=True)


@given(data=st.data(), dtype=st.sampled_from(INTS), shape=shapes(max_dims=2))
@fast(16)
def test_shifts_match_numpy_for_every_count(data, dtype, shape):
    """Counts in [-3, bits + 3]: outside [0, bits) << gives 0 and >> the sign fill, as
    PyTorch (and numpy) do; >> of a negative value is arithmetic."""
    bits = 8 * np.dtype(NP[dtype]).itemsize
    x = data.draw(arrays(dtype, shape))
    low = 0 if dtype == dtypes.uint8 else -3
    y = data.draw(arrays(dtype, shape, low=low, high=bits + 3))
    t, u = Tensor(x), Tensor(y)
    with np.errstate(all="ignore"):
        assert_tensor(t << u, np.left_shift(x, y), exact=True)
        assert_tensor(t >> u, np.right_shift(x, y), exact=True)
    assert_tensor(t.bitwise_left_shift(u), np.left_shift(x, y), exact=True)
    assert_tensor(t.rshift(u), np.right_shift(x, y), exact=True)


def test_shifts_with_scalars_and_wrapping():
    x = np.array([-128, -1, 1, 127, 64], np.int8)
    assert_tensor(Tensor(x) << 1, np.left_shift(x, np.int8(1)), exact=True)  # wraps
    assert_tensor(Tensor(x) >> 7, np.right_shift(x, np.int8(7)), exact=True)
    big = np.array([-(2 ** 63), 2 ** 62 + 5, -3], np.int64)
    assert_tensor(Tensor(big) << 63, np.left_shift(big, 63), exact=True)
    assert_tensor(Tensor(big) >> 64, np.right_shift(big, 63), exact=True)
    u = np.array([255, 128, 1], np.uint8)
    assert_tensor(Tensor(u) >> 7, u >> 7, exact=True)  # logical for unsigned
    assert_tensor(Tensor(u) << 4, np.left_shift(u, np.uint8(4)), exact=True)
    counts = np.array([0, 3, 70], np.int64)
    assert_tensor(1 << Tensor(counts), np.left_shift(1, counts), exact=True)
    assert_tensor(-256 >> Tensor(counts), np.right_shift(-256, counts), exact=True)


@pytest.mark.parametrize("fn", [lambda t: t << 1, lambda t: t >> 1, lambda t: t.lshift(2),
                                lambda t: 1 << t, lambda t: t.bitwise_and(1)])
def test_shifts_and_bitwise_reject_floats_naming_the_dtype(fn):
    with pytest.raises(TypeError, match="float32"):
        fn(Tensor(np.float32([1.0, 2.0])))


def test_shifts_reject_bool_and_float_counts():
    with pytest.raises(TypeError, match="bool"):
        Tensor([True, False]) << Tensor([True, True])
    with pytest.raises(TypeError, match="float32"):
        Tensor([1, 2]) << 1.5


# ---- classification, masked_fill, closeness ----
@pytest.mark.parametrize("dtype", FLOATS + [dtypes.int32, dtypes.bool], ids=lambda d: d.name)
def test_isnan_isinf_isfinite(dtype):
    with np.errstate(all="ignore"):
        arr = EDGES.astype(NP[dtype])
    t = Tensor(arr)
    assert_tensor(t.isnan(), np.isnan(arr), exact=True)
    assert_tensor(t.isinf(), np.isinf(arr), exact=True)
    assert_tensor(t.isfinite(), np.isfinite(arr), exact=True)
    assert_tensor(t.isposinf(), np.isposinf(arr), exact=True)
    assert_tensor(t.isinf(detect_positive=False), np.isneginf(arr), exact=True)
    assert_tensor(t.isinf(False, False), np.zeros(arr.shape, bool), exact=True)


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3), dtype=st.sampled_from(FLOATS + INTS))
@fast(10)
def test_masked_fill_matches_numpy(data, shape, dtype):
    x = data.draw(arrays(dtype, shape))
    mask = data.draw(arrays(dtypes.bool, shape[1:]))  # broadcast along the first axis
    value = data.draw(st.sampled_from([3, -2, 1.5]))
    want = np.where(mask, np.array(value).astype(NP[dtype]), x)
    assert_tensor(Tensor(x).masked_fill(Tensor(mask), value), want, dtype=dtype, exact=True)


def test_masked_fill_gradient_and_bad_input():
    x = spaced(np.random.default_rng(0), (2, 3))[0]
    mask = Tensor(np.array([True, False, True]))
    check_grad(lambda t: t.masked_fill(mask, 2.0), x)
    t = Tensor(x)
    with pytest.raises(TypeError, match="bool mask"):
        t.masked_fill(Tensor(np.array([1, 0, 1])), 0.0)
    with pytest.raises(ValueError, match=r"\(4,\)"):
        t.masked_fill(Tensor(np.ones(4, bool)), 0.0)
    with pytest.raises(ValueError, match="broadcast"):
        Tensor(np.ones(3)).masked_fill(Tensor(np.ones((2, 3), bool)), 0.0)


@given(data=st.data(), shape=shapes(max_dims=2), dtype=st.sampled_from(FLOATS),
       equal_nan=st.booleans(), tol=st.sampled_from([(1e-5, 1e-8), (1e-2, 0.0), (0.0, 0.5)]))
@fast(12)
def test_isclose_matches_numpy(data, shape, dtype, equal_nan, tol):
    x = data.draw(arrays(dtype, shape, special=True))
    near = x + data.draw(arrays(dtype, shape, low=-1e-3, high=1e-3)) * np.abs(x)
    y = np.where(data.draw(arrays(dtypes.bool, shape)), near, data.draw(arrays(dtype, shape,
                                                                                special=True)))
    rtol, atol = tol
    with np.errstate(all="ignore"):
        want = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
    got = Tensor(x).isclose(Tensor(y), rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert_tensor(got, want, exact=True)
    assert Tensor(x).allclose(Tensor(y), rtol, atol, equal_nan) is bool(want.all())


def test_isclose_integers_and_errors():
    a, b = np.array([1, 100, 10 ** 6]), np.array([1, 101, 10 ** 6 + 5])
    assert_tensor(Tensor(a).isclose(Tensor(b), rtol=1e-5, atol=1), np.isclose(a, b, 1e-5, 1),
                  exact=True)
    with pytest.raises(ValueError, match="rtol=-1"):
        Tensor(a).isclose(Tensor(b), rtol=-1)


# ---- any / all ----
@given(data=st.data(), shape=shapes(max_dims=3, min_side=0, max_side=4),
       dtype=st.sampled_from([dtypes.bool, dtypes.int32, dtypes.float32]),
       keepdim=st.booleans(), spelling=st.sampled_from(["axis", "dim", "positional"]))
@fast(16)
def test_any_all_match_numpy(data, shape, dtype, keepdim, spelling):
    x = data.draw(arrays(dtype, shape, low=-1, high=1))
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1))
                     if shape else st.none())
    for name in ("any", "all"):
        fn = getattr(Tensor(x), name)
        got = (fn(axis=axis, keepdim=keepdim) if spelling == "axis" else
               fn(dim=axis, keepdim=keepdim) if spelling == "dim" else fn(axis, keepdim))
        assert_tensor(got, getattr(np, name)(x, axis=axis, keepdims=keepdim), exact=True)


def test_any_all_reject_both_spellings_and_count_nan():
    with pytest.raises(TypeError, match="not both"):
        Tensor([1, 0]).any(axis=0, dim=0)
    assert Tensor(np.float32([0.0, np.nan])).any().item() is True
    assert Tensor(np.zeros((0, 3))).all().item() is True
