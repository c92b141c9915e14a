"""Helpers the op modules share: broadcasting partners, scalars, intervals, reference glue."""
from __future__ import annotations
import math

import numpy as np

from .model import LIMIT, Interp, Ref, Var, int_range, is_float, representable, to_dtype

SCALARS_FLOAT = (0.5, 2.0, -1.0, 1.5, 0.25, -2.5, 3.0, 0.1)
SCALARS_INT = (1, 2, -1, 3, 0, 5)


def bshape(*shapes) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def partner_shape(g, shape) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: dims dropped from the front, some set to 1,
    and now and then leading dims added (the result grows)."""
    out = list(shape[g.int(0, len(shape)):] if g.chance(30) else shape)
    out = [1 if g.chance(25) else s for s in out]
    if g.chance(15) and len(out) == len(shape) < 4:
        out = [g.int(1, 3)] + out
    return tuple(out)


def small(shape) -> bool:
    """A result shape the fuzzer keeps: at most 4 dims and a few thousand elements."""
    return len(shape) <= 4 and int(np.prod(shape)) <= 4096


def partner(g, x: Var, pred=lambda v: True, dtype=None, lo=None, hi=None) -> Var:
    """A second operand broadcasting with x: from the pool, or a fresh input. Now and then
    a row value and its rows, as softmax and layernorm pair them (the scheduler's row
    kernels: a keepdim reduce over trailing axes, read back one value per row)."""
    def fits(v: Var) -> bool:
        return broadcastable(v.shape, x.shape) and small(bshape(v.shape, x.shape)) and pred(v)
    if g.chance(30):
        rows = g.var(lambda v: fits(v) and _row_pair(v.shape, x.shape))
        if rows is not None:
            return rows
    return g.operand(fits, partner_shape(g, x.shape), dtype, lo, hi)


def _row_pair(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Is one shape the other with its trailing axes (not all 1) set to 1?"""
    if len(a) != len(b) or a == b:
        return False
    low, high = (a, b) if int(np.prod(a)) < int(np.prod(b)) else (b, a)
    n = len(a)
    return any(low == high[:k] + (1,) * (n - k) and high[k:] != (1,) * (n - k)
               for k in range(n))


def scalar_for(g, dtype: str):
    """A Python scalar to combine with a tensor of dtype."""
    if is_float(dtype) or g.chance(20):
        return g.pick(SCALARS_FLOAT) if is_float(dtype) or g.chance(50) else g.pick(SCALARS_INT)
    if dtype == "bool":
        return g.pick([True, False, 1, 2])
    return g.pick(SCALARS_INT)


def scalar_grid(value) -> int | None:
    from .model import dyadic_exponent
    return 0 if isinstance(value, (bool, int)) else dyadic_exponent(value)


# ---- intervals ----
def iv_mul(a: tuple, b: tuple) -> tuple[float, float]:
    products = [p * q for p in a for q in b]
    return min(products), max(products)


def iv_div(a: tuple, b: tuple) -> tuple[float, float]:
    return iv_mul(a, (1 / b[1], 1 / b[0]))


def away_from_zero(v: tuple, exact: bool, margin: float = 0.25) -> bool:
    """Whether an interval keeps at least `margin` (inexact: more) away from 0."""
    m = margin if exact else margin * 1.5
    return v[0] >= m or v[1] <= -m


def fits(dtype: str, lo: float, hi: float) -> bool:
    """Whether results in [lo, hi] stay in range: ints without wrapping, floats below LIMIT."""
    if is_float(dtype):
        return max(abs(lo), abs(hi)) <= LIMIT[dtype] and math.isfinite(lo) and math.isfinite(hi)
    dmin, dmax = int_range(dtype)
    return dmin <= lo and hi <= dmax


def grid_exact(dtype: str, grid: int | None, lo: float, hi: float, *sources: Var) -> bool:
    """A sum or product of exact operands is exact when every partial result is
    representable (integers always are, within range)."""
    if not all(s.exact for s in sources):
        return False
    return True if not is_float(dtype) else representable(dtype, grid, max(abs(lo), abs(hi)))


def min_grid(*grids) -> int | None:
    return None if any(q is None for q in grids) else min(grids)


def operand_grid(v: Var, dtype: str) -> int | None:
    """v's grid once cast to dtype (integers are multiples of 1)."""
    return v.grid if is_float(v.dtype) else 0


# ---- reference glue ----
def arg(interp: Interp, ref: Ref, dtype: str) -> np.ndarray:
    """The values of ref converted to dtype, as float64 (floats) or int64 (integers; uint64
    stays uint64, whose values past 2**63 int64 cannot hold)."""
    cast = interp.cast(ref, dtype)
    if is_float(dtype):
        return cast.val.astype(np.float64)
    return cast.val if dtype in ("bool", "uint64") else cast.val.astype(np.int64)


def const(value, dtype: str) -> Ref:
    if dtype.startswith("u") and isinstance(value, (int, np.integer)) and value < 0:
        value = value % 2 ** (8 * np.dtype(dtype).itemsize)  # wraps, as lazyten's constants do
    return Ref(to_dtype(np.array(value), dtype))


def operand_ref(interp: Interp, item, dtype: str) -> Ref:
    """The Ref of an operand (a name, or a Python scalar) converted to dtype."""
    if isinstance(item, str):
        return interp.cast(interp.env[item], dtype)
    return interp.cast(const(item, dtype), dtype)


def mv(ref: Ref, fn) -> Ref:
    """A movement applied to the value and to its error bound alike."""
    return Ref(fn(ref.val), None if ref.err is None else fn(ref.err))


def show(item) -> str:
    """An operand as Python source: a name, or a scalar literal."""
    return item if isinstance(item, str) else repr(item)


def np_pad(a: np.ndarray, pairs, value=0) -> np.ndarray:
    """lazyten's pad in numpy: negative amounts crop, positive ones add `value`."""
    crop = tuple(slice(-min(b, 0), s + min(e, 0)) for s, (b, e) in zip(a.shape, pairs))
    grow = [(max(b, 0), max(e, 0)) for b, e in pairs]
    return np.pad(a[crop], grow, constant_values=value)
