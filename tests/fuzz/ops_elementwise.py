"""Elementwise ops: arithmetic, math functions, comparisons, logic, where and casts.

Each draw function picks operands from the pool (or fresh inputs), checks the op's safe
domain on their intervals, and returns a Step whose `src` is the lazyten expression and
whose `ref` computes it in numpy: in float64 from the operands converted to the result
dtype (as lazyten promotes), rounded to the result dtype, with an error bound unless the
result is exact.
"""
from __future__ import annotations
import math

import numpy as np

from .model import UNIT, Interp, Ref, Step, is_float, is_int, promote, scalar_dtype
from .oplib import (arg, away_from_zero, bshape, fits, grid_exact, iv_div, iv_mul, min_grid,
                    operand_grid, operand_ref, partner, scalar_for, scalar_grid, show)

# ulps each math function may be off, beyond the rounding of its result (float32 exp2 is
# documented within 1 ulp and log2 within 3; exp, log, sin... are built on them)
ULP = {"exp": 4, "exp2": 2, "log": 4, "log2": 4, "sin": 4, "cos": 4, "sigmoid": 4, "tanh": 4,
       "reciprocal": 1, "pow": 4,
       # lazyten/mathfn.py, docs/numerics.md: measured maxima rounded up
       "expm1": 4, "log1p": 4, "sinh": 4, "cosh": 2, "asinh": 4, "acosh": 4, "atanh": 4,
       "erf": 3, "erfc": 5, "logaddexp": 4,
       "asin": 3, "acos": 3, "atan": 3}  # lazyten/pointwise.py


def _float(dtype: str) -> str:
    return dtype if is_float(dtype) else "float32"


def _other(g, x, pred=lambda v: True, lo=None, hi=None, scalar_ok=True, scalar_pred=None):
    """The second operand: a Python scalar (a quarter of the time) or a tensor var."""
    if scalar_ok and g.chance(25):
        s = scalar_for(g, x.dtype)
        if scalar_pred is None or scalar_pred(s):
            return s
    return partner(g, x, pred, None if x.dtype == "bool" else x.dtype, lo, hi)


def _facts(x, y, dtype):
    """(lo, hi, exact, grid, shape) of an operand, tensor or scalar, in dtype."""
    if isinstance(y, (bool, int, float)):
        v = float(y)
        return v, v, True, scalar_grid(y), ()
    return y.lo, y.hi, y.exact, operand_grid(y, dtype), y.shape


def _result_dtype(x, y) -> str:
    return promote(x.dtype, y.dtype) if not isinstance(y, (bool, int, float)) else \
        scalar_dtype(x.dtype, y)


def _step(g, kind, src, fn, operands, dtype, lo, hi, exact, grid=None, err=None, native=False):
    """A Step for `fn` over operands (names or scalars) converted to `dtype` (the compute
    type; the result's dtype is the Var's). `err(args, errs, z)` bounds the error before
    rounding; `native` computes in numpy's dtype arithmetic instead of float64."""
    sources = [o for o in operands if not isinstance(o, (bool, int, float))]
    shape = bshape(*[s.shape for s in sources])
    names = [o.name if not isinstance(o, (bool, int, float)) else o for o in operands]
    out_dtype = dtype if kind != "compare" else "bool"
    if kind in ("compare",):
        lo, hi = 0, 1
    if not fits(out_dtype, lo, hi):
        return None
    var = g.new(shape, out_dtype, lo, hi, sources, grid=grid if is_float(out_dtype) else 0)
    var = var.but(exact=var.exact and exact)

    def ref(interp: Interp) -> Ref:
        refs = [operand_ref(interp, n, dtype) for n in names]
        if native:
            z = fn(*[r.val for r in refs])
            return Ref(z) if var.exact or interp.fd else Ref(z, np.zeros(z.shape))
        args = [arg(interp, r, dtype) for r in refs]
        with np.errstate(all="ignore"):
            z = fn(*args)
        if not is_float(out_dtype):
            return Ref(np.asarray(z).astype(out_dtype))
        bound = None if var.exact or interp.fd else err([np.abs(a) for a in args],
                                                        [r.e() for r in refs], np.asarray(z))
        return interp.out(z, out_dtype, bound, exact=var.exact)

    return g.add(Step(kind, src, ref, var))


# ---- binary arithmetic ----
def _err_add(a, e, z):
    return e[0] + e[1]


