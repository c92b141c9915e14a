"""In-place updates in PyTorch's spelling, and indexing that depends on the data.

`x[index] = value`, `add_`, `mul_`, `zero_`, `fill_`, `clamp_`... compute the new value of
the whole tensor (a masked `where` over the old one) and store it with `assign`, so the
value rule of docs/design.md holds: a tensor computed or viewed from `x` before the update
keeps the old value. Gradients flow as in PyTorch (the overwritten part of the old value
gets none); an in-place update of a leaf that requires grad is refused, as in PyTorch.

Boolean masks (`x[mask]`, `nonzero()`) need the number of True elements to know the
result's shape, so they realize the mask. Mixed into Tensor.
"""
from __future__ import annotations
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from codegen.dtypes import dtypes
from lazyten.elementwise import broadcast_shape
from lazyten.mixin import TensorMixin

if TYPE_CHECKING:  # same package; only for the annotations
    from typing import Self  # the in-place methods return self, whose type mypy knows

    from lazyten.tensor import Tensor


def _kind(dtype) -> int:
    """PyTorch's in-place rule compares kinds: bool < integer < floating point; a result may
    be stored in a tensor of the same or a higher kind (float32 into float16 is fine)."""
    return 2 if dtype.is_float else 0 if dtype == dtypes.bool else 1


def _is_int(item) -> bool:
    return hasattr(item, "__index__") and not isinstance(item, bool) and \
        getattr(item, "ndim", 0) == 0 and not hasattr(item, "lazydata")


def _is_mask(item) -> bool:
    if hasattr(item, "lazydata"):
        return item.dtype == dtypes.bool
    if isinstance(item, np.ndarray):
        return item.dtype == np.bool_
    return isinstance(item, list) and np.asarray(item).dtype == np.bool_


