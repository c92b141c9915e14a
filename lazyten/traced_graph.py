"""A Function's forward as one graph node where no gradient is recorded (D79).

Eager code that runs a layer without gradients (inference, `no_grad`, inputs that need
none) built the layer's whole forward graph on every call: layer_norm is 25 LazyBuffers,
about 50 us of Python, and the schedule cache's key walked its 19 bases again (20 us) to
find the schedule it had already. Here a Function that declares `traced = True` (its
forward is fixed by its inputs' shapes, dtypes and device and its keyword arguments) is
run once per such key on placeholder inputs, and the graph it builds is kept as a
`Subgraph`. Each later call makes one LazyBuffer whose op is `CompositeOps.GRAPH`, with
the real inputs as its sources: the schedule cache keys on that one node, so a graph
seen before finds its schedule (and plan) without the forward's nodes ever being built.

Only a schedule made afresh needs them: the scheduler's first pass (`expand_graphs`)
rebuilds each GRAPH node's subgraph over its real sources (a placeholder's view becomes
the same view of the input, composed with the input's own) and the node itself becomes
the subgraph's result (takes its op, sources and argument), so every rule after it sees
the graph the forward would have built. The values are the same bit for bit
(tests/unit/test_traced_graph.py).

A trace is refused (the forward then always runs as written) where its graph reads a
realized buffer, has an index check or a load op other than a constant or a copy in
memory order, or returns a view, an input or a constant; and for empty shapes.
"""
from __future__ import annotations
from typing import Any

from codegen.helpers import getenv
from codegen.ops import LoadOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer, rewrite_bases
from lazyten.traced import CompositeOps

_MIN_NODES = 4  # a smaller forward costs less to build than to look up and expand


class Subgraph:
    """A traced forward: `root`, its result, over placeholders (CompositeOps.INPUT bases,
    `arg` the input's position). Compared by identity: one per traced key."""
    __slots__ = ("name", "root", "nodes")

    def __init__(self, name: str, root: LazyBuffer, nodes: int):
        self.name, self.root, self.nodes = name, root, nodes

    def __repr__(self) -> str:
        return f"<Subgraph {self.name}: {self.nodes} nodes>"


class NotTraceable(Exception):
    """The forward's graph cannot stand for itself over other inputs."""


# (Function, keyword arguments, dtypes, device, shapes) -> Subgraph, or None: refused
_TRACES: dict[tuple, Subgraph | None] = {}


def traced_forward(fn: type, inputs: list[LazyBuffer], kwargs: dict[str, Any]) -> LazyBuffer | None:
    """One GRAPH node computing `fn().forward(*inputs, **kwargs)` without a gradient, or
    None where it is not traced (GRAPH_TRACE=0, a refused forward, an unhashable
    argument): the caller runs the forward itself."""
    if not getenv("GRAPH_TRACE", 1):  # read on every call, as POINTWISE_TRACE is
        return None
    try:
        key = (fn, tuple(kwargs.items()), tuple([(x.shape, x.dtype, x.device) for x in inputs]))
        sub = _TRACES[key]
    except KeyError:
        if len(_TRACES) >= getenv("TRACE_CACHE", 4096):
            _TRACES.clear()
        sub = _TRACES[key] = _trace(fn, inputs, kwargs)
    except TypeError:  # an unhashable keyword argument
        return None
    if sub is None:
        return None
    root = sub.root
    return LazyBuffer(inputs[0].device, root.st, root.dtype, CompositeOps.GRAPH, tuple(inputs), sub)


def _trace(fn: type, inputs: list[LazyBuffer], kwargs: dict[str, Any]) -> Subgraph | None:
    if len({x.device for x in inputs}) != 1 or any(0 in x.shape for x in inputs):
        return None
    holders = [LazyBuffer(x.device, ShapeTracker.from_shape(x.shape), x.dtype,
                          CompositeOps.INPUT, (), i) for i, x in enumerate(inputs)]
    try:
        root = fn([False] * len(inputs)).forward(*holders, **kwargs)
        nodes = _check(root)
    except NotTraceable:
        return None
    return Subgraph(fn.__name__, root, nodes) if nodes >= _MIN_NODES else None


_LOADS = (LoadOps.CONST, LoadOps.CONTIGUOUS)


def _check(root: LazyBuffer) -> int:
    """The number of nodes (bases and views) of the graph under `root`; raises
    NotTraceable where the graph cannot be rebuilt over other inputs."""
    if root._base is not None or root.realized is not None or \
            root.op in (CompositeOps.INPUT, LoadOps.CONST):
        raise NotTraceable("the result is not a computed base")
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node._base is not None:
            stack.append(node._base)
            continue
        if node.realized is not None or node.checks or node.index_check is not None or \
                node.op is CompositeOps.GRAPH or (isinstance(node.op, LoadOps) and node.op not in _LOADS):
            raise NotTraceable(f"{node} cannot be rebuilt")
        stack.extend(node.src)
    return len(seen)


def expand_graphs(outs: list[LazyBuffer]) -> None:
    """The scheduler's first pass: every unrealized GRAPH node reachable from `outs`
    becomes the graph its forward builds over its sources."""
    rewrite_bases(outs, _become)


def _become(node: LazyBuffer) -> LazyBuffer:
    """A GRAPH node made the result of its traced graph rebuilt over its sources (it
    takes the result's op, sources and argument); any other node as it is."""
    if node.op is CompositeOps.GRAPH:
        result = _rebuild(node.arg.root, node.src)
        node.op, node.src, node.arg = result.op, result.src, result.arg
    return node


def _rebuild(root: LazyBuffer, inputs: tuple[LazyBuffer, ...]) -> LazyBuffer:
    """A copy of the graph under `root` with each placeholder replaced by its input."""
    done: dict[int, LazyBuffer] = {}
    stack: list[tuple[LazyBuffer, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in done:
            continue
        base = node._base
        parts = (base,) if base is not None else node.src
        if not ready and parts:
            stack.append((node, True))
            stack.extend((p, False) for p in parts if id(p) not in done)
            continue
        if base is not None:  # a view of a placeholder or of a node of the graph
            if base.op is CompositeOps.INPUT:
                real = inputs[base.arg]
                done[id(node)] = real._view(real.st + node.st)
            else:
                done[id(node)] = done[id(base)]._view(node.st)
        elif node.op is CompositeOps.INPUT:
            done[id(node)] = inputs[node.arg]
        else:
            done[id(node)] = LazyBuffer(node.device, node.st, node.dtype, node.op,
                                        tuple([done[id(s)] for s in node.src]), node.arg)
    return done[id(root)]
