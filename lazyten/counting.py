"""Counting Tensor methods with PyTorch's names: bincount, histc, unique. Mixed into Tensor.

A count by value is a one-hot sum into rows: bin v sums the weights of the elements whose
bin is v, `SUM_t where(bin(t) == range(v), w(t), 0)`, which a loop target runs as a
scatter (one add per element, D153) and a GPU as the one-hot sum. Where PyTorch's result
has a length the data decides (bincount's largest value, histc's range when min == max,
unique's distinct values), the input is realized first, as nonzero does.
"""
from __future__ import annotations

import numpy as np

from codegen.dtypes import dtypes
from lazyten.errors import ArgumentError, DTypeError, ShapeError
from lazyten.mixin import TensorMixin


class CountingMixin(TensorMixin):
    """bincount, histc, unique."""

    def _counted(self, bins, n: int, weights=None, dtype=None):
        """SUM over the elements of `weights` (else 1) where `bins` (int64, one per element;
        outside [0, n) counts nowhere) is v, for v in [0, n)."""
        tensor_type = type(self)
        hits = bins.reshape(-1, 1) == tensor_type.arange(n, device=self.device).reshape(1, n)
        if weights is None:
            ones = tensor_type.full((1, 1), 1, dtype=dtype, device=self.device)
            return hits.where(ones, 0).sum(axis=0)
        return hits.where(weights.reshape(-1, 1), 0).sum(axis=0)

    def bincount(self, weights=None, minlength: int = 0):
        """PyTorch's bincount: how often each value 0..max occurs in this 1-d tensor of
        non-negative integers (length max(max + 1, minlength)); with `weights` (a tensor of
        this shape) their sums instead, as float64 for integer weights as PyTorch. Realizes
        the largest value (it decides the length); a negative value raises ValueError."""
        if self.ndim != 1 or not self.dtype.is_int:
            raise DTypeError(f"bincount: needs a 1-d integer tensor, got {self.dtype.name} of "
                             f"shape {self.shape}")
        if isinstance(minlength, bool) or not isinstance(minlength, int) or minlength < 0:
            raise ArgumentError(f"bincount: minlength must be a non-negative int, got {minlength!r}")
        if weights is not None and (not isinstance(weights, type(self)) or
                                    weights.shape != self.shape):
            got = weights.shape if isinstance(weights, type(self)) else type(weights).__name__
            raise ShapeError(f"bincount: weights must be a tensor of shape {self.shape}, got {got}")
        n = minlength
        if self.shape[0]:
            low, high = (int(v) for v in _extremes(self))
            if low < 0:
                raise ValueError(f"bincount: values must be non-negative, got {low}")
            n = max(n, high + 1)
        if weights is not None and weights.dtype != dtypes.float32:
            weights = weights.cast(dtypes.float64)  # as PyTorch: float32 stays, else float64
        return self._counted(self.cast(dtypes.int64), n, weights, dtype=dtypes.int64)

    def histc(self, bins: int = 100, min=0, max=0):  # noqa: A002 (PyTorch's names)
        """PyTorch's histc: counts of the elements in `bins` equal-width bins over [min,
        max] (a value equal to max in the last bin; values outside or NaN counted nowhere),
        of this tensor's float dtype. min == max takes the data's range (realized)."""
        if not self.dtype.is_float:
            raise DTypeError(f"histc: needs a floating point tensor, got {self.dtype.name}")
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise ArgumentError(f"histc: bins must be a positive int, got {bins!r}")
        low, high = float(min), float(max)
        if low > high:
            raise ArgumentError(f"histc: max ({high}) must be at least min ({low})")
        if low == high and self.numel():
            low, high = (float(v) for v in _extremes(self))
        if low == high:  # PyTorch widens an empty range by one on each side
            low, high = low - 1, high + 1
        x = self.reshape(-1)
        # as PyTorch rounds: (x - min) * bins / (max - min), truncated; max in the last bin
        step = ((x - low) * bins / (high - low)).cast(dtypes.int64)
        inside = (x >= low) & (x <= high)
        bin_of = inside.where(step.clip(0, bins - 1), -1)
        return self._counted(bin_of, bins, dtype=self.dtype)

    def unique(self, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
               return_counts: bool = False, dim=None):
        """PyTorch's unique over all elements: the distinct values in ascending order, and
        with `return_inverse` each element's position among them (this tensor's shape),
        with `return_counts` how often each occurs. Realizes this tensor (the values decide
        the length); not differentiable, as PyTorch's."""
        if dim is not None:
            raise ArgumentError("unique: dim is not supported (unique over all elements only)")
        tensor_type = type(self)
        values, inverse, counts = np.unique(self.numpy(), return_inverse=True,
                                            return_counts=True)
        out = [tensor_type(values, device=self.device, dtype=self.dtype)]
        if return_inverse:
            out.append(tensor_type(inverse.reshape(self.shape).astype(np.int64), device=self.device))
        if return_counts:
            out.append(tensor_type(counts.astype(np.int64), device=self.device))
        return out[0] if len(out) == 1 else tuple(out)


def _extremes(t) -> tuple:
    """(min, max) of a non-empty tensor, realized."""
    return t.min().item(), t.max().item()
