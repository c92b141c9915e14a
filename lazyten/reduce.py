"""Reduction Tensor methods: sum/max and everything built on them (mean, var, softmax,
argmax, prod, cumsum...). Reductions take `axis=` (int, tuple or None; PyTorch's `dim=`
too) and `keepdim=`. `max(dim)`/`min(dim)` with a positional int or `dim=` return
(values, indices) as in PyTorch; `max(axis=...)` returns values only. Mixed into Tensor.
"""
from __future__ import annotations
from typing import Any, NamedTuple

from codegen.dtypes import as_dtype, dtypes
from codegen.helpers import prod
from lazyten.autograd import primitives as F
from lazyten.autograd.special import Softmax
from lazyten.autograd.stable import Stable
from lazyten.aliases import keywords
from lazyten.dims import norm_axes
from lazyten.mixin import TensorMixin


class ValuesIndices(NamedTuple):
    """What `max(dim)` / `min(dim)` return, as PyTorch's torch.return_types.max."""
    values: Any
    indices: Any


def _correction(correction, unbiased) -> int:
    """var/std's correction from `correction=` or PyTorch's older `unbiased=`."""
    if unbiased is None:
        return correction
    if correction != 1:
        raise TypeError(f"var/std got correction={correction} and unbiased={unbiased}: "
                        f"pass one of them")
    return 1 if unbiased else 0


def _one_dtype(dtype, acc_dtype, name: str):
    if dtype is not None and acc_dtype is not None and dtype != acc_dtype:
        raise TypeError(f"{name}() got dtype={dtype} and acc_dtype={acc_dtype}: they are "
                        f"the same argument (PyTorch's and tinygrad's names); pass one")
    return dtype if dtype is not None else acc_dtype


