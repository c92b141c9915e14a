"""Rearranging Tensor methods: roll, tile and repeat_interleave (PyTorch semantics).

roll and tile are views (repeat's expand + reshape, then a shrink); repeat_interleave with
an int is a view too. With per-element repeats (a tensor or list) the output size depends
on the data: it is read on the host (PyTorch syncs the same way) unless `output_size` is
given, in which case the source index of every output position is computed lazily.
Mixed into Tensor.
"""
from __future__ import annotations
import numpy as np

from codegen.helpers import argfix
from lazyten.dims import as_int, norm_dim
from lazyten.errors import ArgumentError, ShapeError
from lazyten.mixin import TensorMixin


class RearrangeMixin(TensorMixin):
    """roll, tile, repeat_interleave."""

    def roll(self, shifts, dims=None):
        """Shift elements along `dims` cyclically (element i goes to i + shift); with
        dims=None the tensor is rolled as if flattened, then given its shape back."""
        shifts_t = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
        shifts_t = tuple(as_int(s, "roll: shift") for s in shifts_t)
        if dims is None:
            if len(shifts_t) != 1:
                raise ArgumentError(f"roll: shifts {shifts} need dims (got dims=None)")
            return self.flatten().roll(shifts_t, 0).reshape(self.shape)
        dims_t = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if len(dims_t) != len(shifts_t):
            raise ShapeError(f"roll: {len(shifts_t)} shifts for {len(dims_t)} dims "
                             f"(shifts={shifts}, dims={dims})")
        if self.ndim == 0:
            for d in dims_t:
                norm_dim(d, 0, "roll: dim")
            return self._same()
        x = self
        for shift, d in zip(shifts_t, dims_t):
            d = norm_dim(d, self.ndim, "roll: dim")
            n = x.shape[d]
            if n == 0 or shift % n == 0:
                continue
            start = n - shift % n  # out[i] = x[(i - shift) mod n] = twice[start + i]
            twice = x.repeat(tuple(2 if i == d else 1 for i in range(x.ndim)))
            x = twice.shrink(tuple((start, start + n) if i == d else (0, s)
                                   for i, s in enumerate(x.shape)))
        return x if x is not self else self._same()

    def tile(self, *dims):
        """Repeat the whole tensor `dims` times per dim (numpy's tile); fewer dims than the
        tensor has are padded with 1s in front, more add leading dims."""
        reps = tuple(as_int(r, "tile: repeat") for r in argfix(*dims))
        if any(r < 0 for r in reps):
            raise ValueError(f"tile: repeats must be non-negative, got {reps}")
        reps = (1,) * (self.ndim - len(reps)) + reps
        return self.repeat(reps) if reps else self._same()

    def repeat_interleave(self, repeats, dim: int | None = None, output_size: int | None = None):
        """Repeat each element `repeats` times along `dim` (the flattened tensor if None).
        `repeats` is an int (a view) or one count per element (a 1-d tensor or list; one
        count is broadcast): its values are read on the host unless `output_size` (their
        sum) is given, which keeps everything lazy."""
        tensor_type = type(self)
        x = self.flatten() if dim is None else self
        dim = 0 if dim is None else norm_dim(dim, self.ndim, "repeat_interleave: dim")
        if x.ndim == 0:
            x = x.reshape(1)
        n = x.shape[dim]
        if not isinstance(repeats, (tensor_type, list, tuple)) and hasattr(repeats, "__index__"):
            r = as_int(repeats, "repeat_interleave: repeats")
            if r < 0:
                raise ValueError(f"repeat_interleave: repeats must be non-negative, got {r}")
            out = x.unsqueeze(dim + 1)
            out = out.expand(out.shape[:dim + 1] + (r,) + out.shape[dim + 2:])
            return out.reshape(x.shape[:dim] + (n * r,) + x.shape[dim + 1:])
        if not isinstance(repeats, tensor_type):
            repeats = tensor_type(list(repeats), device=self.device)
        if not repeats.dtype.is_int or repeats.ndim > 1:
            raise TypeError(f"repeat_interleave: repeats must be an int or a 1-d integer "
                            f"tensor, got {repeats.dtype.name} of shape {repeats.shape}")
        if repeats.numel() == 1 and n != 1:
            repeats = repeats.reshape(1).expand(n)
        repeats = repeats.reshape(-1)
        if repeats.shape[0] != n:
            raise ValueError(f"repeat_interleave: {repeats.shape[0]} repeats for dim {dim} of "
                             f"size {n} (shape {x.shape})")
        if output_size is None:
            counts = repeats.numpy()
            if (counts < 0).any():
                raise ValueError(f"repeat_interleave: repeats must be non-negative, got "
                                 f"{counts.tolist()}")
            index = tensor_type(np.repeat(np.arange(n, dtype=np.int64), counts),
                                device=self.device)
        else:
            size = as_int(output_size, "repeat_interleave: output_size")
            ends = repeats.cumsum(0)  # output k reads the element i with ends[i-1] <= k < ends[i]
            positions = tensor_type.arange(size, device=self.device).reshape(size, 1)
            index = (ends.reshape(1, n) <= positions).sum(axis=1)
        return x.index_select(dim, index)
