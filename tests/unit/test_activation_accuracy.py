"""Activations and row ops built from primitives (softplus, elu, mish, softmax, layernorm...)
against float64 references written here, over each function's whole range: the composed
formulas must not cancel (log(1 + e^x) for x << 0, e^x - 1 for tiny x, alpha x + beta near
its root), overflow into NaN gradients, or round 16-bit floats at every step.

- float32 / float64: a dense sweep (log-spaced magnitudes from 1e-12 both signs, uniform
  values, a grid to +-100) within a few ulps where the result is a normal number well
  above the subnormal range (below it, where a factor such as e^x is itself subnormal,
  the absolute error must stay under a few of the smallest normal numbers).
- float16 and bfloat16: every finite value of the dtype, within 1 ulp of the float64
  result (computed in float32 and rounded once, as PyTorch computes them).
- gradients: float64 against the derivatives written here, including arguments where e^x
  overflows; float32 gradients finite there.
- row ops (softmax, log_softmax, logsumexp, layernorm, var, std) in 16-bit floats: within
  1 ulp of the float64 result (+ a float32 rounding's worth for outputs near 0).
"""
import math

import numpy as np
import pytest

from codegen.dtypes import dtypes
from lazyten import Tensor
from helpers import rne_bf16

_erfc = np.vectorize(math.erfc, otypes=[float])


def _softplus(x):
    return np.logaddexp(0.0, x)


