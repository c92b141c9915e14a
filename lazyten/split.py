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
from codegen.opt.gpu import grouped
from codegen.target import Target
from codegen.shape.shapetracker import ShapeTracker
from lazyten.indirect import picks_by_range
from lazyten.lazy import LazyBuffer, rewrite_bases
from runtimes import get_runtime

_MIN_REDUCE = 1 << 13   # elements reduced per output before a reduce is split...
_MAX_OUTPUTS = 1 << 12  # ...when it has fewer outputs than this...
_ROWS_PER_THREAD = 16   # ...unless it reduces whole trailing rows, this many per thread,
ROW_MAX = 1 << 16       # ...or rows this short: a row kernel's limit (schedule.py rule 5)
_GPU_ITEMS = 1 << 19    # a GPU reduce with fewer work-items than this is split...
_GPU_MIN_CHUNK = 128    # ...into chunks at least this long


def split_reduces(outs: list[LazyBuffer]) -> None:
    """Split every qualifying unrealized reduce reachable from `outs`."""
    rewrite_bases(outs, _split_one)


def _split_one(base: LazyBuffer) -> LazyBuffer:
    """Stage 1 of `base` split (it is not split again), or `base` as it was."""
    if isinstance(base.op, ReduceOps):
        target = get_runtime(base.device).renderer.target
        chunks = _gpu_chunks(base, target) if target.local_memory else target.split_reduce
        partial = _split(base, chunks, target.threads, exact=bool(target.local_memory))
        if partial is not None:
            return partial
    return base


def _gpu_chunks(reduce: LazyBuffer, target: Target) -> int:
    """A GPU (a target with local memory): how many chunks the largest reduced axis is cut
    into so that stage 1 has `_GPU_ITEMS` work-items (a work-group per output where it is
    a group reduce, D38; a work-item per output otherwise), each chunk at least
    `_GPU_MIN_CHUNK` long; 0: no split. x.sum() over 2^26 floats was one work-group (10
    GB/s); cut into 2048 chunks, 2.5 TB/s on an H100. Rows are split the same way: the
    exemptions of `_split` for row kernels still hold."""
    src, axis = reduce.src[0], reduce.arg
    outputs = prod(reduce.shape)
    rsize = prod(src.shape) // max(outputs, 1)

    def items(outs: int, length: int) -> int:
        return outs * (target.local_size if grouped(outs, length) else 1)
    if not outputs or items(outputs, rsize) >= _GPU_ITEMS:
        return 0
    size = max(src.shape[i] for i in axis)
    best = 0
    for c in range(2, size + 1):
        if size % c:
            continue
        if rsize // c < _GPU_MIN_CHUNK:
            break
        best = c
        if items(outputs * c, rsize // c) >= _GPU_ITEMS:
            break
    return best


def _split(reduce: LazyBuffer, chunks: int, threads: int, exact: bool = False
           ) -> LazyBuffer | None:
    """Rewrite `reduce` into stage 2 and return stage 1, or None where it does not pay.
    `exact`: cut into exactly `chunks` (a GPU's count, made for this reduce), without the
    CPU's limits on outputs and length."""
    src, axis, out_shape = reduce.src[0], reduce.arg, reduce.shape
    outputs = prod(out_shape)
    if not chunks or (not exact and (outputs >= _MAX_OUTPUTS or
                                     prod(src.shape) < outputs * _MIN_REDUCE)):
        return None
    if picks_by_range(reduce):  # a one-hot pick: an indirect load once scheduled (D69)
        return None
    if _is_row_reduce(axis, len(src.shape)) and (outputs >= _ROWS_PER_THREAD * threads or
                                                  prod(src.shape) <= outputs * ROW_MAX):
        # rows enough for every thread, or rows a row kernel takes whole: softmax over
        # 8 x 50257 was five kernels split (max and sum in two stages each), each a
        # thread hand-off, where one kernel walks each row (299 -> 169 us)
        return None
    a = _cut_axis(src.shape, axis, chunks) if not exact else \
        max(axis, key=lambda i: (src.shape[i], -i))
    d = chunks if exact else _divisor(src.shape[a], chunks)
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


def _divisor(size: int, chunks: int) -> int:
    """The largest count of chunks up to `chunks` that divides `size` (0: none)."""
    return max((c for c in range(2, chunks + 1) if size % c == 0), default=0)


def _cut_axis(shape: tuple[int, ...], axis: tuple[int, ...], chunks: int) -> int:
    """The reduced axis cut into chunks: an outer one where it gives at least a quarter of
    `chunks`, so that each chunk still reduces whole runs of the innermost axis (as laid
    out, the contiguous one); else the largest. Cutting a conv1d bias gradient's 128
    positions (64 x 32 x 128, over batch and positions) into 32 runs of 4 left stage 1
    reading 4 floats from each of 64 batches (0.67 ms); cut by batch, each chunk reads
    two whole rows of 128 (D109)."""
    inner = max(axis)
    outer = [i for i in axis if i != inner and _divisor(shape[i], chunks) >= max(2, chunks // 4)]
    if outer:
        return max(outer, key=lambda i: (_divisor(shape[i], chunks), shape[i], -i))
    return max(axis, key=lambda i: (shape[i], -i))


def _is_row_reduce(axis: tuple[int, ...], ndim: int) -> bool:
    """Whether `axis` are the trailing axes: each output reduces one row of the input as
    it is laid out (softmax over a vocabulary-sized width, a row sum)."""
    return tuple(axis) == tuple(range(ndim - len(axis), ndim))