class InPlaceMixin(TensorMixin):
    """__setitem__, the in-place methods (`*_`), requires_grad_, nonzero and mask indexing."""

    # ---- the one way a tensor changes in place ----
    def _check_inplace(self, name: str) -> None:
        if self.requires_grad and self._ctx is None and not type(self).no_grad:
            raise RuntimeError(f"{name}: a leaf tensor that requires grad cannot be changed in "
                               f"place (as in PyTorch): do it inside `with Tensor.no_grad():`, "
                               f"or make a new tensor (x = x + 1)")

    def _snapshot(self):
        """This tensor's current value and graph as another Tensor object (what an in-place
        update reads, and where gradients of tensors computed before it go)."""
        old = type(self)._wrap(self.lazydata)
        old.requires_grad, old._ctx, old._parents = self.requires_grad, self._ctx, self._parents
        old._version, old._previous = self._version, self._previous
        return old

    def _become(self, new, old) -> None:
        """Store `new` (computed from the snapshot `old`) as this tensor's value, in place."""
        if new.shape != self.shape:
            raise ValueError(f"in-place result of shape {new.shape} does not fit the tensor's "
                             f"shape {self.shape}")
        self.assign(type(self)._wrap(new.lazydata).cast(self.dtype))
        recorded = new._ctx is not None and not type(self).no_grad
        if recorded or self._ctx is not None:
            # tensors made from the old value keep sending their gradients to `old`
            self._previous, self._version = old, self._version + 1
            self._ctx, self._parents = (new._ctx, new._parents) if recorded else (None, ())
            self.requires_grad = recorded

    def _update(self, name: str, compute, *, cast: bool = False) -> Self:
        """self = compute(old self), in place; the result must keep self's dtype unless
        `cast` (assignment casts, as PyTorch; arithmetic refuses to narrow, as PyTorch)."""
        self._check_inplace(name)
        old = self._snapshot()
        new = compute(old)
        if not cast and _kind(new.dtype) > _kind(self.dtype):
            raise RuntimeError(f"{name}: the result is {new.dtype.name}, which cannot be stored "
                               f"in place in a {self.dtype.name} tensor (as in PyTorch); "
                               f"use x = x.{name.rstrip('_')}(...) for a new tensor")
        self._become(new.cast(self.dtype), old)
        return self

    # ---- in-place methods ----
    def add_(self, other: Any, alpha: float = 1) -> Self:
        """self += alpha * other, in place."""
        return self._update("add_", lambda x: x + (other if alpha == 1 else other * alpha))

    def sub_(self, other: Any, alpha: float = 1) -> Self:
        return self._update("sub_", lambda x: x - (other if alpha == 1 else other * alpha))

    def mul_(self, other: Any) -> Self:
        return self._update("mul_", lambda x: x * other)

    def div_(self, other: Any, rounding_mode: str | None = None) -> Self:
        return self._update("div_", lambda x: x.div(other, rounding_mode=rounding_mode))

    # min= and max= are PyTorch's keyword names (they shadow the builtins in these bodies)
    def clamp_(self, min: Any = None, max: Any = None) -> Self:
        return self._update("clamp_", lambda x: x.clamp(min, max))

    def clamp_min_(self, min: Any) -> Self:
        return self._update("clamp_min_", lambda x: x.clamp_min(min))

    def clamp_max_(self, max: Any) -> Self:
        return self._update("clamp_max_", lambda x: x.clamp_max(max))

    def clamp_min(self, min: Any) -> Tensor:
        return self.clip(min, None)

    def clamp_max(self, max: Any) -> Tensor:
        return self.clip(None, max)

    def fill_(self, value: Any) -> Self:
        """Every element set to `value` (a number or a one-element tensor), in place."""
        if hasattr(value, "lazydata"):
            if value.numel() != 1:
                raise ValueError(f"fill_ takes a number or a one-element tensor, got shape "
                                 f"{value.shape}")
            return self._update("fill_", lambda x: value.reshape(())._broadcast_to(x.shape),
                                cast=True)
        return self._update("fill_", lambda x: x.full_like(value), cast=True)

    def zero_(self) -> Self:
        return self.fill_(0)

    # random fills from lazyten's generator (Tensor.manual_seed), PyTorch's argument order
    def normal_(self, mean: float = 0.0, std: float = 1.0) -> Self:
        return self._update("normal_", lambda x: x.normal_like(mean=mean, std=std), cast=True)

    def uniform_(self, low: float = 0.0, high: float = 1.0) -> Self:
        """Uniform in [low, high) (PyTorch calls them `from` and `to`)."""
        return self._update("uniform_", lambda x: x.uniform_like(low=low, high=high), cast=True)

    def bernoulli_(self, p: float = 0.5) -> Self:
        """1 with probability p, else 0."""
        return self._update("bernoulli_", lambda x: (x.uniform_like() < p).cast(x.dtype),
                            cast=True)

    def copy_(self, src: Any) -> Self:
        """self's elements set to src's (broadcast, cast to self's dtype), in place."""
        self[...] = src
        return self

    # scatters in place: the out-of-place op's value stored (lazyten/scatter.py)
    def scatter_(self, dim: int, index: Any, src: Any = None, reduce: str | None = None,
                 value: Any = None) -> Self:
        return self._update("scatter_", lambda x: x.scatter(dim, index, src, reduce=reduce,
                                                             value=value), cast=True)

    def scatter_add_(self, dim: int, index: Any, src: Any) -> Self:
        return self._update("scatter_add_", lambda x: x.scatter_add(dim, index, src))

    def scatter_reduce_(self, dim: int, index: Any, src: Any, reduce: str,
                        include_self: bool = True) -> Self:
        return self._update("scatter_reduce_", lambda x: x.scatter_reduce(
            dim, index, src, reduce, include_self=include_self))

    def index_add_(self, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Self:
        return self._update("index_add_", lambda x: x.index_add(dim, index, source, alpha=alpha))

    def index_fill_(self, dim: int, index: Any, value: Any) -> Self:
        return self._update("index_fill_", lambda x: x.index_fill(dim, index, value), cast=True)

    def masked_fill_(self, mask: Any, value: Any) -> Self:
        """`value` where the bool mask is true, in place (cast to self's dtype, as PyTorch)."""
        return self._update("masked_fill_", lambda x: x.masked_fill(mask, value), cast=True)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Switch gradient recording for this leaf on or off (floating-point tensors only)."""
        if requires_grad and not self.dtype.is_float:
            raise RuntimeError(f"only floating point tensors can require gradients, this one "
                               f"is {self.dtype.name} (as in PyTorch)")
        if not requires_grad and self._ctx is not None:
            raise RuntimeError("requires_grad_(False) on a tensor computed from others: use "
                               "detach()")
        self.requires_grad = bool(requires_grad)
        return self

    # ---- x[index] = value ----
    def __setitem__(self, index: Any, value: Any) -> None:
        """numpy/PyTorch assignment: ints, slices (any step), None, Ellipsis, integer tensors
        and boolean masks; `value` is broadcast to the indexed shape and cast to self's
        dtype. Repeated integer indices: the last write wins."""
        tensor_type = type(self)
        index = index if isinstance(index, tuple) else (index,)
        if isinstance(value, (bool, int, float)) and self.dtype.is_float:
            value = tensor_type(value, device=self.device, dtype=self.dtype)
        elif isinstance(value, (list, tuple, np.ndarray)):
            value = tensor_type(value, device=self.device, dtype=self.dtype)
        elif not isinstance(value, tensor_type):
            value = tensor_type(value, device=self.device)  # Python numbers: cast below
        elif value.device != self.device:
            raise ValueError(f"setitem: value on {value.device} for a tensor on {self.device}")
        value = value.cast(self.dtype)
        if len(index) == 1 and _is_mask(index[0]) and value.numel() == 1:
            mask = index[0] if isinstance(index[0], tensor_type) else \
                tensor_type(np.asarray(index[0]), device=self.device)
            if mask.shape != self.shape[:mask.ndim]:
                raise IndexError(f"boolean mask of shape {mask.shape} does not match the "
                                 f"tensor's shape {self.shape}")
            keep = mask.reshape(mask.shape + (1,) * (self.ndim - mask.ndim))
            self._update("__setitem__", lambda x: keep.where(value.reshape(()), x), cast=True)
            return
        if all(i is None or i is Ellipsis or isinstance(i, slice) or _is_int(i) for i in index):
            self._update("__setitem__", lambda x: x._set_basic(index, value), cast=True)
        else:
            self._update("__setitem__", lambda x: x._set_scattered(index, value), cast=True)

    def _set_basic(self, index: tuple, value):
        """self with self[index] replaced, for ints/slices/None/Ellipsis: the value is padded
        back into place along each axis (strided slices through a reshape), then selected."""
        target = self[index]  # checks the index and gives the shape the value must fit
        value = _fit(value, target.shape)
        items = list(index)
        consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
        fill = [slice(None)] * (self.ndim - consumed)
        if Ellipsis in items:
            at = next(k for k, i in enumerate(items) if i is Ellipsis)
            items[at:at + 1] = fill
        else:
            items += fill
        # the value with None dims dropped and int dims kept as size 1
        kept, dim = [], 0
        for item in items:
            if item is None:
                dim += 1
            elif isinstance(item, slice):
                kept.append(value.shape[dim])
                dim += 1
            else:
                kept.append(1)
        placed = value.reshape(tuple(kept))
        mask = placed.ones_like(dtype=dtypes.bool)
        axis = 0
        for item in (i for i in items if i is not None):
            n = self.shape[axis]
            if isinstance(item, slice):
                start, stop, step = item.indices(n)
            else:
                start, step = operator.index(item) % n, 1
            placed = _unslice(placed, axis, start, step, n)
            mask = _unslice(mask, axis, start, step, n)
            axis += 1
        return mask.where(placed, self)

    def _set_scattered(self, index: tuple, value):
        """self with self[index] replaced, for integer tensors and masks: each element finds
        the last write aimed at it (a comparison of every element with every write)."""
        tensor_type = type(self)
        n = self.numel()
        positions = tensor_type.arange(n, device=self.device).reshape(self.shape)[index]
        value = _fit(value, positions.shape)
        k = positions.numel()
        if k == 0:
            return self * 1
        writes = tensor_type.arange(k, device=self.device).reshape(1, k)
        aimed = positions.reshape(1, k) == tensor_type.arange(n, device=self.device).reshape(n, 1)
        last = aimed.where(writes, -1).amax(axis=1, keepdim=True)  # (n, 1): -1 when none
        picked = (writes == last).where(value.reshape(1, k), 0).sum(axis=1).cast(self.dtype)
        return (last >= 0).reshape(self.shape).where(picked.reshape(self.shape), self)

    # ---- boolean masks ----
    def nonzero(self, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
        """Indices of the nonzero elements: an (count, ndim) int64 tensor, or with `as_tuple`
        one int64 tensor per dim. Realizes this tensor (the count decides the shape)."""
        arr, tensor_type = self.numpy(), type(self)
        if arr.ndim == 0:  # as PyTorch: a 0-d tensor is one element with no coordinates
            count = int(bool(arr))
            if as_tuple:
                return (tensor_type(np.zeros(count, dtype=np.int64), device=self.device),)
            return tensor_type(np.zeros((count, 0), dtype=np.int64), device=self.device)
        hits = [np.asarray(h, dtype=np.int64) for h in np.nonzero(arr)]
        if as_tuple:
            return tuple(tensor_type(h, device=self.device) for h in hits)
        return tensor_type(np.stack(hits, axis=-1), device=self.device)

    def _expand_masks(self, index: tuple) -> tuple:
        """`index` with each boolean mask replaced by the integer tensors of its nonzero()."""
        items = list(index)
        consumed = [0 if i is None or i is Ellipsis else
                    (np.ndim(i) if _is_mask(i) and not hasattr(i, "lazydata") else
                     i.ndim if _is_mask(i) else 1) for i in items]
        ellipsis = next((k for k, i in enumerate(items) if i is Ellipsis), None)
        out, dim = [], 0
        for k, item in enumerate(items):
            if ellipsis is not None and k == ellipsis + 1:
                dim = self.ndim - sum(consumed[k:])
            if item is Ellipsis or not _is_mask(item):
                out.append(item)
                dim += consumed[k]
                continue
            mask = item if hasattr(item, "lazydata") else \
                type(self)(np.asarray(item, dtype=np.bool_), device=self.device)
            if mask.device != self.device:
                raise IndexError(f"mask on {mask.device} for a tensor on {self.device}")
            if mask.ndim == 0 or mask.shape != self.shape[dim:dim + mask.ndim]:
                raise IndexError(f"boolean mask of shape {mask.shape} does not match dims "
                                 f"{dim}..{dim + mask.ndim - 1} of the tensor's shape {self.shape}")
            out.extend(mask.nonzero(as_tuple=True))
            dim += mask.ndim
        return tuple(out)


# PyTorch's in-place twins of out-of-place methods: name_ stores name's result (made by
# _inplace below, so every one follows _update's rules for leaves, dtypes and gradients)
INPLACE_TWINS = (
    "abs neg exp exp2 expm1 log log2 log1p sqrt rsqrt reciprocal square sin cos tan sinh cosh "
    "asinh tanh sigmoid relu erf erfc floor ceil round trunc sign clip logical_not bitwise_not "
    "pow fmod remainder floor_divide lerp hardtanh tril triu cumsum cumprod logical_and "
    "logical_or logical_xor bitwise_and bitwise_or bitwise_xor addmm baddbmm").split()


def _inplace(name: str):
    """The method name_ : self = self.name(*args, **kwargs), in place."""
    def method(self, *args, **kwargs):
        return self._update(name + "_", lambda x: getattr(x, name)(*args, **kwargs))
    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"self.{name}(...), stored in place (see InPlaceMixin._update)."
    return method


for _name in INPLACE_TWINS:
    setattr(InPlaceMixin, _name + "_", _inplace(_name))


def _fit(value, shape: tuple):
    """`value` broadcast to `shape` (leading size-1 dims of the value may be dropped, as
    PyTorch allows for `x[0] = y[None]`)."""
    while value.ndim > len(shape) and value.shape[0] == 1:
        value = value.reshape(value.shape[1:])
    try:
        if broadcast_shape(value.shape, shape) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"setitem: a value of shape {value.shape} cannot be broadcast to the "
                         f"indexed shape {tuple(shape)}") from None
    return value._broadcast_to(tuple(shape))


def _unslice(x, axis: int, start: int, step: int, size: int):
    """The inverse of taking x = y[start::step] along `axis` of a y with `size` elements:
    x's elements at their positions, zeros (False) elsewhere."""
    count = x.shape[axis]
    if count == 0:
        pads = [(0, 0)] * x.ndim
        pads[axis] = (0, size)
        return x.pad(pads)
    flip = step < 0
    if flip:
        start, step = size - 1 - start, -step
    if step > 1:  # spread: every count element followed by step - 1 zeros
        x = x.unsqueeze(axis + 1)
        pads = [(0, 0)] * x.ndim
        pads[axis + 1] = (0, step - 1)
        x = x.pad(pads)
        x = x.reshape(x.shape[:axis] + (count * step,) + x.shape[axis + 2:])
    pads = [(0, 0)] * x.ndim
    pads[axis] = (start, size - start - x.shape[axis])
    x = x.pad(pads)
    return x.flip(axis) if flip else x
