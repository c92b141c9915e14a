"""Reductions over random axes (sum, max, min, mean, prod, argmax, argmin, any, all),
matmul, and the sorting ops and scans (sort, argsort, topk, cummax, cummin) of exact values.

Float sums are exact when every partial sum is representable (grid values); otherwise
their error bound allows any summation order: n * u_acc * sum|x|, with float16 expected
to accumulate in float32 (u_acc is float32's unit), as PyTorch does.
"""
from __future__ import annotations
import math

import numpy as np

from .model import ACCUMULATE, UNIT, Interp, Ref, Step, is_float, promote
from .oplib import arg, fits, grid_exact, partner_shape, small

REDUCE_OPS = ("sum", "max", "min", "mean", "prod", "argmax", "argmin")
SMOOTH_REDUCE = ("sum", "max", "min", "mean", "prod")


def _axis(g, x, single: bool = False):
    """(source text of the axis argument, the normalised axes) for x."""
    if x.ndim == 0 or g.chance(20):
        return "", tuple(range(x.ndim))
    if single or g.chance(60):
        a = x.ndim - 1 if g.chance(40) else g.int(0, x.ndim - 1)  # the last axis, as ML code does
        shown = a - x.ndim if g.chance(30) else a
        return f"axis={shown}" if g.chance(50) else f"{shown}", (a,)
    axes = tuple(sorted(g.subset(range(x.ndim), min_size=1)))
    return f"axis={axes}", axes


def draw_reduce(g):
    op = g.pick(REDUCE_OPS if not g.grad else SMOOTH_REDUCE)
    arg_op = op in ("argmax", "argmin")
    x = g.var(lambda v: (v.exact or not arg_op) and (op not in ("mean", "prod") or v.dtype != "bool"
                                                     or op == "prod"))
    if x is None:
        return None
    axis_src, axes = _axis(g, x, single=arg_op)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if op in ("max", "min") or arg_op:
        if any(x.shape[a] == 0 for a in axes):
            return None
    keepdim = g.chance(40)
    kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    shape = kept if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if arg_op and axis_src == "" and keepdim:
        shape = (1,) * x.ndim
    dtype = {"sum": "int64" if not is_float(x.dtype) else x.dtype,
             "prod": "int64" if not is_float(x.dtype) else x.dtype,
             "mean": x.dtype if is_float(x.dtype) else "float32",
             "max": x.dtype, "min": x.dtype, "argmax": "int64", "argmin": "int64"}[op]
    grid, exact = x.grid if is_float(x.dtype) else 0, x.exact
    if op == "sum":
        lo, hi = min(0, n * x.lo), max(0, n * x.hi)
        exact = grid_exact(dtype, grid, lo, hi, x)
    elif op == "mean":  # the mean of nothing is NaN: no op may treat it as a number
        lo, hi = (x.lo, x.hi) if n else (math.nan, math.nan)
        exact = grid_exact(dtype, grid, n * x.lo, n * x.hi, x)
        grid = None
    elif op == "prod":
        if x.bound > 1 and n * math.log(x.bound) > 600:
            return None
        big = x.bound ** n
        lo, hi = (x.lo ** n, x.hi ** n) if x.lo >= 0 else (-big, big)
        lo, hi = min(lo, 1.0), max(hi, 1.0)
        grid = None if grid is None else grid * max(n, 1)
        exact = grid_exact(dtype, grid, lo, hi, x)
    elif arg_op:
        lo, hi, grid = 0, max(n - 1, 0), 0
    else:
        lo, hi = x.lo, x.hi
    empty_mean = op == "mean" and n == 0
    if not (fits(dtype, lo, hi) or empty_mean) or \
            (op == "prod" and not is_float(dtype) and x.bound ** n >= 2 ** 62):
        return None
    keep_src = ", keepdim=True" if keepdim else ""
    args = ", ".join(a for a in (axis_src, keep_src.lstrip(", ")) if a)
    src = f"{x.name}.{op}({args})"
    if op in ("max", "min") and axis_src and not axis_src.startswith("axis="):
        # PyTorch's max(dim) gives (values, indices); its gradient picks one of tied
        # elements where amax shares it, so gradient programs keep to axis=
        src = f"{x.name}.{op}(axis={args})" if g.grad else f"{src}.values"
    var = g.new(shape, dtype, lo, hi, [x], grid=grid)
    var = var.but(exact=var.exact and exact)
    np_axis = None if axis_src == "" else axes

    def ref(interp: Interp, name=x.name) -> Ref:
        src_ref = interp.env[name]
        if arg_op:
            fn = np.argmax if op == "argmax" else np.argmin
            flat = np_axis is None
            values = src_ref.val.reshape(-1) if flat else src_ref.val
            out = fn(values, axis=None if flat else np_axis[0], keepdims=keepdim and not flat)
            return Ref(np.asarray(out).astype(np.int64).reshape(shape))
        a = arg(interp, src_ref, dtype)
        e = src_ref.e()
        with np.errstate(all="ignore"):
            if op in ("max", "min"):
                fn = np.max if op == "max" else np.min
                z, err = fn(a, axis=axes, keepdims=keepdim), np.max(e, axis=axes, keepdims=keepdim)
            elif op in ("sum", "mean"):
                z = np.sum(a, axis=axes, keepdims=keepdim)
                if is_float(dtype):
                    unit = UNIT[ACCUMULATE[dtype]]
                    err = np.sum(e, axis=axes, keepdims=keepdim) + \
                        n * unit * np.sum(np.abs(a), axis=axes, keepdims=keepdim)
                    if op == "mean":
                        err = (err + UNIT[dtype] * np.abs(z)) / max(n, 1)
                        z = z / n if n else z * np.nan
            else:
                z = np.prod(a, axis=axes, keepdims=keepdim)
                if is_float(dtype):
                    unit = UNIT[dtype]
                    upper = np.prod(np.abs(a) + e, axis=axes, keepdims=keepdim)
                    err = upper - np.prod(np.abs(a), axis=axes, keepdims=keepdim) + \
                        1.01 * n * unit * upper
        z = np.asarray(z).reshape(shape)
        if not is_float(dtype):
            return Ref(z.astype(dtype))  # (integers: never bfloat16)
        if op in ("max", "min"):  # values of x: nothing to round
            out = interp.out(z, dtype, exact=True)
            if var.exact or src_ref.err is None:
                return out
            return Ref(out.val, np.asarray(err).reshape(shape))
        bound = None if var.exact or interp.fd else np.asarray(err).reshape(shape)
        return interp.out(z, dtype, bound, exact=var.exact)

    return g.add(Step("reduce", src, ref, var))


