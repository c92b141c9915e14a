"""Loads rebased to a window of their buffer: kernels that differ only in where they read
a buffer are one kernel (D120).

A slice of a buffer is a view with an offset, and the kernel that reads it has the offset
as a literal: a loop over the time steps of a sequence (`x[:, t]`, an RNN's input
projection at step t, the gradient of its output at step t) made one kernel per step,
each lowered and compiled on the first call (139 kernels for an nn.LSTM step of 16 time
steps, 69 once offsets are left out; the lowering is most of a cold step's 3 s).

Where a runtime can pass a pointer into a buffer (its allocator has `offset`: the CPU
runtimes), each input's loads are moved back by the largest multiple of the allocator's
alignment (`ALIGN`, 64 bytes) that their lowest offset holds, and the kernel is given the
buffer's memory that far in (`runtimes.base.Window`). The loads keep their offsets modulo
that alignment, so the vector alignment every decision sees is the same. An input the
kernel reads by value as an index (a range of `Tensor.arange`, D69) keeps its offsets.
The rewrite runs once per schedule made: the schedule cache keeps the rebased kernels,
so a schedule run again (eager code's next call) comes back rebased (D160).
"""
from __future__ import annotations
from typing import Any

from codegen.ops import BufferOps, LazyOp, MemBuffer
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.view import View
from lazyten.schedule_item import ScheduleItem
from runtimes import get_runtime


def rebase_items(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """The items with their kernels' loads rebased where that moves any (D120), equal
    kernels one object (the steps of a sequence: the schedule cache keeps one AST for
    them all, not one each)."""
    out = []
    kernels: dict[LazyOp, LazyOp] = {}
    for item in items:
        if item.ast is None:
            out.append(item)
            continue
        found = _rebase(item) if item.inputs else None
        ast, shifts = (item.ast, item.shifts) if found is None else found
        ast = kernels.setdefault(ast, ast)
        out.append(item if ast is item.ast else ScheduleItem(ast, item.out, item.inputs, shifts))
    return out


def _rebase(item: ScheduleItem) -> tuple[LazyOp, tuple[int, ...]] | None:
    """(the AST with each input's loads moved back by its shift, the shifts in bytes), or
    None where no load moves."""
    assert item.ast is not None, "only kernels are rebased"
    allocator: Any = get_runtime(item.out.device).allocator  # (HostAllocator's offset, ALIGN)
    if getattr(allocator, "offset", None) is None:
        return None
    align = allocator.ALIGN  # (bytes: its blocks' alignment, which a window keeps)
    lowest: dict[int, int] = {}
    for node in item.ast.walk():
        if node.op is BufferOps.LOAD and node.arg.idx > 0:
            offset = node.arg.st.views[0].offset
            lowest[node.arg.idx] = min(lowest.get(node.arg.idx, offset), offset)
    steps = []  # elements each input's loads move back
    for idx, buf in enumerate(item.inputs, start=1):
        grain = align // buf.dtype.itemsize if align % buf.dtype.itemsize == 0 else 0
        low = lowest.get(idx, 0)
        steps.append(0 if buf.range_len or not grain or low < grain else low // grain * grain)
    if not any(steps):
        return None
    done: dict[int, LazyOp] = {}
    for node in item.ast.walk():
        srcs = tuple(done[id(s)] for s in node.src)
        arg = node.arg
        if node.op is BufferOps.LOAD and arg.idx > 0 and steps[arg.idx - 1]:
            first = arg.st.views[0]
            moved = View.create(first.shape, first.strides, first.offset - steps[arg.idx - 1],
                                first.mask)
            arg = MemBuffer(arg.idx, arg.dtype, ShapeTracker((moved,) + arg.st.views[1:]))
        same = arg is node.arg and all(a is b for a, b in zip(srcs, node.src))
        done[id(node)] = node if same else LazyOp(node.op, srcs, arg)
    return done[id(item.ast)], tuple([step * buf.dtype.itemsize
                                     for step, buf in zip(steps, item.inputs)])
