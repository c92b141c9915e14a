"""Expanding traced calls (lazyten/traced_graph.py, D79, D80): the scheduler's first pass
makes each unrealized GRAPH node the graph its Function would have built, rebuilt over the
node's sources; after the schedule ran, the nodes it did not realize are GRAPH nodes again.
A backward expanded in the same pass as its forward reuses the forward's rebuilt nodes;
one expanded later rebuilds the forward's intermediate values, or reads those an earlier
schedule saved (`LazyBuffer.saved`).
"""
from __future__ import annotations
import threading
from typing import TYPE_CHECKING, Any

from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer, rewrite_bases
from lazyten.traced import CompositeOps

if TYPE_CHECKING:
    from lazyten.traced_graph import Output, Subgraph


def swap(x: Any) -> Any:
    """A shape, or a LazyBuffer, with its last two axes swapped."""
    if isinstance(x, tuple):
        return x[:-2] + (x[-1], x[-2])
    n = len(x.shape)
    return x.permute(tuple(range(n - 2)) + (n - 1, n - 2))


def entries(sub: Subgraph, srcs: tuple[LazyBuffer, ...]) -> tuple[LazyBuffer, ...]:
    """What the trace's placeholders stand for: the sources, an input out of memory order
    with its last two axes swapped (its placeholder's base is so)."""
    if not sub.flips:
        return srcs
    return tuple([swap(s) if i < len(sub.flips) and sub.flips[i] else s
                  for i, s in enumerate(srcs)])


class _PassState(threading.local):
    """Per thread (threads may realize at once): `done`, a pass's forwards already rebuilt
    (id of the forward's GRAPH node -> its rebuilt nodes by trace node id) and gradients'
    (Subgraph and source ids -> rebuilt nodes); `expanded`, the GRAPH nodes expanded since
    the last restore_graphs (node, its sources, arg, checks)."""

    def __init__(self) -> None:
        self.done: dict[Any, dict[int, LazyBuffer]] = {}
        self.expanded: list[tuple[LazyBuffer, tuple, Any, tuple]] = []


_PASS = _PassState()


def expand_graphs(outs: list[LazyBuffer]) -> None:
    """The scheduler's first pass: every unrealized GRAPH node reachable from `outs`
    becomes the graph its Function builds over its sources."""
    try:
        rewrite_bases(outs, _become)
    finally:
        _PASS.done.clear()


def _become(node: LazyBuffer) -> LazyBuffer:
    """A GRAPH node made the result of its traced graph rebuilt over its sources (it
    takes the result's op, sources, argument and index checks: the call's flags move to
    the rebuilt bases the trace had them on); any other node as it is."""
    if node.op is not CompositeOps.GRAPH:
        return node
    out: Output = node.arg
    base = out.base
    assert base is not None, "GRAPH nodes stand for computed bases"
    srcs = entries(out.sub, node.src)
    if out.kind == "forward":
        done = _forward_done(node)
        result = LazyBuffer(base.device, base.st, base.dtype, base.op,
                            tuple([done[id(s)] for s in base.src]), base.arg)
        if base.checks:
            result.checks = _flags_of(base, _call_flags(node))
    elif out.kind == "gradient":  # the forward's rebuilt nodes where this pass has them
        key = (out.sub, *[id(s) for s in node.src])
        done = _PASS.done.get(key)  # type: ignore[assignment]
        if done is None:
            done = _PASS.done[key] = _forward_nodes(out.sub, node.src)
        result = rebuild(base, srcs, done, _call_flags(node))
        if result.realized is not None or result.op is CompositeOps.GRAPH:
            # the gradient is a value the forward had (made before this pass): a copy
            result = LazyBuffer.loadop(LoadOps.CONTIGUOUS, node.shape, node.dtype,
                                       node.device, src=(result,))
    else:
        result = rebuild(base, srcs, {}, {})
    _PASS.expanded.append((node, node.src, node.arg, node.checks))
    node.op, node.src, node.arg, node.checks = result.op, result.src, result.arg, result.checks
    return node


