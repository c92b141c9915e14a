"""A Function's forward (and, where a gradient is recorded, its backward) as graph nodes
made without building the Function's graph (D79, D80).

Eager code built a layer's whole graph on every call: layer_norm is 25 LazyBuffers,
about 50 us of Python, and the schedule cache's key walked its 19 bases again (20 us) to
find the schedule it had already; a Linear layer in a training step built 10 nodes
forward and 14 backward. Here a Function that declares `traced = True` (its forward and
backward are fixed by its inputs' shapes, dtypes, device and layout, which inputs need
a gradient, and its keyword arguments) is run once per such key on placeholder inputs:
its forward, then, where a gradient is recorded, its backward from a placeholder
gradient. The graphs are kept as a `Subgraph` with one `Output` per result (the forward's,
then one per input gradient). Each later call makes one LazyBuffer whose op is
`CompositeOps.GRAPH` (its `arg` the Output) with the real inputs as its sources, and
records a `TracedCall` for autograd, whose backward makes one GRAPH node per gradient
(sources: the inputs, the gradient, and the forward's node where the backward reads the
forward's values). The schedule cache keys on those nodes, so a graph seen before finds
its schedule (and plan) without the Function's nodes ever being built.

Only a schedule made afresh needs them: the scheduler's first pass (`expand_graphs`,
rebuilds each GRAPH node's subgraph over its real sources (a placeholder's view becomes
the same view of the input, composed with the input's own) and the node itself becomes
the subgraph's result (takes its op, sources and argument), so every rule after it sees
the graph the Function would have built. A backward expanded in the same pass as its
forward reuses the forward's rebuilt nodes (what the Function saved for its backward);
one expanded later rebuilds the forward's intermediate values over the inputs (the
forward's result itself is read, as saved). The values are the same bit for bit
(tests/unit/test_traced_graph.py).

A trace is refused (the Function then always runs as written) where its graph reads a
realized buffer, has an index check or a load op other than a constant or a copy in
memory order, or its forward returns an input, a constant or a view of either; and for
empty shapes.
"""
from __future__ import annotations
from typing import Any

from codegen.helpers import getenv
from codegen.ops import LoadOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.autograd.function import Function, hold
from lazyten.graph_expand import entries, rebuild, swap
from lazyten.lazy import LazyBuffer
from lazyten.traced import RECORDING, CompositeOps

_MIN_NODES = 4  # a smaller graph costs less to build than to look up and expand


