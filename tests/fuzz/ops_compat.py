"""PyTorch's view spellings (lazyten/compat.py): diagonal, diag, narrow, unbind, movedim,
swapaxes, t and mT, and Tensor.unfold (lazyten/scatter.py). Each is a movement of the value,
so the reference applies the numpy equivalent to the value and to its error bound (as
ops_shape.py does). scatter writes the values of one tensor into another by index."""
from __future__ import annotations

import numpy as np

from .model import UNIT, Interp, Ref, Step, is_float
from .oplib import fits, grid_exact, small
from .ops_shape import OUT_OF_RANGE, _index_tensor, _movement


def _diag_ref(a: np.ndarray, k: int) -> np.ndarray:
    return np.diag(a, k)


def draw_compat_view(g):
    x = g.var()
    if x is None:
        return None
    nd, shape = x.ndim, x.shape
    op = g.pick(["diagonal", "diag", "narrow", "unbind", "movedim", "swapaxes", "t", "mT"])
    if op == "diagonal" and nd >= 2:
        d1, d2 = g.permutation(range(nd))[:2]
        offset = g.int(-3, 3)
        ref = np.diagonal(np.zeros(shape, dtype=np.int8), offset, d1, d2)
        shown = [d - nd if g.chance(30) else d for d in (d1, d2)]
        return _movement(g, x, f"{x.name}.diagonal({offset}, {shown[0]}, {shown[1]})",
                         lambda a: np.diagonal(a, offset, d1, d2), ref.shape)
    if op == "diag" and nd in (1, 2):
        k = g.int(-2, 2)
        new = np.diag(np.zeros(shape, dtype=np.int8), k).shape
        if nd == 1:  # the new zeros are exact and inside any [lo, hi] that holds 0
            return _movement(g, x, f"{x.name}.diag({k})", lambda a: _diag_ref(a, k), new,
                             lo=min(x.lo, 0), hi=max(x.hi, 0))
        return _movement(g, x, f"{x.name}.diag({k})", lambda a: _diag_ref(a, k), new)
    if op in ("narrow", "unbind") and nd >= 1:
        dim = g.int(0, nd - 1)
        n = shape[dim]
        if op == "unbind":
            if n == 0:
                return None
            i = g.int(0, n - 1)
            new = shape[:dim] + shape[dim + 1:]
            return _movement(g, x, f"{x.name}.unbind({dim})[{i}]",
                             lambda a: np.take(a, i, axis=dim), new)
        start = g.int(-n, n)
        begin = start + n if start < 0 else start
        length = g.int(0, n - begin)
        new = shape[:dim] + (length,) + shape[dim + 1:]
        return _movement(g, x, f"{x.name}.narrow({dim}, {start}, {length})",
                         lambda a: np.take(a, range(begin, begin + length), axis=dim), new)
    if op == "movedim" and nd >= 1:
        count = g.int(1, nd)
        src, dst = g.permutation(range(nd))[:count], g.permutation(range(nd))[:count]
        new = np.moveaxis(np.zeros(shape, dtype=np.int8), src, dst).shape
        return _movement(g, x, f"{x.name}.movedim({tuple(src)}, {tuple(dst)})",
                         lambda a: np.moveaxis(a, src, dst), new)
    if op == "swapaxes" and nd >= 2:
        d0, d1 = g.int(0, nd - 1), g.int(-nd, -1)
        new = np.swapaxes(np.zeros(shape, dtype=np.int8), d0, d1).shape
        return _movement(g, x, f"{x.name}.swapaxes({d0}, {d1})",
                         lambda a: np.swapaxes(a, d0, d1), new)
    if op == "t" and nd <= 2:
        return _movement(g, x, f"{x.name}.t()", lambda a: a.T, shape[::-1])
    if op == "mT" and nd >= 2:
        return _movement(g, x, f"{x.name}.mT", lambda a: np.swapaxes(a, -1, -2),
                         shape[:-2] + shape[-2:][::-1])
    return None


def draw_unfold(g):
    """x.unfold(dim, size, step): windows as a new last dim (a view)."""
    x = g.var(lambda v: v.ndim >= 1)
    if x is None:
        return None
    dim = g.int(0, x.ndim - 1)
    size, step = g.int(0, x.shape[dim]), g.int(1, 4)

    def windows(a):
        w = np.lib.stride_tricks.sliding_window_view(a, size, axis=dim)
        return np.take(w, np.arange(0, w.shape[dim], step), axis=dim).copy()
    shape = windows(np.zeros(x.shape, np.int8)).shape
    shown = dim - x.ndim if g.chance(25) else dim
    return _movement(g, x, f"{x.name}.unfold({shown}, {size}, {step})", windows, shape)


