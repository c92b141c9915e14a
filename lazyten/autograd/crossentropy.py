"""Cross entropy of logits against class labels as one Function, in LazyBuffer ops.

Built from Tensor ops, the loss was about 14 Functions (log_softmax, the label compare,
the one-hot pick, the ignored labels, the mean) and as many backward steps, on every
training step. Here the forward applies the LazyBuffer ops those Tensor ops applied, and
the backward is the closed form PyTorch uses: for a row with label t, weight w (the
upstream gradient, divided by the count of labels that count for a mean, 0 for an
ignored label) and smoothing s over C classes,

    d loss / d logits = w * (softmax(logits) - (1 - s) * onehot(t) - s / C).

`tensor` is the Tensor class (for its `arange`, whose uploaded ranges are cached).
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.autograd.special import _exp, _log, _minus, _sum
from lazyten.index_check import attach_check
from lazyten.lazy import LazyBuffer


class SparseCrossEntropy(Function):
    """loss(x (..., C) float32/64 logits, target (...) integer labels) -> the loss, reduced by
    `reduction` ("mean": over the labels not equal to `ignore_index`, NaN if none; "sum";
    "none": shape (...)). A label outside [0, C) raises IndexError when realized. Traced
    (D80): a call is one graph node forward (with its label check) and one backward."""
    traced = True

    def forward(self, x: LazyBuffer, target: LazyBuffer, ignore_index: int = -100,
                smoothing: float = 0.0, reduction: str = "mean", op: str = "", tensor=None):
        rows, classes = target.shape, x.shape[-1]
        target = target.cast(dtypes.int64)  # exact for the label dtypes losses.py sends
        axis = (len(x.shape) - 1,)
        self.smoothing, self.reduction = smoothing, reduction
        shifted = _minus(x, x.r(ReduceOps.MAX, axis))  # log_softmax, as Softmax builds it
        self.logp = _minus(shifted, _log(_sum(_exp(shifted), axis)))
        self.keep = target.e(BinaryOps.CMPNE, target.const(ignore_index))
        safe = self.keep.e(TernaryOps.WHERE, target, target.const(0))
        labels = safe.reshape(rows + (1,)).expand(x.shape)
        arange = tensor.arange(classes, device=x.device).lazydata
        other = labels.e(BinaryOps.CMPNE, arange.reshape((1,) * len(rows) + (classes,))
                         .expand(x.shape))
        self.onehot = other.e(BinaryOps.XOR, other.const(True))
        attach_check(self.onehot, safe, classes, op, 0)
        picked = self.onehot.e(TernaryOps.WHERE, self.logp, x.const(0.0)).r(ReduceOps.SUM, axis)
        loss = picked.e(UnaryOps.NEG)
        if smoothing:  # only then: a -inf logit makes the mean -inf, and 0 * inf is NaN
            mean = self.logp.r(ReduceOps.SUM, axis).e(BinaryOps.MUL, loss.const(1 / classes))
            loss = loss.e(BinaryOps.MUL, loss.const(1 - smoothing)).e(
                BinaryOps.ADD, mean.e(BinaryOps.MUL, mean.const(-smoothing)))
        zero = LazyBuffer.const_like(0.0, rows, x.dtype, x.device)
        loss = self.keep.e(TernaryOps.WHERE, loss.reshape(rows), zero)
        if reduction == "none":
            return loss
        everything = tuple(range(len(rows)))
        total_loss = loss.r(ReduceOps.SUM, everything).reshape(())
        if reduction == "sum":
            return total_loss
        self.count = self.keep.cast(dtypes.int64).r(ReduceOps.SUM, everything).reshape(()) \
            .cast(x.dtype)
        return total_loss.e(BinaryOps.FDIV, self.count)

    def backward(self, grad: LazyBuffer):
        rows, shape = self.keep.shape, self.logp.shape
        if self.reduction == "mean":
            grad = grad.e(BinaryOps.FDIV, self.count)
        if self.reduction != "none":
            grad = grad.reshape((1,) * len(rows)).expand(rows) if rows else grad
        weight = self.keep.e(TernaryOps.WHERE, grad, grad.const(0.0))
        s, classes = self.smoothing, shape[-1]
        aimed = self.onehot.e(TernaryOps.WHERE, self.logp.const(1 - s + s / classes),
                              self.logp.const(s / classes))
        probs = _exp(self.logp)
        return (_minus(probs, aimed).e(BinaryOps.MUL, weight.reshape(rows + (1,)).expand(shape)),
                None)

