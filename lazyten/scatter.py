"""Writes by index (scatter, scatter_reduce, max_unpool2d), masked_select and Tensor.unfold;
mixed into Tensor.

Like gather, a scatter along `dim` is a one-hot comparison: write i of the index lands on
position k where index[.., i, ..] == k (an (m, n) plane per line along dim), and each
position combines the writes that land on it with a reduction over i. An index outside
[0, n) raises IndexError when the result is realized (index_check.py).
"""
from __future__ import annotations
import math

import numpy as np

from codegen.dtypes import dtypes
from lazyten.dims import norm_dim
from lazyten.elementwise import broadcast_shape
from lazyten.errors import ArgumentError, DTypeError, ShapeError
from lazyten.index_check import as_index, check_index
from lazyten.mixin import TensorMixin
from lazyten.nnops import _windows

REDUCES = ("sum", "prod", "mean", "amax", "amin")
OLD_REDUCES = {"add": "sum", "multiply": "prod"}  # scatter(reduce=...)


def _lowest(dtype, largest: bool):
    """The identity of max (largest=False) or min (largest=True) for dtype."""
    if dtype.is_float:
        return math.inf if largest else -math.inf
    info = np.iinfo(np.dtype(dtype.name if dtype.name != "bool" else "int8"))
    return int(info.max if largest else info.min)


