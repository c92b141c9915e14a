"""Sorting, scans and selection Tensor methods: sort, argsort, topk, kthvalue, median,
cummax, cummin, logcumsumexp, index_select and multinomial. Mixed into Tensor.

There is no sort primitive. A sort ranks every element of a row against every other one
(O(n^2) comparisons per row, one reduce): rank_i = #{j: x_j before x_i} + #{j < i: x_j
ties x_i}, so every sort is stable. A one-hot of rank == position then picks values and
indices with a masked sum; values are a masked sum of the input, so their gradient flows
to the picked elements. Scans use the lower-triangular mask of `cumsum` (reduce.py).
Everything stays lazy; multinomial's random numbers come from `rand` like every other
random tensor.
"""
from __future__ import annotations
from typing import Any, NamedTuple

from codegen.dtypes import dtypes
from lazyten.aliases import keywords
from lazyten.autograd.stable import Stable
from lazyten.dims import as_int, norm_dim
from lazyten.index_check import check_index
from lazyten.mixin import TensorMixin


class SortResult(NamedTuple):
    """(values, indices) of sort, topk, cummax and cummin, as PyTorch's return types."""
    values: Any
    indices: Any


def _last(x, dim: int):
    """x with `dim` moved last (a transpose, its own inverse)."""
    return x.transpose(dim, -1) if dim != x.ndim - 1 else x


def _key(x):
    """x as something `<` orders: bool compares as uint8."""
    return x.cast(dtypes.uint8) if x.dtype == dtypes.bool else x


def _precedes(xj, xi, descending: bool):
    """(strictly before, tie): does key j sort before key i; NaN sorts as the largest and
    NaNs tie with each other, as PyTorch."""
    if not xj.dtype.is_float:
        return (xj > xi) if descending else (xj < xi), xj == xi
    nan_j, nan_i = xj.isnan(), xi.isnan()
    if descending:
        strict = (xj > xi) | (nan_j & nan_i.logical_not())
    else:
        strict = (xj < xi) | (nan_i & nan_j.logical_not())
    return strict, (xj == xi) | (nan_j & nan_i)


def _lowest(x):
    """The smallest value of x's dtype (a fill that never wins a max)."""
    if x.dtype.is_float:
        return float("-inf")
    return dtypes.min(x.dtype)  # 0 for every unsigned type


