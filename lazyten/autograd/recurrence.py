"""Recurrence: a recurrent layer's whole sequence as one Function, with backpropagation
through time written out, as PyTorch's own recurrent kernels do.

A step is `state_t = cell(x_t, state_(t-1), W_hh[, b_hh])`, x_t the step's input
projection; the cell (h W_hh^T and the gates' elementwise math) runs as one Composite,
so its gradients come from autograd over the graph it built. The sequence's backward
walks the steps from the last, each step's cell gradients taken at the step's total
state gradient (its output's gradient plus what the next step sends back); the inputs'
gradient is the stacked dx_t, one tensor for the input projection's backward.

The weight's gradient: autograd through the steps makes one small matmul per step (K =
the batch) and a chain of adds. Where the cell is `additive`, p_t = h_(t-1) W_hh^T enters
only as x_t + p_t (RNN, LSTM), so dp_t = dx_t and the gradient is one matmul over every
step, sum_t dx_t^T h_(t-1) as stacked (L N, G) against stacked (L N, H): the steps' cells
then take W_hh as a constant (their traces compute no weight gradient). A GRU's W_hh
gradient stays per step (its reset gate multiplies part of p_t). Gradients of gradients
are not supported (as for every traced call).

The Function is itself `traced` (D161): its forward over every step, and its backward,
are traced once per shapes, which inputs need a gradient and keyword arguments
(traced_graph.py), so a call is one graph node forward and one per gradient backward,
whatever the sequence's length. (While a trace records, the cells' Composites run as
written: a trace holds no traced calls.) Building a layer's graph a step at a time cost
about 20 us of Python per step and direction, forward and backward together.
"""
from __future__ import annotations
from typing import Any, Callable

from lazyten.autograd.composite import Composite
from lazyten.autograd.function import Function, release
from lazyten.lazy import LazyBuffer
from lazyten.switches import no_grad


class Recurrence(Function):
    """Inputs: the input projections (L, N, G), the first state (N, S), W_hh (G, H) and
    b_hh (G,) where the cell takes it; output: every step's state, (L, N, S), in time
    order. Keyword arguments: `cell` (a module-level function of (x_t, state, W_hh[,
    b_hh])), `hidden` (H: the state's first H columns are h), `additive` (see above) and
    `reverse` (run the steps from the last)."""
    traced = True

    def forward(self, xs: LazyBuffer, state: LazyBuffer, *weights: LazyBuffer,
                cell: Callable[..., Any], hidden: int, additive: bool,
                reverse: bool) -> LazyBuffer:
        from lazyten.tensor import Tensor
        self.hidden, self.additive, self.reverse = hidden, additive, reverse
        record = self.requires_grad
        # the weights as the cells take them: gradient-free where this Function makes the
        # weight's gradient itself, or where none is needed
        own = [_leaf(w, record and not additive and need)
               for w, need in zip(weights, self.needs_input_grad[2:])]
        steps = Tensor._wrap(xs).unbind(0)  # (new Tensors without history)
        now = _leaf(state, record)
        outs: list[Any] = [None] * len(steps)
        self.calls: list[Any] = [None] * len(steps)  # each step's cell call: its backward
        self.before: list[Any] = [None] * len(steps)  # each step's incoming state
        for t in (range(len(steps) - 1, -1, -1) if reverse else range(len(steps))):
            if record:  # (the cell's call is recorded: its ctx gives the step's gradients)
                self.before[t] = now
                steps[t].requires_grad = True
                out = steps[t].apply(Composite, now, *own, body=cell)
                self.calls[t] = out._ctx
                now = _leaf(out.lazydata, True)
            else:
                now = steps[t].apply(Composite, now, *own, body=cell)
            outs[t] = now
        with no_grad():  # (the states as this Function's one result: no history)
            return Tensor.stack(outs, 0).lazydata

    def backward(self, grad: LazyBuffer):
        from lazyten.tensor import Tensor
        grads = Tensor._wrap(grad).unbind(0)
        dxs: list[Any] = [None] * len(grads)
        carry = None  # the gradient of the state the step before the current one made
        summed: list[Any] = [None] * (len(self.needs_input_grad) - 2)  # per-step weights'
        for t in (range(len(grads)) if self.reverse else range(len(grads) - 1, -1, -1)):
            total = grads[t] if carry is None else grads[t] + carry
            dx, dstate, *dweights = self.calls[t].backward(total.lazydata)
            release(self.calls[t])  # (its graph reads what it kept: D146)
            dxs[t], carry = Tensor._wrap(dx), Tensor._wrap(dstate)
            for i, g in enumerate(dweights):
                if g is not None:
                    summed[i] = Tensor._wrap(g) if summed[i] is None else summed[i] + Tensor._wrap(g)
        assert carry is not None, "a recurrence has at least one step"
        need = self.needs_input_grad
        dx_all = Tensor.stack(dxs, 0)
        if self.additive and need[2]:  # dW_hh = sum_t dx_t^T h_(t-1): one matmul
            rows = len(grads) * grads[0].shape[0]
            with no_grad():
                h_all = Tensor.stack(self.before, 0)[..., :self.hidden]
            summed[0] = dx_all.reshape(rows, -1).transpose(0, 1).matmul(h_all.reshape(rows, -1))
        return (dx_all.lazydata if need[0] else None, carry.lazydata if need[1] else None,
                *[None if g is None else g.lazydata for g in summed])


def _leaf(value: LazyBuffer, grad: bool):
    """A new Tensor over `value` with no history, that needs a gradient if `grad`."""
    from lazyten.tensor import Tensor
    leaf = Tensor._wrap(value)
    leaf.requires_grad = grad
    return leaf
