"""Views: a chain of movement ops as one Function (the windows pooling reads, D61).

`ViewChain` is a LazyBuffer with the Tensor's movement signatures (reshape, expand,
permute, shrink, and pad, whose negative amounts crop) that applies each op to the buffer
and records the op's backward, as the movement Function (primitives.py) would. `Moves`
runs code written for Tensors (nnops.py's `_windows`) on one: the forward and the
gradient are the LazyBuffer ops the chain of Functions built, with one Function and one
Tensor for the whole chain.
"""
from __future__ import annotations
from typing import Callable

from codegen.ops import ReduceOps
from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer

Back = Callable[[LazyBuffer], LazyBuffer]


class ViewChain:
    """A LazyBuffer and the backward of every movement op that made it, in order."""

    def __init__(self, lb: LazyBuffer, undo: tuple[Back, ...] = ()):
        self.lb, self.shape, self.undo = lb, lb.shape, undo

    def _then(self, lb: LazyBuffer, back: Back) -> ViewChain:
        return ViewChain(lb, self.undo + (back,))

    def reshape(self, shape) -> ViewChain:
        old = self.shape
        return self._then(self.lb.reshape(tuple(shape)), lambda g: g.reshape(old))

    def expand(self, shape) -> ViewChain:
        """(of the same rank, as `_windows` expands)"""
        old, shape = self.shape, tuple(shape)
        assert len(shape) == len(old), "expand keeps the rank"
        axis = tuple(i for i, (a, b) in enumerate(zip(old, shape)) if a != b)
        return self._then(self.lb.expand(shape),
                          lambda g: g.r(ReduceOps.SUM, axis) if axis else g)

    def permute(self, order) -> ViewChain:
        order = tuple(order)
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        return self._then(self.lb.permute(order), lambda g: g.permute(inverse))

    def shrink(self, arg) -> ViewChain:
        arg = tuple(tuple(a) for a in arg)
        back = tuple((b, s - e) for (b, e), s in zip(arg, self.shape))
        return self._then(self.lb.shrink(arg), lambda g: g.pad(back))

    def pad(self, arg) -> ViewChain:
        """Tensor.pad with zeros: negative amounts crop first (a shrink), then the rest
        grows (a pad, whose backward shrinks)."""
        crop = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(arg, self.shape))
        cropped = self.shrink(crop)
        grow = tuple((max(b, 0), max(a, 0)) for b, a in arg)
        back = tuple((b, s + b) for s, (b, _) in zip(cropped.shape, grow))
        return cropped._then(cropped.lb.pad(grow), lambda g: g.shrink(back))


class Moves(Function):
    """`moves(ViewChain(x))` as one node: its backward undoes the chain's ops in reverse."""

    def forward(self, x: LazyBuffer, moves: Callable[[ViewChain], ViewChain]) -> LazyBuffer:
        out = moves(ViewChain(x))
        self.undo = out.undo
        return out.lb

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        for back in reversed(self.undo):
            grad = back(grad)
        return grad