def _err_mul(a, e, z):
    return a[0] * e[1] + a[1] * e[0] + e[0] * e[1]


def _err_div(a, e, z):
    return (e[0] + np.abs(z) * e[1]) / np.maximum(a[1] - e[1], 1e-300)


def _err_max(a, e, z):
    return np.maximum(e[0], e[1])


def draw_arith(g):
    """x + y, x - y, x * y (also with a scalar on either side)."""
    op = g.pick(["add", "sub", "mul"])
    x = g.var(lambda v: v.dtype != "bool")
    if x is None:
        return None
    y = _other(g, x, lambda v: v.dtype != "bool")
    dtype = _result_dtype(x, y)
    ylo, yhi, yexact, ygrid, _ = _facts(x, y, dtype)
    xgrid = operand_grid(x, dtype)
    if op == "mul":
        lo, hi = iv_mul((x.lo, x.hi), (ylo, yhi))
        grid = None if xgrid is None or ygrid is None else xgrid + ygrid
    else:
        lo, hi = (x.lo + ylo, x.hi + yhi) if op == "add" else (x.lo - yhi, x.hi - ylo)
        grid = min_grid(xgrid, ygrid)
    exact = yexact and grid_exact(dtype, grid, lo, hi, x)
    symbol = {"add": "+", "sub": "-", "mul": "*"}[op]
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
    reverse = not isinstance(y, str) and not hasattr(y, "name") and g.chance(40)
    if reverse:  # scalar on the left: s - x
        lo, hi = (lo, hi) if op != "sub" else (-hi, -lo)
        src = f"{show(y)} {symbol} {x.name}"
        return _step(g, "elementwise", src, lambda a, b: fn(b, a), [x, y], dtype, lo, hi, exact,
                     grid, _err_mul if op == "mul" else _err_add)
    src = f"{x.name} {symbol} {show(y.name if hasattr(y, 'name') else y)}"
    return _step(g, "elementwise", src, fn, [x, y], dtype, lo, hi, exact, grid,
                 _err_mul if op == "mul" else _err_add)


def draw_div(g):
    """x / y (true division; integers give float32) with y kept away from 0."""
    x = g.var(lambda v: v.dtype != "bool")
    if x is None:
        return None
    y = _other(g, x, lambda v: v.dtype != "bool" and away_from_zero((v.lo, v.hi), v.exact),
               lo=0.25 if is_float(x.dtype) else 1, hi=3 if is_float(x.dtype) else 9,
               scalar_pred=lambda s: abs(s) >= 0.1)
    dtype = _float(_result_dtype(x, y))
    ylo, yhi, yexact, _, _ = _facts(x, y, dtype)
    if not away_from_zero((ylo, yhi), yexact, 0.1):
        return None
    lo, hi = iv_div((x.lo, x.hi), (ylo, yhi))
    src = f"{x.name} / {show(getattr(y, 'name', y))}"
    return _step(g, "elementwise", src, np.divide, [x, y], dtype, lo, hi, yexact, None, _err_div)


def draw_maximum(g):
    op = g.pick(["maximum", "minimum"])
    x = g.var()
    if x is None:
        return None
    y = _other(g, x)
    dtype = _result_dtype(x, y)
    ylo, yhi, yexact, ygrid, _ = _facts(x, y, dtype)
    pick = max if op == "maximum" else min
    lo, hi = pick(x.lo, ylo), pick(x.hi, yhi)
    src = f"{x.name}.{op}({show(getattr(y, 'name', y))})"
    fn = np.maximum if op == "maximum" else np.minimum
    return _step(g, "elementwise", src, fn, [x, y], dtype, lo, hi, yexact,
                 min_grid(operand_grid(x, dtype), ygrid), _err_max)


