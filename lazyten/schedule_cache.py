"""The schedule cache: a graph with the same structure as one scheduled before (eager code
run again) reuses that schedule, rebound to the new graph's buffers (D27). The key is
built in one pass over the graph per realize, so it is written for speed."""
from __future__ import annotations
from typing import Any, Callable, Optional

from codegen.helpers import getenv
from codegen.ops import LoadOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem


class Template:
    """A cached schedule: `items` with buffers as positions (`_template`), and `plan`,
    what the engine keeps to launch it again without ScheduleItems (plan.py's Plan;
    None until it has run once, False where it cannot have one)."""
    __slots__ = ("items", "plan")

    def __init__(self, items: list[tuple]):
        self.items: list[tuple] = items
        self.plan: Any = None


# What `lookup` found for a graph: its key (None: not cachable), its bases in the key's
# order, and the template cached for the key, if any. (A plain tuple: a NamedTuple's
# constructor is a Python function, and this is made once per realize.)
Found = tuple[Optional[tuple], list[LazyBuffer], Optional[Template]]


def lookup(outs: list[LazyBuffer]) -> Found:
    key, nodes = _signature(outs)
    try:
        template = _SCHEDULES.get(key) if key is not None else None
    except TypeError:  # an unhashable op argument: schedule without the cache
        key = template = None
    return key, nodes, template


def cached_schedule(outs: list[LazyBuffer],
                    schedule: Callable[[list[LazyBuffer]], list[ScheduleItem]],
                    found: Found | None = None) -> list[ScheduleItem]:
    """The schedule of `outs` from the cache, else `schedule(outs)`, remembered; `found`:
    what `lookup(outs)` gave, if the caller asked already."""
    key, nodes, template = found if found is not None else lookup(outs)
    if template is not None:
        return _rebind(template.items, nodes)
    CacheStats.misses += 1
    items = schedule(outs)
    if key is not None:
        if len(_SCHEDULES) >= getenv("SCHEDULE_CACHE", 1024):
            _SCHEDULES.clear()
        _SCHEDULES[key] = Template(_template(items, nodes))
    return items


class CacheStats:
    """Schedules made because the cache had none (uncachable graphs included): eager
    code run again in the same way should add none (the tests read it)."""
    misses = 0


_SCHEDULES: dict[tuple, Template] = {}
_FIRST = (0,)  # the outputs' numbers in the key where there is one
_UNCACHED = (LoadOps.COPY, LoadOps.EMPTY, LoadOps.CUSTOM)


def _signature(outs: list[LazyBuffer]) -> tuple[tuple | None, list[LazyBuffer]]:
    """(key, nodes): everything the scheduler decides from, as a key (each unrealized
    base's op, arg, shape, dtype, device and sources with their views; each realized
    buffer's shape, dtype and device), and the bases in the order the key numbers them.
    Dtypes go in by name (graph dtypes are scalars, and a str hashes faster than a
    DType). The key is None for graphs with copies; an op argument that cannot be
    hashed makes the lookup raise TypeError."""
    # one pass over the graph per realize, so written for speed: breadth first, a base
    # numbered when it is first found (the key names each node's sources by number, so
    # it describes the graph, sharing included, whatever the order); bases are dict keys
    # by identity, and `_base` is read directly rather than through the `base` property
    index: dict[LazyBuffer, int] = {}
    nodes: list[LazyBuffer] = []
    for out in outs:
        base = out._base or out
        if base not in index:
            index[base] = len(nodes)
            nodes.append(base)
    parts: list[tuple] = []
    for base in nodes:  # grows while it is walked: each new source goes on the end
        if base.realized is not None:  # its part is fixed once realized: made once
            kept = base.key_part
            parts.append(kept if kept is not None else buffer_part(base))
            continue
        if base.op in _UNCACHED:
            return None, nodes
        srcs: list = []
        for src in base.src:  # a source that is a base is its number; a view is (its
            view = src._base  # base's number, the view) (`_number` inlined: the hot case)
            found = src if view is None else view
            n = index.get(found)
            if n is None:
                n = index[found] = len(nodes)
                nodes.append(found)
            srcs.append(n if view is None else (n, src.st))
        arg = base.arg
        part: tuple = (base.op, repr(arg) if type(arg) is float else arg,  # -0.0 is not 0.0
                       base.shape, base.dtype.name, base.device, tuple(srcs))
        if base.held:  # (kept for a backward not built yet: a chain stops there, D146)
            part += (True,)
        if base.checks:
            part += (tuple([_number(index, nodes, flag) for flag in base.checks]),)
        if base.saved:  # a traced forward's values a later expansion reads (D80): only
            # the realized ones are read, so only they are keyed (none: nothing added)
            saved = tuple([(t, _number(index, nodes, v))
                           for t, v in sorted(base.saved.items(), key=_first)
                           if v.realized is not None])
            if saved:
                part += (saved,)
        parts.append(part)
    numbers = _FIRST if len(outs) == 1 else tuple([index[o._base or o] for o in outs])
    return (tuple(parts), numbers), nodes


