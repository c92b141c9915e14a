"""GPU passes: a work-item's register tile, and how a kernel's global axes map onto
work-groups.

Hardware dim 0 takes the innermost axis, so neighbouring work-items touch neighbouring
memory; dim 1 the next; the rest are merged into dim 2 (the linearizer splits them back
with // and %). A large reduce with few outputs becomes a group reduce instead: one
work-group per output, each work-item a strided share of the reduce, combined in local
memory by the renderer, where the target has local memory worth using (not on a CPU
driven through work-items, pocl: D56). Such a target asks for a register tile instead.
"""
from __future__ import annotations
import math

from codegen.helpers import prod
from codegen.kernel import Kernel, Opt, OptOps, leaves
from codegen.ops import MemBuffer
from codegen.shape.shapetracker import ShapeTracker
from codegen.stage import stage_plan
from codegen.target import VECTOR_MEMORY, Target

_GROUP_MIN_REDUCE = 256      # a GPU reduce this long, with few outputs, uses a work-group
_GROUP_MAX_OUTPUTS = 4096


def grouped(outputs: int, length: int) -> bool:
    """Whether a GPU reduce of `outputs` outputs, each `length` long, is a group reduce
    (one work-group per output), on a target with local memory."""
    return length >= _GROUP_MIN_REDUCE and outputs <= _GROUP_MAX_OUTPUTS


def hardware_dims(n_axes: int, flat: bool) -> list[list[int]]:
    """The global axes (outer to inner) each hardware dim takes."""
    axes = list(range(n_axes))
    if flat:
        return [axes]
    return [[a] for a in reversed(axes[-2:])] + ([axes[:-2]] if n_axes > 2 else [])