def draw_floordiv(g):
    """x // y and x % y, Python's rounding, on integers (and exact float32/64)."""
    op = g.pick(["//", "%"])
    x = g.var(lambda v: is_int(v.dtype) or (v.dtype in ("float32", "float64") and v.exact))
    if x is None or g.grad:
        return None
    ints = is_int(x.dtype)
    y = _other(g, x, lambda v: (is_int(v.dtype) if ints else v.dtype in ("float32", "float64"))
               and v.exact and away_from_zero((v.lo, v.hi), True, 1 if ints else 0.25),
               lo=1 if ints else 0.5, hi=9 if ints else 3,
               scalar_pred=lambda s: isinstance(s, int) == ints and abs(s) >= (1 if ints else 0.25)
               and not isinstance(s, bool))
    dtype = _result_dtype(x, y)
    ylo, yhi, yexact, _, _ = _facts(x, y, dtype)
    if not yexact or not away_from_zero((ylo, yhi), True, 1 if ints else 0.25) or \
            is_int(dtype) != ints or dtype in ("float16", "bfloat16"):
        return None
    if op == "//":
        lo, hi = iv_div((x.lo, x.hi), (ylo, yhi))
        lo, hi = math.floor(lo), math.floor(hi)
    else:
        big = max(abs(ylo), abs(yhi))
        lo, hi = (0, big) if ylo > 0 else (-big, 0)
    src = f"{x.name} {op} {show(getattr(y, 'name', y))}"
    fn = np.floor_divide if op == "//" else np.mod
    return _step(g, "elementwise", src, fn, [x, y], dtype, lo, hi, True, None, native=True)


def draw_pow(g):
    """x ** c for a few constants c (integer powers multiply; others go through exp2/log2),
    x ** y and c ** x with positive bases."""
    form = g.pick(["int", "int", "float", "tensor", "rpow"])
    if form == "int":
        c = g.pick([2, 3, 0, -1, -2])
        x = g.var(lambda v: v.dtype != "bool" and (
            c >= 0 or (is_float(v.dtype) and away_from_zero((v.lo, v.hi), v.exact))))
        if x is None:
            return None
        dtype = scalar_dtype(x.dtype, c)
        if c >= 0:
            corners = [x.lo ** c, x.hi ** c] + ([0.0] if x.lo < 0 < x.hi else [])
            lo, hi = min(corners), max(corners)
            grid = None if x.grid is None else x.grid * max(c, 1)
            exact = grid_exact(dtype, grid if is_float(dtype) else 0, lo, hi, x) if c else True
        else:
            corners = [x.lo ** c, x.hi ** c]
            lo, hi, grid, exact = min(corners), max(corners), None, False
        grid = 0 if c == 0 else grid
        return _step(g, "elementwise", f"{x.name} ** {c}", lambda a: np.power(a, float(c)), [x],
                     dtype, lo, hi, exact, grid, _int_pow_err(c, dtype))
    x = g.var(lambda v: v.dtype != "bool" and v.lo >= (0.25 if g.grad or not v.exact else 0))
    if form == "float" and x is not None:
        c = g.pick([0.5, 1.5, -0.5, 2.5])
        if c < 0 and x.lo < 0.25:
            return None
        dtype = _float(x.dtype)
        lo, hi = sorted([x.lo ** c if x.lo > 0 else (0.0 if c > 0 else math.inf), x.hi ** c])
        return _step(g, "elementwise", f"{x.name} ** {c}", lambda a: np.power(a, c), [x], dtype,
                     lo, hi, False, None, _pow_err(c, dtype))
    if form == "tensor" and x is not None and x.lo >= 0.25:
        y = partner(g, x, lambda v: is_float(v.dtype) and v.bound <= 3, _float(x.dtype), -2, 2)
        dtype = _float(promote(x.dtype, y.dtype))
        top = max(x.hi, 1 / x.lo) ** y.bound
        return _step(g, "elementwise", f"{x.name} ** {y.name}", np.power, [x, y], dtype,
                     1 / top, top, False, None, _pow_err(None, dtype))
    x = g.var(lambda v: v.dtype != "bool" and v.hi <= 8 and v.lo >= -8)
    if form != "rpow" or x is None:
        return None
    base = g.pick([2.0, 0.5, 3.0])
    dtype = _float(x.dtype)
    lo, hi = sorted([base ** x.lo, base ** x.hi])
    return _step(g, "elementwise", f"{base} ** {x.name}", lambda a: np.power(base, a), [x], dtype,
                 lo, hi, False, None,
                 lambda a, e, z: np.abs(z) * np.expm1(abs(math.log(base)) * e[0])
                 + ULP["pow"] * _unit(dtype) * np.abs(z) * (1 + abs(math.log(base)) * a[0]))


def _int_pow_err(c: int, dtype: str):
    """x ** c by repeated multiplication (and a reciprocal for c < 0)."""
    def err(a, e, z):
        unit = _unit(dtype)
        if c > 0:
            return (a[0] + e[0]) ** c - a[0] ** c + c * unit * np.abs(z)
        return -c * np.abs(z) * e[0] / np.maximum(a[0] - e[0], 1e-300) + (1 - c) * unit * np.abs(z)
    return err


