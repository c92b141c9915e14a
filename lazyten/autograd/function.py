"""Function: the base of every autograd op (primitives.py, special.py, norm.py, conv.py,
stable.py).

`forward` takes LazyBuffers (and keyword arguments) and returns one LazyBuffer; `backward`
takes the output's gradient and returns one gradient per input (None where that input
needs none). Gradients are lazy, so they fuse with the rest of a training step.
`Tensor.apply` (tensor.py) makes a Function, runs its forward and records it in the graph;
engine.py runs the backwards.
"""
from __future__ import annotations

from lazyten.lazy import LazyBuffer


class Function:
    """Base: remembers which inputs need a gradient."""
    versions: tuple[int, ...] | None = None  # the inputs' `_version`s, set by Tensor.apply
    # the forward is fixed by the inputs' shapes, dtypes and device and the keyword
    # arguments: without a gradient it runs as one traced graph node (traced_graph.py)
    traced = False

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
