"""Indexing Tensor methods: `x[index]` (PyTorch's rules) and `gather`.

The basic part of an index (ints, slices, None, ...) is a view built from a few movement
ops; integer tensors and `gather` are one-hot comparisons against `arange(n)` reduced by a
sum (no gather op: the compiler reads the picked elements directly, codegen/gather.py,
D69), whose out-of-range indices raise when realized (index_check.py). Mixed into Tensor.
"""
from __future__ import annotations
import operator

from codegen.dtypes import dtypes
from lazyten.aliases import keywords
from lazyten.autograd import primitives as F
from lazyten.dims import norm_dim
from lazyten.elementwise import broadcast_shape
from lazyten.errors import DTypeError, ShapeError
from lazyten.index_check import as_index, check_index
from lazyten.inplace import _is_mask
from lazyten.mixin import TensorMixin


class IndexingMixin(TensorMixin):
    """`x[index]` and gather."""

    def __getitem__(self, index):
        """PyTorch indexing: ints, slices (any step), None, one Ellipsis, and integer tensors
        (or lists) broadcast together. As PyTorch (unlike numpy), an int is always a basic
        index: it drops its dim first, so index tensors separated only by ints stay in place.
        A boolean mask indexes with its nonzero() indices (which realizes it)."""
        index = index if isinstance(index, tuple) else (index,)
        dots = -1  # where the one Ellipsis is, if any
        for k, i in enumerate(index):  # ints, slices and one Ellipsis alone (`x[:, t]`, a
            if type(i) is int or type(i) is slice:  # loop's step; `x[..., :n]`): no items
                continue                             # to normalise (bool is no int)
            if i is not Ellipsis or dots >= 0:
                break
            dots = k
        else:
            fill = self.ndim - len(index) + (dots >= 0)
            if fill >= 0:
                if dots < 0:
                    return self._basic_index([*index, *[slice(None)] * fill])[0]
                return self._basic_index([*index[:dots], *[slice(None)] * fill,
                                          *index[dots + 1:]])[0]
        if any(_is_mask(i) for i in index):  # boolean masks: their nonzero() indices
            index = self._expand_masks(index)
        items = [self._index_item(i) for i in index]
        if sum(1 for i in items if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        if consumed > self.ndim:
            raise IndexError(f"too many indices ({consumed}) for tensor of shape {self.shape}")
        fill = [slice(None)] * (self.ndim - consumed)
        if any(i is Ellipsis for i in items):
            at = next(k for k, i in enumerate(items) if i is Ellipsis)
            items[at:at + 1] = fill
        else:
            items += fill
        x, advanced = self._basic_index(items)
        return x._advanced_index(advanced) if advanced else x

    def _basic_index(self, items: list):
        """The ints, slices and Nones of `items` (one per dim, Ellipsis filled in) applied
        as one shrink (ints and unit steps), a slice per other step, and one reshape (ints
        drop their dims, None adds one): a few ops whatever the rank, not one per dim; and
        (dim, tensor) for each index tensor, at its dim of the result."""
        full = self.lazydata.shape
        window = [(0, s) for s in full]
        steps: list[tuple[int, tuple[int, int, int]]] = []
        shape: list[int | None] = []  # the result's dims: kept input dim d, or None (new)
        advanced = []
        d = 0
        for item in items:
            if item is None:
                shape.append(None)
                continue
            n = full[d]
            if isinstance(item, slice):
                start, stop, step = item.indices(n)
                if step == 1:
                    window[d] = (start, max(start, stop))
                else:
                    steps.append((d, (start, stop, step)))
                shape.append(d)
            elif isinstance(item, int):
                if not -n <= item < n:
                    raise IndexError(f"index {item} is out of bounds for dim {d} with size {n} "
                                     f"(tensor of shape {self.shape})")
                # PyTorch: an int is a basic index, applied first (numpy: an advanced one)
                window[d] = (item % n, item % n + 1)
            else:
                advanced.append((len(shape), item))
                shape.append(d)
            d += 1
        # the window is in range and the reshape keeps every element, by construction:
        # the primitives at once (Tensor.shrink's and reshape's checks would find nothing)
        x = self
        cut = window != [(0, s) for s in full]
        if cut and not steps:  # the window and the reshape in one node (`x[:, t]`)
            now = tuple([e - b for b, e in window])
            new = tuple([1 if k is None else now[k] for k in shape])
            return x.apply(F.Shrink, arg=tuple(window),
                           shape=None if new == now else new), advanced
        if cut:
            x = x.apply(F.Shrink, arg=tuple(window))
        for dim, (start, stop, step) in steps:
            x = x._slice_axis(dim, start, stop, step)
        now = x.lazydata.shape
        new = tuple([1 if k is None else now[k] for k in shape])
        if new != now:
            x = x.apply(F.Reshape, shape=new)
        return (self._same() if x is self else x), advanced

    def _index_item(self, item):
        """One index item normalised: None, Ellipsis, slice, Python int or integer Tensor."""
        tensor_type = type(self)
        if item is None or item is Ellipsis or isinstance(item, slice):
            return item
        if isinstance(item, bool):
            raise IndexError(f"boolean index {item!r} is not supported "
                             f"(tensor of shape {self.shape})")
        if hasattr(item, "__index__") and getattr(item, "ndim", 0) == 0 and \
                not isinstance(item, tensor_type):
            return operator.index(item)
        if isinstance(item, (list, tuple)) or hasattr(item, "__array__"):
            item = tensor_type(item, device=self.device)
        if not isinstance(item, tensor_type):
            raise IndexError(f"unsupported index {item!r} for tensor of shape {self.shape}")
        if not item.dtype.is_int:
            raise IndexError(f"tensors used as indices must be integer or bool, got "
                             f"{item.dtype.name}")
        if item.device != self.device:
            raise IndexError(f"index on {item.device} for a tensor on {self.device}")
        return as_index(item)

    def _advanced_index(self, advanced):
        """Integer-array indexing, as one-hot masks reduced by a sum (no gather op): the
        compiler reads the picked elements directly (codegen/gather.py, D69)."""
        tensor_type = type(self)
        dims = [d for d, _ in advanced]
        try:
            idx_shape = broadcast_shape(*[t.shape for _, t in advanced])
        except ValueError:
            raise IndexError(f"index tensors of shapes {[t.shape for _, t in advanced]} cannot "
                             f"be broadcast together") from None
        rest = [d for d in range(self.ndim) if d not in dims]
        # adjacent index tensors keep their place, separated ones go first (numpy, PyTorch)
        adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
        x = self.permute(rest[:dims[0]] + dims + rest[dims[0]:] if adjacent else dims + rest)
        lead = dims[0] if adjacent else 0
        k, nidx = len(dims), len(idx_shape)
        # x: lead dims, then the k indexed dims, then the rest
        x = x.reshape(x.shape[:lead] + (1,) * nidx + x.shape[lead:])
        mask = None
        for j, (d, t) in enumerate(advanced):
            n = self.shape[d]
            check = t
            t = (t < 0).where(t + n, t)._broadcast_to(idx_shape)
            ar = tensor_type.arange(n, device=self.device)
            shape = [1] * k
            shape[j] = n
            onehot = t.reshape(idx_shape + (1,) * k) == ar.reshape(tuple(shape))
            onehot = check_index(onehot, check, n, f"tensor index into dim {d}",
                                 allow_negative=True)
            mask = onehot if mask is None else mask & onehot
        mask = mask.reshape((1,) * lead + mask.shape + (1,) * (x.ndim - lead - nidx - k))
        picked = mask.where(x, 0) if x.dtype != dtypes.bool else mask & x
        axes = tuple(range(lead + nidx, lead + nidx + k))
        if x.dtype == dtypes.bool:
            return picked.cast(dtypes.int32).sum(axis=axes).cast(dtypes.bool)
        return picked.sum(axis=axes).cast(x.dtype)

    @keywords(axis="dim")
    def gather(self, dim: int, index):
        """out[i][j] = self[i][index[i][j]] along `dim` (PyTorch's gather)."""
        dim = norm_dim(dim, self.ndim, "dim")
        if index.ndim != self.ndim:
            raise ShapeError(f"gather: index shape {index.shape} must have {self.ndim} dims")
        for d, (a, b) in enumerate(zip(index.shape, self.shape)):
            if d != dim and a > b:
                raise ShapeError(f"gather: index shape {index.shape} exceeds {self.shape} at "
                                 f"dim {d}")
        if index.dtype.is_float:
            raise DTypeError(f"gather index must be an integer tensor, got {index.dtype}")
        index, n = as_index(index), self.shape[dim]
        arg = [(0, s) for s in index.shape]
        arg[dim] = (0, n)
        x = self.shrink(arg).unsqueeze(dim)  # (..., 1, n, ...)
        x = x.expand(x.shape[:dim] + (index.shape[dim],) + x.shape[dim + 1:])
        ar = type(self).arange(n, device=self.device).reshape((1,) * (dim + 1) + (n,) +
                                                               (1,) * (self.ndim - dim - 1))
        onehot = check_index(index.unsqueeze(dim + 1) == ar, index, n, f"gather along dim {dim}")
        picked = onehot.where(x, 0)
        return picked.sum(axis=dim + 1).cast(self.dtype)