def graph_of(node: LazyBuffer) -> LazyBuffer:
    """The base a GRAPH node stands for, rebuilt over its sources apart from any pass (the
    node stays as it is): for analyses that read ops before scheduling (stable.py)."""
    out: Output = node.arg
    base = out.base
    assert base is not None, "GRAPH nodes stand for computed bases"
    sub, srcs = out.sub, entries(out.sub, node.src)
    done = {id(sub.forward.base): srcs[-1]} if out.kind == "gradient" and sub.reads_forward else {}
    return rebuild(base, srcs, done, _call_flags(node))


def restore_graphs() -> None:
    """After a schedule ran: each GRAPH node it expanded but did not realize is a GRAPH
    node again (its forward's values the schedule computed stay `saved`). A later
    realize of it then keys on the node as it would after a cached schedule, which
    expands nothing: one key either way, so eager code repeated settles at once."""
    expanded = _PASS.expanded
    while expanded:
        node, src, arg, checks = expanded.pop()
        if node.realized is None:
            node.op, node.src, node.arg, node.checks = CompositeOps.GRAPH, src, arg, checks


def _call_flags(node: LazyBuffer) -> dict[int, LazyBuffer]:
    """A traced call's flags (`node.checks`), by the trace's flag each stands for."""
    return {id(f.root): real for f, real in zip(node.arg.sub.flags, node.checks)}


def _flags_of(traced: LazyBuffer, flags: dict[int, LazyBuffer]) -> tuple[LazyBuffer, ...]:
    return tuple([flags[id(f)] for f in traced.checks])


def _forward_done(node: LazyBuffer) -> dict[int, LazyBuffer]:
    """The rebuilt nodes under an unexpanded forward's result, by trace node id, made once
    a pass: its result maps to `node` itself, so that a gradient reading it reads the
    node (which then joins the graph and is expanded), while one reading only the
    forward's intermediate values leaves the node as it is (a later realize of it keys
    on the same GRAPH node as it would have without this one)."""
    done = _PASS.done.get(id(node))
    if done is None:
        out: Output = node.arg
        base = out.base
        assert base is not None, "GRAPH nodes stand for computed bases"
        done = _PASS.done[id(node)] = {id(base): node}
        # values an earlier schedule computed: read, not computed again (the schedule
        # cache's key names them)
        node.saved = {t: v for t, v in node.saved.items() if v.realized is not None} \
            if node.saved else {}
        done.update(node.saved)
        srcs, flags = entries(out.sub, node.src), _call_flags(node)
        for src in base.src:
            rebuild(src, srcs, done, flags, (id(node), node.saved))
    return done


def _forward_nodes(sub: Subgraph, srcs: tuple[LazyBuffer, ...]) -> dict[int, LazyBuffer]:
    """The rebuilt nodes a gradient starts from: the forward's, where it reads any (its
    node is the last of `srcs`)."""
    if not sub.reads_forward:
        return {}
    forward = srcs[-1]
    if forward.realized is None and forward.op is CompositeOps.GRAPH:
        return dict(_forward_done(forward))
    found = _PASS.done.get(id(forward))  # (expanded in this pass, or before it)
    return dict(found) if found is not None else {id(sub.forward.base): forward}


def rebuild(root: LazyBuffer, inputs: tuple[LazyBuffer, ...], done: dict[int, LazyBuffer],
             flags: dict[int, LazyBuffer], owner: tuple[int, dict] | None = None) -> LazyBuffer:
    """A copy of the graph under `root` with each placeholder replaced by its input;
    `done` (extended here) maps trace nodes to nodes already rebuilt; a base that had
    index checks in the trace gets the call's flags that stand for them (`flags`).
    `owner`: (id of the forward's GRAPH node, its `saved`) for a forward's graph, whose
    new bases it keeps and marks as its values (`origin`)."""
    stack: list[tuple[LazyBuffer, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in done:
            continue
        base = node._base
        parts = (base,) if base is not None else node.src
        if not ready and parts and (base is not None or node.realized is None):
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
        elif node.realized is not None:  # a range: the same buffer
            done[id(node)] = node
        else:
            new = done[id(node)] = LazyBuffer(node.device, node.st, node.dtype, node.op,
                                              tuple([done[id(s)] for s in node.src]), node.arg)
            if node.checks:
                new.checks = _flags_of(node, flags)
            if owner is not None:
                new.origin = (owner[0], id(node))
                owner[1][id(node)] = new
    return done[id(root)]
