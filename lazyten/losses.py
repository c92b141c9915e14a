"""Loss functions as Tensor methods, with PyTorch's semantics: (input, target) -> a loss.

Class labels pick their log-probability through a one-hot comparison (no gather op);
`weight` rescales classes and the weighted mean divides by the summed weights of the
targets that count (those not equal to `ignore_index`), as PyTorch's does. The class dim
is 1 for (N, C, d1, ...) inputs and 0 for a (C,) input. Mixed into Tensor.
"""
from __future__ import annotations
from codegen.dtypes import dtypes
from lazyten.autograd.crossentropy import SparseCrossEntropy
from lazyten.errors import ShapeError
from lazyten.index_check import check_index
from lazyten.mixin import TensorMixin

REDUCTIONS = ("mean", "sum", "none")


def _reduce_loss(loss, reduction: str):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _class_last(x, target, op: str):
    """(N, C, d1, ...) -> (N, d1, ..., C) (a (C,) input stays); checks target's shape."""
    cdim = 1 if x.ndim >= 2 else 0
    if x.ndim == 0:
        raise ValueError(f"{op} needs an input with a class dim, got shape {x.shape}")
    expected = x.shape[:cdim] + x.shape[cdim + 1:]
    if target.shape != expected:
        raise ShapeError(f"{op}: target shape {target.shape} does not fit input {x.shape} "
                         f"(expected {expected})")
    if target.dtype.is_float or target.dtype == dtypes.bool:
        raise TypeError(f"{op}: class-index targets must be integers, got {target.dtype.name}")
    if x.ndim <= 2:
        return x
    return x.permute([0] + list(range(2, x.ndim)) + [1])


def _nll_terms(logp, target, weight, ignore_index: int, op: str):
    """-w[t] * logp[t] per target (0 where ignored) and w[t] (0 where ignored)."""
    classes = logp.shape[-1]
    if weight is not None and weight.shape != (classes,):
        raise ShapeError(f"{op}: weight of shape {weight.shape} does not fit {classes} classes")
    keep = target != ignore_index
    safe = keep.where(target, 0)
    onehot = safe.unsqueeze(-1) == type(logp).arange(classes, device=logp.device)
    onehot = check_index(onehot, safe, classes, f"{op} class label")
    picked = onehot.where(logp, 0).sum(-1)
    if weight is None:
        w_t = keep.cast(logp.dtype)
        return keep.where(-picked, 0), w_t
    w_t = keep.where(onehot.where(weight.cast(logp.dtype), 0).sum(-1), 0)
    return keep.where(-picked * w_t, 0), w_t


def _one_function(logits, target, weight, reduction: str) -> bool:
    """Whether the loss is one Function (autograd/crossentropy.py): unweighted, class-last
    float32/64 logits, integer labels that int64 holds exactly, something to compute. The
    rest (weights, 16-bit logits, uint64 labels) is built from Tensor ops, below."""
    return (weight is None and logits.ndim >= 1 and logits.dtype in _FUSED_FLOATS
            and target.dtype in _FUSED_LABELS and logits.numel() > 0
            and reduction in REDUCTIONS)


_FUSED_FLOATS = (dtypes.float32, dtypes.float64)
_FUSED_LABELS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                 dtypes.uint16, dtypes.uint32)


def _weighted(loss, w_t, reduction: str):
    """PyTorch's rule: a weighted mean divides by the weights of the counted targets."""
    if reduction == "mean":
        return loss.sum() / w_t.sum()
    return _reduce_loss(loss, reduction)


