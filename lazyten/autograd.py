"""Reverse-mode traversal shared by `Tensor.backward` and `Tensor.gradient`.

`propagate` walks the graph below a root from the output back to the leaves and yields
each node with its finished gradient (a LazyBuffer). `backward` stores the leaves' ones in
`.grad` and frees the graph as it goes; `gradient` picks out its targets' ones and keeps
the graph, so it can be called again.
"""
from __future__ import annotations
from typing import Any, Iterator

from codegen.ops import BinaryOps
from lazyten.lazy import LazyBuffer


def propagate(root: Any, gradient: LazyBuffer, free: bool) -> Iterator[tuple[Any, LazyBuffer]]:
    """Yield (node, d(root)/d(node)) for every node of root's graph that needs a gradient,
    each after all its consumers; with `free`, drop each node's graph once it is used."""
    grads = {id(root): gradient}
    for node in reversed(root._toposort()):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        if node._ctx is None and getattr(node, "_freed", False):
            raise RuntimeError("backward through a graph a second time: its saved "
                               "values were freed by the first backward()")
        yield node, g
        if node._ctx is None:
            continue
        in_grads = node._ctx.backward(g)
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        for parent, pg in zip(node._inputs(), in_grads):
            if pg is None or not parent.requires_grad:
                continue
            assert pg.shape == parent.shape, f"grad shape {pg.shape} != {parent.shape}"
            prev = grads.get(id(parent))
            grads[id(parent)] = pg if prev is None else prev.e(BinaryOps.ADD, pg)
        if free:
            node._ctx, node._parents = None, ()  # free the graph, as PyTorch does
            node._freed = True
