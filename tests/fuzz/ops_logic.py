"""Comparisons, logic, where and casts: the ops whose results are exact by definition.

Comparisons, argmax and float -> int casts are drawn only on exact values (a value a
rounding away from a threshold would have two right answers), and casts only where the
value fits the target type.
"""
from __future__ import annotations
import math

import numpy as np

from .model import Interp, Ref, Step, int_range, is_float, is_int, promote, scalar_dtype, to_dtype
from .oplib import broadcastable, bshape, fits, min_grid, operand_ref, partner, scalar_grid, show
from .ops_elementwise import _facts, _other, _result_dtype, _step


# ---- comparisons, logic, where ----
def draw_compare(g):
    op = g.pick(["<", "<=", ">", ">=", "==", "!="])
    x = g.var(lambda v: v.exact)
    if x is None:
        return None
    y = _other(g, x, lambda v: v.exact)
    dtype = _result_dtype(x, y)
    fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
          "==": np.equal, "!=": np.not_equal}[op]
    return _step(g, "compare", f"{x.name} {op} {show(getattr(y, 'name', y))}", fn, [x, y],
                 dtype, 0, 1, True)


def draw_logic(g):
    op = g.pick(["&", "|", "^", "~", "logical_not"])
    x = g.var(lambda v: not is_float(v.dtype) or (op == "logical_not" and v.exact))
    if x is None:
        return None
    if op == "logical_not":
        return _step(g, "compare", f"{x.name}.logical_not()", np.logical_not, [x], x.dtype, 0, 1,
                     True)
    if op == "~":
        lo, hi = (0, 1) if x.dtype == "bool" else \
            ((int_range(x.dtype)[1] - x.hi, int_range(x.dtype)[1] - x.lo)
             if x.dtype.startswith("u") else (-x.hi - 1, -x.lo - 1))
        fn = np.logical_not if x.dtype == "bool" else np.invert
        return _step(g, "elementwise", f"~{x.name}", fn, [x], x.dtype, lo, hi, True)
    y = _other(g, x, lambda v: not is_float(v.dtype),
               scalar_pred=lambda s: not isinstance(s, float))
    if isinstance(y, float):
        return None
    dtype = _result_dtype(x, y)
    if is_float(dtype):
        return None
    ylo, yhi, _, _, _ = _facts(x, y, dtype)
    k = math.ceil(math.log2(max(abs(x.lo), abs(x.hi), abs(ylo), abs(yhi)) + 1)) + 1
    dmin, dmax = int_range(dtype)
    lo, hi = (0, 1) if dtype == "bool" else (max(-2 ** k, dmin), min(2 ** k, dmax))
    fn = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op]
    return _step(g, "elementwise", f"{x.name} {op} {show(getattr(y, 'name', y))}", fn, [x, y],
                 dtype, lo, hi, True)


def draw_shift(g):
    """x << c and x >> c on integers (c a scalar or a tensor of counts, some of them out of
    [0, bits): PyTorch and numpy give 0 or the sign fill there), and the bitwise_* names."""
    op = g.pick(["<<", ">>", "bitwise_left_shift", "bitwise_right_shift"])
    x = g.var(lambda v: is_int(v.dtype))
    if x is None:
        return None
    bits = 8 * np.dtype(x.dtype).itemsize
    if g.chance(50):
        y = g.int(0, bits + 2)
        yhi = y
    else:
        y = partner(g, x, lambda v: is_int(v.dtype) and v.lo >= -2 and v.hi <= bits + 2,
                    x.dtype, 0 if x.dtype.startswith("u") else -2, min(bits + 2, 20))
        yhi = y.hi
    dtype = _result_dtype(x, y)
    if not is_int(dtype):
        return None
    dmin, dmax = int_range(dtype)
    left = op in ("<<", "bitwise_left_shift")
    if left:
        scale = 2 ** max(int(yhi), 0)
        lo, hi = min(x.lo * scale, 0), max(x.hi * scale, 0)
        if not (dmin <= lo and hi <= dmax):
            lo, hi = dmin, dmax  # may wrap
    else:
        lo, hi = min(x.lo, 0), max(x.hi, 0)
    fn = np.left_shift if left else np.right_shift
    other = show(getattr(y, "name", y))
    src = f"{x.name} {op} {other}" if op in ("<<", ">>") else f"{x.name}.{op}({other})"
    return _step(g, "elementwise", src, fn, [x, y], dtype, lo, hi, True, native=True)


