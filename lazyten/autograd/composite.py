"""Composite: a function of Tensors run as one Function, so that a call of it is one graph
node forward and one per gradient backward (traced_graph.py, D79, D80), with no backward
written by hand: its backward is autograd over the graph its forward built.

A recurrent layer's step is the case it was made for: an LSTM step is about twenty Tensor
ops, each a Function and a Tensor, a LazyBuffer or more, and a node of the backward's
walk, sixteen times per layer per training step; as a Composite it is one traced call.

`x.apply(Composite, *others, body=fn, **kwargs)` runs `fn(x, *others, **kwargs)`. `fn`
must return one Tensor computed from its inputs, and what it computes must be fixed by
the inputs' shapes, dtypes, device and layout and by the keyword arguments (the trace is
made once per such key and reused): a module-level function, not a closure over tensors
or a lambda made per call (each new object would be traced anew). A graph the tracer
refuses (it reads a realized buffer, returns an input) runs as written, with the same
values and gradients.
"""
from __future__ import annotations
from typing import Any, Callable

from lazyten.autograd.engine import propagate
from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer


class Composite(Function):
    """Inputs: the Tensors `body` takes; keyword arguments: `body` and its own."""
    traced = True

    def forward(self, *xs: LazyBuffer, body: Callable[..., Any], **kwargs: Any) -> LazyBuffer:
        from lazyten.tensor import Tensor
        self.inputs = []
        for x, need in zip(xs, self.needs_input_grad):
            t = Tensor._wrap(x)
            t.requires_grad = need
            self.inputs.append(t)
        self.out = body(*self.inputs, **kwargs)
        if not isinstance(self.out, Tensor):
            raise TypeError(f"a composite's function returns one Tensor, {body.__name__} "
                            f"returned {type(self.out).__name__}")
        return self.out.lazydata

    def backward(self, grad: LazyBuffer):
        found: dict[int, LazyBuffer | None] = {id(t): None for t in self.inputs if t.requires_grad}
        if self.out.requires_grad:  # (else no input reaches the result: no gradients)
            for node, g in propagate(self.out, grad, free=False):
                if id(node) in found:
                    found[id(node)] = g
        return tuple([found.get(id(t)) for t in self.inputs])