class Output:
    """One result of a trace: `root` (a node over the placeholders) and `base`, the base
    a GRAPH node stands for (root itself, or the base root is a view of); None where the
    result is no computed node (a view of a placeholder, a constant): it is rebuilt at
    once, which costs a view or two. `kind`: "forward", "gradient" or "flag" (an index
    check's flag, `check` its `index_check`). GRAPH nodes' `arg`: compared by identity."""
    __slots__ = ("sub", "kind", "root", "base", "check")

    def __init__(self, sub: Subgraph, kind: str, root: LazyBuffer):
        self.sub, self.kind, self.root, self.check = sub, kind, root, root.index_check
        base = root.base
        self.base = None if base.op is CompositeOps.INPUT or base.op is LoadOps.CONST else base

    def __repr__(self) -> str:
        return f"<{self.sub.fn.__name__} {self.kind}>"

    def make(self, srcs: tuple[LazyBuffer, ...], checks: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        """This result over real sources: a GRAPH node (or a view of one) carrying the
        call's index-check flags."""
        if self.base is None:
            return rebuild(self.root, entries(self.sub, srcs), {}, {})
        node = LazyBuffer(srcs[0].device, self.base.st, self.base.dtype, CompositeOps.GRAPH,
                          srcs, self)
        if checks:
            node.checks = checks
        if self.check is not None:
            node.index_check = self.check
        return node if self.root is self.base else node._view(self.root.st)


class Subgraph:
    """A traced Function over placeholders (CompositeOps.INPUT bases, `arg` the input's
    position; the gradient's is `n_inputs`): `forward`, then `gradients` (one Output per
    input, None where none is needed), `flags` (its index checks' flags), and `consts`,
    the realized ranges (`Tensor.arange`'s) and frozen constants (both never written) its
    graph reads, which every call's GRAPH nodes take as sources after the inputs.
    `reads_forward`: whether the gradients' graphs read a node the forward computed."""
    __slots__ = ("fn", "forward", "gradients", "flags", "consts", "nodes", "reads_forward",
                 "flips", "_held")

    def __init__(self, fn: type, roots: list[LazyBuffer | None], walked: Walk,
                 reads_forward: bool, flips: tuple[bool, ...]):
        self.fn, self.nodes, self.reads_forward = fn, walked.nodes, reads_forward
        self.flips = flips if True in flips else ()
        self.forward = Output(self, "forward", roots[0])  # type: ignore[arg-type]
        self.gradients = [None if r is None else Output(self, "gradient", r) for r in roots[1:]]
        self.flags = [Output(self, "flag", flag) for flag in walked.flags]
        self.consts = tuple(walked.consts)
        self._held: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        return f"<Subgraph {self.fn.__name__}: {self.nodes} nodes>"

    def held(self) -> tuple[int, ...]:
        """The positions of the inputs the gradients' graphs read (what a Function's
        backward keeps: D146), found once."""
        if self._held is None:
            found, seen = set(), set()
            stack = [g.root.base for g in self.gradients if g is not None]
            while stack:
                node = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if node.op is CompositeOps.INPUT:
                    found.add(node.arg)
                stack.extend(s.base for s in node.src)
            self._held = tuple(sorted(found))
        return self._held


class TracedCall(Function):
    """What autograd records for a traced call: its backward makes the gradients' GRAPH
    nodes over the call's inputs, the gradient, the trace's ranges and the forward's
    node where they read what the forward computed (as a Function saves it)."""

    def __init__(self, sub: Subgraph, needs: list[bool], inputs: tuple[LazyBuffer, ...],
                 forward: LazyBuffer):
        self.needs_input_grad = needs  # (Function.__init__, spelt out: one per traced op)
        self.requires_grad = True in needs
        self.sub, self.inputs, self.forward_node = sub, inputs, forward
        self.flags = forward.checks  # (the forward's node gives them up when expanded)

    @property
    def function(self) -> type:
        return self.sub.fn

    def held_values(self) -> list[LazyBuffer]:
        """The inputs the gradients' graphs read (autograd/function.py `hold`)."""
        return [self.inputs[i].base for i in self.sub.held() if i < len(self.inputs)]

    def backward(self, grad: LazyBuffer):
        sub, forward = self.sub, self.forward_node
        srcs = self.inputs + (grad,) + sub.consts + ((forward,) if sub.reads_forward else ())
        return tuple([None if out is None else out.make(srcs, self.flags)
                      for out in sub.gradients])


class NotTraceable(Exception):
    """The Function's graph cannot stand for itself over other inputs."""


# (Function, keyword arguments, (shape, dtype name, device) per input[, which inputs need a
# gradient, which are in memory order]) -> Subgraph, or None: refused
_TRACES: dict[tuple, Subgraph | None] = {}


def traced_call(fn: type, inputs: tuple[LazyBuffer, ...], kwargs: dict[str, Any],
                needs: list[bool] | None) -> tuple[LazyBuffer, TracedCall | None] | None:
    """(the result of `fn().forward(*inputs, **kwargs)` as a GRAPH node, and what autograd
    records where `needs` (which inputs need a gradient) is given), or None where it is
    not traced (GRAPH_TRACE=0, a refused graph, an unhashable argument): the caller runs
    the Function itself."""
    if not getenv("GRAPH_TRACE", 1) or RECORDING.get():  # (read on every call, as
        return None                                     # POINTWISE_TRACE is)
    try:
        # (dtypes by name: a DType's hash is a Python call, a str's is cached)
        key: tuple
        if needs is None:
            key = (fn, tuple(kwargs.items()),
                   tuple([(x.shape, x.dtype.name, x.device) for x in inputs]))
        else:  # a backward may depend on layout (Matmul's weight gradient)
            key = (fn, tuple(kwargs.items()), tuple(needs),
                   tuple([(x.shape, x.dtype.name, x.device, x._base is None or x.st.contiguous)
                          for x in inputs]))
        sub = _TRACES[key]
    except KeyError:
        if len(_TRACES) >= getenv("TRACE_CACHE", 4096):
            _TRACES.clear()
        sub = _TRACES[key] = _trace(fn, inputs, kwargs, needs)
    except TypeError:  # an unhashable keyword argument
        return None
    if sub is None:
        return None
    srcs = inputs + sub.consts
    checks = tuple([flag.make(srcs) for flag in sub.flags]) if sub.flags else ()
    lazy = sub.forward.make(srcs, checks)
    if needs is None:
        return lazy, None
    call = TracedCall(sub, needs, inputs, lazy.base)
    hold(call)
    return lazy, call


def _trace(fn: type, inputs: tuple[LazyBuffer, ...], kwargs: dict[str, Any],
           needs: list[bool] | None) -> Subgraph | None:
    if len({x.device for x in inputs}) != 1 or any(0 in x.shape for x in inputs):
        return None
    # a backward may read the layout (Matmul's weight gradient, D67): an input out of
    # memory order gets a placeholder out of order too, its last two axes swapped
    flips = tuple([needs is not None and len(x.shape) >= 2 and not (x._base is None or x.st.contiguous)
                   for x in inputs])
    holders = [_placeholder(swap(x.shape) if flip else x.shape, x.dtype, x.device, i)
               for i, (x, flip) in enumerate(zip(inputs, flips))]
    holders = [swap(h) if flip else h for h, flip in zip(holders, flips)]
    recording = RECORDING.set(True)
    try:
        ctx = fn(needs or [False] * len(inputs))
        root = ctx.forward(*holders, **kwargs)
        if root.base.op in (CompositeOps.INPUT, LoadOps.CONST) or root.base.realized is not None:
            raise NotTraceable("the result is not computed")
        roots: list[LazyBuffer | None] = [root]
        if needs is not None:
            grad = _placeholder(root.shape, root.dtype, root.device, len(inputs))
            grads = ctx.backward(grad)
            grads = grads if isinstance(grads, tuple) else (grads,)
            roots += [grads[i] if need and i < len(grads) else None for i, need in enumerate(needs)]
        walked = Walk(roots)
        reads_forward = _reaches(roots[1:], Walk([root]).computed)
    except NotTraceable:
        return None
    finally:
        RECORDING.reset(recording)
    if walked.nodes < _MIN_NODES:
        return None
    return Subgraph(fn, roots, walked, reads_forward, flips)


def _placeholder(shape: tuple[int, ...], dtype, device: str, position: int) -> LazyBuffer:
    return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, CompositeOps.INPUT, (), position)