def draw_scatter(g):
    """x.scatter(dim, idx, src): src's values written into x; a repeated index keeps the
    write latest along dim (lazyten's documented choice)."""
    x = g.var(lambda v: 1 <= v.ndim and v.numel > 0 and v.dtype != "bool")
    if x is None:
        return None
    dim = g.int(0, x.ndim - 1)
    shape = tuple(g.int(1, 3) if d == dim else g.int(1, s) for d, s in enumerate(x.shape))
    if not small(shape):
        return None
    src = g.operand(lambda v, s=shape: v.shape == s and v.dtype == x.dtype, shape, x.dtype)
    n = x.shape[dim]
    bad = not g.grad and g.chance(OUT_OF_RANGE)
    idx = _index_tensor(g, shape, n, False, bad)
    grids = [t.grid if t.dtype.startswith("float") else 0 for t in (x, src)]
    var = g.new(x.shape, x.dtype, min(x.lo, src.lo), max(x.hi, src.hi), [x, src, idx],
                grid=None if None in grids else min(grids))
    if bad:
        g.prog.bad_index.add(var.name)

    def write(a, b, i):
        # in the finite-difference reference b is float64 where x is float32: writing it
        # into a copy of x would round each step of the difference to float32
        out = a.astype(np.result_type(a.dtype, b.dtype))
        for pos in np.ndindex(*i.shape):  # row-major: the latest write along dim wins
            target = list(pos)
            target[dim] = min(max(int(i[pos]), 0), n - 1)
            out[tuple(target)] = b[pos]
        return out

    def ref(interp: Interp, names=(x.name, src.name, idx.name)) -> Ref:
        a, b = interp.env[names[0]], interp.cast(interp.env[names[1]], x.dtype)
        i = interp.env[names[2]].val.astype(np.int64)
        val = write(a.val, b.val, i)
        if a.err is None and b.err is None:
            return Ref(val)
        return Ref(val, write(a.e(), b.e(), i))
    return g.add(Step("index", f"{x.name}.scatter({dim}, {idx.name}, {src.name})", ref, var))


def draw_scatter_add(g):
    """x.scatter_add(dim, idx, src) or x.index_add(dim, idx1d, src): src's values added
    into x by index, a repeated index adding each time (a scatter kernel on a CPU, D153).
    A float sum's error bound allows any order: (adds + 2) units of x's dtype times the
    sum of the magnitudes reaching each element."""
    x = g.var(lambda v: 1 <= v.ndim and v.numel > 0 and v.dtype not in ("bool", "bfloat16"))
    if x is None:
        return None
    dim, whole = g.int(0, x.ndim - 1), g.chance(50)  # index_add: the index is 1-d
    k = g.int(1, 6)
    shape = tuple(k if d == dim else s if whole else g.int(1, s) for d, s in enumerate(x.shape))
    if not small(shape):
        return None
    src = g.operand(lambda v, s=shape: v.shape == s and v.dtype == x.dtype, shape, x.dtype)
    n = x.shape[dim]
    bad = not g.grad and g.chance(OUT_OF_RANGE)
    idx = _index_tensor(g, (k,) if whole else shape, n, False, bad)
    grids = [t.grid if t.dtype.startswith("float") else 0 for t in (x, src)]
    grid = None if None in grids else min(grids)
    lo, hi = x.lo + k * min(src.lo, 0), x.hi + k * max(src.hi, 0)
    if not fits(x.dtype, lo, hi):
        return None
    var = g.new(x.shape, x.dtype, lo, hi, [x, src, idx], grid=grid,
                exact=grid_exact(x.dtype, grid, lo, hi, x, src))
    if bad:
        g.prog.bad_index.add(var.name)

    def positions(i):
        """Where each element of src adds: its own position with dim replaced by the index."""
        full = np.broadcast_to(i.reshape((1,) * dim + (k,) + (1,) * (len(shape) - dim - 1)),
                               shape) if whole else i
        at = list(np.indices(shape))
        at[dim] = np.clip(full, 0, n - 1)
        return tuple(at)

    def ref(interp: Interp, names=(x.name, src.name, idx.name)) -> Ref:
        a, b = interp.env[names[0]], interp.cast(interp.env[names[1]], x.dtype)
        at = positions(interp.env[names[2]].val.astype(np.int64))
        z = a.val.astype(np.float64 if is_float(x.dtype) else a.val.dtype)
        np.add.at(z, at, b.val)
        if not is_float(x.dtype) or interp.fd or var.exact:
            return interp.out(z, x.dtype, exact=var.exact)
        count, mag, err = np.zeros(x.shape), np.abs(a.f64()), a.e().copy()
        np.add.at(count, at, 1)
        np.add.at(mag, at, np.abs(b.f64()))
        np.add.at(err, at, b.e())
        return interp.out(z, x.dtype, err + (count + 2) * UNIT[x.dtype] * mag)
    call = f"index_add({dim}, {idx.name}, {src.name})" if whole else \
        f"scatter_add({dim}, {idx.name}, {src.name})"
    return g.add(Step("index", f"{x.name}.{call}", ref, var))


OPS = [
    ("compat_view", "movement", draw_compat_view, True),
    ("unfold", "movement", draw_unfold, True),
    ("scatter", "index", draw_scatter, True),
    ("scatter_add", "index", draw_scatter_add, True),
]
