"""Numeric helpers in PyTorch's names that a newcomer types and the other mixins lacked:
nan_to_num, addcmul, addcdiv, diff, searchsorted and bucketize, cdist; and the creation
functions logspace, tril_indices and triu_indices. Each is built from existing Tensor ops
(comparisons, where, slices, a sum or a norm), so it stays lazy, fuses as they do, and
its gradient is theirs. Mixed into Tensor.

searchsorted and bucketize count: the insertion point of v in a sorted row is the number
of its elements below v (left) or not above it (right), one compare and one sum over the
row (O(rows x values) work, no data-dependent control flow), so ties land where PyTorch
puts them. A NaN compares false with everything: its position is 0 on the left side and
the row's length on the right (PyTorch's binary search puts NaN last on both).
"""
from __future__ import annotations
import math
from typing import Any

import numpy as np

from codegen.dtypes import dtypes, promote
from lazyten.creation import to_numpy_dtype
from lazyten.dims import as_int
from lazyten.errors import DTypeError, ShapeError
from lazyten.mixin import TensorMixin

# the largest finite value of each float dtype: nan_to_num's default for an infinity
_FINITE_MAX = {dtypes.float16: 65504.0, dtypes.bfloat16: 3.3895313892515355e38,
               dtypes.float32: float(np.finfo(np.float32).max),
               dtypes.float64: float(np.finfo(np.float64).max)}


