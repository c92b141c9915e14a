"""A schedule pass: a sum of reduces over the same input shape becomes one reduce of a sum.

A weight read in several places gets one gradient per read, and autograd adds them up: a
hand-written recurrent model's weights are read once per time step, so each weight's
gradient is a chain of adds over one small matmul a step (dz_t^T x_t, reduced over the
batch alone), and each bias's a chain over one reduce a step. The scheduler made a kernel
of each, every one storing its (out, in) result for the next to read and add to. Since

    sum_k a(k) + sum_k b(k) = sum_k (a(k) + b(k))

for reduces over the same axes of inputs of the same shape, a tree of adds whose leaves
are such sums is one sum over the added inputs: one kernel, whatever the number of
steps, reading each step's inputs once and storing the result once (a 16-step LSTM's
weight gradient: 16 kernels of K = 8 become one). Floating-point sums are then added in
another order, as any change of a reduce's loops adds them (split reduces, vector lanes).

Here, sources first, an ADD is *a sum of sums* when each of its sources is either an
unrealized SUM reduce read in memory order (its own shape, or a reshape of it) or a sum
of sums read as it is, and each of them is read by this ADD alone and is no output; the
reduces must reduce the same axes of inputs of the same shape. At a sum of sums that no
larger one takes in (a root), the reduces are merged in groups of up to `_TERMS_MAX`
(a kernel's inputs and the code it inlines grow with each): a new reduce of each group
reduces the sum of the group's inputs, and the root adds the groups' reduces instead;
one group leaves the root adding it and -0.0 (for integers 0), which changes no value,
-0.0 included, so the root stays an elementwise base, its value and readers unchanged.

Only reduces of up to `_TERM_MAX` elements each are merged: a large matmul is compute-
bound, and its own kernel is tiled and its operands packed for one product, which two
products in one loop lose (on the 2-core AVX-512 machine, four 512 x 512 weight gradients
of K = 64 took 0.92 ms merged against 0.78; of K = 32, 0.45 against 0.66; a 16-step
LSTM's of K = 8, 0.31 against 0.37 ms).

Left alone: reduces with index checks or their flags, MAX reduces (a max of maxes is a
max over the union, but nothing builds those chains), and a reduce read by anything
else or an output, whose value is needed as it is (merged, it would be computed twice).
The merged reduces and the adds over them are new bases: the old ones keep their graphs
(a tensor the caller holds may read one), and are computed if read later.

Like lazyten/merge.py's, the rewrite lasts while the schedule is made: `merge_sums`
returns the sources it changed and `merge.restore` puts them back (a base the schedule
leaves unrealized keeps the graph it was built with, and so its schedule-cache key).
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.ops import BinaryOps, ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.merge import Changes, sources_first

_TERMS_MAX = 16        # reduces merged into one: a 16-step recurrence's gradient is one kernel
_TERM_MAX = 1 << 23    # elements a merged reduce's input has, at most (see below)


def merge_sums(outs: list[LazyBuffer]) -> Changes:
    """Rewrite the unrealized graph below `outs` so that each sum of sums is computed by
    as few reduces as `_TERMS_MAX` allows; the bases whose sources changed, with the
    sources they had."""
    order = sources_first(outs)
    reads: dict[int, int] = {id(o.base): 2 for o in outs}  # an output is read outside
    for base in order:
        for src in base.src:
            reads[id(src.base)] = reads.get(id(src.base), 0) + 1
        for flag in base.checks:
            reads[id(flag)] = 2
    leaves: dict[int, list[LazyBuffer]] = {}  # a sum of sums -> the views of its reduces
    taken: set[int] = set()                   # sums of sums a larger one takes in
    for base in order:
        found = _sum_of_sums(base, reads, leaves)
        if found is not None:
            leaves[id(base)] = found
            taken.update(id(src) for src in base.src if id(src) in leaves)
    changes: Changes = []
    for base in order:
        if id(base) in leaves and id(base) not in taken:
            _merge(base, leaves[id(base)], changes)
    return changes


def _sum_of_sums(base: LazyBuffer, reads: dict[int, int],
                 leaves: dict[int, list[LazyBuffer]]) -> list[LazyBuffer] | None:
    """The views of the reduces it adds, where `base` is a sum of sums."""
    if base.op is not BinaryOps.ADD or base.dtype.name == "bool":
        return None
    found: list[LazyBuffer] = []
    for src in base.src:
        of = src.base
        if reads.get(id(of)) != 1:
            return None
        if id(of) in leaves and src._base is None:
            found += leaves[id(of)]
        elif _mergeable(src):
            found.append(src)
        else:
            return None
    first = found[0].base
    for view in found[1:]:
        reduce = view.base
        if reduce.arg != first.arg or reduce.shape != first.shape or \
                reduce.src[0].shape != first.src[0].shape or view.st != found[0].st:
            return None
    return found


def _mergeable(view: LazyBuffer) -> bool:
    """Whether `view` reads an unrealized SUM reduce in memory order that may be merged."""
    reduce = view.base
    return reduce.op is ReduceOps.SUM and reduce.realized is None and not reduce.checks and \
        reduce.index_check is None and prod(reduce.src[0].shape) <= _TERM_MAX and \
        (view._base is None or view.st.contiguous and prod(view.shape) == prod(reduce.shape))


def _merge(root: LazyBuffer, views: list[LazyBuffer], changes: Changes) -> None:
    """Merge the reduces `views` read, in groups, each into a new reduce, and make `root`
    add those up (it keeps its value: only its sources change)."""
    groups = -(-len(views) // _TERMS_MAX)
    size = -(-len(views) // groups)
    sums = []
    for k in range(0, len(views), size):
        first = views[k].base
        total = first.src[0]
        for view in views[k + 1:k + size]:
            total = total.e(BinaryOps.ADD, view.base.src[0])
        merged = LazyBuffer(first.device, ShapeTracker.from_shape(first.shape), first.dtype,
                            ReduceOps.SUM, (total,), first.arg)
        sums.append(merged if views[k]._base is None else merged._view(views[k].st))
    acc = sums[0]
    for term in sums[1:-1]:
        acc = acc.e(BinaryOps.ADD, term)
    last = sums[-1] if len(sums) > 1 else \
        root.const(-0.0 if root.dtype.is_float else 0)  # x + -0.0 is x, -0.0 too
    changes.append((root, root.src))
    root.src = (acc, last)
