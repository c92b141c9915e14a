"""Function: the base of every autograd op (primitives.py, special.py, norm.py, conv.py,
stable.py).

`forward` takes LazyBuffers (and keyword arguments) and returns one LazyBuffer; `backward`
takes the output's gradient and returns one gradient per input (None where that input
needs none). Gradients are lazy, so they fuse with the rest of a training step.
`Tensor.apply` (tensor.py) makes a Function, runs its forward and records it in the graph;
engine.py runs the backwards.
"""
from __future__ import annotations
from typing import Any

from lazyten.lazy import LazyBuffer


class Function:
    """Base: remembers which inputs need a gradient."""
    versions: tuple[int, ...] | None = None  # the inputs' `_version`s, set by Tensor.apply
    # the forward is fixed by the inputs' shapes, dtypes and device and the keyword
    # arguments: without a gradient it runs as one traced graph node (traced_graph.py)
    traced = False
    # what a subclass keeps for its backward where its attributes do not say (`hold`)
    held_values: Any = None  # (a method: `self -> list[LazyBuffer]`)

    def __init__(self, needs_input_grad: list[bool]):
        self.needs_input_grad = needs_input_grad
        self.requires_grad = True in needs_input_grad

    @property
    def function(self) -> type:
        """The Function this call ran (a traced call's is its Function: traced_graph.py)."""
        return type(self)

    def forward(self, *args, **kwargs) -> LazyBuffer:
        raise NotImplementedError

    def backward(self, grad: LazyBuffer):
        raise NotImplementedError


def _kept(ctx: Function) -> list[LazyBuffer]:
    """The bases of the values `ctx` keeps for its backward: its LazyBuffer attributes,
    and those in a tuple or list (a traced call's: the inputs its gradients read)."""
    own = type(ctx).held_values
    if own is not None:
        return own(ctx)
    out = []  # (this runs once per recorded op: no comprehension, no failed lookups)
    for value in ctx.__dict__.values():
        kind = type(value)
        if kind is LazyBuffer:
            out.append(value._base or value)
        elif (kind is tuple or kind is list) and value and type(value[0]) is not bool:
            for item in value:
                if type(item) is LazyBuffer:
                    out.append(item._base or item)
    return out


def keeps_nothing(ctx: Function) -> list[LazyBuffer]:
    """`held_values` of a Function that keeps no values for its backward (a view's keeps
    shapes and arguments): `hold` and `release` then look at nothing."""
    return []


def hold(ctx: Function) -> None:
    """Count the values a recorded Function keeps until its backward is built: a kernel
    that computes one on the way to something else stores it (lazyten/schedule.py, rule
    3), so a backward built after the forward was realized (`loss.item()` before
    `loss.backward()`) reads it, where it computed it again (a Linear's matmul under a
    gelu: D146). `release` takes the count back once the backward is built: its graph
    then reads what it needs, and the scheduler decides as before."""
    for base in _kept(ctx):
        base.held += 1


def release(ctx: Function) -> None:
    for base in _kept(ctx):
        if base.held:
            base.held -= 1
