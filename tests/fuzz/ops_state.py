"""Ops about state and evaluation order: assign and setitem (in place), clone, detach,
realize.

The rule they check (issue 11): every Tensor is a value. After `t.assign(v)` the name t
reads v; every tensor computed from t's old contents keeps the old value, whatever was
realized first. Realizing a few tensors at once, or intermediates early, changes nothing.
"""
from __future__ import annotations

import numpy as np

from .model import Interp, Ref, Step, is_float, promote, scalar_dtype
from .ops_logic import cast_ok
from .oplib import (broadcastable, bshape, const, grid_exact, min_grid, mv, np_pad, operand_grid,
                    scalar_for, scalar_grid, show)


def _self_view(g, t):
    """A view of t with t's shape: (source suffix, numpy fn), e.g. '.flip(0)'."""
    nd = t.ndim
    options = ["flip", "shift"] + (["swap"] if len(set(t.shape)) < nd else [])
    kind = g.pick(options) if nd else None
    if kind == "flip":
        axes = g.subset(range(nd), min_size=1)
        return f".flip({', '.join(map(str, axes))})", lambda a: np.flip(a, tuple(axes))
    if kind == "shift":
        d = g.int(0, nd - 1)
        pairs = tuple((1, -1) if i == d and g.chance(50) else ((-1, 1) if i == d else (0, 0))
                      for i in range(nd))
        if t.shape[d] == 0:
            return "", lambda a: a
        return f".pad({pairs!r})", lambda a: np_pad(a, pairs)
    if kind == "swap":
        pairs = [(i, j) for i in range(nd) for j in range(i + 1, nd) if t.shape[i] == t.shape[j]]
        i, j = g.pick(pairs)
        return f".transpose({i}, {j})", lambda a: np.swapaxes(a, i, j)
    return "", lambda a: a


def draw_assign(g):
    """t.assign(value), t += y, t.assign(t.flip(0)), ...: the value may read t itself."""
    target = g.var(lambda v: v.buffer) if g.chance(75) else g.var()
    if target is None:
        return None
    form = g.pick(["pool", "view", "view+", "iadd"])
    name, dtype = target.name, target.dtype
    if form == "pool":
        v = g.var(lambda v: v.shape == target.shape and v.name != name and cast_ok(v, dtype))
        if v is None:
            return None
        text = v.name if v.dtype == dtype else f"{v.name}.cast(dtypes.{dtype})"
        new = v.but(name=name, dtype=dtype, buffer=target.buffer,
                    grid=v.grid if is_float(v.dtype) else 0)
        if not is_float(dtype):
            new = new.but(lo=int(new.lo), hi=int(new.hi))
        src = f"{name}.assign({text})"

        def value(interp: Interp, vn=v.name) -> Ref:
            return interp.cast(interp.env[vn], dtype) if dtype != "bool" else \
                Ref(interp.env[vn].val != 0)
        return g.add(Step("assign", src, value, new, rebinds=name))
    suffix, fn = _self_view(g, target)
    lo, hi = min(target.lo, 0), max(target.hi, 0)
    if form == "view":
        src = f"{name}.assign({name}{suffix})"
        new = target.but(lo=lo, hi=hi)
        return g.add(Step("assign", src, lambda interp: mv(interp.env[name], fn), new,
                          rebinds=name))
    if dtype == "bool":
        return None
    # value = view + y, where y is a scalar or a var broadcasting to t's shape, of t's dtype
    if g.chance(40):
        y = g.pick([1, 2, -1]) if not is_float(dtype) else g.pick([0.5, 1.0, -1.5])
        ylo = yhi = float(y)
        yexact, ygrid, yname = True, operand_grid(target, dtype) if not is_float(dtype) else -1, y
        if scalar_dtype(dtype, y) != dtype:
            return None
    else:
        y = g.var(lambda v: broadcastable(v.shape, target.shape) and
                  bshape(v.shape, target.shape) == target.shape and promote(v.dtype, dtype) == dtype
                  and v.dtype != "bool")
        if y is None:
            return None
        ylo, yhi, yexact, ygrid, yname = y.lo, y.hi, y.exact, operand_grid(y, dtype), y.name
    lo, hi = lo + ylo, hi + yhi
    from .oplib import fits
    if not fits(dtype, lo, hi):
        return None
    grid = min_grid(operand_grid(target, dtype), ygrid)
    exact = yexact and grid_exact(dtype, grid, lo, hi, target)
    new = target.but(lo=lo, hi=hi, exact=exact, grid=grid if is_float(dtype) else 0)
    if form == "iadd":
        suffix, fn = "", (lambda a: a)
        new = new.but(lo=target.lo + ylo, hi=target.hi + yhi)
        src = f"{name} += {show(yname)}"
    else:
        src = f"{name}.assign({name}{suffix} + {show(yname)})"

    def ref(interp: Interp) -> Ref:
        t = mv(interp.env[name], fn)
        other = interp.cast(interp.env[yname], dtype) if isinstance(yname, str) else \
            const(yname, dtype)
        if not is_float(dtype):
            return Ref((t.val.astype(np.int64) + other.val.astype(np.int64)).astype(dtype))
        z = t.val.astype(np.float64) + other.val.astype(np.float64)
        if exact or interp.fd:
            return interp.out(z, dtype, exact=True)
        return interp.out(z, dtype, t.e() + other.e())
    return g.add(Step("assign", src, ref, new, rebinds=name))