_LOADS = (LoadOps.CONST, LoadOps.CONTIGUOUS)


class Walk:
    """The graph under `roots`, checked: `nodes` counts its nodes (bases and views),
    `computed` the ids of its computed bases, `flags` its index checks' flags (walked
    too), `consts` its realized ranges and frozen constants.
    Raises NotTraceable where the graph cannot be rebuilt over other inputs."""

    def __init__(self, roots: list[LazyBuffer | None]):
        seen: set[int] = set()
        self.computed: set[int] = set()
        self.flags: list[LazyBuffer] = []
        self.consts: list[LazyBuffer] = []
        stack = [r for r in roots if r is not None]
        flags: set[int] = set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node._base is not None:
                stack.append(node._base)
                continue
            if node.realized is not None:
                # a range (Tensor.arange) or a frozen constant is never written
                if not node.range_len and not node.frozen:
                    raise NotTraceable(f"{node} is realized")
                self.consts.append(node)
                continue
            if node.op is CompositeOps.GRAPH or (node.index_check is not None and id(node) not in flags) \
                    or (isinstance(node.op, LoadOps) and node.op not in _LOADS):
                raise NotTraceable(f"{node} cannot be rebuilt")
            if node.checks:
                if node.op is CompositeOps.INPUT:
                    raise NotTraceable("an index check on an input")
                for flag in node.checks:
                    if id(flag) not in flags:
                        flags.add(id(flag))
                        self.flags.append(flag)
                        stack.append(flag)
            if node.op is not CompositeOps.INPUT and node.op is not LoadOps.CONST:
                self.computed.add(id(node))
            stack.extend(node.src)
        self.nodes = len(seen)


def _reaches(roots: list[LazyBuffer | None], targets: set[int]) -> bool:
    """Whether the graph under `roots` reads a node of `targets`."""
    seen: set[int] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if id(node) in targets:
            return True
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend((node._base,) if node._base is not None else node.src)
    return False