def draw_any_all(g):
    """x.any(...) / x.all(...) of exact values (a value near 0 would have two answers),
    with axis= or PyTorch's dim=: bool results, False / True over nothing."""
    op = g.pick(["any", "all"])
    x = g.var(lambda v: v.exact)
    if x is None:
        return None
    axis_src, axes = _axis(g, x)
    if axis_src.startswith("axis=") and g.chance(50):
        axis_src = "dim=" + axis_src[len("axis="):]
    keepdim = g.chance(40)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdim else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    args = ", ".join(a for a in (axis_src, "keepdim=True" if keepdim else "") if a)
    var = g.new(shape, "bool", 0, 1, [x], grid=0)
    np_axis = None if axis_src == "" else axes

    def ref(interp: Interp, name=x.name) -> Ref:
        fn = np.any if op == "any" else np.all
        return Ref(np.asarray(fn(interp.env[name].val, axis=np_axis, keepdims=keepdim))
                   .reshape(shape))
    return g.add(Step("reduce", f"{x.name}.{op}({args})", ref, var))


def draw_matmul(g):
    """x @ y with 1-d or batched operands (batch dims broadcast)."""
    x = g.var(lambda v: v.ndim >= 1 and v.dtype != "bool" and v.shape[-1] <= 7)
    if x is None:
        return None
    k = x.shape[-1]
    if g.chance(25):
        yshape = (k,)
    else:
        batch = partner_shape(g, x.shape[:-2]) if x.ndim > 2 and g.chance(60) else ()
        yshape = tuple(batch) + (k, g.side())
    try:
        shape = np.matmul(np.zeros(x.shape), np.zeros(yshape)).shape
    except ValueError:
        return None
    if not small(shape):
        return None
    y = g.operand(lambda v: v.shape == yshape and v.dtype != "bool", yshape,
                  x.dtype if g.chance(80) else None)
    dtype = promote(x.dtype, y.dtype)
    if dtype == "bool":
        return None
    lo, hi = min(x.lo * y.hi, x.hi * y.lo, x.lo * y.lo, x.hi * y.hi), \
        max(x.lo * y.hi, x.hi * y.lo, x.lo * y.lo, x.hi * y.hi)
    lo, hi = min(0, k * lo), max(0, k * hi)
    xgrid = x.grid if is_float(x.dtype) else 0
    ygrid = y.grid if is_float(y.dtype) else 0
    grid = None if xgrid is None or ygrid is None else xgrid + ygrid
    exact = grid_exact(dtype, grid, lo, hi, x, y)
    if not fits(dtype, lo, hi):
        return None
    var = g.new(shape, dtype, lo, hi, [x, y], grid=grid if is_float(dtype) else 0)
    var = var.but(exact=var.exact and exact)
    einsum = ["Tensor.einsum('...ij,...jk->...ik', {}, {})"] if x.ndim >= 2 and len(yshape) >= 2 \
        else []
    form = g.pick(["{} @ {}", "{}.matmul({})", "{}.dot({})"] + einsum)
    src = form.format(x.name, y.name)

    def ref(interp: Interp, xn=x.name, yn=y.name) -> Ref:
        a, b = interp.env[xn], interp.env[yn]
        av, bv = arg(interp, a, dtype), arg(interp, b, dtype)
        z = np.matmul(av, bv)
        if not is_float(dtype):
            return Ref(z.astype(dtype))
        if var.exact or interp.fd:
            return interp.out(z, dtype, exact=True)
        ea, eb = a.e(), b.e()
        unit = UNIT[ACCUMULATE[dtype]]
        err = np.matmul(np.abs(av), eb) + np.matmul(ea, np.abs(bv)) + np.matmul(ea, eb) + \
            k * unit * np.matmul(np.abs(av), np.abs(bv))
        return interp.out(z, dtype, err)

    return g.add(Step("matmul", src, ref, var))


