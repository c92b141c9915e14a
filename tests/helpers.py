"""Test oracles shared by the op tests: hypothesis strategies that make (Tensor, ndarray)
pairs with the same values (contiguous or not), a comparison that checks shape, dtype and
values (NaN where numpy has NaN), and direct-loop numpy references for conv and pooling.
"""
from __future__ import annotations
import itertools

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from codegen.dtypes import dtypes
from lazyten import Tensor

# Every distinct kernel compiles (tens of ms), so keep examples few and shapes small.
FAST = settings(deadline=None, max_examples=12, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def fast(n: int = 12):
    """The suite's hypothesis settings with `n` examples."""
    return settings(FAST, max_examples=n)


NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8,
      dtypes.int16: np.int16, dtypes.int32: np.int32, dtypes.int64: np.int64,
      dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64,
      dtypes.uint16: np.uint16, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64,
      dtypes.bfloat16: np.float32}  # numpy has no bfloat16: its values as float32
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64]
ALL = [dtypes.bool] + INTS + FLOATS

# (rtol, atol) per result dtype, for plain arithmetic; transcendentals get loosened
TOL = {dtypes.float16: (2e-3, 2e-3), dtypes.float32: (1e-5, 1e-6), dtypes.float64: (1e-10, 1e-12)}


def rne_bf16(x) -> np.ndarray:
    """Reference rounding to bfloat16, written apart from lazyten's: each value (as float64)
    rounded to 8 significant bits, ties to even (np.round), on the grid of its binade; the
    subnormal grid 2**-133 below 2**-126; inf past the largest bfloat16. NaN stays NaN.
    Returns float32 (which holds every bfloat16 exactly)."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.asarray(x, np.float64)
        _, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
        e = np.maximum(e, -125)  # 2**-126 = 0.5 * 2**-125: below it the grid stays 2**-133
        r = np.ldexp(np.round(np.ldexp(x, 8 - e)), e - 8)
        r = np.where(np.isfinite(x) & (np.abs(r) >= 2.0 ** 128), np.copysign(np.inf, x), r)
    return r.astype(np.float32)


# ---- shapes ----
def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 1, max_side: int = 5):
    """Small shapes, with size-1 dims drawn often."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


@st.composite
def broadcastable(draw, n: int = 2, min_dims: int = 0, max_dims: int = 4):
    """`n` shapes that broadcast together (some dims 1, some dropped)."""
    shape_set = draw(hnp.mutually_broadcastable_shapes(
        num_shapes=n, min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=4))
    return shape_set.input_shapes


# ---- values ----
def elements(dtype, low=None, high=None, special: bool = False):
    """A value strategy for a dtype; `special` adds NaN and +-inf to floats."""
    if dtype == dtypes.bool:
        return st.booleans()
    if dtype.is_int:
        info = np.iinfo(NP[dtype])
        lo = info.min if low is None else max(int(low), int(info.min))
        hi = info.max if high is None else min(int(high), int(info.max))
        return st.integers(lo, hi)
    width = {dtypes.float16: 16, dtypes.float32: 32, dtypes.float64: 64}[dtype]
    lo, hi = (-10.0 if low is None else low), (10.0 if high is None else high)
    npt = NP[dtype]
    lo = float(npt(lo)) if float(npt(lo)) >= lo else float(np.nextafter(npt(lo), npt(np.inf)))
    hi = float(npt(hi)) if float(npt(hi)) <= hi else float(np.nextafter(npt(hi), npt(-np.inf)))
    finite = st.floats(lo, hi, width=width, allow_subnormal=False)
    if not special:
        return finite
    return st.one_of(finite, st.sampled_from([float("nan"), float("inf"), float("-inf")]))


def arrays(dtype, shape, **kw):
    return hnp.arrays(NP[dtype], shape, elements=elements(dtype, **kw))


# ---- layouts: the same values behind different ShapeTrackers ----
LAYOUTS = ("contiguous", "permute", "flip", "slice", "step")


