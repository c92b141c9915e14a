"""Peeling a global loop at a window's border (CPU): where a load under the reduce reads
through padding, its validity depends on a global index and a reduce index together (a
padded conv: input row y + kh - 1 exists only for y >= 1 at kh = 0, y <= H - 2 at kh =
2). Split that global loop into border and interior loops, each emitted with its own
index bounds, and the symbolic validity folds to true inside the interior: the reduce's
loads there are plain vector loads and broadcasts, with no per-step checks (D70).

An elementwise kernel whose reads are gated by their view's padding (a `cat` of computed
values, each piece inlined and gated to 0 outside its place, D117) computes every piece
at every position and keeps one. `mask_plan` splits a global loop where those gates
switch: in each segment every gate folds to true or false, and the emitter computes the
pieces whose gate holds there and nothing of the others (D122). `reduce_plan` does the
same for a reduce loop: a sum over a `cat` (the norm of every gradient joined end to end)
runs a loop per piece, each reading its own piece unmasked (D163).
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


MASK_SEGMENTS = 32  # segments an elementwise kernel's loop is split into at its gates...
MASK_SEGMENTS_MAX = 256  # ...or up to this many where the kernel is small enough that
SEGMENT_NODES = 1 << 21  # segments x its AST's nodes stay under this (each segment is
                         # emitted with the part of the body its gates keep)


def mask_plan(k: Kernel, gidx: list[Node], lane: Variable | None,
              combos: list[tuple[int, ...]]) -> tuple[int, Segments] | None:
    """(axis, segments) for an elementwise kernel: the outermost global loop along which
    the validity of its reads (memory and gate constants) switches, split so that every
    such term is constant in each segment but where a vector straddles a switch (that
    iteration keeps its gates); None where no loop has a switch, or folding would cover
    less than half of the loop."""
    if k.reduceop is not None or k.rows or k.group:
        return None
    # a `stack` of a recurrence's L steps switches L times: unsplit, every element computes
    # all L pieces (quadratic in L); split, a run computes its own (D162)
    most = max(MASK_SEGMENTS, min(MASK_SEGMENTS_MAX, SEGMENT_NODES // len(k.ast.walk())))
    return _split_at_switches(gidx, k.global_shape, read_terms(k, gidx, lane, combos), most)


def reduce_plan(k: Kernel, gidx: list[Node], lane: Variable | None,
                combos: list[tuple[int, ...]]) -> tuple[int, Segments] | None:
    """(reduce axis, segments) for a reduce kernel whose reads are gated by their views'
    padding along one reduce index alone (a `cat` reduced along its joined axis: every
    step checked which piece it is in, and LLVM vectorized none of it): that reduce loop is
    cut where those gates switch, and each run reads its pieces without checks. Terms that
    also depend on another index (a window's, peel_plan's) do not count."""
    if k.reduceop is None or k.rows or k.group or k.padded or not k.reduce_shape:
        return None
    ridx: list[Node] = [Variable(f"ridx{j}", 0, s - 1) for j, s in enumerate(k.reduce_shape)]
    alone = [t for t in read_terms(k, gidx, lane, combos, ridx)
             if len(names := {v.expr for v in t.vars()}) == 1 and min(names).startswith("ridx")]
    most = max(MASK_SEGMENTS, min(MASK_SEGMENTS_MAX, SEGMENT_NODES // len(k.ast.walk())))
    return _split_at_switches(ridx, k.reduce_shape, alone, most)


def pad_plan(k: Kernel, gidx: list[Node], lane: Variable | None,
             combos: list[tuple[int, ...]]) -> tuple[int, Segments] | None:
    """(axis, segments) for a reduce kernel whose output axis was padded (OptOps.PAD_OUT: a
    matmul's 300 columns walked in tiles of 16, the last tile part padding): its loads
    under the reduce check that global index at every reduce step, and its stores are
    masked. Split that loop where those checks switch: the whole tiles run with plain
    loads and stores, the partial tile keeps its masks, and a tile wholly in the padding
    stores nothing (its loop is dead code). Only the checks that no reduce index enters
    count (a window's are peel_plan's), and those that mask vector lanes first (a
    matmul's padded columns of B: a masked vector load at every step, where its padded
    rows of A, clamped, mask only the stores)."""
    if k.reduceop is None or k.rows or k.group or max(k.padded_axis, k.padded_rows) < 0:
        return None
    ridx: list[Node] = [Variable(f"ridx{j}", 0, s - 1) for j, s in enumerate(k.reduce_shape)]

    def terms(vectors: bool) -> list[Node]:
        return [t for t in read_terms(k, gidx, lane, combos, ridx, vectors)
                if not any(v.expr.startswith("ridx") for v in t.vars())]
    return _split_at_switches(gidx, k.global_shape, terms(True)) or \
        _split_at_switches(gidx, k.global_shape, terms(False))


def _split_at_switches(idxs: list[Node], sizes: tuple[int, ...], terms: list[Node],
                       most: int = MASK_SEGMENTS) -> tuple[int, Segments] | None:
    """The outermost loop (of indexes `idxs`, `sizes` long) that `terms` depend on, cut
    where they switch; None where that takes more than `most` pieces or folds less than
    half the loop."""
    for axis, var in enumerate(idxs):
        if not isinstance(var, Variable):  # (a loop of one: a number)
            continue
        mine = [t for t in terms if var.expr in {v.expr for v in t.vars()}]
        if not mine:
            continue
        segments = switches(mine, var, 0, sizes[axis])
        folded = sum(hi - lo for lo, hi, values in segments if values is not None)
        if 2 <= len(segments) <= most and 2 * folded >= sizes[axis]:
            return axis, [(lo, hi) for lo, hi, _ in segments]
        return None
    return None


def read_terms(k: Kernel, gidx: list[Node], lane: Variable | None,
                combos: list[tuple[int, ...]], ridx: list[Node] | None = None,
                vectors: bool = False) -> list[Node]:
    """Every term of every read's validity (memory and constants, the first and last
    copies), once each; with `vectors`, only those of reads along the lanes."""
    lanes: list[Node] = [lane] if lane is not None else []
    terms: dict[str, Node] = {}
    for combo in {combos[0], combos[-1]}:
        idxs = list(gidx) + list(ridx or []) + [NumNode(c) for c in combo] + lanes
        for key in k.sts:
            if key == k.out_key:
                continue
            idx, valid = k.sts[key].expr_idxs(idxs)
            if vectors and (lane is None or lane not in idx.vars()):
                continue
            for term in valid.nodes if isinstance(valid, AndNode) else [valid]:
                if not isinstance(term, NumNode):
                    terms.setdefault(str(term), term)
    return list(terms.values())


def switches(terms: list[Node], var: Variable, lo: int, hi: int
              ) -> list[tuple[int, int, tuple[int, ...] | None]]:
    """[lo, hi) cut into runs where every term is constant ((start, end, the terms'
    values)), halving where one is not; a single iteration that does not fold stays a
    run of its own (values None). Neighbouring runs with the same values are joined."""
    values = _fold(terms, var, lo, hi)
    if values is not None or hi - lo == 1:
        return [(lo, hi, values)]
    mid = (lo + hi) // 2
    out: list[tuple[int, int, tuple[int, ...] | None]] = []
    for run in switches(terms, var, lo, mid) + switches(terms, var, mid, hi):
        if out and out[-1][2] is not None and out[-1][2] == run[2]:
            out[-1] = (out[-1][0], run[1], run[2])
        else:
            out.append(run)
    return out


def _fold(terms: list[Node], var: Variable, lo: int, hi: int) -> tuple[int, ...] | None:
    """Each term's value with `var` in [lo, hi), or None where one is not constant there."""
    bounded = Variable(var.expr, lo, hi - 1)
    out = []
    for term in terms:
        folded = term.substitute({var: bounded})
        if folded.min != folded.max:
            return None
        out.append(folded.min)
    return tuple(out)