def _sigmoid(x):
    """1 / (1 + e^-x) without overflow (e^x / (1 + e^x) below 0)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _phi(x):
    return np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
def _mish_d(x):
    return np.tanh(_softplus(x)) + x * _sigmoid(x) / np.cosh(_softplus(x)) ** 2

# name: (float64 reference, its derivative, float32 ulps, float64 ulps). gelu and
# quick_gelu scale x before e^ / erfc: the rounded product costs ~x^2 (|1.702 x|) ulps
# where x << 0, as in PyTorch (docs/numerics.md), so their bound grows with x.
ACTIVATIONS = {
    "softplus": (_softplus, _sigmoid, 6, 5),
    "logsigmoid": (lambda x: -np.logaddexp(0.0, -x), lambda x: _sigmoid(-x), 5, 4),
    "mish": (lambda x: x * np.tanh(_softplus(x)), _mish_d, 10, 8),
    "silu": (lambda x: x * _sigmoid(x), lambda x: _sigmoid(x) * (1 + x * _sigmoid(-x)), 6, 5),
    "sigmoid": (_sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x), 3, 3),
    "tanh": (np.tanh, lambda x: 1 / np.cosh(x) ** 2, 5, 5),
    "elu": (lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
            lambda x: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0))), 5, 4),
    "celu": (lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
             lambda x: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0))), 5, 4),
    "selu": (lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0))),
             lambda x: SELU_SCALE * np.where(x > 0, 1.0, SELU_ALPHA * np.exp(np.minimum(x, 0))),
             5, 6),
    "softsign": (lambda x: x / (1 + np.abs(x)), lambda x: 1 / (1 + np.abs(x)) ** 2, 2, 2),
    "gelu": (lambda x: 0.5 * x * _erfc(-x / np.sqrt(2)),
             lambda x: 0.5 * _erfc(-x / np.sqrt(2)) + x * _phi(x), lambda x: 8 + 2 * x * x,
             lambda x: 8 + 3 * x * x),
    "quick_gelu": (lambda x: x * _sigmoid(1.702 * x),
                   lambda x: _sigmoid(1.702 * x) * (1 + 1.702 * x * _sigmoid(-1.702 * x)),
                   lambda x: 6 + 2 * np.abs(x), lambda x: 5 + 2 * np.abs(x)),
    "hardswish": (lambda x: x * np.clip(x + 3, 0, 6) / 6,
                  lambda x: np.where(x < -3, 0.0, np.where(x > 3, 1.0, (2 * x + 3) / 6)), 3, 2),
    "hardsigmoid": (lambda x: np.clip(x + 3, 0, 6) / 6,
                    lambda x: np.where(np.abs(x) < 3, 1 / 6, 0.0), 2, 2),
    "relu6": (lambda x: np.clip(x, 0, 6), lambda x: ((x > 0) & (x < 6)).astype(float), 0.5, 0.5),
}
NP_DTYPE = {dtypes.float32: np.float32, dtypes.float64: np.float64}


def _sweep(n: int = 40_000) -> np.ndarray:
    rng = np.random.default_rng(11)
    mag = 10.0 ** rng.uniform(-12, 2.5, n)
    return np.concatenate([mag, -mag, rng.uniform(-30, 30, n), np.linspace(-100, 100, 4001),
                           [0.0, -0.0, -3.0, 3.0, 20.0, -20.0, 88.0, 89.0, 710.0, -710.0]])


def _errors(got: np.ndarray, want: np.ndarray, np_dtype):
    """(ulps where want is normal and far from the subnormals, absolute error in smallest
    normals elsewhere)."""
    info = np.finfo(np_dtype)
    far = np.isfinite(want) & (np.abs(want) >= info.tiny * 2.0 ** info.nmant)
    spacing = np.spacing(np.abs(want[far]).astype(np_dtype)).astype(np.float64)
    ulp = np.abs(got[far] - want[far]) / spacing
    near = np.isfinite(want) & ~far
    small = np.abs(got[near] - want[near]) / info.tiny
    return ulp, small, far


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_dense_sweep_within_ulps(name, dtype):
    ref, _, ulp32, ulp64 = ACTIVATIONS[name]
    x = _sweep().astype(NP_DTYPE[dtype])
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    got = getattr(Tensor(x), name)().numpy().astype(np.float64)
    ulp, small, far = _errors(got, want, NP_DTYPE[dtype])
    bounds = ulp32 if dtype is dtypes.float32 else ulp64
    bound = bounds(x[far].astype(np.float64)) if callable(bounds) else np.full(ulp.shape, bounds)
    worst = int(np.argmax(ulp - bound))
    assert (ulp <= bound).all(), (f"{name} {dtype.name}: {ulp[worst]:.1f} ulps > {bound[worst]:.1f} at "
                                  f"x={x[far][worst]!r}: {got[far][worst]!r}, want {want[far][worst]!r}")
    # below the threshold an ulp there (one smallest normal) is the unit: the same bound
    near = x[np.isfinite(want) & ~far].astype(np.float64)
    allowed = np.maximum(bounds(near) if callable(bounds) else bounds, 64)
    assert (small <= allowed).all(), f"{name}: {small.max()} smallest normals off"
    inf = ~np.isfinite(want)
    assert (got[inf] == want[inf]).all(), f"{name}: infinities differ"


def _all_values(dtype) -> np.ndarray:
    """Every finite value of a 16-bit float dtype, as float32."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    if dtype is dtypes.float16:
        values = bits.view(np.float16).astype(np.float32)
    else:
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    return values[np.isfinite(values)]


def _rounded(want: np.ndarray, dtype) -> np.ndarray:
    return want.astype(np.float16).astype(np.float64) if dtype is dtypes.float16 \
        else rne_bf16(want).astype(np.float64)


def _ulps16(got: np.ndarray, want: np.ndarray, dtype) -> np.ndarray:
    """Error in ulps of the dtype at the correctly rounded result (the subnormal spacing
    below the normals)."""
    rounded = np.abs(_rounded(want, dtype))
    bits, low = (10, -14) if dtype is dtypes.float16 else (7, -126)
    exponent = np.floor(np.log2(np.maximum(rounded, 2.0 ** low)))
    return np.abs(got - want) / 2.0 ** (exponent - bits)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_16bit_every_value_within_one_ulp(name, dtype):
    ref = ACTIVATIONS[name][0]
    x = _all_values(dtype)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    out = getattr(Tensor(x).cast(dtype), name)()
    assert out.dtype == dtype
    got = out.cast(dtypes.float64).numpy()
    with np.errstate(over="ignore"):
        finite = np.isfinite(_rounded(want, dtype))
    err = _ulps16(got[finite], want[finite], dtype)
    worst = int(np.argmax(err))
    assert err.max() <= 1.0, (f"{name} {dtype.name}: {err.max():.2f} ulps at x={x[finite][worst]!r}: "
                              f"{got[finite][worst]!r}, want {want[finite][worst]!r}")


