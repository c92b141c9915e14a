"""Reduce splitting: a schedule pass that cuts a long reduce with few outputs in two.

One kernel per output row would leave the CPU's threads (which split a kernel's outer
loop) with almost nothing to share: a conv's weight gradient reduces 147K elements into
150 outputs. So where the device's target asks for it (`Target.split_reduce`, the CPU:
32), the largest reduced axis is cut into `d` chunks: stage 1 reduces each chunk (d
times the outputs, enough to share), stage 2 reduces the d partials.

The graph the Tensor built is the same for every device; this pass runs when the graph
is scheduled, before fusion is decided. It rewrites a reduce base in place into stage 2
reading a new stage-1 base: the base computes the same value, and every consumer (and
the autograd graph, which holds the same object) sees it unchanged.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.ops import ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.indirect import picks_by_range
from lazyten.lazy import LazyBuffer, rewrite_bases
from runtimes import get_runtime

_MIN_REDUCE = 1 << 13   # elements reduced per output before a reduce is split...
_MAX_OUTPUTS = 1 << 12  # ...when it has fewer outputs than this...
_ROWS_PER_THREAD = 16   # ...unless it reduces whole trailing rows, this many per thread,
ROW_MAX = 1 << 16       # ...or rows this short: a row kernel's limit (schedule.py rule 5)


def split_reduces(outs: list[LazyBuffer]) -> None:
    """Split every qualifying unrealized reduce reachable from `outs`."""
    rewrite_bases(outs, _split_one)


def _split_one(base: LazyBuffer) -> LazyBuffer:
    """Stage 1 of `base` split (it is not split again), or `base` as it was."""
    if isinstance(base.op, ReduceOps):
        target = get_runtime(base.device).renderer.target
        partial = _split(base, target.split_reduce, target.threads)
        if partial is not None:
            return partial
    return base


def _split(reduce: LazyBuffer, chunks: int, threads: int) -> LazyBuffer | None:
    """Rewrite `reduce` into stage 2 and return stage 1, or None where it does not pay."""
    src, axis, out_shape = reduce.src[0], reduce.arg, reduce.shape
    outputs = prod(out_shape)
    if not chunks or outputs >= _MAX_OUTPUTS or prod(src.shape) < outputs * _MIN_REDUCE:
        return None
    if picks_by_range(reduce):  # a one-hot pick: an indirect load once scheduled (D69)
        return None
    if _is_row_reduce(axis, len(src.shape)) and (outputs >= _ROWS_PER_THREAD * threads or
                                                  prod(src.shape) <= outputs * ROW_MAX):
        # rows enough for every thread, or rows a row kernel takes whole: softmax over
        # 8 x 50257 was five kernels split (max and sum in two stages each), each a
        # thread hand-off, where one kernel walks each row (299 -> 169 us)
        return None
    a = max(axis, key=lambda i: (src.shape[i], -i))
    d = max((c for c in range(2, chunks + 1) if src.shape[a] % c == 0), default=0)
    if d == 0:
        return None
    parts = src.shape[:a] + (d, src.shape[a] // d) + src.shape[a + 1:]
    inner = tuple(sorted(i + (i > a) for i in axis if i != a)) + (a + 1,)
    partial = LazyBuffer(reduce.device, ShapeTracker.from_shape(
        tuple(1 if i in inner else s for i, s in enumerate(parts))), reduce.dtype, reduce.op,
        (src.reshape(parts),), tuple(sorted(inner)))
    reduce.src = (partial.reshape(out_shape[:a] + (d,) + out_shape[a + 1:]),)
    reduce.arg = (a,)
    return partial


def _is_row_reduce(axis: tuple[int, ...], ndim: int) -> bool:
    """Whether `axis` are the trailing axes: each output reduces one row of the input as
    it is laid out (softmax over a vocabulary-sized width, a row sum)."""
    return tuple(axis) == tuple(range(ndim - len(axis), ndim))
