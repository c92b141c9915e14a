"""The end of a reduce along vector lanes: each accumulator's lanes combined into one value.

Alone, an accumulator of L lanes halves L -> L/2 -> ... -> 1: lane k meets lane k + L/2,
one vector op per level. A tile of dot products (Linear's x @ W.T: 4 x 4 outputs, 16
lanes along the reduce) has 16 such accumulators, and halving each alone costs about as
many instructions as the tile's multiply-adds at a reduce of 128 (96 shuffles and 80
adds in one kernel). Together they take a transpose tree: two vectors of one level
become one of the next, each accumulator's share of lanes halved (lanes [0, w/2) of its
share meet [w/2, w), as alone), until every accumulator has one lane of one vector
(16 accumulators: 15 ops, 30 shuffles). Each lane meets the same lanes in the same order
as alone, so the results are the same bits.
"""
from __future__ import annotations
from typing import Protocol

from codegen.dtypes import DType
from codegen.ops import BinaryOps, Op
from codegen.uops import UOp, dtype_of


class Emitter(Protocol):
    def alu(self, op: Op, dtype: DType, *src: UOp) -> UOp: ...
    def vectorize(self, lanes: list[UOp]) -> UOp: ...
    def extract(self, x: UOp, lane: int) -> UOp: ...


def across_lanes(g: Emitter, op: BinaryOps, accs: list[UOp]) -> list[UOp]:
    """Each accumulator's lanes combined by `op`: in groups of a power of two (up to the
    lane count) by a transpose tree, the rest alone."""
    out: list[UOp] = []
    lanes = dtype_of(accs[0]).count if accs else 0
    while len(out) < len(accs):
        group = 1
        while group * 2 <= min(len(accs) - len(out), lanes):
            group *= 2
        if group < 2 or lanes & (lanes - 1) or \
                any(dtype_of(a) != dtype_of(accs[0]) for a in accs[len(out):len(out) + group]):
            out.append(alone(g, op, accs[len(out)]))
        else:
            out += together(g, op, accs[len(out):len(out) + group])
    return out


def together(g: Emitter, op: BinaryOps, accs: list[UOp]) -> list[UOp]:
    """A power-of-two group of accumulators of L lanes (L a power of two, at least as many
    as the group): pairs of vectors merged level by level, each holding its accumulators'
    lanes in consecutive shares, then the one vector left halved within each share."""
    lanes = dtype_of(accs[0]).count
    vectors = [(acc, [i]) for i, acc in enumerate(accs)]  # (vector, whose share is whose)
    while len(vectors) > 1:
        merged = []
        for (v, a), (u, b) in zip(vectors[::2], vectors[1::2]):
            w = lanes // len(a)  # lanes each accumulator has in v (and in u)
            lo = _halves(g, v, len(a), w, 0) + _halves(g, u, len(b), w, 0)
            hi = _halves(g, v, len(a), w, w // 2) + _halves(g, u, len(b), w, w // 2)
            merged.append((g.alu(op, dtype_of(lo[0]).vec(lanes), g.vectorize(lo),
                                 g.vectorize(hi)), a + b))
        vectors = merged
    vector, owners = vectors[0]
    w = lanes // len(owners)
    while w > 1:  # fewer accumulators than lanes: halve each share within the vector
        lo, hi = _halves(g, vector, len(owners), w, 0), _halves(g, vector, len(owners), w, w // 2)
        vector = g.alu(op, dtype_of(lo[0]).vec(len(lo)), g.vectorize(lo), g.vectorize(hi))
        w //= 2
    lane_of = {i: lane for lane, i in enumerate(owners)}
    return [g.extract(vector, lane_of[i]) for i in range(len(accs))]


def _halves(g: Emitter, v: UOp, shares: int, w: int, start: int) -> list[UOp]:
    """Lanes [start, start + w/2) of each of the `shares` consecutive shares of w lanes."""
    return [g.extract(v, s * w + start + k) for s in range(shares) for k in range(w // 2)]


def alone(g: Emitter, op: BinaryOps, acc: UOp) -> UOp:
    """One accumulator's lanes in one value: combined pairwise, as vectors while the count
    is even (lane k with lane k + half: one vector op per level, where scalar pairs were
    one op per pair in a chain LLVM may not reorder), then as scalars."""
    while dtype_of(acc).count % 2 == 0 and dtype_of(acc).count > 2:
        half = dtype_of(acc).count // 2
        lo = g.vectorize([g.extract(acc, k) for k in range(half)])
        hi = g.vectorize([g.extract(acc, k) for k in range(half, 2 * half)])
        acc = g.alu(op, dtype_of(lo), lo, hi)
    parts = [g.extract(acc, k) for k in range(dtype_of(acc).count)]
    while len(parts) > 1:
        pairs = [g.alu(op, dtype_of(a), a, b) for a, b in zip(parts[::2], parts[1::2])]
        parts = pairs + parts[len(pairs) * 2:]
    return parts[0]