def stable_order(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """numpy's stable argsort with NaN as the largest value (PyTorch's order)."""
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        key = np.where(nan, 0, -a if descending else a)
        return np.lexsort((key, ~nan if descending else nan), axis=axis)  # lexsort is stable
    return np.argsort(~a if descending else a, axis=axis, kind="stable")  # ~ reverses ints


def cum_extreme(a: np.ndarray, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's cummax/cummin: the running value, and the last index j <= i holding it
    (the last NaN's once a NaN is seen)."""
    moved = np.moveaxis(a, axis, -1)
    acc = np.maximum.accumulate if largest else np.minimum.accumulate
    values = acc(moved, axis=-1) if moved.shape[-1] else moved
    n = moved.shape[-1]
    row, col = np.arange(n).reshape(n, 1), np.arange(n).reshape(1, n)
    x, v = moved[..., None, :], values[..., :, None]
    hit = x == v
    if a.dtype.kind == "f":
        hit = hit | (np.isnan(x) & np.isnan(v))
    index = np.where(hit & (col <= row), col, -1).max(axis=-1) if n else values.astype(np.int64)
    return np.moveaxis(values, -1, axis), np.moveaxis(index.astype(np.int64), -1, axis)


def draw_sort(g):
    """sort/argsort/topk/cummax/cummin along one dim of exact values (so the order is
    decided): values bit for bit, indices (ties: stable order; last index for cummax)."""
    x = g.var(lambda v: v.exact and v.ndim >= 1)
    if x is None:
        return None
    op = g.pick(["sort", "argsort", "topk", "cummax", "cummin"])
    dim = g.int(0, x.ndim - 1)
    n, shown = x.shape[dim], dim - x.ndim if g.chance(30) else dim
    part = g.pick(["values", "indices"]) if op != "argsort" else "indices"
    flag = g.chance(50)
    if op == "sort":
        src = f"{x.name}.sort({shown}, descending={flag}).{part}"
    elif op == "argsort":
        src = f"{x.name}.argsort(dim={shown}, descending={flag})"
    elif op == "topk":
        k = g.int(0, n)
        src = f"{x.name}.topk({k}, dim={shown}, largest={flag}).{part}"
    else:
        src = f"{x.name}.{op}({shown}).{part}"
    shape = x.shape if op != "topk" else x.shape[:dim] + (k,) + x.shape[dim + 1:]
    if part == "values":
        var = g.new(shape, x.dtype, x.lo, x.hi, [x], grid=x.grid)
    else:
        var = g.new(shape, "int64", 0, max(n - 1, 0), [x], grid=0)

    def ref(interp: Interp, name=x.name) -> Ref:
        a = interp.env[name].val
        if op in ("cummax", "cummin"):
            values, index = cum_extreme(a, dim, op == "cummax")
        else:
            index = stable_order(a, dim, flag)
            if op == "topk":
                index = np.take(index, np.arange(k), axis=dim)
            values = np.take_along_axis(a, index, axis=dim)
        return Ref(np.asarray(values if part == "values" else index.astype(np.int64)))
    return g.add(Step("reduce", src, ref, var))


def draw_row(g):
    """A row op in one step, its row value never an output of its own (so the scheduler
    may compute it in the kernel that reads it, a row kernel): x - x.max(...) over the
    trailing axes, x * x.sum(...), or x.softmax(-1) / x.log_softmax(-1)."""
    op = g.pick(["centre", "scale", "softmax", "log_softmax"])
    x = g.var(lambda v: v.ndim >= 1 and is_float(v.dtype) and v.dtype != "bfloat16" and
              v.shape[-1] > 0 and (op == "centre" or v.bound <= 16))
    if x is None:
        return None
    k = g.int(1, x.ndim) if op in ("centre", "scale") else 1  # trailing axes reduced
    axes = tuple(range(x.ndim - k, x.ndim))
    n = int(np.prod([x.shape[a] for a in axes]))
    if n == 0 or (op == "scale" and n * x.bound * x.bound > 1e4):
        return None
    shown = f"axis={axes}" if k > 1 else "-1"
    src = {"centre": f"{x.name} - {x.name}.amax({shown}, keepdim=True)",
           "scale": f"{x.name} * {x.name}.sum({shown}, keepdim=True)",
           "softmax": f"{x.name}.softmax(-1)", "log_softmax": f"{x.name}.log_softmax(-1)"}[op]
    lo, hi = {"centre": (x.lo - x.hi, 0.0), "scale": (-n * x.bound ** 2, n * x.bound ** 2),
              "softmax": (0.0, 1.0), "log_softmax": (-2 * x.bound - math.log(n) - 1, 0.0)}[op]
    var = g.new(x.shape, x.dtype, lo, hi, [x], grid=None).but(exact=False)

    def ref(interp: Interp, name=x.name) -> Ref:
        src_ref = interp.env[name]
        a, e = arg(interp, src_ref, x.dtype), src_ref.e()
        unit = UNIT[ACCUMULATE[x.dtype]]
        with np.errstate(all="ignore"):
            if op == "centre":
                z, err = a - a.max(axes, keepdims=True), e + e.max(axes, keepdims=True)
            elif op == "scale":
                s = a.sum(axes, keepdims=True)
                s_err = e.sum(axes, keepdims=True) + n * unit * np.abs(a).sum(axes, keepdims=True)
                z = a * s
                err = np.abs(a) * s_err + e * (np.abs(s) + s_err) + UNIT[x.dtype] * np.abs(z)
            else:  # a loose bound: each exp, the sum and the division round a few times
                shifted = a - a.max(-1, keepdims=True)
                spread = 2 * e.max(-1, keepdims=True) + (n + 16) * unit
                if op == "softmax":
                    z = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
                    err = z * 2 * spread + (n + 16) * UNIT[x.dtype] * z
                else:
                    z = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
                    err = 2 * spread + (n + 16) * UNIT[x.dtype] * (1 + np.abs(z))
        return interp.out(z, x.dtype, err)
    return g.add(Step("reduce", src, ref, var))


OPS = [
    ("reduce", "reduce", draw_reduce, True),
    ("row", "reduce", draw_row, True),
    ("any_all", "reduce", draw_any_all, False),
    ("matmul", "matmul", draw_matmul, True),
    ("sort", "reduce", draw_sort, False),
]