class NumericMixin(TensorMixin):
    """nan_to_num, addcmul, addcdiv, diff, searchsorted, bucketize, cdist, logspace,
    tril_indices, triu_indices."""

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None,
                   neginf: float | None = None):
        """NaN -> `nan`, inf -> `posinf`, -inf -> `neginf` (default: the dtype's largest
        finite value and its negative), as torch.nan_to_num; other values pass through
        (their gradient too). An integer or bool tensor has none: a copy."""
        if not self.dtype.is_float:
            return self.clone()
        big = _FINITE_MAX[self.dtype]
        top = big if posinf is None else posinf
        bottom = -big if neginf is None else neginf
        out = self.isnan().where(float(nan), self)
        out = (self == math.inf).where(float(top), out)
        return (self == -math.inf).where(float(bottom), out)

    def addcmul(self, tensor1, tensor2, value: Any = 1):
        """self + value * tensor1 * tensor2 (torch.addcmul), broadcast and promoted."""
        return self + (tensor1 * tensor2 if value == 1 else value * tensor1 * tensor2)

    def addcdiv(self, tensor1, tensor2, value: Any = 1):
        """self + value * tensor1 / tensor2 (torch.addcdiv); as PyTorch, integer tensor1
        and tensor2 are refused (true or floor division would be a guess)."""
        if not any(getattr(t, "dtype", dtypes.float32).is_float for t in (tensor1, tensor2)):
            raise DTypeError(f"addcdiv of integer tensors ({tensor1.dtype.name} / "
                             f"{tensor2.dtype.name}) is not supported (as PyTorch): use "
                             "addcmul with a reciprocal, or divide explicitly")
        quotient = tensor1 / tensor2
        return self + (quotient if value == 1 else value * quotient)

    def diff(self, n: int = 1, dim: int = -1, prepend=None, append=None):
        """The n-th forward difference along `dim` (torch.diff): x[1:] - x[:-1], n times,
        after `prepend` and `append` are joined on along `dim`; bool tensors give
        x[1:] != x[:-1], as PyTorch."""
        n = as_int(n, "diff: n")
        if n < 0:
            raise ValueError(f"diff: n must be non-negative, got {n}")
        if self.ndim == 0:
            raise ShapeError("diff needs a tensor of at least one dimension, got a 0-d one")
        axis = dim + self.ndim if dim < 0 else dim
        if not 0 <= axis < self.ndim:
            raise IndexError(f"diff: dim {dim} is out of range for {self.ndim} dimensions")
        x = self
        if prepend is not None or append is not None:
            parts = [_along(p, x, axis, name) for p, name in ((prepend, "prepend"),
                                                                (x, ""), (append, "append"))
                     if p is not None]
            x = parts[0].cat(*parts[1:], dim=axis)
        for _ in range(n):
            length = x.shape[axis]
            if length == 0:
                break
            later, earlier = x.narrow(axis, 1, length - 1), x.narrow(axis, 0, length - 1)
            x = later != earlier if x.dtype == dtypes.bool else later - earlier
        return x

    def searchsorted(self, values, *, right: bool = False, side: str | None = None,
                     out_int32: bool = False):
        """Where each of `values` would be inserted into this sorted tensor (torch.searchsorted
        with this as `sorted_sequence`): 1-d, or rows (..., M) with `values` (..., K) of the
        same leading dims. `side` "left"/"right" is `right` spelled as numpy does."""
        if side is not None:
            if side not in ("left", "right"):
                raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
            if right and side == "left":
                raise ValueError("searchsorted: side='left' and right=True disagree")
            right = side == "right"
        tensor_type = type(self)
        v = values if isinstance(values, tensor_type) else tensor_type(values, device=self.device)
        if self.ndim == 0:
            raise ShapeError("searchsorted: the sorted sequence must have at least one "
                             "dimension, got a 0-d tensor")
        if self.ndim > 1 and (v.ndim != self.ndim or v.shape[:-1] != self.shape[:-1]):
            raise ShapeError(f"searchsorted: a sorted sequence of shape {self.shape} needs "
                             f"values of shape {self.shape[:-1]} + (K,), got {v.shape}")
        dtype = promote(self.dtype, v.dtype)
        # every value (..., K, 1) against its row: the one row (M,), or rows (..., 1, M)
        rows, point = self.cast(dtype), v.cast(dtype).unsqueeze(-1)
        row = rows if self.ndim == 1 else rows.unsqueeze(-2)
        below = row <= point if right else row < point
        return below.sum(-1).cast(dtypes.int32 if out_int32 else dtypes.int64)

    def bucketize(self, boundaries, *, right: bool = False, out_int32: bool = False):
        """The bucket of each element among 1-d sorted `boundaries` (torch.bucketize):
        boundaries[i-1] < x <= boundaries[i] gives i (right: boundaries[i-1] <= x <
        boundaries[i])."""
        if getattr(boundaries, "ndim", None) != 1:
            raise ShapeError("bucketize: boundaries must be a 1-d tensor, got "
                             f"{getattr(boundaries, 'shape', boundaries)!r}")
        return boundaries.searchsorted(self, right=right, out_int32=out_int32)

    def cdist(self, x2, p: float = 2.0):
        """Distances between every row of this (..., P, M) and every row of `x2` (..., R, M)
        in the p-norm (torch.cdist): (..., P, R), batch dims broadcast. The norm is
        Tensor.norm's over the rows' differences, whose gradient at a zero distance is 0
        as PyTorch's."""
        if self.ndim < 2 or x2.ndim < 2 or self.shape[-1] != x2.shape[-1]:
            raise ShapeError(f"cdist needs (..., P, M) and (..., R, M) inputs, got {self.shape} "
                             f"and {x2.shape}")
        if not (self.dtype.is_float and x2.dtype.is_float):
            raise DTypeError(f"cdist needs floating point inputs, got {self.dtype.name} and "
                             f"{x2.dtype.name}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0 or math.isnan(p):
            raise ValueError(f"cdist: p must be a non-negative number, got {p!r}")
        return (self.unsqueeze(-2) - x2.unsqueeze(-3)).norm(p, dim=-1)

    @classmethod
    def logspace(cls, start, end, steps: int, base: float = 10.0, dtype=None, device=None,
                 requires_grad=None):
        """base ** linspace(start, end, steps) (torch.logspace), made on the host in
        float64 and rounded once to `dtype`."""
        exponents = cls.linspace(start, end, steps, dtype=dtypes.float64).numpy()
        dtype = dtype if dtype is not None else dtypes.default_float
        values = np.power(np.float64(base), exponents)
        return cls(values, device=device, dtype=dtype, requires_grad=requires_grad)

    @classmethod
    def tril_indices(cls, row: int, col: int, offset: int = 0, dtype=None, device=None):
        """(2, N) row and column indices of the lower triangle of a row x col matrix,
        row by row (torch.tril_indices): the elements with column - row <= offset."""
        return _triangle(cls, row, col, offset, dtype, device, np.tril_indices)

    @classmethod
    def triu_indices(cls, row: int, col: int, offset: int = 0, dtype=None, device=None):
        """(2, N) indices of the upper triangle (column - row >= offset), row by row."""
        return _triangle(cls, row, col, offset, dtype, device, np.triu_indices)


def _along(part, x, axis: int, name: str):
    """diff's `prepend` or `append` as a tensor to join `x` along `axis`: a number becomes
    a slice of one element (as numpy's), a tensor must match x's other dims."""
    tensor_type = type(x)
    if not isinstance(part, tensor_type):
        shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        return tensor_type(np.full(shape, part), device=x.device).cast(x.dtype)
    if part.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(part.shape, x.shape))
                                  if i != axis):
        raise ShapeError(f"diff: {name} of shape {part.shape} does not match the input's "
                         f"shape {x.shape} outside dim {axis}")
    return part


def _triangle(cls, row, col, offset, dtype, device, numpy_indices):
    row, col, offset = (as_int(v, f"{numpy_indices.__name__}: {w}")
                        for v, w in ((row, "row"), (col, "col"), (offset, "offset")))
    if row < 0 or col < 0:
        raise ValueError(f"{numpy_indices.__name__}: row and col must be non-negative, got "
                         f"{row} and {col}")
    dtype = dtype if dtype is not None else dtypes.int64
    if dtype.is_float or dtype == dtypes.bool:
        raise DTypeError(f"{numpy_indices.__name__}: dtype must be an integer type, got "
                         f"{dtype.name}")
    rows, cols = numpy_indices(row, offset, col)
    pairs = np.stack([rows, cols]).astype(to_numpy_dtype(dtype)).reshape(2, -1)
    return cls(pairs, device=device, dtype=dtype)
