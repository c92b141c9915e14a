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

from codegen.helpers import prod
from codegen.kernel import Kernel, Opt, OptOps
from codegen.target import Target

_GROUP_MIN_REDUCE = 256      # a GPU reduce this long, with few outputs, uses a work-group
_GROUP_MAX_OUTPUTS = 4096


def hardware_dims(n_axes: int, flat: bool) -> list[list[int]]:
    """The global axes (outer to inner) each hardware dim takes."""
    axes = list(range(n_axes))
    if flat:
        return [axes]
    return [[a] for a in reversed(axes[-2:])] + ([axes[:-2]] if n_axes > 2 else [])


def launch_sizes(sizes: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Work-groups and work-group size per dim. Dims past 0 take an exact divisor; dim 0 is
    padded (the renderer guards the extra work-items) when no good divisor exists."""
    groups, local = [], []
    for d, size in enumerate(sizes):
        cap = max(1, min(size, budget))
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


def item_tile(k: Kernel, target: Target) -> list[Opt]:
    """Register tile of a work-item, up to `target.item_tile` accumulators: unroll output
    axes along which an input of the reduce does not change, so one load feeds several
    accumulators (a matmul's row of A feeds a 4 x 2 tile). Each round takes the widest
    unroll, the innermost axis on ties, while enough work-items stay to share."""
    if not target.item_tile or k.reduceop is None:
        return []
    t, opts = k.copy(), list[Opt]()
    while True:
        best = _item_unroll(t, target)
        if best is None or not t.can_apply(best):
            return opts
        t.apply(best)
        opts.append(best)


def _item_unroll(t: Kernel, target: Target) -> Opt | None:
    """The widest unroll one more round of item_tile can take (the innermost on ties)."""
    room = target.item_tile // prod(t.upcasts)
    best = None
    for axis in range(t.n_global):
        if not _reused(t, axis):
            continue
        size = t.full_shape[axis]
        amount = next((a for a in _ITEM_UNROLLS if size % a == 0 and a <= room),
                      size if 2 <= size <= min(room, _ITEM_WHOLE) else 0)
        items = prod(t.global_shape) // max(amount, 1)
        if amount and items >= _ITEM_MIN_ITEMS * target.threads and \
                (best is None or amount >= best.amount):
            best = Opt(OptOps.UPCAST, axis, amount, "reuse: an input ignores this axis")
    return best


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
    gsizes, rsize = k.global_shape, prod(k.reduce_shape)
    if (k.reduceop is not None and target.local_size > 1 and target.local_memory > 0
            and rsize >= _GROUP_MIN_REDUCE and prod(gsizes) <= _GROUP_MAX_OUTPUTS):
        size = 1 << (min(target.local_size, rsize).bit_length() - 1)  # a power of two
        return [Opt(OptOps.GROUP, 0, size, f"a {rsize}-long reduce into {prod(gsizes)} outputs")]
    if not gsizes:
        return []
    opts = []
    dims = hardware_dims(len(gsizes), False)
    groups, local = launch_sizes([prod(gsizes[a] for a in d) for d in dims], target.local_size)
    if any(n > limit for n, limit in zip(groups[1:], target.max_global[1:])):
        opts.append(Opt(OptOps.FLATTEN, why=f"work-groups {groups} pass the launch limits"))
        groups, local = launch_sizes([prod(gsizes)], target.local_size)
    return opts + [Opt(OptOps.LOCAL, d, size, "work-group size") for d, size in enumerate(local)
                   if size > 1]
