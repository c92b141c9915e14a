"""Autograd: every Function and the reverse traversal that runs their backwards.

- function.py: `Function`, the base: `forward` on LazyBuffers beside its `backward`.
- primitives.py: one Function per Tensor primitive (unary, binary, ternary, reduce,
  movement, copies), written in LazyBuffer ops.
- special.py: Functions whose forward is a composite (mathfn.py's special functions,
  atan2, copysign, pow in Tensor ops; softmax in LazyBuffer ops) and whose backward is
  PyTorch's closed-form formula.
- norm.py: layer normalisation with its weight and bias as one Function, in LazyBuffer
  ops (the chain's forward graph; a closed-form backward).
- matmul.py: matmul as one Function, in LazyBuffer ops (the graph its Tensor ops built).
- views.py: a chain of movement ops as one Function (`Moves` on a `ViewChain`).
- conv.py: convolution, whose gradients are convolutions.
- stable.py: values several kernels must read bit for bit alike (`stable_values`, `Stable`).
- tanh.py: the tanh primitive, its float32 and float64 forms (D131).
- engine.py: the reverse traversal behind `Tensor.backward` and `Tensor.gradient`.

Tensor methods (the mixins) only apply these, through `Tensor.apply`. This file imports
nothing at load, so a module may import one of these without loading the others; `grad`
below is torch.autograd.grad over `Tensor.gradient` (D170).
"""
from typing import Any


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Any = None,
         create_graph: bool = False, allow_unused: Any = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple:
    """torch.autograd.grad: the sum over `outputs` of d(<grad_output, output>)/d(input)
    for each of `inputs`, as a tuple; `.grad` is left alone and the graph kept. An input
    no output depends on raises RuntimeError, or gives None with allow_unused (zeros with
    materialize_grads). create_graph (higher order) and is_grads_batched are refused."""
    from lazyten.tensor import Tensor, _NO_HIGHER_ORDER
    if create_graph:
        raise NotImplementedError(_NO_HIGHER_ORDER.format("autograd.grad(create_graph=True)"))
    if is_grads_batched:
        raise NotImplementedError("autograd.grad(is_grads_batched=True) is not supported")
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    seeds = [None] * len(outs) if grad_outputs is None else \
        [grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs)
    if len(seeds) != len(outs):
        raise ValueError(f"autograd.grad: {len(seeds)} grad_outputs for {len(outs)} outputs")
    unused = allow_unused or materialize_grads
    total: list = [None] * len(ins)
    for out, seed in zip(outs, seeds):
        for i, t in enumerate(ins):  # (per input: one an output does not reach is unused)
            try:
                (g,) = out.gradient(t, gradient=seed)
            except RuntimeError as e:
                if not unused or "was not used" not in str(e):
                    raise
                continue
            total[i] = g if total[i] is None else total[i] + g
    for i, t in enumerate(ins):
        if total[i] is None and not unused:
            raise RuntimeError(f"autograd.grad: input {i} was not used to compute the outputs "
                               "(allow_unused=True gives None for it)")
        if total[i] is None and materialize_grads:
            total[i] = t.zeros_like().detach()
    return tuple(total)