class ScatterMixin(TensorMixin):
    """scatter, scatter_reduce, masked_select, unfold, max_unpool2d."""

    def _scatter_writes(self, op: str, dim: int, index, src):
        """(dim, hits, values, order): hits (bool) and values of shape self.shape[:dim] +
        (m, n) + self.shape[dim + 1:], write i (of m) landing on position k (of n); order
        is arange(m) shaped to broadcast against them."""
        tensor_type = type(self)
        dim = norm_dim(dim, self.ndim, "dim")
        if not isinstance(index, tensor_type) or index.dtype.is_float or \
                index.dtype == dtypes.bool:
            got = index.dtype.name if isinstance(index, tensor_type) else type(index).__name__
            raise DTypeError(f"{op}: index must be an integer tensor, got {got}")
        if not isinstance(src, tensor_type):
            src = tensor_type.full(index.shape, src, dtype=self.dtype, device=self.device)
        elif src.dtype != self.dtype:
            raise DTypeError(f"{op}: src dtype {src.dtype.name} must match self's "
                             f"{self.dtype.name}")
        if index.ndim != self.ndim or src.ndim != self.ndim:
            raise ShapeError(f"{op}: self {self.shape}, index {index.shape} and src "
                             f"{src.shape} must have the same number of dims")
        for d, (i, s, x) in enumerate(zip(index.shape, src.shape, self.shape)):
            if i > s or (d != dim and i > x):
                raise ShapeError(f"{op}: index shape {index.shape} exceeds src {src.shape} "
                                 f"or self {self.shape} at dim {d}")
        n, m, nd = self.shape[dim], index.shape[dim], self.ndim
        at = (1,) * (dim + 1) + (n,) + (1,) * (nd - dim - 1)
        positions = tensor_type.arange(n, device=self.device).reshape(at)
        hits = as_index(index).unsqueeze(dim + 1) == positions
        hits = check_index(hits, index, n, f"{op} along dim {dim}")
        values = src.shrink([(0, i) for i in index.shape]).unsqueeze(dim + 1)
        values = values.expand(values.shape[:dim + 1] + (n,) + values.shape[dim + 2:])
        pad = [(0, x - i) for x, i in zip(self.shape, index.shape)]
        pad = pad[:dim] + [(0, 0), (0, 0)] + pad[dim + 1:]
        order = tensor_type.arange(m, device=self.device)
        order = order.reshape((1,) * dim + (m,) + (1,) * (nd - dim))
        return dim, hits.pad(pad), values.pad(pad), order

    def scatter(self, dim: int, index, src=None, reduce: str | None = None, value=None):
        """out[.., index[.., i, ..], ..] = src[.., i, ..] along dim (PyTorch's scatter): src a
        tensor or a number (`value=`). Where an index repeats, the write latest along dim
        wins (PyTorch leaves the order undefined), and only it receives src's gradient;
        overwritten positions of self get none. reduce="add"/"multiply" combine instead."""
        src = value if src is None else src
        if src is None:
            raise TypeError("scatter: give src (a tensor or number) or value=")
        if reduce is not None:
            if reduce not in OLD_REDUCES:
                raise ArgumentError(f"scatter: reduce must be 'add' or 'multiply', "
                                    f"got {reduce!r}")
            return self.scatter_reduce(dim, index, src, OLD_REDUCES[reduce])
        x = self.cast(dtypes.int32) if self.dtype == dtypes.bool else self
        if isinstance(src, type(self)) and self.dtype == dtypes.bool and src.dtype == dtypes.bool:
            src = src.cast(x.dtype)
        dim, hits, values, order = x._scatter_writes("scatter", dim, index, src)
        last = hits.where(order, -1).amax(axis=dim, keepdim=True)
        winner = hits & (order == last)
        picked = winner.where(values, 0).sum(axis=dim).cast(x.dtype)
        out = (last >= 0).squeeze(dim).where(picked, x)
        return out.cast(self.dtype) if out.dtype != self.dtype else out

    def scatter_add(self, dim: int, index, src):
        """PyTorch's scatter_add: self plus the src values written to each position."""
        return self.scatter_reduce(dim, index, src, "sum")

    def index_add(self, dim: int, index, source, *, alpha=1):
        """PyTorch's index_add: self plus alpha * source[.., i, ..] added to position
        index[i] along dim, for each i (an index that repeats adds each time); index is a
        1-d integer tensor (or list) as long as source along dim. An index outside
        [0, size) raises IndexError when the result is realized."""
        tensor_type = type(self)
        dim = norm_dim(dim, self.ndim, "index_add: dim") if self.ndim else 0
        if not isinstance(index, tensor_type):
            index = tensor_type(index, device=self.device)
        if not index.dtype.is_int or index.ndim > 1:
            raise DTypeError(f"index_add: index must be a 0-d or 1-d integer tensor, got "
                             f"{index.dtype.name} of shape {index.shape}")
        if not isinstance(source, tensor_type) or source.dtype != self.dtype:
            got = source.dtype.name if isinstance(source, tensor_type) else type(source).__name__
            raise DTypeError(f"index_add: source must be a tensor of self's dtype "
                             f"{self.dtype.name}, got {got}")
        if self.ndim == 0:
            return self.reshape(1).index_add(0, index, source.reshape(-1), alpha=alpha).reshape(())
        index = index.reshape(-1)
        k, n = index.shape[0], self.shape[dim]
        want = self.shape[:dim] + (k,) + self.shape[dim + 1:]
        if source.shape != want:
            raise ShapeError(f"index_add: source {source.shape} must be self {self.shape} "
                             f"with {k} (the index's length) along dim {dim}: {want}")
        hits = as_index(index).reshape(k, 1) == tensor_type.arange(n, device=self.device)
        hits = check_index(hits, index, n, f"index_add along dim {dim}")
        hits = hits.reshape((1,) * dim + (k, n) + (1,) * (self.ndim - dim - 1))
        values = source if alpha == 1 else source * alpha
        # the sum alone is a one-hot sum into rows (a scatter on a CPU, D153)
        return self + hits.where(values.unsqueeze(dim + 1), 0).sum(axis=dim).cast(self.dtype)

    def index_fill(self, dim: int, index, value):
        """PyTorch's index_fill: every position along dim that `index` (a 0-d or 1-d integer
        tensor or list) names set to `value` (a number or a one-element tensor). An index
        outside [0, size) raises IndexError when the result is realized."""
        tensor_type = type(self)
        if self.ndim == 0:
            return self.reshape(1).index_fill(0, index, value).reshape(())
        dim = norm_dim(dim, self.ndim, "index_fill: dim")
        if not isinstance(index, tensor_type):
            index = tensor_type(index, device=self.device)
        if not index.dtype.is_int or index.ndim > 1:
            raise DTypeError(f"index_fill: index must be a 0-d or 1-d integer tensor, got "
                             f"{index.dtype.name} of shape {index.shape}")
        index, n = index.reshape(-1), self.shape[dim]
        hits = as_index(index).reshape(-1, 1) == tensor_type.arange(n, device=self.device)
        hits = check_index(hits, index, n, f"index_fill along dim {dim}")
        named = hits.any(axis=0).reshape((n,) + (1,) * (self.ndim - dim - 1))
        if isinstance(value, tensor_type):
            value = value.reshape(()).cast(self.dtype)
        return named.where(value, self).cast(self.dtype)

    def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
        """PyTorch's scatter_reduce: each position of self combines (sum, prod, mean, amax,
        amin) the src values written to it, and its own value with include_self; positions
        nothing is written to keep self. Integer means round down, as PyTorch."""
        if reduce not in REDUCES:
            raise ArgumentError(f"scatter_reduce: reduce must be one of {REDUCES}, "
                                f"got {reduce!r}")
        if self.dtype == dtypes.bool:
            raise DTypeError("scatter_reduce: bool tensors are not supported")
        dim, hits, values, _ = self._scatter_writes("scatter_reduce", dim, index, src)
        if reduce == "sum":  # self added after: the sum alone is a one-hot sum (D153)
            out = hits.where(values, 0).sum(axis=dim).cast(self.dtype)
            return self + out if include_self else hits.any(axis=dim).where(out, self)
        if include_self:
            mine = type(self).full(self.unsqueeze(dim).shape, True, device=self.device)
            hits = hits.cat(mine, dim=dim)
            values = values.cat(self.unsqueeze(dim), dim=dim)
        if reduce in ("sum", "mean"):
            out = hits.where(values, 0).sum(axis=dim)
        elif reduce == "prod":
            out = hits.where(values, 1).prod(axis=dim)
        else:
            largest = reduce == "amin"
            masked = hits.where(values, _lowest(self.dtype, largest))
            out = masked.min(axis=dim) if largest else masked.max(axis=dim)
        if reduce == "mean":
            count = hits.sum(axis=dim).maximum(1)
            out = out / count if self.dtype.is_float else out.div(count, rounding_mode="floor")
        out = out.cast(self.dtype)
        return out if include_self else hits.any(axis=dim).where(out, self)

    def masked_select(self, mask):
        """The elements where the bool `mask` (broadcast with self) is true, as a 1-d tensor.
        Realizes the mask (its count decides the shape), as boolean indexing does."""
        if not isinstance(mask, type(self)) or mask.dtype != dtypes.bool:
            got = mask.dtype.name if isinstance(mask, type(self)) else type(mask).__name__
            raise DTypeError(f"masked_select needs a bool mask tensor, got {got}")
        shape = broadcast_shape(self.shape, mask.shape)
        return self._broadcast_to(shape).reshape(-1)[mask._broadcast_to(shape).reshape(-1)]

    def unfold(self, dimension: int, size: int, step: int):
        """Windows of `size` every `step` along `dimension`, as a new last dim (PyTorch's
        Tensor.unfold): shape[dimension] becomes (n - size) // step + 1. A view."""
        dim = norm_dim(dimension, self.ndim, "dimension")
        n = self.shape[dim] if self.ndim else 1
        if step <= 0 or size < 0 or size > n:
            raise ShapeError(f"unfold: need 0 <= size <= {n} (dimension {dim}) and step > 0, "
                             f"got size {size}, step {step}")
        x = (self if self.ndim else self.reshape(1)).movedim(dim, -1)
        count = (n - size) // step + 1
        if size == 0:
            empty = x.shrink([(0, s) for s in x.shape[:-1]] + [(0, 0)]).unsqueeze(-2)
            windows = empty.expand(x.shape[:-1] + (count, 0))
        else:
            windows = _windows(x, (size,), (step,), (1,))
        return windows.movedim(-2, dim) if self.ndim else windows.reshape(size)

    def max_unpool2d(self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0,
                     output_size=None):
        """The inverse of max_pool2d(return_indices=True): zeros with each pooled value put
        back at its index (a flat position in its (H, W) plane)."""
        pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
        kernel, dilation, padding = pair(kernel_size), pair(dilation), pair(padding)
        stride = kernel if stride is None else pair(stride)
        if self.ndim < 3 or indices.shape != self.shape:
            raise ShapeError(f"max_unpool2d: input {self.shape} and indices {indices.shape} "
                             f"must be one (N, C, H, W) or (C, H, W) shape")
        if output_size is None:
            output_size = [(i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in
                           zip(self.shape[-2:], stride, padding, dilation, kernel)]
        height, width = tuple(output_size)[-2:]
        lead = self.shape[:-2]
        out = type(self).zeros(lead + (height * width,), dtype=self.dtype, device=self.device)
        out = out.scatter(-1, indices.reshape(lead + (-1,)), self.reshape(lead + (-1,)))
        return out.reshape(lead + (height, width))
