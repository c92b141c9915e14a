"""torch.nn.functional's losses beyond nn/functional.py's (which forward to losses.py):
smooth_l1, huber, kl_div, the margin and embedding losses, poisson and gaussian NLL, each a
few Tensor ops with PyTorch's argument names, order, defaults and reductions. Also the
legacy size_average/reduce mapping that every loss shares. Re-exported by nn/functional.py.
"""
from __future__ import annotations
import math

from lazyten.losses import _reduce_loss
from lazyten.nn.functional_act import pairwise_distance
from lazyten.tensor import Tensor

__all__ = ["smooth_l1_loss", "huber_loss", "kl_div", "soft_margin_loss",
           "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss",
           "gaussian_nll_loss", "cosine_embedding_loss", "triplet_margin_loss",
           "multilabel_soft_margin_loss"]


def _reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's legacy_get_string: the deprecated flags, when given, pick the reduction."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target)."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss needs beta >= 0, got {beta}")
    d = (input - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta)."""
    if delta <= 0:
        raise ValueError(f"huber_loss needs delta > 0, got {delta}")
    d = (input - target).abs()
    loss = (d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce_loss(loss * weight if weight is not None else loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """target * (log(target) - input), input holding log-probabilities (0 where target is
    0); log_target: the target holds log-probabilities too. 'batchmean' divides the sum by
    the batch size (dim 0), 'mean' by the element count, as PyTorch."""
    reduction = _reduction(size_average, reduce, reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        xlogy = target * positive.where(target, 1).log()
        loss = xlogy - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce_loss(loss, reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target * input)), targets +-1."""
    return _reduce_loss((-target * input).softplus(), _reduction(size_average, reduce, reduction))


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                        size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, -target * (input1 - input2) + margin)."""
    loss = (-target * (input1 - input2) + margin).maximum(0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average=None,
                         reduce=None, reduction: str = "mean") -> Tensor:
    """input where target is 1, max(0, margin - input) where it is -1 (PyTorch's sum of
    the two terms, so other target values get both)."""
    hinge = (target != 1).where((margin - input).maximum(0), 0)
    loss = hinge + (target != -1).where(input, 0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean") -> Tensor:
    """exp(input) - target * input (log_input), or input - target * log(input + eps); full
    adds Stirling's target * log(target) - target + 0.5 log(2 pi target) where target > 1."""
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        safe = (target > 1).where(target, 1)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + (target > 1).where(stirling, 0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """0.5 * (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) with full). var is
    clamped to eps for the value only (its gradient passes unclamped, as PyTorch's clamp
    under no_grad); a var missing input's last dim is broadcast over it."""
    v = var if isinstance(var, Tensor) else \
        Tensor.full(input.shape, float(var), dtype=input.dtype, device=input.device)
    if v.shape != input.shape:
        if v.shape == input.shape[:-1]:
            v = v.unsqueeze(-1)
        elif not (v.shape[:-1] == input.shape[:-1] and v.shape[-1:] == (1,)):
            raise ValueError(f"gaussian_nll_loss: var of shape {v.shape} does not fit "
                             f"input {input.shape}")
    v = v + (v.clamp(min=eps) - v).detach()
    loss = 0.5 * (v.log() + (input - target).square() / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce_loss(loss, reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                          size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1;
    cos along dim 1 (dim 0 for 1-d inputs), each squared norm + 1e-12 as PyTorch."""
    dim = 1 if input1.ndim == 2 else 0
    dot = (input1 * input2).sum(dim)
    mags = ((input1 * input1).sum(dim) + 1e-12) * ((input2 * input2).sum(dim) + 1e-12)
    cos = dot / mags.sqrt()
    loss = (target == 1).where(1 - cos, 0) + (target == -1).where((cos - margin).maximum(0), 0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor,
                        margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0), d the pairwise p-norm distance; swap uses
    min(d(a, n), d(p, n))."""
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    loss = (margin + d_pos - d_neg).maximum(0)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                size_average=None, reduce=None,
                                reduction: str = "mean") -> Tensor:
    """Binary cross entropy of each class's logit, averaged over the classes (last dim)."""
    loss = -(target * input.logsigmoid() + (1 - target) * (-input).logsigmoid())
    if weight is not None:
        loss = loss * weight
    loss = loss.mean(-1)
    return _reduce_loss(loss, _reduction(size_average, reduce, reduction))