def _basic_index(g, shape) -> tuple[str, tuple]:
    """An index of ints and slices (any step) for `shape`: (source text, numpy index)."""
    texts, items = [], []
    for n in shape:
        kind = g.pick(["int", "slice", "slice", "full"]) if n else "full"
        if kind == "int":
            i = g.int(-n, n - 1)
            texts.append(str(i))
            items.append(i)
        elif kind == "slice":
            step = g.pick([1, 2, -1, -2, 3])
            start = g.pick([None, g.int(-n, n - 1)])
            stop = g.pick([None, g.int(-n - 1, n)])
            texts.append(f"{'' if start is None else start}:{'' if stop is None else stop}:{step}")
            items.append(slice(start, stop, step))
        else:
            texts.append(":")
            items.append(slice(None))
    return ", ".join(texts), tuple(items)


def draw_setitem(g):
    """t[ints and slices] = value: a scalar or a var broadcasting to the indexed shape, cast
    to t's dtype. t keeps its other elements; tensors read from t before keep the old."""
    target = g.var(lambda v: v.ndim > 0 and v.buffer) if g.chance(60) else \
        g.var(lambda v: v.ndim > 0)
    if target is None:
        return None
    name, dtype = target.name, target.dtype
    text, index = _basic_index(g, target.shape)
    sub_shape = np.empty(target.shape)[index].shape
    if g.chance(40):
        value = scalar_for(g, dtype)
        if not is_float(dtype) and isinstance(value, float) or \
                dtype.startswith("u") and value < 0:
            return None
        vlo = vhi = float(value)
        vgrid = scalar_grid(value) if is_float(dtype) else 0
        vexact, vname = vgrid is not None, value
    else:
        v = g.var(lambda v: broadcastable(v.shape, sub_shape) and
                  bshape(v.shape, sub_shape) == sub_shape and v.name != name and
                  cast_ok(v, dtype) and (v.dtype == dtype or v.exact))
        if v is None:
            return None
        vlo, vhi, vexact, vgrid, vname = v.lo, v.hi, v.exact, operand_grid(v, dtype), v.name
        if is_float(v.dtype) and not is_float(dtype):  # truncation toward zero
            vlo, vhi = float(np.floor(vlo)), float(np.ceil(vhi))
    if dtype == "bool":
        vlo, vhi = 0.0, 1.0
    lo, hi = min(target.lo, vlo), max(target.hi, vhi)
    new = target.but(lo=lo, hi=hi, exact=target.exact and vexact,
                     grid=min_grid(target.grid, vgrid) if is_float(dtype) else 0)

    def ref(interp: Interp) -> Ref:
        old = interp.env[name]
        if isinstance(vname, str):
            part = interp.cast(interp.env[vname], dtype)
        else:
            part = interp.cast(Ref(np.array(vname)), dtype)
        val = old.val.astype(np.result_type(old.val.dtype, part.val.dtype))  # fd: float64
        val[index] = part.val
        if old.err is None and part.err is None:
            return Ref(val)
        err = old.e().copy()
        err[index] = part.e()
        return Ref(val, err)
    return g.add(Step("assign", f"{name}[{text}] = {show(vname)}", ref, new, rebinds=name))


def draw_clone(g):
    x = g.var()
    if x is None:
        return None
    method = g.pick(["clone", "clone", "detach"]) if not g.grad else "clone"
    var = g.new(x.shape, x.dtype, x.lo, x.hi, [x], grid=x.grid)
    var = var.but(buffer=False)
    return g.add(Step("clone", f"{x.name}.{method}()", lambda interp, n=x.name: interp.env[n], var))


def draw_realize(g):
    """Tensor.realize(a, b, ...) of a few live tensors, in a random order."""
    names = g.permutation([v for v in g.pool])[:g.int(1, 3)]
    if not names:
        return None
    if g.chance(60):
        src = f"Tensor.realize({', '.join(names)})"
    else:
        src = f"{names[0]}.realize({', '.join(names[1:])})"
    return g.add(Step("realize", src, lambda interp: None))


OPS = [
    ("assign", "assign", draw_assign, False),
    ("setitem", "assign", draw_setitem, False),
    ("clone", "clone", draw_clone, True),
    ("realize", "realize", draw_realize, True),
]