def _unit(dtype: str) -> float:
    """The unit roundoff math functions work in: 16-bit floats are computed in float32."""
    return UNIT["float32" if dtype in ("float16", "bfloat16", "float32") else dtype]


def _pow_err(c, dtype: str):
    def err(a, e, z):
        y = c if c is not None else a[1]
        ey = 0 if c is not None else e[1]
        logx = np.abs(np.log(np.maximum(a[0], 1e-300)))
        prop = np.abs(z) * (np.abs(y) * e[0] / np.maximum(a[0] - e[0], 1e-300) + logx * ey)
        return prop + ULP["pow"] * _unit(dtype) * np.abs(z) * (1 + np.abs(y) * logx)
    return err


# ---- unary ----
def _unary_table(dtype: str):
    """name -> (domain(var) -> bool, interval(lo, hi) -> (lo, hi), numpy fn, error fn)."""
    def u(name):
        return ULP[name] * _unit(dtype)
    return {
        "exp": (lambda v: v.hi <= 7, lambda lo, hi: (math.exp(lo), math.exp(hi)), np.exp,
                lambda a, e, z: np.abs(z) * np.expm1(e[0]) + u("exp") * np.abs(z)),
        "exp2": (lambda v: v.hi <= 10, lambda lo, hi: (2 ** lo, 2 ** hi), np.exp2,
                 lambda a, e, z: np.abs(z) * np.expm1(e[0] * math.log(2)) + u("exp2") * np.abs(z)),
        "log": (lambda v: away_from_zero((v.lo, v.hi), v.exact, 0.05) and v.lo > 0,
                lambda lo, hi: (math.log(lo), math.log(hi)), np.log,
                lambda a, e, z: e[0] / np.maximum(a[0] - e[0], 1e-300) + u("log") * np.abs(z)),
        "log2": (lambda v: away_from_zero((v.lo, v.hi), v.exact, 0.05) and v.lo > 0,
                 lambda lo, hi: (math.log2(lo), math.log2(hi)), np.log2,
                 lambda a, e, z: e[0] / np.maximum(a[0] - e[0], 1e-300) / math.log(2)
                 + u("log2") * np.abs(z)),
        "sqrt": (lambda v: v.lo >= (0 if v.exact else 0.05),
                 lambda lo, hi: (math.sqrt(lo), math.sqrt(hi)), np.sqrt,
                 lambda a, e, z: e[0] / (np.sqrt(a[0]) + np.sqrt(np.maximum(a[0] - e[0], 0))
                                         + 1e-300)),
        "sin": (lambda v: v.bound <= 20, lambda lo, hi: (-1.0, 1.0), np.sin,
                lambda a, e, z: e[0] + u("sin") * (np.abs(z) + a[0])),
        "cos": (lambda v: v.bound <= 20, lambda lo, hi: (-1.0, 1.0), np.cos,
                lambda a, e, z: e[0] + u("cos") * (np.abs(z) + a[0] + 2)),
        "sigmoid": (lambda v: True, lambda lo, hi: (1 / (1 + math.exp(-max(lo, -700))),
                                                    1 / (1 + math.exp(-min(hi, 700)))),
                    lambda a: 1 / (1 + np.exp(-a)),
                    lambda a, e, z: e[0] / 4 + u("sigmoid") * np.abs(z)),
        "tanh": (lambda v: True, lambda lo, hi: (math.tanh(lo), math.tanh(hi)), np.tanh,
                 lambda a, e, z: e[0] + u("tanh") * np.abs(z)),
        "reciprocal": (lambda v: away_from_zero((v.lo, v.hi), v.exact),
                       lambda lo, hi: tuple(sorted((1 / lo, 1 / hi))), lambda a: 1 / a,
                       lambda a, e, z: e[0] / np.maximum(a[0] * (a[0] - e[0]), 1e-300)
                       + u("reciprocal") * np.abs(z)),
    }


SMOOTH_UNARY = ("exp", "log", "sqrt", "sin", "sigmoid", "tanh", "reciprocal", "exp2", "log2", "cos")