def draw_classify(g):
    """isnan, isinf, isfinite (and one-sided isinf) of any tensor: bool results."""
    op = g.pick(["isnan()", "isinf()", "isfinite()", "isposinf()", "isneginf()"])
    x = g.var(lambda v: v.exact or v.bound < 1e4)
    if x is None:
        return None
    fn = {"isnan()": np.isnan, "isinf()": np.isinf, "isfinite()": np.isfinite,
          "isposinf()": np.isposinf, "isneginf()": np.isneginf}[op]
    return _step(g, "compare", f"{x.name}.{op}", fn, [x], x.dtype, 0, 1, True, native=True)


def draw_masked_fill(g):
    """x.masked_fill(mask, value): a bool mask broadcasting to x's shape, a scalar value."""
    x = g.var(lambda v: not math.isnan(v.lo))  # the mean of nothing has no bounds
    if x is None:
        return None
    mask = g.var(lambda v: v.dtype == "bool" and v.exact and len(v.shape) <= len(x.shape)
                 and broadcastable(v.shape, x.shape) and bshape(v.shape, x.shape) == x.shape)
    if mask is None:
        return None
    value = g.pick([0, 1, 2.5, -3]) if x.dtype != "bool" else g.pick([True, False])
    fill = to_dtype(np.array(value), x.dtype).item()
    lo, hi = min(x.lo, fill), max(x.hi, fill)
    grid = min_grid(x.grid, scalar_grid(float(fill))) if is_float(x.dtype) else 0
    var = g.new(x.shape, x.dtype, lo, hi, [x, mask], grid=grid)

    def ref(interp: Interp, xname=x.name, mname=mask.name) -> Ref:
        cond = interp.env[mname].val
        xr = interp.env[xname]
        val = np.where(cond, np.asarray(fill, xr.val.dtype), xr.val)
        if var.exact or interp.fd:
            return Ref(val)
        return Ref(val, np.where(cond, 0.0, xr.e()))
    return g.add(Step("where", f"{x.name}.masked_fill({mask.name}, {show(value)})", ref, var))


def draw_where(g):
    """cond.where(x, y): a bool (or exact, tested != 0) condition, tensors or scalars."""
    c = g.var(lambda v: v.exact and (v.dtype == "bool" or g.chance(30)))
    if c is None:
        return None
    x = _other(g, c.but(dtype="float32" if c.dtype == "bool" else c.dtype), scalar_ok=True)
    joint = bshape(c.shape, x.shape) if hasattr(x, "shape") else c.shape
    if int(np.prod(joint)) > 4096 or len(joint) > 4:
        return None
    y = _other(g, c.but(dtype=getattr(x, "dtype", "float32"), shape=joint), scalar_ok=True)
    tensors = [t for t in (x, y) if hasattr(t, "name")]
    if len(tensors) == 2:
        dtype = promote(x.dtype, y.dtype)
    elif tensors:
        t, s = (x, y) if tensors[0] is x else (y, x)
        dtype = scalar_dtype(t.dtype, s)
    else:
        dtype = promote(_python_dtype(x), _python_dtype(y))
    shape = bshape(c.shape, *[t.shape for t in tensors])
    if int(np.prod(shape)) > 4096 or len(shape) > 4:
        return None
    facts = [_facts(c, t, dtype) for t in (x, y)]
    lo, hi = min(f[0] for f in facts), max(f[1] for f in facts)
    exact = all(f[2] for f in facts)
    grid = min_grid(*[f[3] for f in facts])
    names = [getattr(t, "name", t) for t in (x, y)]
    src = f"{c.name}.where({show(names[0])}, {show(names[1])})"

    var = g.new(shape, dtype, lo, hi, [c] + tensors, grid=grid if is_float(dtype) else 0)
    var = var.but(exact=var.exact and exact)

    def ref(interp: Interp, cname=c.name) -> Ref:
        cond = interp.env[cname].val != 0  # tested in its own dtype
        a, b = [operand_ref(interp, n, dtype) for n in names]
        val = np.where(cond, a.val, b.val)
        if var.exact or interp.fd:
            return Ref(val)
        return Ref(val, np.where(cond, a.e(), b.e()))
    return g.add(Step("where", src, ref, var))


def _python_dtype(value) -> str:
    """The dtype lazyten gives a Python scalar on its own."""
    return "bool" if isinstance(value, bool) else ("int64" if isinstance(value, int) else "float32")


