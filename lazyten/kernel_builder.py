"""The kernel AST of one materialised base, once the scheduler has decided what is
materialised (lazyten/schedule.py): every base the kernel inlines is expanded into its
op at the view it is read through (each (base, view) once), every materialised one
becomes a LOAD of an input buffer, a constant a CONST, and the root a STORE; a reduce
that rule 3 or 5 fused is one node however the kernel reaches it. An ASSIGN that reads
its target other than element for element reads a copy of the old value
(`old_target`, which the scheduler schedules first). An elementwise base inlined through
a padded view (a pad, a `cat`) whose ops do not all map 0 to 0 (sigmoid, exp, + 1, ...)
is gated: where the view is padding the kernel reads 0, not the ops applied to padding's
zeros (the scheduler's rule 4 leaves such a base inlined unless that repeats work).
A base read through a view with no valid element (a pad shrunk back to its padding: the
gradient of one `chunk` piece read where another lies) is the constant 0, whatever its
op: the kernel neither loads nor computes it, so the buffer is no input of the kernel
and cannot pin where its loads are rebased (D120, D159)."""
from __future__ import annotations
from typing import TYPE_CHECKING

from codegen.helpers import prod
from codegen.dtypes import dtypes
from codegen.ops import BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps, TernaryOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer, broadcast_scalar
from lazyten.traced import CompositeOps, expand as expand_pointwise

if TYPE_CHECKING:
    from lazyten.schedule import _Graph as Graph


class KernelBuilder:
    """Builds the AST of the kernel that materialises one base."""

    def __init__(self, graph: Graph, out: LazyBuffer):
        self.graph, self.out = graph, out
        self.inputs: list[LazyBuffer] = []
        self.memo: dict[tuple, LazyOp] = {}
        self.assign_target = out.src[1].base if out.op is LoadOps.ASSIGN else None
        self.old_target: LazyBuffer | None = None  # a copy of the target, when one is read

    def build(self) -> LazyOp:
        out = self.out
        if out.op is LoadOps.ASSIGN:
            body = self.lazyop(out.src[0], ShapeTracker.from_shape(out.shape))
            kernel_shape = out.shape
        elif out in self.graph.fused_reduce:
            reduce = self.graph.fused_reduce[out]
            kernel_shape = reduce.shape
            body = self.expand_base(out, ShapeTracker.from_shape(out.shape).reshape(kernel_shape))
        else:
            kernel_shape = out.shape
            body = self.expand_base(out, ShapeTracker.from_shape(out.shape))
        store = MemBuffer(0, out.dtype, ShapeTracker.from_shape(kernel_shape))
        return LazyOp(BufferOps.STORE, (body,), store)

    def buffer_index(self, base: LazyBuffer, st: ShapeTracker | None = None) -> int:
        if base is self.out:
            return 0
        if base is self.assign_target:
            # an ASSIGN reads its target in place only element for element; any other view
            # (a flip, a shift, a transpose) would read elements already overwritten, so
            # it reads a copy of the old value made first (the scheduler adds the copy)
            if st is not None and st.contiguous and st.shape == base.shape:
                return 0
            if self.old_target is None:
                self.old_target = LazyBuffer(base.device, ShapeTracker.from_shape(base.shape),
                                             base.dtype, LoadOps.CONTIGUOUS, (base,))
            base = self.old_target
        for i, b in enumerate(self.inputs):
            if b is base:
                return i + 1
        self.inputs.append(base)
        return len(self.inputs)

    def lazyop(self, lb: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The AST reading `lb` at kernel index space `st` (whose base shape is lb.shape)."""
        base = lb.base
        composite = st if lb._base is None else lb.st + st
        key = (id(base), composite)
        if key in self.memo:
            return self.memo[key]
        if any(v.invalid for v in composite.views):  # a read of padding alone: 0 everywhere
            node = LazyOp(BufferOps.CONST, (), ConstBuffer(0, base.dtype, broadcast_scalar(st.shape)))
        elif base.realized is not None or (base in self.graph.realize and base is not self.out):
            node = LazyOp(BufferOps.LOAD, (), MemBuffer(self.buffer_index(base, composite),
                                                        base.dtype, composite))
        elif base.op is LoadOps.CONST:
            node = LazyOp(BufferOps.CONST, (), ConstBuffer(base.arg, base.dtype, composite))
        else:
            node = self.expand_base(base, composite)
            if any(v.mask is not None for v in composite.views) and \
                    not isinstance(base.op, (ReduceOps, LoadOps)) and \
                    not self.graph._zero_preserving(base):
                node = _gated(node, base, composite)
        self.memo[key] = node
        return node

    def expand_base(self, base: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The AST of `base`'s own op (not a load of it)."""
        if isinstance(base.op, ReduceOps):
            src = base.src[0]
            # rule 3 reads it in memory order; a row kernel (rule 5) one value per row
            assert (st.contiguous and prod(st.shape) == prod(base.shape)) or \
                st.shape == src.shape, "reduce fused by a view"
            key = ("reduce", id(base))  # one node, however the kernel reaches it
            if key not in self.memo:
                self.memo[key] = LazyOp(base.op, (self.lazyop(src, ShapeTracker.from_shape(
                    src.shape)),), base.arg)
            return self.memo[key]
        if base.op is LoadOps.CONTIGUOUS:
            return self.lazyop(base.src[0], st)
        if base.op is TernaryOps.WHERE:  # a condition the same everywhere picks one side
            cond = self.lazyop(base.src[0], st)
            if cond.op is BufferOps.CONST and all(v.mask is None for v in cond.arg.st.views):
                return self.lazyop(base.src[1] if cond.arg.val else base.src[2], st)
        srcs = tuple(self.lazyop(s, st) for s in base.src)
        if base.op is CompositeOps.POINTWISE:
            return expand_pointwise(base, srcs, st)
        return LazyOp(base.op, srcs, base.arg)


def _gated(node: LazyOp, base: LazyBuffer, st: ShapeTracker) -> LazyOp:
    """`node` (base's ops read through `st`) where `st` is valid, 0 where it is padding."""
    valid = LazyOp(BufferOps.CONST, (), ConstBuffer(True, dtypes.bool, st))
    zero = LazyOp(BufferOps.CONST, (), ConstBuffer(0, base.dtype, st))
    return LazyOp(TernaryOps.WHERE, (valid, node, zero))
