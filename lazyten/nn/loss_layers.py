"""Loss layers in PyTorch's module spelling, each holding its settings (checked at
construction) and calling the functional loss (nn/functional.py, nn/functional_losses.py).
A `weight` or `pos_weight` tensor is a buffer, named as PyTorch names it, so it is saved in
the state dict. CrossEntropyLoss and MSELoss are in nn/stateless.py.
"""
from __future__ import annotations

from lazyten.nn import functional as F
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["NLLLoss", "L1Loss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss",
           "KLDivLoss", "SoftMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss",
           "PoissonNLLLoss", "GaussianNLLLoss", "CosineEmbeddingLoss", "TripletMarginLoss",
           "MultiLabelSoftMarginLoss"]


class _Loss(Module):
    """A loss with a reduction ('mean', 'sum' or 'none'; the legacy size_average/reduce
    flags pick it when given, as PyTorch)."""
    reductions: tuple[str, ...] = ("mean", "sum", "none")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        reduction = F._reduction(size_average, reduce, reduction)
        if reduction not in self.reductions:
            raise ValueError(f"{type(self).__name__}: reduction must be one of "
                             f"{self.reductions}, got {reduction!r}")
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities (N, C, ...) at class indices."""

    def __init__(self, weight: Tensor | None = None, size_average=None,
                 ignore_index: int = -100, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class L1Loss(_Loss):
    """|input - target|."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class BCELoss(_Loss):
    """Binary cross entropy of probabilities, optionally weighted per element."""

    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.weight = weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits; pos_weight scales the positive term per class."""

    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None,
                 reduction: str = "mean", pos_weight: Tensor | None = None):
        super().__init__(size_average, reduce, reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """0.5 d^2 where |d| < delta, else delta * (|d| - 0.5 delta)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities from the target; reduction 'batchmean' too."""
    reductions = ("mean", "sum", "none", "batchmean")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class SoftMarginLoss(_Loss):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class _MarginLoss(_Loss):
    default_margin = 0.0

    def __init__(self, margin: float | None = None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = self.default_margin if margin is None else margin


class MarginRankingLoss(_MarginLoss):
    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.margin_ranking_loss(input1, input2, target, self.margin,
                                     reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    default_margin = 1.0

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_MarginLoss):
    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.cosine_embedding_loss(input1, input2, target, self.margin,
                                       reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average=None,
                 eps: float = 1e-8, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input: Tensor, target: Tensor, var) -> Tensor:
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps,
                                     self.swap, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.weight = weight

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.multilabel_soft_margin_loss(input, target, self.weight,
                                             reduction=self.reduction)