# ---- casts ----
def cast_ok(v, dtype: str) -> bool:
    """Whether casting v to dtype has one right answer (no out-of-range float->int)."""
    if is_float(v.dtype) and not is_float(dtype):
        if not v.exact:
            return False
        if dtype == "bool":
            return True
        dmin, dmax = int_range(dtype)
        return dmin - 1 < v.lo and v.hi < dmax + 1
    if is_float(dtype):
        return fits(dtype, v.lo, v.hi)
    if dtype == "bool" or v.dtype == "bool":
        return True
    dmin, dmax = int_range(dtype)
    return dmin <= v.lo and v.hi <= dmax


ALIASES = {"float32": "float", "float16": "half", "float64": "double", "int32": "int",
           "int64": "long", "bool": "bool", "bfloat16": "bfloat16"}


def draw_cast(g):
    x = g.var()
    if x is None:
        return None
    dtype = g.pick(["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32",
                    "float64", "uint16", "uint32", "uint64", "bfloat16"])
    if not cast_ok(x, dtype) or dtype == x.dtype:
        return None
    src = f"{x.name}.{ALIASES[dtype]}()" if dtype in ALIASES and g.chance(40) else \
        f"{x.name}.cast(dtypes.{dtype})"
    if dtype == "bool":
        lo, hi = 0, 1
    elif is_float(x.dtype) and not is_float(dtype):
        lo, hi = math.trunc(x.lo), math.trunc(x.hi)
    else:
        lo, hi = x.lo, x.hi
    var = g.new(x.shape, dtype, lo, hi, [x], grid=0 if not is_float(x.dtype) else x.grid)

    def ref(interp: Interp, name=x.name) -> Ref:
        src_ref = interp.env[name]
        if dtype == "bool":
            return Ref(src_ref.val != 0)
        return interp.cast(src_ref, dtype)
    return g.add(Step("cast", src, ref, var))


_SAME_SIZE = [("int16", "uint16", "float16", "bfloat16"), ("int32", "uint32", "float32"),
              ("int64", "uint64", "float64")]


def _bits(val: np.ndarray, dtype: str) -> np.ndarray:
    """The stored bits of reference values of dtype, as unsigned integers."""
    if dtype == "bfloat16":
        return (np.array(val, np.float32, order="C").view(np.uint32) >> 16).astype(np.uint16)
    arr = np.array(val, dtype, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    return arr.view(f"u{arr.dtype.itemsize}")


_LARGEST = {"float16": 0x7BFF, "bfloat16": 0x7F7F, "float32": 0x7F7FFFFF,
            "float64": 0x7FEFFFFFFFFFFFFF}  # the bits of the largest finite value


def _float_of(bits: int, dtype: str) -> float:
    size = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[dtype]
    return float(_from_bits(np.array([bits], f"u{size}"), dtype)[0])


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.view(dtype)


def draw_bitcast(g):
    """x.bitcast(d): the same bits read as another dtype of the same itemsize. Fuzzer floats
    are finite, so no NaN payload is at stake; floats whose interval holds 0 are not
    drawn, since the bits show the sign of a zero, which the reference does not track.
    Integers become floats only where every value in their interval is the pattern of a
    finite non-negative float below the fuzzer's LIMIT (subnormals too), whose interval is
    then known (the order of such patterns is the floats')."""
    group = {d: kinds for kinds in _SAME_SIZE for d in kinds}
    x = g.var(lambda v: v.dtype in group and v.exact and
              (not is_float(v.dtype) or v.lo > 0 or v.hi < 0))
    if x is None:
        return None
    dtype = g.pick([d for d in group[x.dtype] if d != x.dtype])
    if is_float(dtype) and (is_float(x.dtype) or not 0 <= x.lo <= x.hi <= _LARGEST[dtype]):
        return None
    if is_float(dtype):
        lo, hi = _float_of(int(x.lo), dtype), _float_of(int(x.hi), dtype)
        if not fits(dtype, lo, hi):  # huge floats would overflow later ops' intervals
            return None
    else:
        lo, hi = int_range(dtype)
    var = g.new(x.shape, dtype, lo, hi, [x], grid=None if is_float(dtype) else 0)

    def ref(interp: Interp, name=x.name, src=x.dtype) -> Ref:
        bits = _bits(interp.env[name].val, src)
        return Ref(_from_bits(bits, dtype))
    return g.add(Step("cast", f"{x.name}.bitcast(dtypes.{dtype})", ref, var))


OPS = [
    ("compare", "compare", draw_compare, True),
    ("logic", "compare", draw_logic, False),
    ("shift", "compare", draw_shift, False),
    ("classify", "compare", draw_classify, False),
    ("masked_fill", "where", draw_masked_fill, True),
    ("where", "where", draw_where, True),
    ("cast", "cast", draw_cast, False),
    ("bitcast", "cast", draw_bitcast, False),
]
