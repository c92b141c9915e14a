"""Movement Tensor methods: views that never copy, joining and splitting (indexing is
indexing.py).

reshape/permute/expand/pad/shrink/flip map onto the ShapeTracker; everything else
(slicing with steps, repeat, cat, tril...) is built from those plus
elementwise ops. Mixed into Tensor.
"""
from __future__ import annotations
import functools
import math

from codegen.dtypes import dtypes, promote
from codegen.helpers import argfix, prod
from lazyten.autograd import primitives as F
from lazyten.autograd.views import Cat
from lazyten.aliases import POSITIONAL, joined, keywords
from lazyten.dims import as_int, norm_dim
from lazyten.errors import ShapeError
from lazyten.mixin import TensorMixin
from lazyten.padding import check_mode, flat_pairs, pad_modes


class MovementMixin(TensorMixin):
    """View-changing methods."""

    # ---- primitive views ----
    @keywords(shape=POSITIONAL)
    def reshape(self, *shape):
        shape = tuple(argfix(*shape))
        if not all(type(s) is int for s in shape):  # the common case skips the conversion
            shape = tuple(as_int(s, "reshape size") for s in shape)
        if shape == self.shape:
            return self._same()
        if -1 in shape:
            if shape.count(-1) > 1:
                raise ShapeError(f"reshape {self.shape} -> {shape}: only one -1 allowed")
            known = prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                raise ShapeError(f"cannot reshape tensor of shape {self.shape} into {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if shape and min(shape) < 0:  # (every size is an int by now)
            raise ShapeError(f"invalid shape {shape}")
        if prod(shape) != self.numel():
            raise ShapeError(f"cannot reshape tensor of shape {self.shape} "
                             f"({self.numel()} elements) into {shape}")
        return self._same() if shape == self.shape else self.apply(F.Reshape, shape=tuple(shape))

    @keywords(shape=POSITIONAL, size=POSITIONAL)
    def view(self, *shape):
        return self.reshape(*shape)

    @keywords(order=POSITIONAL, dims=POSITIONAL)
    def permute(self, *order):
        order = argfix(*order)
        ndim = len(self.lazydata.shape)
        if len(order) != ndim:
            raise ShapeError(f"permute {order} does not match {ndim} dims of {self.shape}")
        # the common case, Python ints that are a permutation already, checked at once
        if not (sorted(order) == list(range(ndim)) and set(map(type, order)) <= {int}):
            order = tuple([norm_dim(o, ndim, "permute dim") for o in order])
            if sorted(order) != list(range(ndim)):
                raise ShapeError(f"permute {order} is not a permutation of {ndim} dims")
        return self.apply(F.Permute, order=tuple(order))

    @keywords(shape=POSITIONAL, size=POSITIONAL)
    def expand(self, *shape):
        shape = tuple(argfix(*shape))
        if not all(type(s) is int for s in shape):
            shape = tuple(as_int(s, "expand size") for s in shape)
        if len(shape) < self.ndim:
            raise ShapeError(f"cannot expand {self.shape} to fewer dims {shape}")
        base = (1,) * (len(shape) - self.ndim) + self.shape
        new = tuple(b if s == -1 else s for s, b in zip(shape, base))
        for b, s in zip(base, new):
            if b != s and b != 1:
                raise ShapeError(f"cannot expand {self.shape} to {shape}: only size-1 dims grow")
        if base == self.shape:  # no reshape: no `Same` node for it
            return self._same() if new == base else self.apply(F.Expand, shape=new)
        x = self.apply(F.Reshape, shape=base)
        return x if new == base else x.apply(F.Expand, shape=new)

    def shrink(self, arg):
        """Keep [start, end) of each axis (None keeps all)."""
        # (one loop, no generators: split, chunk and indexing make a shrink per piece)
        shape = self.lazydata.shape
        if len(arg) != len(shape):
            raise ValueError(f"shrink {tuple(arg)} does not match shape {self.shape}")
        pairs, whole = [], True
        for a, s in zip(arg, shape):
            b, e = (0, s) if a is None else a
            if not 0 <= b <= e <= s:
                raise ValueError(f"shrink {tuple(arg)} is out of range for shape {self.shape}")
            whole = whole and b == 0 and e == s
            pairs.append((b, e))
        if whole:
            return self._same()
        return self.apply(F.Shrink, arg=tuple(pairs))

    def pad(self, padding, value: float = 0.0, mode: str = "constant"):
        """Pad with `value`: per-axis ((before, after), ...) or PyTorch's flat form
        (last_before, last_after, second_last_before, ...). Negative pads crop. `mode`:
        'constant', 'reflect', 'replicate' or 'circular' (padding.py)."""
        if padding and all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ShapeError(f"flat padding {padding} does not fit shape {self.shape}")
            pairs = flat_pairs(padding, self.ndim)
        else:
            pairs = [(0, 0) if p is None else tuple(p) for p in padding]
        if len(pairs) != self.ndim:
            raise ValueError(f"padding {padding} does not match shape {self.shape}")
        grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        check_mode(mode)
        if mode != "constant" and value != 0:
            raise ValueError(f"padding mode {mode!r} takes no value, got {value}")
        x = self
        if mode in ("reflect", "replicate"):  # as PyTorch: pad the whole input, then crop
            x = pad_modes(x, list(grow), mode)
        crop = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape))
        if any(b > e for b, e in crop):
            raise ValueError(f"padding {padding} crops more than shape {self.shape} has")
        x = x.shrink(crop)
        if mode in ("reflect", "replicate"):
            return x
        if mode != "constant":  # circular (and unknown modes): crop first, as PyTorch
            return pad_modes(x, list(grow), mode)
        if all(g == (0, 0) for g in grow):
            return x
        out = x.apply(F.Pad, arg=grow)
        if value != 0:
            mask = x.ones_like(dtype=dtypes.bool).apply(F.Pad, arg=grow)
            out = mask.where(out, value)
        return out

    @keywords(axis=POSITIONAL, dims=POSITIONAL)
    def flip(self, *axis):
        axis = tuple(norm_dim(a, self.ndim) for a in argfix(*axis))
        if len(set(axis)) != len(axis):
            raise ShapeError(f"flip: dims {argfix(*axis)} repeat a dim of shape {self.shape}")
        return self.apply(F.Flip, axis=axis) if axis else self

    # ---- derived views ----
    @property
    def T(self):
        """All dims reversed, as numpy's (and PyTorch's) .T."""
        return self.permute(tuple(reversed(range(self.ndim))))

    @keywords(axis0="dim0", axis1="dim1")
    def transpose(self, dim0: int = 1, dim1: int = 0):
        ndim = len(self.lazydata.shape)
        d0, d1 = norm_dim(dim0, ndim, "dim"), norm_dim(dim1, ndim, "dim")
        if d0 == d1:  # (a 0-d tensor's dims 0 and -1 too, as in PyTorch)
            return self._same()
        order = list(range(ndim))
        order[d0], order[d1] = order[d1], order[d0]
        # a permutation of ints by construction: permute's checks would find nothing
        return self.apply(F.Permute, order=tuple(order))

    @keywords(axis="dim")
    def squeeze(self, dim=None):
        """Drop size-1 dims: all of them, or those of `dim` (an int or a tuple) that are 1."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = {norm_dim(d, self.ndim, "dim") for d in (dim if isinstance(dim, (tuple, list))
                                                          else (dim,))}
        return self.reshape(tuple(s for i, s in enumerate(self.shape)
                                  if not (i in dims and s == 1)))

    @keywords(axis="dim")
    def unsqueeze(self, dim: int):
        dim = norm_dim(dim, self.ndim + 1, "dim")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    @keywords(axis="dim")
    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = norm_dim(start_dim, self.ndim, "dim"), norm_dim(end_dim, self.ndim, "dim")
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    @keywords(axis="dim")
    def unflatten(self, dim: int, sizes):
        dim = norm_dim(dim, self.ndim, "dim")
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1:])

    def repeat(self, *repeats):
        repeats = argfix(*repeats)
        if len(repeats) < self.ndim:
            raise ShapeError(f"repeat {repeats} has fewer dims than shape {self.shape}")
        base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
        inter = [d for s in base.shape for d in (1, s)]
        expanded = [d for r, s in zip(repeats, base.shape) for d in (r, s)]
        return base.reshape(inter).expand(expanded).reshape(
            tuple(r * s for r, s in zip(repeats, base.shape)))

    @keywords(axis="dim", split_size_or_sections="sizes")
    def split(self, sizes, dim: int = 0):
        dim = norm_dim(dim, self.ndim, "dim")
        n = self.shape[dim]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ShapeError(f"split sizes {sizes} do not sum to dim {dim} of {self.shape}")
        if any(s < 0 for s in sizes):
            raise ValueError(f"split sizes {sizes} must not be negative (shape {self.shape})")
        if len(sizes) == 1:
            return (self._same(),)
        # each piece is in range by construction: Shrink at once (Tensor.shrink's checks
        # would find nothing; chunk and split run once per step of a recurrence)
        out, start, arg = [], 0, [(0, d) for d in self.shape]
        for s in sizes:
            arg[dim] = (start, start + s)
            out.append(self.apply(F.Shrink, arg=tuple(arg)))
            start += s
        return tuple(out)

    @keywords(axis="dim")
    def chunk(self, chunks: int, dim: int = 0):
        dim = norm_dim(dim, self.ndim, "dim")
        if chunks <= 0:
            raise ValueError(f"chunks must be positive, got {chunks}")
        return self.split(math.ceil(self.shape[dim] / chunks) or 1, dim)

    @keywords(axis="dim")
    def cat(self, *others, dim: int = 0):
        """Join along `dim`: Tensor.cat([a, b], dim=0) (PyTorch), Tensor.cat(a, b) or
        a.cat(b, dim=0) (tinygrad)."""
        tensors = joined("cat", self, others)
        if isinstance(self, (list, tuple)) and isinstance(tensors[-1], int):
            *tensors, dim = tensors  # Tensor.cat([a, b], 1), as torch.cat((a, b), 1)
        if any(t.ndim == 0 for t in tensors):
            raise ShapeError(f"cat needs tensors with at least one dim, got shapes "
                             f"{[t.shape for t in tensors]} (use stack)")
        first = tensors[0]
        dim = norm_dim(dim, first.ndim, "dim")
        for t in tensors:
            if t.ndim != first.ndim or any(a != b for i, (a, b) in
                                           enumerate(zip(t.shape, first.shape)) if i != dim):
                raise ShapeError(f"cat: shapes {[t.shape for t in tensors]} differ outside "
                                 f"dim {dim}")
        return type(first)._joined(tensors, dim, new_axis=False)

    @keywords(axis="dim")
    def stack(self, *others, dim: int = 0):
        """Join along a new `dim`; called as cat is."""
        tensors = joined("stack", self, others)
        if isinstance(self, (list, tuple)) and isinstance(tensors[-1], int):
            *tensors, dim = tensors
        first = tensors[0]
        dim = norm_dim(dim, first.ndim + 1, "dim")
        shapes = {t.shape for t in tensors}
        if len(shapes) != 1:
            raise ShapeError(f"stack needs equal shapes, got {sorted(shapes)}")
        return type(first)._joined(tensors, dim, new_axis=True)

    @staticmethod
    def _joined(tensors: list, dim: int, new_axis: bool):
        """cat (stack: `new_axis`) of checked tensors: one Cat Function over them all, each
        cast once to the dtype of all of them (bfloat16 + int32 + float32 is float32:
        joining in turn would round the int32 to bfloat16 on the way)."""
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"tensors on different devices: {' and '.join(sorted(devices))}")
        dtype = functools.reduce(promote, [t.dtype for t in tensors])
        # (an input of that dtype goes in as it is: Cat makes the new tensor, so no `Same`
        # node per input, which stack of a recurrence's steps would add to both passes)
        tensors = [t if t.lazydata.dtype == dtype else t.cast(dtype) for t in tensors]
        if len(tensors) == 1:
            return tensors[0].unsqueeze(dim) if new_axis else tensors[0]._same()
        return tensors[0].apply(Cat, *tensors[1:], dim=dim, new_axis=new_axis)

    def _tri(self, diagonal: int, upper: bool):
        if self.ndim < 2:
            raise ShapeError(f"tril/triu need at least 2 dims, got shape {self.shape}")
        n, m = self.shape[-2:]
        keep = type(self)._tri_mask(n, m, diagonal, upper, self.device)
        return keep.where(self, self.zeros_like())

    @classmethod
    def _tri_mask(cls, n: int, m: int, diagonal: int = 0, upper: bool = False, device=None):
        """The (n, m) bool mask tril (triu with `upper`) keeps: column j of row i where
        j - i <= diagonal (>= for triu). One comparison of two ranges, each shifted so
        that the bound is a strict `<`: j < i + diagonal + 1, or i + diagonal < j + 1."""
        if upper:
            rows, cols = cls.arange(diagonal, n + diagonal, device=device), \
                cls.arange(1, m + 1, device=device)
            return rows.reshape(n, 1) < cols.reshape(1, m)
        rows = cls.arange(diagonal + 1, n + diagonal + 1, device=device)
        return cls.arange(m, device=device).reshape(1, m) < rows.reshape(n, 1)

    def tril(self, diagonal: int = 0):
        return self._tri(diagonal, False)

    def triu(self, diagonal: int = 0):
        return self._tri(diagonal, True)

    # ---- indexing ----
    def _slice_axis(self, dim: int, start: int, stop: int, step: int):
        """Elements start, start+step, ... (< stop) of one axis, as views."""
        n = self.shape[dim]
        count = max(0, math.ceil((stop - start) / step)) if step > 0 else \
            max(0, math.ceil((start - stop) / -step))
        x = self
        if step < 0:  # flip, then take a positive step from the mirrored start
            x, start, step = x.flip(dim), n - 1 - start, -step
        arg = [(0, s) for s in x.shape]
        if count == 0:
            arg[dim] = (0, 0)
            return x.shrink(arg)
        arg[dim] = (start, min(start + count * step, x.shape[dim]) if step == 1 else
                    start + (count - 1) * step + 1)
        x = x.shrink(arg)
        if step == 1:
            return x
        pads = [(0, 0)] * x.ndim
        pads[dim] = (0, count * step - x.shape[dim])
        x = x.pad(pads)
        x = x.reshape(x.shape[:dim] + (count, step) + x.shape[dim + 1:])
        arg = [(0, s) for s in x.shape]
        arg[dim + 1] = (0, 1)
        return x.shrink(arg).reshape(x.shape[:dim] + (count,) + x.shape[dim + 2:])