def launch_sizes(sizes: list[int], budget: int, max_local: tuple[int, ...] = ()
                 ) -> tuple[list[int], list[int]]:
    """Work-groups and work-group size per dim, within `budget` work-items in all and each
    dim within its `max_local` (CUDA: 1024, 1024, 64; a tile that left dims 0 and 1 one
    wide gave dim 2 128 work-items, which cuLaunchKernel refused). Dims past 0 take an
    exact divisor; dim 0 is padded (the renderer guards the extra work-items) when no good
    divisor exists."""
    groups, local = [], []
    for d, size in enumerate(sizes):
        limit = max_local[d] if d < len(max_local) else budget
        cap = max(1, min(size, budget, limit))
        best = max(n for n in range(1, cap + 1) if size % n == 0)
        if d == 0 and best * 2 < cap:
            best = cap
        groups.append(-(-size // best))
        local.append(best)
        budget //= best
    return groups, local


# the tile of a work-item (D56; LeNet's step on pocl: 41 -> 19 ms of kernels with 8, 20 with 16)
_ITEM_UNROLLS = (4, 2)      # an output axis of the tile is unrolled by these...
_ITEM_WHOLE = 8             # ...or whole, when it is this short (a 5-wide conv window)
_ITEM_MIN_ITEMS = 64        # work-items left per thread after tiling, at least
_GPU_MIN_ITEMS = 1 << 15    # a GPU keeps this many work-items after tiling, at least
_ACC_BYTES = 8              # an accumulator in local memory (a group reduce), at most


def _min_items(target: Target) -> int:
    """Work-items a GPU kernel keeps after tiling: the target's own floor (TARGET_FIELDS=
    min_items=4 lets small shapes take tiles and vectors), else `_GPU_MIN_ITEMS`."""
    return target.min_items or _GPU_MIN_ITEMS


def item_tile(k: Kernel, target: Target) -> list[Opt]:
    """Register tile of a work-item, up to `target.item_tile` accumulators: unroll output
    axes along which an input of the reduce does not change, so one load feeds several
    accumulators (a matmul's row of A feeds a 4 x 2 tile). Each round takes the widest
    unroll, the innermost axis on ties, while enough work-items stay to share."""
    if not target.item_tile:
        return []
    if k.reduceop is None:
        return _elementwise_items(k, target)
    t, opts, unrolled = k.copy(), list[Opt](), [1] * k.n_global
    while True:
        best = _item_unroll(t, target, unrolled)
        if best is None or not t.can_apply(best):
            return opts
        t.apply(best)
        opts.append(best)
        unrolled[best.axis] *= best.amount


def _elementwise_items(k: Kernel, target: Target) -> list[Opt]:
    """A GPU elementwise kernel: each work-item takes `target.elementwise_items` outputs of
    the innermost axis, strided so that neighbouring work-items stay contiguous: that many
    independent loads in flight per work-item, where the card keeps `_GPU_MIN_ITEMS`."""
    amount, inner = target.elementwise_items, k.n_global - 1
    if target.local_memory <= 0 or amount < 2 or inner < 0 or \
            prod(k.global_shape) // amount < _min_items(target):
        return []
    while amount >= 2 and k.full_shape[inner] % amount:
        amount //= 2
    if amount < 2:
        return []
    vector = _vector_items(k, target, inner, amount)
    if vector:
        return vector
    opt = Opt(OptOps.STRIDE_UPCAST, inner, amount, "loads in flight per work-item")
    return [opt] if k.can_apply(opt) else []


def _vector_items(k: Kernel, target: Target, inner: int, amount: int) -> list[Opt]:
    """The work-item's outputs adjacent instead, as the lanes of one vector (D98), where
    the dialect renders a vector that wide for every buffer's type (`VECTOR_MEMORY`, within
    `target.vector_memory` bytes) and the output's vectors start at multiples of `amount`:
    each load and store of contiguous, aligned memory is then one instruction (float4),
    the others lane by lane (codegen/vector_memory.py). [] where that does not hold."""
    nodes = [n for n in leaves(k.ast) if isinstance(n.arg, MemBuffer)]
    if any(n.arg.dtype not in VECTOR_MEMORY or n.arg.dtype.itemsize * amount >
           target.vector_memory for n in nodes):
        return []
    if k.strides(k.out_key, inner) != 1 or not _aligned(k.sts[k.out_key], inner, amount):
        return []
    opts = [Opt(OptOps.UPCAST, inner, amount, "adjacent outputs per work-item"),
            Opt(OptOps.LANES, inner + 1, amount, "one vector load or store each (float4)")]
    return opts if k.tried(*opts) is not None else []


def _aligned(st: ShapeTracker, axis: int, amount: int) -> bool:
    """Whether every run of `amount` elements along `axis` that starts at a multiple of
    `amount` starts at a multiple of `amount` in memory (one view, its offset and other
    strides multiples of it)."""
    if len(st.views) != 1:
        return False
    view = st.views[0]
    return view.offset % amount == 0 and \
        all(stride % amount == 0 for i, stride in enumerate(view.strides) if i != axis)


def _item_unroll(t: Kernel, target: Target, unrolled: list[int]) -> Opt | None:
    """The widest unroll one more round of item_tile can take (the innermost on ties). On
    a GPU (a target with local memory) the axis unrolled least so far comes first, so the
    tile grows square (a matmul's 4 x 4 reads 8 values per 16 products, a 1 x 16 reads
    17), and the innermost axis, which neighbouring work-items walk, is unrolled with
    strides (STRIDE_UPCAST): their loads and stores stay contiguous."""
    gpu = target.local_memory > 0
    best, rank = None, None
    for axis in range(t.n_global):
        amount = _unroll_amount(t, target, axis)
        if not amount:
            continue
        key = (-unrolled[axis] if gpu else 0, amount)
        if rank is None or key >= rank:
            op = OptOps.STRIDE_UPCAST if gpu and axis == t.n_global - 1 else OptOps.UPCAST
            best, rank = Opt(op, axis, amount, "reuse: an input ignores this axis"), key
    return best


def _unroll_amount(t: Kernel, target: Target, axis: int) -> int:
    """How far item_tile may unroll `axis` in its next round (0: not at all): an axis an
    input of the reduce ignores, by 4 or 2 (or whole when short), within the tile's room,
    while enough work-items remain (a GPU keeps `_GPU_MIN_ITEMS`)."""
    if not _reused(t, axis):
        return 0
    room, size = target.item_tile // prod(t.upcasts), t.full_shape[axis]
    amount = next((a for a in _ITEM_UNROLLS if size % a == 0 and a <= room),
                  size if 2 <= size <= min(room, _ITEM_WHOLE) else 0)
    least = _min_items(target) if target.local_memory > 0 else _ITEM_MIN_ITEMS * target.threads
    return amount if amount and prod(t.global_shape) // amount >= least else 0


def _reused(k: Kernel, axis: int) -> bool:
    """Some input read in the reduce loop does not depend on this axis."""
    red = range(k.n_global, k.n_global + k.n_reduce)
    for key in k.loads:
        strides = k.sts[key].real_strides(ignore_valid=True)
        if strides[axis] == 0 and any(strides[r] != 0 for r in red):
            return True
    return False


def gpu_layout(k: Kernel, target: Target) -> list[Opt]:
    """A group reduce, or the work-group size of each hardware dim (and FLATTEN when a dim
    would pass its launch limit: everything then goes to dim 0)."""
    if not target.gpu:
        return []
    gsizes = k.global_shape
    group = _row_group(k, target) if k.rows else _group_reduce(k, target)
    if group or not gsizes:
        return group
    staged = _staged(k, target)
    if staged:
        return staged
    opts = []
    dims = hardware_dims(len(gsizes), False)
    groups, local = launch_sizes([prod(gsizes[a] for a in d) for d in dims], target.local_size,
                                 target.max_local)
    if any(n > limit for n, limit in zip(groups[1:], target.max_global[1:])):
        opts.append(Opt(OptOps.FLATTEN, why=f"work-groups {groups} pass the launch limits"))
        groups, local = launch_sizes([prod(gsizes)], target.local_size, target.max_local)
    return opts + [Opt(OptOps.LOCAL, d, size, "work-group size") for d, size in enumerate(local)
                   if size > 1]


def _group_reduce(k: Kernel, target: Target) -> list[Opt]:
    """A long reduce with few outputs: one work-group per output (D38), its accumulators
    within local memory; [] where it is not one, or the target has no local memory."""
    rsize, outputs = prod(k.reduce_shape), prod(k.global_shape)
    if k.reduceop is None or target.local_size <= 1 or target.local_memory <= 0 or \
            not grouped(outputs, rsize):
        return []
    room = target.local_memory // (_ACC_BYTES * prod(k.upcasts))  # each accumulator
    size = 1 << (min(target.local_size, rsize, room).bit_length() - 1)  # a power of two
    return [Opt(OptOps.GROUP, 0, size, f"a {rsize}-long reduce into {outputs} outputs")]


_ROW_GROUP_MIN = 32        # a row kernel's work-group, at least (a warp); else a work-item per row


def _row_group(k: Kernel, target: Target) -> list[Opt]:
    """A row kernel on a GPU (D94): one work-group per row, `target.row_items` elements
    of the row per work-item at least, within the device's work-group limit and local
    memory (a scratch array per reduce). Each reduce is combined in local memory and
    every work-item reads the result; then each stores its share of the row. Rows too
    short for a warp's worth: [] (a work-item per row walks it alone)."""
    if target.local_memory <= 0:
        return []
    rsize, limit = prod(k.reduce_shape), target.max_group or target.local_size
    room = target.local_memory // (_ACC_BYTES * len(k.reduceops))
    cap = min(limit, target.max_local[0], room)
    want = 1 << max(0, round(math.log2(max(rsize / max(target.row_items, 1), 1))))
    size = min(want, 1 << (cap.bit_length() - 1))  # powers of two: the nearest, within cap
    if size < _ROW_GROUP_MIN:
        return []
    return [Opt(OptOps.GROUP, 0, size, f"a work-group per row of {rsize}")]


_STAGE_STEPS = 32          # reduce steps per local-memory stage (H100, 4096 matmul: 8 steps
#                            28.3 TFLOP/s, 16: 25.9, 32: 31.2)
_STAGE_GROUP = (16, 16)    # a staged kernel's work-group on dims 0 and 1


def _group_fits(k: Kernel, target: Target) -> bool:
    """A tiled reduce over one axis whose two inner global axes a 16 x 16 work-group
    divides, within the target's work-group size and launch limits."""
    n, (l0, l1), sizes = k.n_global, _STAGE_GROUP, k.global_shape
    if not target.local_memory or k.reduceop is None or k.n_reduce != 1 or not k.upcasts \
            or n < 2 or l0 * l1 > target.local_size:
        return False
    return not (sizes[n - 1] % l0 or sizes[n - 2] % l1) and \
        sizes[n - 2] // l1 <= target.max_global[1] and prod(sizes[:n - 2]) <= target.max_global[2]


def _staged(k: Kernel, target: Target) -> list[Opt]:
    """A tiled GPU reduce whose operands the work-items of a 16 x 16 work-group share (a
    matmul: A along dim 0, B along dim 1) reads them through local memory, 32 steps of
    the reduce per stage (codegen/stage.py, D92); [] where that does not apply: no tile,
    sizes the group does not divide, no operand shared, or more than local memory."""
    l0, l1 = _STAGE_GROUP
    if not _group_fits(k, target):
        return []
    opts = [Opt(OptOps.LOCAL, 0, l0, "a staged work-group"),
            Opt(OptOps.LOCAL, 1, l1, "a staged work-group"),
            Opt(OptOps.STAGE, 0, _STAGE_STEPS, "operands the work-group shares, staged")]
    trial = k.tried(*opts)
    if trial is None:
        return []
    blocks = [prod(e for _, e in axes) for axes in stage_plan(trial, leaves(trial.ast)).values()]
    if not blocks or sum(blocks) * 4 > target.local_memory or any(b % (l0 * l1) for b in blocks):
        return []
    return opts
