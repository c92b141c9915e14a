"""CPU pass: the loop order of a reduce kernel (which output axis is outermost, the one the
threads split). docs/decisions.md D34 gives the measurements.
"""
from __future__ import annotations

from codegen.kernel import Kernel, Opt, OptOps
from codegen.opt.tile_measures import elements_read
from codegen.target import Target

_L2_DISCOUNT = 8  # an input re-read from L2 against one from L3: 4x the L2 re-reads ran
# 20% faster (AVX2, 1024x512x128 matmul: B, 256 KB, per block of rows, not A, 512 KB)
_MIN_OUTER = 8               # iterations the outermost loop needs to be worth splitting


def order_loops(k: Kernel, target: Target) -> list[Opt]:
    """Put outermost the loop whose iterations re-read the fewest bytes.

    Each iteration of the outer loop streams again every input that does not depend on
    it (a matmul's B, for each block of rows). So the outer loop is the one that
    minimises iterations x bytes of the inputs it ignores, if it has enough iterations to
    split across threads. An input small enough to stay in the L1 cache (a bias) costs
    nothing to re-read; one that stays in the core's L2 (at most half of it) costs
    `_L2_DISCOUNT` times less than one read again from L3 or memory [D34]. An outer loop
    with fewer iterations than threads (a batch of 4 unrolled whole) gives way to the
    cheapest one that has enough, whatever it re-reads: else the kernel runs on one
    thread. Enough is 8 iterations, or where no loop has 8, as many as the threads."""
    if k.reduceop is None or not target.tile:
        return []
    cached, in_l2 = target.cached_bytes // 4, target.l2_bytes // 8  # float32 elements

    def footprint(key: int) -> int:
        elements = elements_read(k, key)
        return 0 if elements <= cached else \
            elements // _L2_DISCOUNT if elements <= in_l2 else elements

    def cost(axis: int) -> int:
        ignored = [key for key in k.loads if k.strides(key, axis) == 0]
        return k.full_shape[axis] * sum(footprint(key) for key in ignored)
    if k.n_global < 2:
        return []
    # loops with enough iterations to share; where none has, any the threads can share
    # (a batch of 4 unrolled whole before 7 x 7 pixels and 4 blocks of channels: else
    # one thread ran it all)
    axes = [a for a in range(k.n_global) if k.full_shape[a] >= _MIN_OUTER] or \
        [a for a in range(k.n_global) if k.full_shape[a] >= max(2, target.threads)]
    if not axes:
        return []
    best = min(axes, key=lambda a: (cost(a), a))
    if best != 0 and cost(best) < cost(0):
        return [Opt(OptOps.OUTER, best, why=f"re-reads {cost(best)} elements, not {cost(0)}")]
    if best != 0 and k.full_shape[0] < max(2, target.threads):  # threads split it [D66]
        return [Opt(OptOps.OUTER, best, why=f"{k.full_shape[0]} iterations are too few to split")]
    return []
