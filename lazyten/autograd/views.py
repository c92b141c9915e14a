"""Views: a chain of movement ops as one Function (the windows pooling reads, D61), and
`Cat`, a join (cat and stack) as one Function (D110).

`ViewChain` is a LazyBuffer with the Tensor's movement signatures (reshape, expand,
permute, shrink, and pad, whose negative amounts crop) that applies each op to the buffer
and records the op's backward, as the movement Function (primitives.py) would. `Moves`
runs code written for Tensors (nnops.py's `_windows`) on one: the forward and the
gradient are the LazyBuffer ops the chain of Functions built, with one Function and one
Tensor for the whole chain.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import dtypes
from codegen.ops import ReduceOps, TernaryOps
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


class Cat(Function):
    """Inputs joined along `dim` (`new_axis`: each first given a size-1 axis there, as
    stack does): each input padded with zeros to the whole length, and picked where its
    range lies by a mask (a where, not a sum: 0.0 + -0.0 is +0.0, and a join keeps the
    sign); gradient: each input's range of the gradient. One Function for the join,
    traced (one node each way): stacking an RNN's 16 states built 16 unsqueezes, 16 pads
    and 15 adds as Tensor ops, 361 us (D110)."""
    traced = True

    def forward(self, *xs: LazyBuffer, dim: int, new_axis: bool = False) -> LazyBuffer:
        self.ranges, self.shapes = [], [x.shape for x in xs]
        if new_axis:
            xs = tuple(x.reshape(x.shape[:dim] + (1,) + x.shape[dim:]) for x in xs)
        total = sum(x.shape[dim] for x in xs)
        out, start = None, 0
        for x in xs:
            n = x.shape[dim]
            self.ranges.append(tuple((start, start + n) if i == dim else (0, s)
                                     for i, s in enumerate(x.shape)))
            pads = tuple((start, total - start - n) if i == dim else (0, 0)
                         for i in range(len(x.shape)))
            start += n
            if n == 0 and out is not None:
                continue
            piece = x.pad(pads)
            if out is None:
                out = piece
                continue
            inside = LazyBuffer.const_like(True, x.shape, dtypes.bool, x.device).pad(pads)
            out = inside.e(TernaryOps.WHERE, piece, out)
        assert out is not None, "cat of no inputs"
        return out

    def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
        grads = []
        for need, part, shape in zip(self.needs_input_grad, self.ranges, self.shapes):
            grads.append(grad.shrink(part).reshape(shape) if need else None)
        return tuple(grads)
