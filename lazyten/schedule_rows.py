"""Rule 5 of the scheduler (lazyten/schedule.py, D55): row kernels. On a CPU, or a GPU with
local memory (a work-group per row, D94), a reduce materialised by rule 4 whose only reader
is one elementwise kernel of the reduce's input shape, reading it one value per row
(softmax's max and sum, layernorm's mean and variance), moves into that kernel, which
computes it per row before storing the row. Rows up to `ROW_MAX` elements.
"""
from __future__ import annotations
from typing import TYPE_CHECKING

from codegen.helpers import prod
from codegen.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.split import ROW_MAX
from lazyten.traced import CompositeOps

if TYPE_CHECKING:
    from lazyten.schedule import _Graph as Graph

ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps, CompositeOps)  # a traced composite is one


class RowGroup:
    """Rule 5: the materialised reduces that the kernel of `out` (elementwise, of shape S)
    can compute itself, one value per row. The walk follows the kernel builder: every
    base `out`'s kernel inlines, at the view it is read through. A candidate is a reduce
    (or a rule-3 chain top) over the trailing axes of S, whose input has shape S, read
    as its one value per row (the expand of its kept shape onto S); the walk continues
    into it, so a reduce read by another (softmax's max, by the sum) joins too. The
    group is refused if a candidate is also read another way; a candidate that another
    kernel reads (directly or through ops that kernel inlines) stays materialised and
    is read from memory, and the rest join (layernorm's backward: the row's mean and
    rstd, which its weight gradient reads too, come from memory; its two sums join)."""

    def __init__(self, graph: Graph, out: LazyBuffer):
        self.graph, self.out, self.shape = graph, out, out.shape
        self.axes: tuple[int, ...] | None = None
        self.group: set[LazyBuffer] = set()
        self.bad = False  # a candidate also read another way (a flipped row value)

    def reduces(self) -> set[LazyBuffer]:
        stack, seen = [(self.out, ShapeTracker.from_shape(self.shape))], set()
        while stack:
            base, st = stack.pop()
            if (id(base), st) in seen:
                continue
            seen.add((id(base), st))
            if isinstance(base.op, ReduceOps):  # its input is read at the kernel's shape
                st = ShapeTracker.from_shape(base.src[0].shape)
            for src in base.src:
                self._visit(src.base, st if src._base is None else src.st + st, stack)
        if self.bad:
            return set()
        # a candidate another kernel reads stays materialised and is read from memory here;
        # what only it read is then read by its kernel too, so prune until nothing changes
        while True:
            kept = {b for b in self.group if self._only_here(b)}
            if kept == self.group:
                return kept
            self.group = kept

    def _visit(self, base: LazyBuffer, st: ShapeTracker, stack: list) -> None:
        graph = self.graph
        if base.realized is not None or base.op is LoadOps.CONST:
            return
        if base in graph.realize and not self._candidate(base, st):
            return  # read from memory
        if base not in graph.realize and not isinstance(base.op, (*ELEMENTWISE, ReduceOps)):
            return
        stack.append((base, st))

    def _candidate(self, base: LazyBuffer, st: ShapeTracker) -> bool:
        reduce = base if isinstance(base.op, ReduceOps) else self.graph.fused_reduce.get(base)
        if reduce is None or base in self.graph.outs or base.checks or \
                reduce.src[0].shape != self.shape:
            return False
        axes, n = reduce.arg, len(self.shape)
        kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        if axes != tuple(range(n - len(axes), n)) or self.axes not in (None, axes) or \
                prod(self.shape) // prod(kept) > ROW_MAX or prod(base.shape) != prod(kept):
            return False
        view = st.simplify()
        if len(view.views) != 1 or view.views[0] != ShapeTracker.from_shape(kept).expand(
                self.shape).views[0]:
            self.bad = True  # read one value per row here, and otherwise elsewhere
            return False
        self.axes = axes
        self.group.add(base)
        return True

    def _only_here(self, base: LazyBuffer) -> bool:
        """Does every read of `base` end in this kernel (`out`, or another candidate)?
        Elementwise ops that read it are inlined wherever they are read, so follow them."""
        graph, stack, seen = self.graph, [base], set()
        while stack:
            node = stack.pop()
            for user, _ in graph.consumers[node]:
                if user is self.out or user in self.group or id(user) in seen:
                    continue
                if user in graph.realize:
                    return False
                seen.add(id(user))
                stack.append(user)
        return True
