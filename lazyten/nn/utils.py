"""torch.nn.utils' gradient clipping: `clip_grad_norm_` and `clip_grad_value_` rescale or
clamp each parameter's `.grad` (a new lazy Tensor in `.grad`, as `p.grad = ...` would be;
nothing realizes until the optimiser's step reads them).

The total norm is one reduce over the gradients joined end to end (one kernel however
many parameters, where a reduce per gradient was a kernel each), and it is a traced
Function (D80): a call builds one graph node, not the ~6 Tensor ops per parameter it
took written out (0.8 ms of a ViT's 2.9 ms step with 21 parameters: D163).

`parameters_to_vector` joins the parameters into one 1-d Tensor (gradients flow back to
them); `vector_to_parameters` writes consecutive slices of a vector into them in place,
recording no gradient. `nn.utils.rnn` (pad_sequence) lives in nn/rnn_utils.py."""
from __future__ import annotations
import math
import sys
from typing import Iterable

from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer
from lazyten.nn import rnn_utils as rnn
from lazyten.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector",
           "vector_to_parameters", "rnn"]
# `from lazyten.nn.utils.rnn import pad_sequence` as from torch (this is a module, not a
# package: the import statement finds the submodule here)
sys.modules[__name__ + ".rnn"] = rnn


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """(parameter, its gradient, detached) for each parameter that has one."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [(p, p.grad.detach()) for p in params if p.grad is not None]


class TotalNorm(Function):
    """The norm of order `norm_type` of all the inputs together, in float32, 0-d: inf the
    largest |g|, -inf the smallest, 0 the count of nonzeros, p (sum |g|^p)^(1/p)."""
    traced = True

    def forward(self, *grads: LazyBuffer, norm_type: float) -> LazyBuffer:
        flat = Tensor.cat(*[Tensor._wrap(g).float().reshape(-1) for g in grads])
        if math.isinf(norm_type):
            total = flat.abs().max() if norm_type > 0 else flat.abs().min()
        elif norm_type == 0:
            total = (flat != 0).float().sum()
        elif norm_type == 2:
            total = (flat * flat).sum().sqrt()
        else:
            total = (flat.abs() ** norm_type).sum() ** (1 / norm_type)
        return total.lazydata


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total + 1e-6)), total the norm of all
    gradients together (`norm_type` inf: the largest |g|). Returns the total norm (a 0-d
    float32 Tensor, lazy). error_if_nonfinite=True reads it to raise on inf/NaN."""
    pairs = _with_grads(parameters)
    if not pairs:
        return Tensor.zeros(())
    grads = [g for _, g in pairs]
    total = grads[0].apply(TotalNorm, *grads[1:], norm_type=float(norm_type))
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           f"gradients is non-finite ({total.item()})")
    scale = (max_norm / (total + 1e-6)).minimum(1.0)
    for p, g in pairs:
        p.grad = g * scale.cast(g.dtype)  # (g is detached: so is the product)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient into [-clip_value, clip_value]."""
    for p, g in _with_grads(parameters):
        p.grad = g.clip(-clip_value, clip_value)


def _same_device(params: list[Tensor]) -> None:
    if len({p.device for p in params}) > 1:
        raise TypeError(f"parameters are on different devices "
                        f"({sorted({p.device for p in params})}): not supported")


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and joined end to end into one 1-d Tensor."""
    params = list(parameters)
    _same_device(params)
    return Tensor.cat(*[p.reshape(-1) for p in params])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Write consecutive slices of the 1-d `vec` into the parameters in place (each reshaped
    to its parameter's shape), as `p.data = ...`: no gradient is recorded."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected a Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    _same_device(params)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.numel() < total:
        raise ValueError(f"vector_to_parameters: a 1-d vector of at least {total} values is "
                         f"needed for the parameters, got shape {vec.shape}")
    offset = 0
    for p in params:
        n = p.numel()
        p.data = vec[offset:offset + n].reshape(p.shape).detach()
        p.realize()  # now: a second write of a pending one would replace its buffer
        offset += n