def draw_math(g):
    """exp, log, sqrt, sin, sigmoid, tanh... on floats (integers compute in float32)."""
    name = g.pick(SMOOTH_UNARY)
    domain = _unary_table("float32")[name][0]
    x = g.var(lambda v: domain(v) and (not g.grad or name != "sqrt" or v.lo >= 0.05))
    if x is None:
        return None
    _, interval, fn, err = _unary_table(_float(x.dtype))[name]
    lo, hi = interval(x.lo, x.hi)
    exact = name == "sqrt"  # IEEE: correctly rounded
    return _step(g, "elementwise", f"{x.name}.{name}()", fn, [x], _float(x.dtype), lo, hi,
                 exact, None, err)


_ERF = np.vectorize(math.erf, otypes=[float])
_ERFC = np.vectorize(math.erfc, otypes=[float])


def _special_table(dtype: str):
    """name -> (domain(var) -> bool, interval(lo, hi), numpy fn, error fn) for mathfn.py's
    functions. The error functions see |x| only: each bounds the derivative over
    [|x| - e, |x| + e] for either sign the domain allows."""
    def u(name):
        return ULP[name] * _unit(dtype)
    tiny = 1e-300
    return {
        "expm1": (lambda v: v.hi <= 7, lambda lo, hi: (math.expm1(lo), math.expm1(hi)), np.expm1,
                  lambda a, e, z: np.exp(a[0] + e[0]) * e[0] + u("expm1") * np.abs(z)),
        "log1p": (lambda v: v.lo >= (-0.5 if v.exact else -0.4) and v.hi <= 1e6,
                  lambda lo, hi: (math.log1p(lo), math.log1p(hi)), np.log1p,
                  lambda a, e, z: e[0] / np.maximum(np.where(a[0] >= 0.5, 1.0, 1 - a[0]) - e[0],
                                                    tiny) + u("log1p") * np.abs(z)),
        "sinh": (lambda v: v.bound <= 10, lambda lo, hi: (math.sinh(lo), math.sinh(hi)), np.sinh,
                 lambda a, e, z: np.cosh(a[0] + e[0]) * e[0] + u("sinh") * np.abs(z)),
        "cosh": (lambda v: v.bound <= 10,
                 lambda lo, hi: (1.0 if lo <= 0 <= hi else min(math.cosh(lo), math.cosh(hi)),
                                 max(math.cosh(lo), math.cosh(hi))), np.cosh,
                 lambda a, e, z: np.sinh(a[0] + e[0]) * e[0] + u("cosh") * np.abs(z)),
        "asinh": (lambda v: v.bound <= 1e6, lambda lo, hi: (math.asinh(lo), math.asinh(hi)),
                  np.arcsinh, lambda a, e, z: e[0] + u("asinh") * np.abs(z)),
        "acosh": (lambda v: v.lo >= 1.25 and v.hi <= 1e6,
                  lambda lo, hi: (math.acosh(lo), math.acosh(hi)), np.arccosh,
                  lambda a, e, z: e[0] / np.sqrt(np.maximum((a[0] - e[0]) ** 2 - 1, tiny))
                  + u("acosh") * np.abs(z)),
        "atanh": (lambda v: v.bound <= 0.75, lambda lo, hi: (math.atanh(lo), math.atanh(hi)),
                  np.arctanh, lambda a, e, z: e[0] / np.maximum(1 - (a[0] + e[0]) ** 2, tiny)
                  + u("atanh") * np.abs(z)),
        "erf": (lambda v: True, lambda lo, hi: (math.erf(lo), math.erf(hi)), _ERF,
                lambda a, e, z: 1.13 * e[0] + u("erf") * np.abs(z)),
        "erfc": (lambda v: v.hi <= 9, lambda lo, hi: (math.erfc(hi), math.erfc(lo)), _ERFC,
                 lambda a, e, z: 1.13 * e[0] + u("erfc") * np.abs(z)),
        "asin": (lambda v: v.bound <= 0.75, lambda lo, hi: (math.asin(lo), math.asin(hi)),
                 np.arcsin, lambda a, e, z: e[0] / np.sqrt(np.maximum(1 - (a[0] + e[0]) ** 2, tiny))
                 + u("asin") * np.abs(z)),
        "acos": (lambda v: v.bound <= 0.75, lambda lo, hi: (math.acos(hi), math.acos(lo)),
                 np.arccos, lambda a, e, z: e[0] / np.sqrt(np.maximum(1 - (a[0] + e[0]) ** 2, tiny))
                 + u("acos") * np.abs(z)),
        "atan": (lambda v: v.bound <= 1e30, lambda lo, hi: (math.atan(lo), math.atan(hi)),
                 np.arctan, lambda a, e, z: e[0] + u("atan") * np.abs(z)),
    }