class ReduceMixin(TensorMixin):
    """Reductions and the functions built on them."""

    def _reduce(self, fn, axis, keepdim: bool, **kwargs):
        axes = norm_axes(axis, self.ndim)
        if not axes:
            return self._same()
        if keepdim:
            shape = tuple([1 if i in axes else s for i, s in enumerate(self.shape)])
        else:
            shape = tuple([s for i, s in enumerate(self.shape) if i not in axes])
        return self.apply(fn, axis=axes, shape=shape, **kwargs)

    @keywords(dim="axis")
    def sum(self, axis=None, keepdim: bool = False, dtype=None, acc_dtype=None):
        """Sum; bool and integer tensors sum in int64 as PyTorch does. float16 and bfloat16
        sums accumulate in float32 (also across the stages of a split reduce) and round once.
        `dtype=` (PyTorch) and `acc_dtype=` (tinygrad) both cast the input first: the sum
        accumulates in, and returns, that dtype."""
        x = self
        dtype = _one_dtype(dtype, acc_dtype, "sum")
        if dtype is not None:  # (the reduce below makes the new tensor: no `Same` node)
            x = x if as_dtype(dtype) == x.dtype else x.cast(dtype)
        elif not x.dtype.is_float:
            x = x.cast(dtypes.int64)
        if x.dtype.opmath != x.dtype:
            return x.float()._reduce(F.Sum, axis, keepdim).cast(x.dtype)
        return x._reduce(F.Sum, axis, keepdim)

    def max(self, *args, axis=None, keepdim: bool = False, dim=None):
        """max(axis=...): the maximum (values only, as tinygrad's and numpy's). max(dim) or
        max(dim=d) with one int: (values, indices) as PyTorch, indices of the first
        maximum. max(other_tensor): the elementwise maximum."""
        return self._extreme(args, axis, keepdim, dim, largest=True)

    def min(self, *args, axis=None, keepdim: bool = False, dim=None):
        """The minimum; arguments as for max."""
        return self._extreme(args, axis, keepdim, dim, largest=False)

    def _extreme(self, args: tuple, axis, keepdim: bool, dim, largest: bool):
        name = "max" if largest else "min"
        if args and isinstance(args[0], type(self)):
            if len(args) > 1 or axis is not None or dim is not None:
                raise TypeError(f"{name}(other) takes one tensor and nothing else")
            return self.maximum(args[0]) if largest else self.minimum(args[0])
        if len(args) > 2:
            raise TypeError(f"{name}() takes at most 2 positional arguments (dim, keepdim), "
                            f"got {len(args)}")
        if len(args) == 2:
            keepdim = args[1]
        if args and args[0] is not None:
            if dim is not None:
                raise TypeError(f"{name}() got dim twice (positional and dim=)")
            dim = args[0]
        if dim is None:
            return self.amax(axis, keepdim) if largest else self.amin(axis, keepdim)
        if axis is not None:
            raise TypeError(f"{name}() got both axis= and dim=: pass axis= for the values "
                            f"only, dim= for (values, indices)")
        if isinstance(dim, (tuple, list)) or isinstance(dim, bool) or \
                not hasattr(dim, "__index__"):
            raise TypeError(f"{name}(dim) takes one int dim and returns (values, indices); "
                            f"got {dim!r}: for the {name}imum over several dims use "
                            f"{name}(axis={dim!r}) or a{name}(dim={dim!r})")
        values = self.amax(dim, keepdim) if largest else self.amin(dim, keepdim)
        indices = self._arg(dim, keepdim, largest)
        if self.requires_grad and not type(self).no_grad and self.ndim:
            # as PyTorch: the gradient goes to the element the index names, not to ties
            picked = self._gather_first(indices if keepdim else indices.unsqueeze(dim), dim)
            values = picked if keepdim else picked.squeeze(dim)
        return ValuesIndices(values, indices)

    def _gather_first(self, index, dim: int):
        """self's values at `index` (keepdim shape) along `dim`, as a masked sum."""
        dim = norm_axes(dim, self.ndim)[0] if self.ndim else 0
        n = self.shape[dim] if self.ndim else 1
        positions = type(self).arange(n, device=self.device).reshape(
            (n,) + (1,) * (self.ndim - dim - 1))
        return (positions == index).where(self, 0).sum(axis=dim, keepdim=True).cast(self.dtype)

    @keywords(dim="axis")
    def amax(self, axis=None, keepdim: bool = False):
        """The maximum over `axis` (values only); ties share the gradient."""
        if self.numel() == 0 and (axis is None or
                                  any(self.shape[a] == 0 for a in norm_axes(axis, self.ndim))):
            raise ValueError(f"max of an empty tensor of shape {self.shape} along axis {axis}")
        return self._reduce(F.Max, axis, keepdim)

    @keywords(dim="axis")
    def amin(self, axis=None, keepdim: bool = False):
        """The minimum over `axis` (values only)."""
        if self.dtype == dtypes.bool:
            return self.logical_not().amax(axis, keepdim).logical_not()
        if self.dtype.is_int:
            return ~((~self).amax(axis, keepdim))
        return -((-self).amax(axis, keepdim))

    @keywords(dim="axis")
    def mean(self, axis=None, keepdim: bool = False):
        """Mean; float16 is summed and divided in float32 (a float16 sum of 65,520 ones
        is already inf) and rounded once."""
        x = self if self.dtype.is_float else self.float()
        if x.dtype.opmath != x.dtype:
            return x.float().mean(axis, keepdim).cast(x.dtype)
        count = prod(self.shape[i] for i in norm_axes(axis, self.ndim))
        if not count:
            return x.sum(axis, keepdim) * float("nan")
        return x._reduce(F.Mean, axis, keepdim, count=count)  # (sum / count as one node)

    @keywords(dim="axis")
    def var(self, axis=None, keepdim: bool = False, correction: int = 1, *, unbiased=None):
        """Variance with `correction` (1: Bessel's); PyTorch's older `unbiased=` True/False
        means correction 1/0."""
        correction = _correction(correction, unbiased)
        x = self if self.dtype.is_float else self.float()
        if x.dtype.opmath != x.dtype:  # 16-bit floats: computed in float32, rounded once
            return x.float().var(axis, keepdim, correction).cast(x.dtype)
        count = prod(self.shape[i] for i in norm_axes(axis, self.ndim))
        squares = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        dof = count - correction
        if dof >= 0:
            return squares / dof
        # N < correction, as PyTorch: the value divides by 0 (inf, or NaN where the squares
        # are 0) while the gradient is the formula's, 2 (x - mean) / (N - correction)
        exact = squares / dof
        return exact + (squares / 0 - exact).detach()

    @keywords(dim="axis")
    def std(self, axis=None, keepdim: bool = False, correction: int = 1, *, unbiased=None):
        """sqrt(var) (`unbiased=` as var's). Where the variance is 0 the gradient is 0, as
        PyTorch's std gives (sqrt's own would be inf * 0 = nan); sqrt reads 1 there so its
        backward stays finite."""
        var = self.var(axis, keepdim, _correction(correction, unbiased))
        zero = var == 0
        return zero.where(0.0, zero.where(1.0, var).sqrt())

    @keywords(dim="axis")
    def prod(self, axis=None, keepdim: bool = False, dtype=None, acc_dtype=None):
        """Product by pairwise multiplication (exact for integers), log2(n) view steps.
        `dtype=` / `acc_dtype=` cast the input first, as for sum."""
        dtype = _one_dtype(dtype, acc_dtype, "prod")
        if dtype is not None:
            return self.cast(dtype).prod(axis, keepdim)
        axes = norm_axes(axis, self.ndim)
        if self.dtype.opmath != self.dtype:  # multiplied in float32, rounded once
            return self.float().prod(axis, keepdim).cast(self.dtype)
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
        axis = norm_axes(axis, self.ndim)
        if not axis:  # a 0-d tensor
            return type(self).zeros((), dtype=dtypes.int64, device=self.device)
        axis = axis[0]
        n = self.shape[axis]
        if n == 0:
            raise ValueError(f"argmax/argmin of an empty dim {axis} of shape {self.shape}")
        # x is compared with its maximum in another kernel: both must read the same values
        x = x.detach().apply(Stable)
        best = x.amax(axis, keepdim=True)
        hit = (x == best) | x.isnan() if x.dtype.is_float else x == best
        count_down = type(self).arange(n, 0, -1, device=self.device).reshape(
            (n,) + (1,) * (self.ndim - axis - 1))
        first = hit.where(count_down, 0).amax(axis, keepdim=keepdim)
        return (n - first).cast(dtypes.int64)

    @keywords(dim="axis")
    def argmax(self, axis=None, keepdim: bool = False):
        return self._arg(axis, keepdim, True)

    @keywords(dim="axis")
    def argmin(self, axis=None, keepdim: bool = False):
        return self._arg(axis, keepdim, False)

    @keywords(dim="axis")
    def logsumexp(self, axis=None, keepdim: bool = False):
        if not self.dtype.is_float or self.dtype.opmath != self.dtype:
            # as PyTorch: x - max(x) in integers would wrap; 16-bit floats round once
            out = self.float().logsumexp(axis, keepdim)
            return out.cast(self.dtype) if self.dtype.is_float else out
        m = self.detach().amax(axis, keepdim=True)  # a shift only: no gradient, no saved input
        m = m.isinf().where(0, m)  # all -inf rows: avoid inf - inf
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        if keepdim:
            return out
        axes = norm_axes(axis, self.ndim)
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @keywords(dim="axis")
    def softmax(self, axis: int = -1):
        """16-bit floats are computed in float32 and rounded once, as PyTorch does."""
        return self._opmath(lambda x: x.apply(Softmax, axis=axis, log=False, tensor=type(x)))

    @keywords(dim="axis")
    def log_softmax(self, axis: int = -1):
        return self._opmath(lambda x: x.apply(Softmax, axis=axis, log=True, tensor=type(x)))

    @keywords(dim="axis")
    def cumsum(self, axis: int = 0):
        """Running sum: a lower-triangular mask over an expanded view, reduced once."""
        axes = norm_axes(axis, self.ndim)  # checked even for a 0-d tensor (axis 0 or -1), as PyTorch
        if self.ndim == 0:
            return self._same()
        axis = axes[0]
        n = self.shape[axis]
        x = self if self.dtype.is_float else self.cast(dtypes.int64)
        moved = x.transpose(axis, -1) if axis != self.ndim - 1 else x
        tensor_type = type(self)
        rows = tensor_type.arange(n, device=self.device).reshape(n, 1)
        cols = tensor_type.arange(n, device=self.device).reshape(1, n)
        tri = cols <= rows  # (n, n): output i sums inputs j <= i
        out = tri.where(moved.unsqueeze(-2), 0).sum(-1)
        return out.transpose(axis, -1) if axis != self.ndim - 1 else out

    # ---- logical reductions (bool results) ----
    @keywords(dim="axis")
    def any(self, axis=None, keepdim: bool = False):
        """Whether any element (along axis) is nonzero; False for an empty reduction."""
        return (self != 0).sum(axis, keepdim) > 0

    @keywords(dim="axis")
    def all(self, axis=None, keepdim: bool = False):
        """Whether every element (along axis) is nonzero; True for an empty reduction."""
        return (self == 0).sum(axis, keepdim) == 0