@st.composite
def tensor_and_array(draw, shape, dtype=dtypes.float32, layout=None, **kw):
    """(Tensor, ndarray) with equal values; the tensor is a view of another buffer
    (permuted, flipped, sliced with an offset, or taken with a step of 2 or -2)."""
    arr = draw(arrays(dtype, shape, **kw))
    layout = layout or draw(st.sampled_from(LAYOUTS))
    return make_layout(arr, layout, draw), arr


def make_layout(arr: np.ndarray, layout: str, draw=None) -> Tensor:
    """A Tensor equal to `arr`, reached through `layout`'s movement ops."""
    ndim = arr.ndim
    if ndim == 0 or layout == "contiguous":
        return Tensor(arr)
    if layout == "permute":
        order = list(reversed(range(ndim)))
        inverse = list(np.argsort(order))
        return Tensor(np.ascontiguousarray(arr.transpose(order))).permute(inverse)
    if layout == "flip":
        axes = tuple(range(0, ndim, 2)) or (0,)
        return Tensor(np.ascontiguousarray(np.flip(arr, axes))).flip(axes)
    if layout == "slice":  # one extra element before and after on every axis
        big = np.zeros(tuple(s + 2 for s in arr.shape), dtype=arr.dtype)
        big[tuple(slice(1, -1) for _ in arr.shape)] = arr
        return Tensor(big)[tuple(slice(1, -1) for _ in arr.shape)]
    if layout == "step":  # every other element, forwards on even axes, backwards on odd
        big = np.zeros(tuple(2 * s + 1 for s in arr.shape), dtype=arr.dtype)
        index = tuple(slice(1, None, 2) if i % 2 == 0 else slice(-2, None, -2)
                      for i in range(ndim))
        big[index] = arr
        return Tensor(big)[index]
    raise ValueError(layout)


# ---- comparison ----
def assert_tensor(t: Tensor, expected, dtype=None, rtol=None, atol=None, exact=False):
    """t's shape, dtype (given or expected's) and values match, NaN where NaN; `exact`
    floats match bit for bit but for NaN payloads (the sign of a zero too: -0.0 == 0.0
    hid a cat that turned -0.0 into 0.0)."""
    expected = np.asarray(expected)
    if dtype is not None:
        assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
        expected = expected.astype(NP[dtype]) if expected.dtype != NP[dtype] else expected
    else:
        assert NP[t.dtype] == expected.dtype.type, f"dtype {t.dtype} != numpy {expected.dtype}"
    assert t.shape == expected.shape, f"shape {t.shape} != {expected.shape}"
    got = t.numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if exact or not t.dtype.is_float:
        np.testing.assert_array_equal(got, expected)
        if t.dtype.is_float:
            zeros = (got == 0) & (expected == 0)
            np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(expected[zeros]),
                                          err_msg="the signs of zeros differ")
        return
    r, a = TOL[t.dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               equal_nan=True)