def draw_special(g):
    """expm1, log1p, sinh, cosh, asinh, acosh, atanh, erf, erfc (lazyten/mathfn.py); asin,
    acos, atan (lazyten/pointwise.py)."""
    name = g.pick(list(_special_table("float32")))
    domain = _special_table("float32")[name][0]
    x = g.var(lambda v: v.dtype != "bool" and domain(v))
    if x is None:
        return None
    _, interval, fn, err = _special_table(_float(x.dtype))[name]
    lo, hi = interval(max(x.lo, -1e300), min(x.hi, 1e300))
    return _step(g, "elementwise", f"{x.name}.{name}()", fn, [x], _float(x.dtype), lo, hi,
                 False, None, err)


def draw_logaddexp(g):
    """x.logaddexp(y): log(e^x + e^y), each partial derivative in [0, 1]."""
    x = g.var(lambda v: v.dtype != "bool" and v.bound <= 60)
    if x is None:
        return None
    y = partner(g, x, lambda v: v.dtype != "bool" and v.bound <= 60, _float(x.dtype), -8, 8)
    dtype = _float(promote(x.dtype, y.dtype))
    lo, hi = max(x.lo, y.lo), max(x.hi, y.hi) + math.log(2)
    return _step(g, "elementwise", f"{x.name}.logaddexp({y.name})", np.logaddexp, [x, y], dtype,
                 lo, hi, False, None,
                 lambda a, e, z: np.maximum(e[0], e[1]) + ULP["logaddexp"] * _unit(dtype)
                 * (np.abs(z) + np.maximum(a[0], a[1])))


def draw_simple_unary(g):
    """neg, abs, relu, square, sign, and floor/ceil/round/trunc of exact values."""
    name = g.pick(["neg", "abs", "relu", "square", "sign", "floor", "ceil", "round", "trunc"])
    rounding = name in ("floor", "ceil", "round", "trunc", "sign")  # jumps: exact inputs only
    x = g.var(lambda v: (v.dtype != "bool" or name in ("abs", "sign")) and
              not (name == "neg" and v.dtype.startswith("u")) and (not rounding or v.exact)
              and not math.isnan(v.lo))  # the mean of nothing: no bounds to round
    if x is None:
        return None
    lo, hi, grid, exact = x.lo, x.hi, x.grid, True
    if name == "neg":
        lo, hi, fn = -x.hi, -x.lo, np.negative
    elif name == "abs":
        lo, hi = (0.0 if x.lo < 0 < x.hi else min(abs(x.lo), abs(x.hi))), x.bound
        fn = np.abs
    elif name == "relu":
        lo, hi, fn = max(x.lo, 0), max(x.hi, 0), lambda a: np.maximum(a, 0)
    elif name == "square":
        lo, hi = (0.0 if x.lo < 0 < x.hi else min(x.lo ** 2, x.hi ** 2)), x.bound ** 2
        grid = None if x.grid is None else 2 * x.grid
        exact = grid_exact(x.dtype, grid, lo, hi, x)
        fn = np.square
    elif name == "sign":
        lo, hi, grid, fn = -1, 1, 0, np.sign
    else:
        fn = {"floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc}[name]
        lo, hi, grid = math.floor(x.lo), math.ceil(x.hi), 0 if x.grid is not None else None
    err = (lambda a, e, z: 2 * a[0] * e[0] + e[0] ** 2) if name == "square" else \
        (lambda a, e, z: e[0] * (name != "sign"))
    src = f"-{x.name}" if name == "neg" and g.chance(50) else f"{x.name}.{name}()"
    return _step(g, "elementwise", src, fn, [x], x.dtype, lo, hi, exact, grid, err)


OPS = [
    ("arith", "elementwise", draw_arith, True),
    ("arith2", "elementwise", draw_arith, True),
    ("div", "elementwise", draw_div, True),
    ("maximum", "elementwise", draw_maximum, True),
    ("floordiv", "elementwise", draw_floordiv, False),
    ("pow", "elementwise", draw_pow, True),
    ("math", "elementwise", draw_math, True),
    ("math2", "elementwise", draw_math, True),
    ("unary", "elementwise", draw_simple_unary, True),
    ("special", "elementwise", draw_special, True),
    ("logaddexp", "elementwise", draw_logaddexp, True),
]
