"""Scheduler: lazy graph -> ordered ScheduleItems (one kernel AST each).

Fusion rules, applied to the graph of bases reachable from the outputs:
  1. Elementwise ops are inlined into every kernel that reads them (a chain is 1 kernel;
     inside a kernel a shared subexpression is computed once).
  2. Elementwise ops feeding a reduce are inlined into the reduce's kernel.
  3. A reduce whose only consumer is elementwise, read in memory order (a pure reshape),
     moves into that consumer's kernel, and so on up a chain of single consumers.
  4. Materialised once: outputs, LoadOps (copy, contiguous, assign), reduces not fused
     by rule 3 (a reduce read by several consumers, or expanded), an elementwise base
     read through padding when one of its ops does not map 0 to 0 (exp, log, recip...),
     and an elementwise base read through an expand that would repeat much work: each
     element read `_EXPAND_MIN` times or more, repeating `_RECOMPUTE_MIN` ops or more (the
     relu mask of an MLP's gradient, re-read for every input feature of a weight
     gradient, is computed once instead of 784 times).
"""
from __future__ import annotations
from dataclasses import dataclass, field

from codegen.helpers import getenv, prod
from codegen.ops import (BinaryOps, BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer,
                         ReduceOps, TernaryOps, UnaryOps, ZERO_PRESERVING)
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.pack import pack_schedule
from lazyten.split import split_reduces

_ELEMENTWISE = (UnaryOps, BinaryOps, TernaryOps)
_EXPAND_MIN = 8            # reads per element that make an expanded elementwise base...
_RECOMPUTE_MIN = 1 << 16   # ...worth materialising, when this many ops would be repeated
_OPS_COUNTED = 16          # inlined ops counted per base (enough to pass the bar)


@dataclass
class ScheduleItem:
    """One step: a kernel `ast` (None for COPY/EMPTY) writing `out` from `inputs`."""
    ast: LazyOp | None
    out: LazyBuffer
    inputs: list[LazyBuffer] = field(default_factory=list)


def _has_mask(st: ShapeTracker) -> bool:
    return any(v.mask is not None for v in st.views)


def _reshape_only(view: LazyBuffer, base: LazyBuffer) -> bool:
    """Does `view` read every element of `base` once, in memory order? (A contiguous
    view can still be a prefix: a shrink to the first elements.)"""
    return view.st.contiguous and prod(view.shape) == prod(base.shape)


