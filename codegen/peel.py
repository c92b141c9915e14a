"""Peeling a global loop at a window's border (CPU): where a load under the reduce reads
through padding, its validity depends on a global index and a reduce index together (a
padded conv: input row y + kh - 1 exists only for y >= 1 at kh = 0, y <= H - 2 at kh =
2). Split that global loop into border and interior loops, each emitted with its own
index bounds, and the symbolic validity folds to true inside the interior: the reduce's
loads there are plain vector loads and broadcasts, with no per-step checks (D70).
"""
from __future__ import annotations

from codegen.kernel import Kernel
from codegen.shape.symbolic import AndNode, Node, NumNode, Variable

PEEL_MAX = 3        # border iterations a peeled loop may have on each side (a window's reach)
PEEL_INTERIOR = 2   # the interior holds at least 1/this of the loop (else the copies cost more)

Segments = list[tuple[int, int]]


def peel_plan(k: Kernel, gidx: list[Node], lane: Variable | None,
              combos: list[tuple[int, ...]]) -> tuple[int, Segments] | None:
    """(axis, [(start, end), ...]): the outermost global loop whose index bounds a window's
    validity, split into its border iterations and an interior where that validity holds
    for every reduce step and copy; None where no loop has such an interior."""
    if k.reduceop is None or k.rows or k.group:
        return None
    for axis, size in enumerate(k.global_shape):
        if _window_free(k, gidx, lane, combos, axis, 0, size):
            continue  # nothing to fold along this axis
        for lo, hi in _borders(size):
            if _window_free(k, gidx, lane, combos, axis, lo, hi):
                return axis, [(a, b) for a, b in ((0, lo), (lo, hi), (hi, size)) if b > a]
    return None


def _borders(size: int) -> list[tuple[int, int]]:
    """Interiors [lo, hi) of a loop of `size`, fewest border iterations first."""
    out = []
    for total in range(1, 2 * PEEL_MAX + 1):
        for lo in range(max(0, total - PEEL_MAX), min(total, PEEL_MAX) + 1):
            hi = size - (total - lo)
            if hi - lo >= max(2, size // PEEL_INTERIOR):
                out.append((lo, hi))
    return out


def _window_free(k: Kernel, gidx: list[Node], lane: Variable | None,
                 combos: list[tuple[int, ...]], axis: int, lo: int, hi: int) -> bool:
    """Whether, with global index `axis` in [lo, hi), no validity term of a load under the
    reduce depends on it and on a reduce index together (checked on the first and last
    copies: the decision only; every loop is emitted with its exact bounds)."""
    name = f"gidx{axis}"
    bounded = list(gidx)
    bounded[axis] = Variable(name, lo, hi - 1)
    ridx: list[Node] = [Variable(f"ridx{j}", 0, s - 1) for j, s in enumerate(k.reduce_shape)]
    lanes: list[Node] = [lane] if lane is not None else []
    for combo in {combos[0], combos[-1]}:
        idxs = bounded + ridx + [NumNode(c) for c in combo] + lanes
        for key in k.loads:
            valid = k.sts[key].expr_idxs(idxs)[1]
            for term in valid.nodes if isinstance(valid, AndNode) else [valid]:
                names = {v.expr for v in term.vars()}
                if name in names and any(n.startswith("ridx") for n in names):
                    return False
    return True
