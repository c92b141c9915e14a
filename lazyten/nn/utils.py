"""torch.nn.utils' gradient clipping: `clip_grad_norm_` and `clip_grad_value_` rescale or
clamp each parameter's `.grad` (a new lazy Tensor in `.grad`, as `p.grad = ...` would be;
nothing realizes until the optimiser's step reads them)."""
from __future__ import annotations
import math
from typing import Iterable

from lazyten.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """(parameter, its gradient, detached) for each parameter that has one."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [(p, p.grad.detach()) for p in params if p.grad is not None]


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale every gradient by min(1, max_norm / (total + 1e-6)), total the norm of all
    gradients together (`norm_type` inf: the largest |g|). Returns the total norm (a 0-d
    float32 Tensor, lazy). error_if_nonfinite=True reads it to raise on inf/NaN."""
    pairs = _with_grads(parameters)
    if not pairs:
        return Tensor.zeros(())
    grads = [g.float() for _, g in pairs]
    if math.isinf(norm_type):
        total = Tensor.stack(*[g.abs().max() for g in grads]).max()
    else:
        total = Tensor.stack(*[(g.abs() ** norm_type).sum() for g in grads]).sum() ** (1 / norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           f"gradients is non-finite ({total.item()})")
    scale = (max_norm / (total + 1e-6)).minimum(1.0)
    for p, g in pairs:
        p.grad = (g * scale.cast(g.dtype)).detach()
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient into [-clip_value, clip_value]."""
    for p, g in _with_grads(parameters):
        p.grad = g.clip(-clip_value, clip_value)