def assert_matmul(got, a, b) -> None:
    """`got` is the float32 product a @ b (batched as numpy's): against float64, within
    2e-6 of the sum of |a_i b_i| for each element. A float32 sum of k terms is off by
    about sqrt(k) ulps of its partial sums, so a fixed tolerance fails at some k (the
    tests that make k twice the L2 cache did, on a 2 MB one); a wrong panel or a term
    left out is off by whole terms."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    expected, bound = a64 @ b64, 2e-6 * (np.abs(a64) @ np.abs(b64))
    got = np.asarray(got, np.float64)
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    err = np.abs(got - expected)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), f"off by {err[worst]} at {worst}, where the bound is {bound[worst]}"


# ---- direct-loop references for convolution and pooling ----
def _pad_spatial(x: np.ndarray, padding, value=0.0) -> np.ndarray:
    """padding: per spatial dim (before, after) pairs."""
    pads = [(0, 0)] * (x.ndim - len(padding)) + [tuple(p) for p in padding]
    return np.pad(x, pads, constant_values=value)


def conv_ref(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """N-d convolution (PyTorch semantics) by explicit loops over every output element.
    x: (N, Cin, *sp), w: (Cout, Cin/groups, *k); padding an int, per-dim ints or pairs."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    nd = w.ndim - 2
    stride = (stride,) * nd if isinstance(stride, int) else tuple(stride)
    dilation = (dilation,) * nd if isinstance(dilation, int) else tuple(dilation)
    if isinstance(padding, int):
        padding = [(padding, padding)] * nd
    padding = [(p, p) if isinstance(p, int) else tuple(p) for p in padding]
    x = _pad_spatial(x, padding)
    n, cin = x.shape[:2]
    cout, cin_g = w.shape[:2]
    kernel = w.shape[2:]
    out_sp = [(x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
              for i in range(nd)]
    out = np.zeros((n, cout, *out_sp))
    per_group = cout // groups
    for b, co in itertools.product(range(n), range(cout)):
        g = co // per_group
        for pos in itertools.product(*[range(o) for o in out_sp]):
            acc = 0.0
            for ci in range(cin_g):
                for k in itertools.product(*[range(s) for s in kernel]):
                    at = tuple(p * s + kk * d for p, s, kk, d in zip(pos, stride, k, dilation))
                    acc += x[(b, g * cin_g + ci) + at] * w[(co, ci) + k]
            out[(b, co) + pos] = acc
    if bias is not None:
        out += np.asarray(bias, np.float64).reshape((1, cout) + (1,) * nd)
    return out


def conv_transpose_ref(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1,
                       output_padding=0):
    """Transposed convolution by scattering each input element: w is (Cin, Cout/groups, *k)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    nd = w.ndim - 2
    stride, dilation, padding, output_padding = [
        (v,) * nd if isinstance(v, int) else tuple(v)
        for v in (stride, dilation, padding, output_padding)]
    n, cin = x.shape[:2]
    per_group = w.shape[1]
    cin_g = cin // groups
    kernel = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + output_padding[i]
            for i in range(nd)]
    out = np.zeros((n, per_group * groups, *full))
    for b, ci in itertools.product(range(n), range(cin)):
        g = ci // cin_g
        for pos in itertools.product(*[range(s) for s in x.shape[2:]]):
            for co in range(per_group):
                for k in itertools.product(*[range(s) for s in kernel]):
                    at = tuple(p * s + kk * d for p, s, kk, d in zip(pos, stride, k, dilation))
                    out[(b, g * per_group + co) + at] += x[(b, ci) + pos] * w[(ci, co) + k]
    crop = tuple(slice(p, f - p) for p, f in zip(padding, full))
    out = out[(slice(None), slice(None)) + crop]
    if bias is not None:
        out += np.asarray(bias, np.float64).reshape((1, -1) + (1,) * nd)
    return out


def pool_ref(x, kernel, stride=None, padding=0, dilation=1, op="max"):
    """2-d max or average pooling over the last two dims by explicit loops. Max pads with
    -inf; average pads with zeros that count in the mean (PyTorch's count_include_pad)."""
    x = np.asarray(x, np.float64)
    kernel = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    if stride is None:
        stride = kernel
    stride = (stride,) * 2 if isinstance(stride, int) else tuple(stride)
    dilation = (dilation,) * 2 if isinstance(dilation, int) else tuple(dilation)
    padding = [(padding, padding)] * 2 if isinstance(padding, int) else \
        [(p, p) if isinstance(p, int) else tuple(p) for p in padding]
    x = _pad_spatial(x, padding, value=-np.inf if op == "max" else 0.0)
    h, w = x.shape[-2:]
    oh = (h - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (w - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [i * stride[0] + a * dilation[0] for a in range(kernel[0])]
        cols = [j * stride[1] + b * dilation[1] for b in range(kernel[1])]
        window = x[..., rows, :][..., cols]
        out[..., i, j] = window.max(axis=(-2, -1)) if op == "max" else window.mean(axis=(-2, -1))
    return out