class LossMixin(TensorMixin):
    """Loss functions."""

    def nll_loss(self, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        """PyTorch's nll_loss of log-probabilities (N, C, ...) against class indices."""
        logp = _class_last(self, target, "nll_loss")
        loss, w_t = _nll_terms(logp, target, weight, ignore_index, "nll_loss")
        return _weighted(loss, w_t, reduction)

    def cross_entropy(self, target, weight=None, ignore_index: int = -100,
                      reduction: str = "mean", label_smoothing: float = 0.0):
        """PyTorch's cross_entropy of logits (N, C, ...): class-index or probability targets."""
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        cdim = 1 if self.ndim >= 2 else 0
        if target.dtype.is_float and target.shape == self.shape:  # class probabilities
            classes = self.shape[cdim]
            target = target * (1 - label_smoothing) + label_smoothing / classes
            if weight is not None:
                target = target * weight.reshape((classes,) + (1,) * (self.ndim - cdim - 1))
            return _reduce_loss(-(target * self.log_softmax(cdim)).sum(cdim), reduction)
        logits = _class_last(self, target, "cross_entropy")
        if _one_function(logits, target, weight, reduction):
            return logits.apply(SparseCrossEntropy, target, ignore_index=ignore_index,
                                smoothing=label_smoothing, reduction=reduction,
                                op="cross_entropy class label", tensor=type(self))
        logp = _class_last(self.log_softmax(cdim), target, "cross_entropy")
        loss, w_t = _nll_terms(logp, target, weight, ignore_index, "cross_entropy")
        if label_smoothing:  # only then: a -inf logit makes the smoothing term inf
            keep = target != ignore_index
            w = logp if weight is None else logp * weight.cast(logp.dtype)
            smooth = keep.where(-w.sum(-1) / logp.shape[-1], 0)
            loss = (1 - label_smoothing) * loss + label_smoothing * smooth
        return _weighted(loss, w_t, reduction)

    def sparse_categorical_crossentropy(self, target, label_smoothing: float = 0.0,
                                        reduction: str = "mean", ignore_index: int = -100):
        """Cross entropy of logits (..., C) against integer class labels (...,). Labels equal
        to `ignore_index` add nothing and the mean divides by the others' count (all ignored:
        NaN), as PyTorch's CrossEntropyLoss."""
        if target.shape != self.shape[:-1]:
            raise ShapeError(f"labels of shape {target.shape} do not match logits {self.shape}")
        if _one_function(self, target, None, reduction):
            return self.apply(SparseCrossEntropy, target, ignore_index=ignore_index,
                              smoothing=label_smoothing, reduction=reduction,
                              op="cross entropy class label", tensor=type(self))
        logp = self.log_softmax(-1)
        keep = target != ignore_index
        target = keep.where(target, 0)
        onehot = (target.unsqueeze(-1) == type(self).arange(self.shape[-1], device=self.device))
        onehot = check_index(onehot, target, self.shape[-1], "cross entropy class label")
        loss = -(onehot.where(logp, 0)).sum(-1)
        if label_smoothing:  # only then: a -inf logit makes the mean -inf, and 0 * inf is NaN
            loss = (1 - label_smoothing) * loss - label_smoothing * logp.mean(-1)
        loss = keep.where(loss, 0)
        if reduction == "mean":
            return loss.sum() / keep.sum().cast(loss.dtype)
        return _reduce_loss(loss, reduction)

    def binary_crossentropy(self, target, reduction: str = "mean"):
        """-(t log x + (1 - t) log(1 - x)) with each log clamped to >= -100, as PyTorch's
        (so x = 0 or 1 exactly gives PyTorch's loss, not a clamp's own). The gradient is
        the log's, 1/x, for x >= 1e-12, and 0 below it, so it stays finite."""
        def clamped_log(p):
            value = p.log().maximum(-100).detach()
            slope = p.clip(1e-12, None).log()
            return value + (slope - slope.detach())
        loss = -(target * clamped_log(self) + (1 - target) * clamped_log(1 - self))
        return _reduce_loss(loss, reduction)

    def binary_crossentropy_logits(self, target, reduction: str = "mean", pos_weight=None):
        """BCE of logits; `pos_weight` scales the positive term (broadcast over the class
        dim, as PyTorch's BCEWithLogitsLoss). log1p(e^-|x|) keeps its relative precision
        where it is the whole loss (log(1 + e^-|x|) made a confident right answer's loss 0)."""
        tail = (-self.abs()).exp().log1p()
        if pos_weight is None:  # max(x, 0) - x t + log1p(e^-|x|): no term cancels another
            loss = self.maximum(0) - self * target + tail
        else:  # (1 - t) softplus(x) + pw t softplus(-x): (1 - t) x + ... cancelled for x << 0
            loss = (1 - target) * (self.maximum(0) + tail) + \
                pos_weight * target * ((-self).maximum(0) + tail)
        return _reduce_loss(loss, reduction)

    def mse(self, target, reduction: str = "mean"):
        return _reduce_loss((self - target).square(), reduction)

    def l1_loss(self, target, reduction: str = "mean"):
        """Mean (or sum) absolute difference, PyTorch's l1_loss."""
        return _reduce_loss((self - target).abs(), reduction)