class _Graph:
    """The unrealized part of the graph and the decision of what to materialise."""

    def __init__(self, outs: list[LazyBuffer]):
        self.consumers: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]] = {}
        self.order: list[LazyBuffer] = []
        seen: set[int] = set()
        checks: list[LazyBuffer] = []
        stack = [(o.base, False) for o in outs]
        while stack:  # iterative DFS: graphs from long training loops get deep
            base, done = stack.pop()
            if done:
                self.order.append(base)
                continue
            if id(base) in seen or base.realized is not None:
                continue
            seen.add(id(base))
            self.consumers.setdefault(base, [])
            stack.append((base, True))
            for src in base.src:
                if src.base.realized is None:
                    self.consumers.setdefault(src.base, []).append((base, src))
                    stack.append((src.base, False))
            for flag in base.checks:  # index checks run before anything reads the base
                if flag.realized is None:
                    checks.append(flag)
                    stack.append((flag, False))
        self.realize: set[LazyBuffer] = {o.base for o in outs if o.base.realized is None
                                         and o.base.op is not LoadOps.CONST}
        self.realize.update(checks)
        self.fused_reduce: dict[LazyBuffer, LazyBuffer] = {}  # chain top -> its reduce
        self._decide()

    def _decide(self) -> None:
        for base in self.order:
            if isinstance(base.op, LoadOps) and base.op is not LoadOps.CONST:
                self.realize.add(base)
            if base.op is LoadOps.COPY and base.src[0].base.realized is None:
                self.realize.add(base.src[0].base)
            for _, view in self.consumers[base]:
                if _has_mask(view.st) and base.op not in (LoadOps.CONST,) and \
                        not self._zero_preserving(base):
                    self.realize.add(base)
                elif isinstance(base.op, _ELEMENTWISE) and self._repeats_work(base, view):
                    self.realize.add(base)
        for base in self.order:
            if isinstance(base.op, ReduceOps):
                top = self._chain_top(base)
                if top is base:
                    self.realize.add(base)
                else:
                    self.realize.add(top)
                    self.fused_reduce[top] = base

    def _chain_top(self, reduce: LazyBuffer) -> LazyBuffer:
        """Rule 3: grow the elementwise descendants of `reduce` that read it (or each
        other) in memory order; if they all flow into one exit, that exit's kernel holds
        the reduce. Otherwise the reduce is materialised on its own."""
        if reduce in self.realize:
            return reduce
        group, stack = {reduce}, [reduce]
        while stack:
            node = stack.pop()
            if node in self.realize:
                continue  # an output: its consumers read it from memory
            for user, view in self.consumers[node]:
                if user in group:
                    continue
                if user.op is None or isinstance(user.op, (LoadOps, ReduceOps)) or \
                        not _reshape_only(view, node) or self._reads_reduce(user, group):
                    return reduce
                group.add(user)
                stack.append(user)
        exits = [n for n in group if n in self.realize or
                 any(u not in group for u, _ in self.consumers[n]) or not self.consumers[n]]
        if len(exits) != 1 or exits[0] is reduce:
            return reduce
        for n in group:  # every read inside the group is in memory order, the reduce's too
            if not all(_reshape_only(v, n) for u, v in self.consumers[n] if u in group):
                return reduce
        return exits[0]

    def _reads_reduce(self, user: LazyBuffer, group: set) -> bool:
        """Does `user` inline another unrealized reduce (a kernel holds only one)?"""
        stack, seen = [s.base for s in user.src if s.base not in group], set()
        while stack:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or b in self.realize or b in group:
                continue
            seen.add(id(b))
            if isinstance(b.op, ReduceOps):
                return True
            if not isinstance(b.op, LoadOps):
                stack.extend(s.base for s in b.src)
        return False

    def _repeats_work(self, base: LazyBuffer, view: LazyBuffer) -> bool:
        """Would inlining `base` where `view` reads it repeat much work (rule 4)?"""
        size, reads = prod(base.shape), prod(view.shape)
        if reads < _EXPAND_MIN * size:
            return False
        return (reads - size) * self._inlined_ops(base) >= _RECOMPUTE_MIN

    def _inlined_ops(self, base: LazyBuffer) -> int:
        """Elementwise ops a kernel reading `base` computes for each element (up to
        _OPS_COUNTED): base's own and those of the unmaterialised bases it inlines."""
        count, stack, seen = 0, [base], set()
        while stack and count < _OPS_COUNTED:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or (b in self.realize and b is not base):
                continue
            seen.add(id(b))
            if isinstance(b.op, _ELEMENTWISE):
                count += 1
                stack.extend(s.base for s in b.src)
        return count

    def _zero_preserving(self, base: LazyBuffer) -> bool:
        stack, seen = [base], set()
        while stack:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or (b in self.realize and b is not base):
                continue
            seen.add(id(b))
            if isinstance(b.op, (LoadOps, ReduceOps)):
                continue
            if b.op not in ZERO_PRESERVING:
                return False
            stack.extend(s.base for s in b.src)
        return True


class _KernelBuilder:
    """Builds the AST of the kernel that materialises one base."""

    def __init__(self, graph: _Graph, out: LazyBuffer):
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
        if base.realized is not None or (base in self.graph.realize and base is not self.out):
            node = LazyOp(BufferOps.LOAD, (), MemBuffer(self.buffer_index(base, composite),
                                                        base.dtype, composite))
        elif base.op is LoadOps.CONST:
            node = LazyOp(BufferOps.CONST, (), ConstBuffer(base.arg, base.dtype, composite))
        else:
            node = self.expand_base(base, composite)
        self.memo[key] = node
        return node

    def expand_base(self, base: LazyBuffer, st: ShapeTracker) -> LazyOp:
        """The AST of `base`'s own op (not a load of it)."""
        if isinstance(base.op, ReduceOps):
            assert st.contiguous and prod(st.shape) == prod(base.shape), "reduce fused by a view"
            src = base.src[0]
            return LazyOp(base.op, (self.lazyop(src, ShapeTracker.from_shape(src.shape)),), base.arg)
        if base.op is LoadOps.CONTIGUOUS:
            return self.lazyop(base.src[0], st)
        srcs = tuple(self.lazyop(s, st) for s in base.src)
        return LazyOp(base.op, srcs, base.arg)


def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    """Every step needed to realize `outs`, in an order that respects dependencies.
    A graph with the same structure as one scheduled before (eager code run again)
    reuses that schedule, rebound to this graph's buffers."""
    key, nodes = _signature(outs)
    try:
        template = _SCHEDULES.get(key) if key is not None else None
    except TypeError:  # an unhashable op argument: schedule without the cache
        key = template = None
    if template is not None:
        return _rebind(template, nodes)
    items = _schedule(outs)
    if key is not None:
        if len(_SCHEDULES) >= getenv("SCHEDULE_CACHE", 1024):
            _SCHEDULES.clear()
        _SCHEDULES[key] = _template(items, nodes)
    return items


# ---- the schedule cache ----
_SCHEDULES: dict[tuple, list[tuple]] = {}
_UNCACHED = (LoadOps.COPY, LoadOps.EMPTY, LoadOps.CUSTOM)