class SortingMixin(TensorMixin):
    """sort/argsort/topk, the max/min/logsumexp scans, index_select and multinomial."""

    # ---- sorting ----
    def _sorted(self, dim, descending: bool, k: int | None, what: str, need_values=True):
        """(values, indices) of the first k (all if None) positions of a stable sort."""
        dim = norm_dim(dim, self.ndim, f"{what}: dim")
        if self.ndim == 0:
            values, indices = self.reshape(1)._sorted(0, descending, k, what, need_values)
            shape = (0,) if k == 0 else ()
            return SortResult(None if values is None else values.reshape(shape),
                              indices.reshape(shape))
        tensor_type, n = type(self), self.shape[dim]
        k = n if k is None else k
        x = _last(self.apply(Stable), dim)  # (..., n)
        key = _key(x.detach())
        strict, tie = _precedes(key.unsqueeze(-2), key.unsqueeze(-1), descending)
        ar = tensor_type.arange(n, device=self.device)
        earlier = ar.reshape(1, n) < ar.reshape(n, 1)  # [i, j]: j < i
        rank = (strict | (tie & earlier)).sum(axis=-1)  # (..., n)
        onehot = rank.unsqueeze(-1) == tensor_type.arange(k, device=self.device)  # (..., n, k)
        indices = onehot.where(ar.reshape(n, 1), 0).sum(axis=-2)
        values = None
        if need_values:
            src = x.cast(dtypes.uint8) if x.dtype == dtypes.bool else x
            values = _last(onehot.where(src.unsqueeze(-1), 0).sum(axis=-2).cast(self.dtype), dim)
        return SortResult(values, _last(indices.cast(dtypes.int64), dim))

    @keywords(axis="dim")
    def sort(self, dim: int | None = None, descending: bool = False,
             stable: bool = False) -> SortResult:
        """(values, indices) sorted along `dim` (default -1); always stable (equal elements
        keep their order, whatever `stable` says); NaN sorts as the largest value."""
        return self._sorted(-1 if dim is None else dim, descending, None, "sort")

    @keywords(axis="dim")
    def argsort(self, dim: int | None = None, descending: bool = False, stable: bool = False):
        """Indices (int64) that sort `dim` (default -1), stably; NaN sorts as the largest."""
        return self._sorted(-1 if dim is None else dim, descending, None, "argsort",
                            need_values=False).indices

    @keywords(axis="dim")
    def topk(self, k: int, dim: int | None = None, largest: bool = True,
             sorted: bool = True) -> SortResult:
        """The k largest (or smallest) along `dim` (default -1), always in sorted order;
        ties are broken as the stable sort does (lower index first); NaN is the largest."""
        dim_ = norm_dim(-1 if dim is None else dim, self.ndim, "topk: dim")
        n = self.shape[dim_] if self.ndim else 1
        k = as_int(k, "topk: k")
        if not 0 <= k <= n:
            raise IndexError(f"topk: k={k} is out of range for dim {dim_} of size {n} "
                             f"(shape {self.shape})")
        return self._sorted(dim_, largest, k, "topk")

    @keywords(axis="dim")
    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> SortResult:
        """The k-th smallest (k from 1) along `dim` and its index, as PyTorch; NaN is the
        largest value."""
        dim_ = norm_dim(dim, self.ndim, "kthvalue: dim")
        n = self.shape[dim_] if self.ndim else 1
        k = as_int(k, "kthvalue: k")
        if not 1 <= k <= n:
            raise IndexError(f"kthvalue: k={k} is out of range for dim {dim_} of size {n} "
                             f"(shape {self.shape})")
        return self._pick_sorted(dim_, k - 1, keepdim, "kthvalue")

    @keywords(axis="dim")
    def median(self, dim: int | None = None, keepdim: bool = False):
        """The lower median ((n - 1) // 2-th smallest) of all elements, or (values, indices)
        along `dim`, as PyTorch; a row holding NaN has median NaN (index: its first NaN)."""
        if dim is None:
            flat = self.reshape(-1)
            if flat.shape[0] == 0:
                raise IndexError("median of an empty tensor")
            return flat.median(0).values
        dim_ = norm_dim(dim, self.ndim, "median: dim")
        n = self.shape[dim_] if self.ndim else 1
        if n == 0:
            raise IndexError(f"median: dim {dim_} of shape {self.shape} is empty")
        picked = self._pick_sorted(dim_, (n - 1) // 2, keepdim, "median")
        if not self.dtype.is_float:
            return picked
        nan = self.isnan()
        any_nan = nan.any(dim_, keepdim=keepdim) if self.ndim else nan
        first_nan = nan.cast(dtypes.int8).argmax(dim_, keepdim=keepdim) if self.ndim else \
            self.zeros_like(dtype=dtypes.int64)
        return SortResult(any_nan.where(float("nan"), picked.values),
                          any_nan.where(first_nan, picked.indices))

    def _pick_sorted(self, dim: int, position: int, keepdim: bool, what: str) -> SortResult:
        """(value, index) at `position` of the stable ascending sort along dim."""
        values, indices = self._sorted(dim, False, position + 1, what)
        if not self.ndim:
            return SortResult(values.reshape(()), indices.reshape(()))
        arg = tuple((position, position + 1) if i == dim else (0, s)
                    for i, s in enumerate(values.shape))
        values, indices = values.shrink(arg), indices.shrink(arg)
        if not keepdim:
            values, indices = values.squeeze(dim), indices.squeeze(dim)
        return SortResult(values, indices)

    # ---- scans ----
    def _cum_extreme(self, dim, largest: bool, what: str) -> SortResult:
        """Running max (min): the value, and the LAST index holding it; once a NaN is seen
        the value is NaN and the index the last NaN's (PyTorch's cummax/cummin)."""
        dim = norm_dim(dim, self.ndim, f"{what}: dim")
        if self.ndim == 0:
            values, indices = self.reshape(1)._cum_extreme(0, largest, what)
            return SortResult(values.reshape(()), indices.reshape(()))
        tensor_type, n = type(self), self.shape[dim]
        if n == 0:
            return SortResult(self._same(), self.zeros_like(dtype=dtypes.int64))
        x = _last(self.apply(Stable), dim)  # (..., n)
        key = x.detach()
        if not largest:  # order-reversing and exact, as in argmin
            key = key.logical_not() if key.dtype == dtypes.bool else \
                -key if key.dtype.is_float else ~key
        key = _key(key).unsqueeze(-2)  # (..., 1, n): j
        ar = tensor_type.arange(n, device=self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)  # [i, j]: j <= i
        best = tri.where(key, _lowest(key)).max(axis=-1, keepdim=True)  # (..., n, 1)
        hit = tri & (key == best)
        if key.dtype.is_float:
            nan = tri & key.isnan()
            seen_nan = nan.cast(dtypes.uint8).max(axis=-1, keepdim=True).cast(dtypes.bool)
            hit = seen_nan.where(nan, hit)
        index = hit.where(ar, -1).max(axis=-1)  # (..., n): the last hit
        onehot = index.unsqueeze(-1) == ar
        src = x.cast(dtypes.uint8) if x.dtype == dtypes.bool else x
        values = onehot.where(src.unsqueeze(-2), 0).sum(axis=-1).cast(self.dtype)
        return SortResult(_last(values, dim), _last(index.cast(dtypes.int64), dim))

    @keywords(axis="dim")
    def cummax(self, dim: int | None = None) -> SortResult:
        """(values, indices) of the running maximum along `dim`; ties pick the last index."""
        return self._cum_extreme(dim, True, "cummax")

    @keywords(axis="dim")
    def cummin(self, dim: int | None = None) -> SortResult:
        """(values, indices) of the running minimum along `dim`; ties pick the last index."""
        return self._cum_extreme(dim, False, "cummin")

    @keywords(axis="dim")
    def logcumsumexp(self, dim: int | None = None):
        """log(cumsum(exp(x))) along `dim`, shifted by the running maximum so that neither
        large nor very negative values overflow or vanish; integers compute in float32."""
        dim = norm_dim(dim, self.ndim, "logcumsumexp: dim")
        x = self if self.dtype.is_float else self.float()
        if x.dtype.opmath != x.dtype:  # as PyTorch: half (and bfloat16) computes in float32
            return x.float().logcumsumexp(dim).cast(x.dtype)
        if x.ndim == 0 or x.shape[dim] == 0:
            return x._same()
        tensor_type, n = type(self), x.shape[dim]
        xj = _last(x, dim).unsqueeze(-2)  # (..., 1, n)
        ar = tensor_type.arange(n, device=self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)  # [i, j]: j <= i
        shift = tri.where(xj.detach(), float("-inf")).max(axis=-1, keepdim=True)  # (..., n, 1)
        shift = shift.isinf().where(0.0, shift)  # rows of -inf (or an inf): no inf - inf
        terms = tri.where(xj - shift, float("-inf")).exp()
        out = terms.sum(axis=-1, keepdim=True).log() + shift
        return _last(out.squeeze(-1), dim)

    # ---- selection ----
    def index_select(self, dim: int, index):
        """The entries `index` (a 1-d integer tensor or list) of `dim`; an index outside
        [0, size) raises IndexError when the result is realized (as gather)."""
        tensor_type = type(self)
        dim = norm_dim(dim, self.ndim, "index_select: dim")
        if not isinstance(index, tensor_type):
            index = tensor_type(index, device=self.device)
        if not index.dtype.is_int:
            raise TypeError(f"index_select: index must be an integer tensor, got "
                            f"{index.dtype.name}")
        if index.ndim > 1:
            raise ValueError(f"index_select: index must be 0-d or 1-d, got shape {index.shape}")
        if index.device != self.device:
            raise ValueError(f"index_select: index on {index.device}, tensor on {self.device}")
        if self.ndim == 0:
            if index.numel() != 1:
                raise IndexError(f"index_select on a 0-d tensor takes one index, got "
                                 f"shape {index.shape}")
            return self.reshape(1).index_select(0, index).reshape(())
        index = index.reshape(-1)
        k, n = index.shape[0], self.shape[dim]
        onehot = index.reshape(k, 1) == tensor_type.arange(n, device=self.device)
        onehot = onehot.reshape((1,) * dim + (k, n) + (1,) * (self.ndim - dim - 1))
        out = onehot.where(self.unsqueeze(dim), 0).sum(axis=dim + 1).cast(self.dtype)
        return check_index(out, index, n, f"index_select along dim {dim}")

    def multinomial(self, num_samples: int = 1, replacement: bool = False):
        """int64 samples of category indices from the non-negative weights of each row
        (1-d or 2-d). With replacement: the inverse of the normalised cumsum at uniform
        numbers; without: the num_samples smallest of Exp(1) / weight (an exponential race,
        the same law as drawing one at a time and renormalising). A row that is negative,
        inf, NaN or all zero, or has fewer than num_samples nonzero weights when sampling
        without replacement, raises IndexError when the samples are realized."""
        tensor_type = type(self)
        if self.ndim not in (1, 2):
            raise ValueError(f"multinomial: weights must be 1-d or 2-d, got shape {self.shape}")
        if not self.dtype.is_float:
            raise TypeError(f"multinomial: weights must be floating point, got {self.dtype.name}")
        samples, n = as_int(num_samples, "multinomial: num_samples"), self.shape[-1]
        if samples <= 0:
            raise ValueError(f"multinomial: num_samples must be positive, got {samples}")
        if n == 0:
            raise ValueError(f"multinomial: no categories (weights of shape {self.shape})")
        if not replacement and samples > n:
            raise ValueError(f"multinomial: cannot draw {samples} samples without replacement "
                             f"from {n} categories")
        w = self.detach().reshape(-1, n)
        w = w.float() if w.dtype.opmath != w.dtype else w
        positive = w > 0
        bad = ((w < 0) | w.isnan() | w.isinf()).cast(dtypes.uint8).max(axis=1) > 0
        bad = bad | (w.sum(axis=1) == 0)
        if replacement:
            cdf = w.cumsum(1)
            cdf = cdf / cdf[:, n - 1:]  # the last entry exactly 1: u < 1 always finds a slot
            u = tensor_type.rand(w.shape[0], samples, dtype=w.dtype, device=self.device)
            out = (cdf.unsqueeze(1) <= u.unsqueeze(2)).sum(axis=2)
        else:
            bad = bad | (positive.sum(axis=1) < samples)
            u = tensor_type.rand(w.shape[0], n, dtype=w.dtype, device=self.device)
            race = -(1 - u).log()  # Exp(1), finite since u < 1
            out = positive.where(race / positive.where(w, 1), float("inf")).topk(
                samples, largest=False).indices
        out = out.cast(dtypes.int64).reshape(self.shape[:-1] + (samples,))
        flag = bad.where(n, 0)  # an out-of-range "index" for each bad row
        return check_index(out, flag, n, "multinomial: a row of weights is negative, inf, "
                           "NaN or all zero, or has fewer nonzero weights than num_samples "
                           "without replacement")
