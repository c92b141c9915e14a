"""Reduction Tensor methods: sum/max and everything built on them (mean, var, softmax,
argmax, prod, cumsum...). Reductions take `axis=` (int, tuple or None) and `keepdim=`.
Mixed into Tensor.
"""
from __future__ import annotations
import operator

from codegen.dtypes import dtypes
from codegen.helpers import prod
from lazyten import function as F


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, checked fast
        return (axis % ndim,)
    if hasattr(axis, "__index__"):
        axes = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
    out = []
    for a in axes:
        if not hasattr(a, "__index__") or isinstance(a, bool):
            raise TypeError(f"axis must be an int or a tuple of ints, got {axis!r}")
        a = operator.index(a)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"axis {a} is out of range for a tensor with {ndim} dims")
        out.append(a % max(ndim, 1) if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(out)) if ndim else ()


class ReduceMixin:
    """Reductions and the functions built on them."""

    def _reduce(self, fn, axis, keepdim: bool):
        axes = _axes(axis, self.ndim)
        if not axes:
            return self._same()
        if keepdim:
            shape = tuple([1 if i in axes else s for i, s in enumerate(self.shape)])
        else:
            shape = tuple([s for i, s in enumerate(self.shape) if i not in axes])
        return self.apply(fn, axis=axes, shape=shape)

    def sum(self, axis=None, keepdim: bool = False, dtype=None):
        """Sum; bool and integer tensors sum in int64 as PyTorch does. float16 sums
        accumulate in float32 (also across the stages of a split reduce) and round once."""
        x = self
        if dtype is not None:
            x = x.cast(dtype)
        elif not x.dtype.is_float:
            x = x.cast(dtypes.int64)
        if x.dtype == dtypes.float16:
            return x.float()._reduce(F.Sum, axis, keepdim).half()
        return x._reduce(F.Sum, axis, keepdim)

    def max(self, axis=None, keepdim: bool = False):
        if self.numel() == 0 and (axis is None or any(self.shape[a] == 0 for a in _axes(axis, self.ndim))):
            raise ValueError(f"max of an empty tensor of shape {self.shape} along axis {axis}")
        return self._reduce(F.Max, axis, keepdim)

    def min(self, axis=None, keepdim: bool = False):
        if self.dtype == dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if self.dtype.is_int:
            return ~((~self).max(axis, keepdim))
        return -((-self).max(axis, keepdim))

    amax, amin = max, min

    def mean(self, axis=None, keepdim: bool = False):
        """Mean; float16 is summed and divided in float32 (a float16 sum of 65,520 ones
        is already inf) and rounded once."""
        x = self if self.dtype.is_float else self.float()
        if x.dtype == dtypes.float16:
            return x.float().mean(axis, keepdim).half()
        count = prod(s for i, s in enumerate(self.shape) if i in _axes(axis, self.ndim))
        total = x.sum(axis, keepdim)
        return total / count if count else total * float("nan")

    def var(self, axis=None, keepdim: bool = False, correction: int = 1):
        x = self if self.dtype.is_float else self.float()
        count = prod(s for i, s in enumerate(self.shape) if i in _axes(axis, self.ndim))
        squares = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return squares / max(count - correction, 0) if count - correction > 0 else squares * float("nan")

    def std(self, axis=None, keepdim: bool = False, correction: int = 1):
        """sqrt(var). Where the variance is 0 the gradient is 0, as PyTorch's std gives
        (sqrt's own would be inf * 0 = nan); sqrt reads 1 there so its backward stays finite."""
        var = self.var(axis, keepdim, correction)
        zero = var == 0
        return zero.where(0.0, zero.where(1.0, var).sqrt())

    def prod(self, axis=None, keepdim: bool = False):
        """Product by pairwise multiplication (exact for integers), log2(n) view steps."""
        axes = _axes(axis, self.ndim)
        if self.dtype == dtypes.float16:  # multiplied in float32, rounded once
            return self.float().prod(axis, keepdim).half()
        x = self if self.dtype.is_float else self.cast(dtypes.int64)
        rest = [i for i in range(self.ndim) if i not in axes]
        n = prod(self.shape[a] for a in axes)
        x = x.permute(rest + list(axes)).reshape(tuple(self.shape[i] for i in rest) + (n,))
        while x.shape[-1] > 1:
            half = (x.shape[-1] + 1) // 2
            x = x.pad([(0, 0)] * (x.ndim - 1) + [(0, 2 * half - x.shape[-1])], value=1)
            x = x.reshape(x.shape[:-1] + (2, half))
            x = x[..., 0, :] * x[..., 1, :]
            # keep each kernel's expression tree small; and with a gradient, store every
            # level: the backward of level k reads its sibling products, and recomputing
            # them inside each gradient kernel made a 9 x 9 prod's backward take 30 s
            if half > 64 or (x.requires_grad and not type(self).no_grad):
                x = x.apply(F.Materialize)
        if x.shape[-1] == 0:
            x = x.ones_like().pad([(0, 0)] * (x.ndim - 1) + [(0, 1)], value=1)
        out = x.reshape(x.shape[:-1])
        if keepdim:
            out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))
        return out

    def _arg(self, axis, keepdim: bool, largest: bool):
        """Index of the first maximum (or minimum); NaN counts as the extreme, as numpy."""
        x = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self
        if not largest:  # order-reversing and exact: ~ for integers, negation for floats
            x = -x if x.dtype.is_float else ~x
        if axis is None:
            out = x.flatten()._arg(0, keepdim=False, largest=True)
            return out.reshape((1,) * self.ndim) if keepdim else out
        axis = _axes(axis, self.ndim)
        if not axis:  # a 0-d tensor
            return type(self).zeros((), dtype=dtypes.int64, device=self.device)
        axis = axis[0]
        n = self.shape[axis]
        if n == 0:
            raise ValueError(f"argmax/argmin of an empty dim {axis} of shape {self.shape}")
        # x is compared with its maximum in another kernel: both must read the same values
        x = type(self)._wrap(F.stable_values(x.lazydata))
        best = x.max(axis, keepdim=True)
        hit = (x == best) | x.isnan() if x.dtype.is_float else x == best
        count_down = type(self).arange(n, 0, -1, device=self.device).reshape(
            (n,) + (1,) * (self.ndim - axis - 1))
        first = hit.where(count_down, 0).max(axis, keepdim=keepdim)
        return (n - first).cast(dtypes.int64)

    def argmax(self, axis=None, keepdim: bool = False):
        return self._arg(axis, keepdim, True)

    def argmin(self, axis=None, keepdim: bool = False):
        return self._arg(axis, keepdim, False)

    def logsumexp(self, axis=None, keepdim: bool = False):
        if not self.dtype.is_float:  # as PyTorch; x - max(x) in integers would wrap
            return self.float().logsumexp(axis, keepdim)
        m = self.detach().max(axis, keepdim=True)  # a shift only: no gradient, no saved input
        m = m.isinf().where(0, m)  # all -inf rows: avoid inf - inf
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.reshape(
            tuple(s for i, s in enumerate(self.shape) if i not in _axes(axis, self.ndim)))

    def softmax(self, axis: int = -1):
        x = self._float()
        e = (x - x.detach().max(axis, keepdim=True)).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1):
        x = self._float()
        shifted = x - x.detach().max(axis, keepdim=True)
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def cumsum(self, axis: int = 0):
        """Running sum: a lower-triangular mask over an expanded view, reduced once."""
        axis = _axes(axis, self.ndim)[0] if self.ndim else 0
        if self.ndim == 0:
            return self._same()
        n = self.shape[axis]
        x = self if self.dtype.is_float else self.cast(dtypes.int64)
        moved = x.transpose(axis, -1) if axis != self.ndim - 1 else x
        tensor_type = type(self)
        rows = tensor_type.arange(n, device=self.device).reshape(n, 1)
        cols = tensor_type.arange(n, device=self.device).reshape(1, n)
        tri = cols <= rows  # (n, n): output i sums inputs j <= i
        out = tri.where(moved.unsqueeze(-2), 0).sum(-1)
        return out.transpose(axis, -1) if axis != self.ndim - 1 else out

    # ---- logical reductions (bool results; `dim=` is PyTorch's name for `axis=`) ----
    def any(self, axis=None, keepdim: bool = False, dim=None):
        """Whether any element (along axis) is nonzero; False for an empty reduction."""
        return (self != 0).sum(_axis_or_dim(axis, dim), keepdim) > 0

    def all(self, axis=None, keepdim: bool = False, dim=None):
        """Whether every element (along axis) is nonzero; True for an empty reduction."""
        return (self == 0).sum(_axis_or_dim(axis, dim), keepdim) == 0


def _axis_or_dim(axis, dim):
    if axis is not None and dim is not None:
        raise TypeError(f"give axis= or dim=, not both (got axis={axis}, dim={dim})")
    return dim if axis is None else axis