def _signature(outs: list[LazyBuffer]) -> tuple[tuple | None, list[LazyBuffer]]:
    """(key, nodes): everything the scheduler decides from, as a key (each unrealized
    base's op, arg, shape, dtype, device and sources with their views; each realized
    buffer's shape, dtype and device), and the bases in the order the key numbers them.
    Dtypes go in by name (graph dtypes are scalars, and a str hashes faster than a
    DType). The key is None for graphs with copies; an op argument that cannot be
    hashed makes the lookup raise TypeError."""
    # one pass over the graph per realize, so written for speed: bases are dict keys by
    # identity, `_base or lb` is `lb.base` without a property call, and a base is pushed
    # twice, under `_FINISH`, to number it after its sources
    index: dict[LazyBuffer, int] = {}
    nodes: list[LazyBuffer] = []
    parts: list[tuple] = []
    stack: list = [o._base or o for o in reversed(outs)]
    while stack:  # iterative post-order, like _Graph
        base = stack.pop()
        if base is _FINISH:
            base = stack.pop()
            if base in index:
                continue
            # a source that is a base is its number; a view is (its base's number, view)
            srcs = tuple([index[src] if src._base is None else (index[src._base], src.st)
                          for src in base.src])
            arg = base.arg
            part: tuple = (base.op, repr(arg) if type(arg) is float else arg,  # -0.0 is not 0.0
                           base.shape, base.dtype.name, base.device, srcs)
            if base.checks:
                part += (tuple([index[flag] for flag in base.checks]),)
        elif base in index:
            continue
        elif base.realized is not None:
            part = ("buffer", base.shape, base.dtype.name, base.device)
        else:
            if base.op in _UNCACHED:
                return None, nodes
            stack.append(base)
            stack.append(_FINISH)
            stack.extend([src._base or src for src in reversed(base.src)])
            if base.checks:
                stack.extend(base.checks)
            continue
        index[base] = len(nodes)
        nodes.append(base)
        parts.append(part)
    return (tuple(parts), tuple([index[o._base or o] for o in outs])), nodes


_FINISH = object()  # on _signature's stack: the base below it has its sources numbered


def _template(items: list[ScheduleItem], nodes: list[LazyBuffer]) -> list[tuple]:
    """Items with buffers as positions: i >= 0 for nodes[i], ~j (< 0) for the j-th copy
    the scheduler made (a pack panel, an assign target's old value: a fresh buffer each
    time the schedule is reused): (ast, out, inputs, how to make the fresh output or
    None)."""
    index = {id(n): i for i, n in enumerate(nodes)}
    out: list[tuple] = []
    fresh = 0
    for item in items:
        new = None
        if id(item.out) not in index:
            index[id(item.out)] = ~fresh
            fresh += 1
            new = (item.out.device, item.out.shape, item.out.dtype, item.out.op,
                   index[id(item.out.src[0].base)])
        out.append((item.ast, index[id(item.out)], [index[id(b)] for b in item.inputs], new))
    return out


def _rebind(template: list[tuple], nodes: list[LazyBuffer]) -> list[ScheduleItem]:
    fresh: list[LazyBuffer] = []
    items = []
    for ast, out, inputs, new in template:
        if new is not None:
            device, shape, dtype, op, src = new
            fresh.append(LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, op,
                                    (nodes[src] if src >= 0 else fresh[~src],)))
        if fresh:
            items.append(ScheduleItem(ast, nodes[out] if out >= 0 else fresh[~out],
                                      [nodes[r] if r >= 0 else fresh[~r] for r in inputs]))
        else:  # most schedules make no copies: every buffer is a node of the graph
            items.append(ScheduleItem(ast, nodes[out], [nodes[r] for r in inputs]))
    return items


def _schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    split_reduces(outs)  # a schedule pass: rewrites long reduces before fusion is decided
    graph = _Graph(outs)
    items = []
    for base in graph.order:  # sources before consumers
        if base not in graph.realize:
            continue
        if base.op in (LoadOps.EMPTY, LoadOps.CUSTOM):
            items.append(ScheduleItem(None, base))
        elif base.op is LoadOps.COPY:
            items.append(ScheduleItem(None, base, [base.src[0].base]))
        elif base.op is LoadOps.CONST:
            raise AssertionError("constants are never materialised on their own")
        else:
            builder = _KernelBuilder(graph, base)
            ast = builder.build()
            old = builder.old_target
            if old is not None:
                items.append(ScheduleItem(copy_ast(old.shape, old.dtype), old, [old.src[0]]))
            items.append(ScheduleItem(ast, base, builder.inputs))
    return pack_schedule(_order(_checks_first(items)))


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


def copy_ast(shape: tuple[int, ...], dtype) -> LazyOp:
    """The kernel that copies buffer 1 into buffer 0, both contiguous of `shape`."""
    st = ShapeTracker.from_shape(shape)
    return LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtype, st)),),
                  MemBuffer(0, dtype, st))