def buffer_part(base: LazyBuffer) -> tuple:
    """A realized base's part of the key (kept on the base: it never changes)."""
    base.key_part = ("buffer", base.shape, base.dtype.name, base.device, base.range_len)
    return base.key_part


def realized_since(found: Found, positions: list[int]) -> Found:
    """`found` for the same graph after the bases at `positions`, which have no sources
    (constants), were realized in place: their parts become buffers' and the rest of the
    key stands (a base with no sources numbers nothing after it), so the graph is not
    walked again (lifted constants, lazyten/varying.py)."""
    key, nodes, _ = found
    assert key is not None, "a key to patch"
    parts = list(key[0])
    for i in positions:
        parts[i] = buffer_part(nodes[i])
    patched = (tuple(parts), key[1])
    return patched, nodes, _SCHEDULES.get(patched)


def _number(index: dict[LazyBuffer, int], nodes: list[LazyBuffer], base: LazyBuffer) -> int:
    """The number of `base` in the key: the next one if it is new."""
    n = index.get(base)
    if n is None:
        n = index[base] = len(nodes)
        nodes.append(base)
    return n


def _first(pair: tuple) -> Any:
    return pair[0]


def _template(items: list[ScheduleItem], nodes: list[LazyBuffer]) -> list[tuple]:
    """Items with buffers as positions: i >= 0 for nodes[i], ~j (< 0) for the j-th buffer
    the scheduler made (a pack panel, an assign target's old value, a kernel inside a
    traced forward's graph: a fresh buffer each time the schedule is reused): (ast, out,
    inputs, how to make the fresh output or None, the kernel's shifts: the schedule's
    items come rebased, D120, so the template keeps the rebased kernels, shared by the
    steps of a sequence and with the program cache, not each step's own). The fresh output's source is a
    position, or None where it is no buffer of the schedule (inside a traced graph); a
    value inside a traced forward's graph names its GRAPH node's position and the trace
    node, to be saved on the node (D80)."""
    index = {id(n): i for i, n in enumerate(nodes)}
    out: list[tuple] = []
    fresh = 0
    for item in items:
        new = None
        if id(item.out) not in index:
            index[id(item.out)] = ~fresh
            fresh += 1
            src = item.out.src[0].base if item.out.src else None
            origin = item.out.origin  # a value a traced forward computed: saved on its node
            save = None
            if origin is not None and index.get(origin[0], -1) >= 0:
                save = (index[origin[0]], origin[1])
            new = (item.out.device, item.out.shape, item.out.dtype, item.out.op,
                   index.get(id(src)), save)
        out.append((item.ast, index[id(item.out)], [index[id(b)] for b in item.inputs], new,
                    item.shifts))
    return out


def save_value(node: LazyBuffer, trace_node: int, value: LazyBuffer) -> None:
    """Keep a value a traced forward's graph computed on its GRAPH node (D80)."""
    if node.saved is None:
        node.saved = {}
    node.saved[trace_node] = value


def _rebind(template: list[tuple], nodes: list[LazyBuffer]) -> list[ScheduleItem]:
    fresh: list[LazyBuffer] = []
    items = []
    for ast, out, inputs, new, shifts in template:
        if new is not None:
            device, shape, dtype, op, src, save = new
            fresh.append(LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, op,
                                    () if src is None else
                                    (nodes[src] if src >= 0 else fresh[~src],)))
            if save is not None:
                save_value(nodes[save[0]], save[1], fresh[-1])
        if fresh:
            items.append(ScheduleItem(ast, nodes[out] if out >= 0 else fresh[~out],
                                      [nodes[r] if r >= 0 else fresh[~r] for r in inputs],
                                      shifts))
        else:  # most schedules make no copies: every buffer is a node of the graph
            items.append(ScheduleItem(ast, nodes[out], [nodes[r] for r in inputs], shifts))
    return items
