"""Reverse-mode traversal shared by `Tensor.backward` and `Tensor.gradient`.

A Tensor that needs a gradient records the Function that made it (`_ctx`) and its inputs
(`_parents`). `propagate` walks that graph below a root from the output back to the leaves,
runs each Function's backward, and yields each node with its finished gradient (a
LazyBuffer). `backward` stores the leaves' ones in
`.grad` and frees the graph as it goes; `gradient` picks out its targets' ones and keeps
the graph, so it can be called again.
"""
from __future__ import annotations
import weakref
from typing import Any, Iterator

from codegen.ops import BinaryOps
from lazyten.autograd.function import release
from lazyten.lazy import LazyBuffer


def seed(root: Any, gradient: Any, caller: str) -> LazyBuffer:
    """The gradient backward()/gradient() start from (ones for a one-element root),
    checked against the root."""
    if gradient is None:
        if root.numel() != 1:
            raise ValueError(f"{caller}() on a tensor of shape {root.shape} needs an "
                             "explicit gradient (only one-element tensors imply 1)")
        gradient = type(root).ones(root.shape, dtype=root.dtype, device=root.device)
    if gradient.shape != root.shape:
        raise ValueError(f"gradient shape {gradient.shape} != tensor shape {root.shape}")
    if gradient.dtype != root.dtype or gradient.device != root.device:
        raise TypeError(f"gradient is {gradient.dtype} on {gradient.device} but the tensor "
                        f"is {root.dtype} on {root.device}")
    if root._ctx is None and not root.requires_grad:
        raise RuntimeError(f"{caller}() on a tensor that does not require grad")
    return gradient.lazydata


def describe(t: Any) -> str:
    """A tensor's shape and dtype (anything else's repr), for error messages."""
    return f"tensor of shape {t.shape}, {t.dtype.name}" if hasattr(t, "lazydata") else repr(t)


def propagate(root: Any, gradient: LazyBuffer, free: bool) -> Iterator[tuple[Any, LazyBuffer]]:
    """Yield (node, d(root)/d(node)) for every node of root's graph that needs a gradient,
    each after all its consumers; with `free`, drop each node's graph once it is used."""
    grads = {id(root): gradient}
    for node, parents in reversed(toposort(root)):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        ctx = node._ctx
        if ctx is None and getattr(node, "_freed", False):
            raise RuntimeError("backward through a graph a second time: its saved "
                               "values were freed by the first backward()")
        yield node, g
        if ctx is None:
            continue
        in_grads = ctx.backward(g)
        release(ctx)  # (its graph now reads what it keeps: D146)
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        for parent, pg in zip(parents, in_grads):  # (runs once per edge of the graph)
            if pg is None or not parent.requires_grad:
                continue
            assert pg.shape == parent.lazydata.shape, f"grad shape {pg.shape} != {parent.shape}"
            key = id(parent)
            prev = grads.get(key)
            grads[key] = pg if prev is None else prev.e(BinaryOps.ADD, pg)
        if free:
            node._ctx, node._parents = None, ()  # free the graph, as PyTorch does
            node._freed = True


def toposort(root: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """(tensor, its inputs) for the tensors of root's graph that need a gradient, each
    after its inputs (which are found once, here, for the walk and the backward)."""
    order: list[tuple[Any, tuple[Any, ...]]] = []
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[Any, ...] | None]] = [(root, None)]
    while stack:
        node, parents = stack.pop()
        if parents is not None:  # its inputs are all in order: now it is
            order.append((node, parents))
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        parents = inputs(node)
        stack.append((node, parents))
        for p in parents:  # (a loop, not a comprehension: this runs once per node)
            if p._ctx is not None or p.requires_grad:
                stack.append((p, None))
    return order


def inputs(node: Any) -> tuple[Any, ...]:
    """The tensors `node` was computed from, as they were then: a parent updated in place
    since (inplace.py) is replaced by its value of that time."""
    ctx, parents = node._ctx, node._parents
    versions = None if ctx is None else ctx.versions
    if versions is None:
        return parents
    for parent, version in zip(parents, versions):  # (one entry per parent)
        if parent._version != version:
            break
    else:
        return parents
    out = []
    for parent, version in zip(node._parents, versions):
        while parent._version != version:
            previous = parent._previous
            assert previous is not None, "an in-place update keeps the value it replaced"
            parent = previous
        out.append(parent)
    return tuple(out)


# the tensors backward() was called on since the gradients were last realized (D167), weakly
_ROOTS: list[weakref.ref] = []
_MOST_ROOTS = 16  # (a loop of backwards that never steps keeps the last ones)


def note_root(root: Any) -> None:
    """Remember a tensor backward() was called on: it is computed with the gradients."""
    if len(_ROOTS) >= _MOST_ROOTS:
        del _ROOTS[0]
    _ROOTS.append(weakref.ref(root))


def take_roots() -> list[Any]:
    """The noted roots still alive and not computed (then forgotten): what the
    optimiser's step realizes with the gradients, so that a loss read after the update
    needs neither the parameters' old values nor its graph computed again."""
    alive = [t for t in (ref() for ref in _ROOTS) if t is not None]
    _ROOTS.clear()
    return [t for t in alive if (t.lazydata._base or t.lazydata).realized is None]

