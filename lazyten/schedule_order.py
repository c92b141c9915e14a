"""The order a schedule's items run in: index checks first, and every read of a buffer's
old value before the ASSIGN that overwrites it (D12, D24)."""
from __future__ import annotations

from codegen.ops import LoadOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem, copy_ast


def order_items(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """`items` in an order that respects dependencies, checks and in-place updates."""
    return _order(_checks_first(items))


def _checks_first(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Index checks (and the kernels they need) run before everything else, so a bad index
    raises before any kernel has written into a buffer in place."""
    if not any(item.out.index_check is not None for item in items):
        return items
    producer = {id(item.out): item for item in items}
    first: set[int] = set()
    stack = [item for item in items if item.out.index_check is not None]
    while stack:
        item = stack.pop()
        if id(item) not in first:
            first.add(id(item))
            stack.extend(producer[id(b)] for b in item.inputs if id(b) in producer)
    return [i for i in items if id(i) in first] + [i for i in items if id(i) not in first]


def _order(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Topological order with one extra rule: every kernel that reads a buffer's old value
    runs before the ASSIGN that overwrites it in place. Two assigns can each read the
    other's target (updates whose gradients are elementwise in the other parameter,
    fused into the update kernels); then the targets' old values are copied first and
    their other readers read the copies."""
    producer = {id(item.out): i for i, item in enumerate(items)}
    assigns = {}  # id(target base) -> index of the assign item
    for i, item in enumerate(items):
        if item.out.op is LoadOps.ASSIGN:
            assigns[id(item.out.src[1].base)] = i
    if not assigns:  # the graph's order already puts producers first
        return items
    after: list[set[int]] = [set() for _ in items]  # after[i]: items that must run before i
    for i, item in enumerate(items):
        for inp in item.inputs:
            if id(inp) in producer:
                after[i].add(producer[id(inp)])
            if id(inp) in assigns and assigns[id(inp)] != i:
                after[assigns[id(inp)]].add(i)
    done: set[int] = set()
    order: list[ScheduleItem] = []
    pending = list(range(len(items)))
    while pending:
        ready = [i for i in pending if after[i] <= done]
        if not ready:
            return _order(_snapshot_targets(items, assigns))
        for i in ready:
            done.add(i)
            order.append(items[i])
        pending = [i for i in pending if i not in done]
    return order


def _snapshot_targets(items: list[ScheduleItem], assigns: dict[int, int]) -> list[ScheduleItem]:
    """`items` with a copy of each assign target's old value made first; every kernel
    but the target's own assign reads the copy (same shape and layout: targets are
    contiguous), so no kernel has to run before an assign any more."""
    copies: dict[int, ScheduleItem] = {}
    for i, item in enumerate(items):
        for inp in item.inputs:
            if id(inp) in assigns and assigns[id(inp)] != i and id(inp) not in copies:
                old = LazyBuffer(inp.device, ShapeTracker.from_shape(inp.shape), inp.dtype,
                                 LoadOps.CONTIGUOUS, (inp,))
                copies[id(inp)] = ScheduleItem(copy_ast(inp.shape, inp.dtype), old, [inp])
    rebound = [ScheduleItem(item.ast, item.out, [
        copies[id(inp)].out if id(inp) in copies and assigns[id(inp)] != i else inp
        for inp in item.inputs]) for i, item in enumerate(items)]
    return list(copies.values()) + rebound