# points away from the kinks (0 for relu-like ones, +-3 for the hard ones, 6 for relu6)
GRAD_POINTS = np.array([-1000.0, -700.0, -100.0, -40.0, -20.0, -9.0, -2.5, -1.0, -0.3,
                        -1e-3, -3e-9, 2e-9, 1e-3, 0.4, 1.3, 2.2, 4.5, 9.0, 21.0, 88.5,
                        100.0, 700.0, 1000.0])


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_gradients_match_float64_derivatives(name):
    derivative = ACTIVATIONS[name][1]
    t = Tensor(GRAD_POINTS, requires_grad=True)
    getattr(t, name)().sum().backward()
    got = t.grad.numpy()
    with np.errstate(all="ignore"):
        want = derivative(GRAD_POINTS)
    ok = np.isclose(got, want, rtol=1e-5, atol=1e-12)
    assert ok.all(), f"{name}: d/dx at {GRAD_POINTS[~ok]} is {got[~ok]}, want {want[~ok]}"


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_float32_gradients_finite_where_exp_overflows(name):
    x = np.array([-1000.0, -100.0, -89.0, 89.0, 100.0, 1000.0], np.float32)
    t = Tensor(x, requires_grad=True)
    getattr(t, name)().sum().backward()
    assert np.isfinite(t.grad.numpy()).all(), f"{name}: gradient {t.grad.numpy()} at {x}"


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(x):
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)


ROW_OPS = {
    "softmax": (lambda t: t.softmax(-1), _softmax),
    "log_softmax": (lambda t: t.log_softmax(-1), lambda x: np.log(_softmax(x))),
    "logsumexp": (lambda t: t.logsumexp(-1), lambda x: np.log(np.exp(x).sum(-1))),
    "layernorm": (lambda t: t.layernorm(), _layernorm),
    "var": (lambda t: t.var(-1), lambda x: x.var(-1, ddof=1)),
    "std": (lambda t: t.std(-1), lambda x: x.std(-1, ddof=1)),
}


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(ROW_OPS))
def test_row_ops_16bit_round_once(name, dtype):
    op, ref = ROW_OPS[name]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 37)) * 3).astype(np.float32)
    t = Tensor(x).cast(dtype)
    exact = t.cast(dtypes.float64).numpy()  # the 16-bit inputs, exactly
    want = ref(exact)
    out = op(t)
    assert out.dtype == dtype
    got = out.cast(dtypes.float64).numpy()
    # float32 intermediates are ~1e-7 relative to the row's scale: that much more near 0
    slack = 2e-7 * np.abs(exact).max() * 16
    err = _ulps16(got, want, dtype)
    err = np.where(np.abs(got - want) <= slack, 0.0, err)
    assert err.max() <= 1.0, f"{name} {dtype.name}: {err.max():.2f} ulps"


def test_layernorm_16bit_with_parameters_keeps_promotion():
    rng = np.random.default_rng(5)
    x = Tensor(rng.standard_normal((4, 9)).astype(np.float32)).cast(dtypes.float16)
    w16 = Tensor(rng.standard_normal(9).astype(np.float32)).cast(dtypes.float16)
    w32 = Tensor(rng.standard_normal(9).astype(np.float32))
    assert x._layer_norm(-1, 1e-5, w16, w16).dtype == dtypes.float16
    out = x._layer_norm(-1, 1e-5, w32, None)
    assert out.dtype == dtypes.float32
    want = _layernorm(x.cast(dtypes.float64).numpy()) * w32.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
