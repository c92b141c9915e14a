"""PyTorch's view spellings (lazyten/compat.py): diagonal, diag, narrow, unbind, movedim,
swapaxes, t and mT. Each is a movement of the value, so the reference applies the numpy
equivalent to the value and to its error bound (as ops_shape.py does)."""
from __future__ import annotations

import numpy as np

from .ops_shape import _movement


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


OPS = [
    ("compat_view", "movement", draw_compat_view, True),
]
