"""Max and average pooling over the last len(kernel_size) dims (2 by default, as
max_pool2d/avg_pool2d; a 3-tuple kernel pools 3 dims, as tinygrad's), with PyTorch's
padding, ceil_mode, divisor and return_indices rules. Windows are views (NNMixin._pool).
Mixed into Tensor.
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from codegen.helpers import make_pair, prod
from lazyten.errors import ShapeError
from lazyten.mixin import TensorMixin


def _rank(kernel_size) -> int:
    return len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2


class PoolingMixin(TensorMixin):
    """max_pool2d, avg_pool2d."""

    def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0,
                   ceil_mode: bool = False, return_indices: bool = False):
        """Max over windows of the last len(kernel_size) dims; padding reads as -inf (the
        dtype's minimum). return_indices: also each maximum's flat index into its input
        plane (H*W), as PyTorch (the first one on ties)."""
        nd = _rank(kernel_size)
        k = make_pair(kernel_size, nd)
        stride = make_pair(stride if stride is not None else k, nd)
        dilation = make_pair(dilation, nd)
        pads = _pool_padding(self, k, stride, dilation, self._padding(padding, nd), ceil_mode)
        lead, axes = [(0, 0)] * (self.ndim - nd), tuple(range(-nd, 0))
        x = self.pad(lead + pads, value=dtypes.min(self.dtype)) \
            if any(p != (0, 0) for p in pads) else self
        windows = x._pool(k, stride, dilation)
        out = windows.max(axis=axes)
        if not return_indices:
            return out
        # each input cell's flat index, padded and windowed like the input; the lowest
        # index among the window's maxima wins (padding and misses read `big`, never chosen)
        plane, big = self.shape[-nd:], prod(self.shape[-nd:])
        index = type(self).arange(big, device=self.device).reshape(plane)
        index = index.pad(pads, value=big) if any(p != (0, 0) for p in pads) else index
        hit = windows == out.reshape(out.shape + (1,) * nd)
        return out, hit.where(index._pool(k, stride, dilation), big).min(axis=axes)

    def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None):
        """Mean over windows of the last len(kernel_size) dims, PyTorch's divisor: the
        window's size within the padded input (without the padding if not
        count_include_pad), or divisor_override."""
        nd = _rank(kernel_size)
        k = make_pair(kernel_size, nd)
        stride = make_pair(stride if stride is not None else k, nd)
        dilation = make_pair(dilation, nd)
        given = self._padding(padding, nd)
        pads = _pool_padding(self, k, stride, dilation, given, ceil_mode)
        lead, axes = [(0, 0)] * (self.ndim - nd), tuple(range(-nd, 0))
        x = self.pad(lead + pads) if any(p != (0, 0) for p in pads) else self
        windows = x._pool(k, stride, dilation)
        if divisor_override is not None:
            return windows.sum(axis=axes) / divisor_override
        if pads == given and (count_include_pad or all(p == (0, 0) for p in given)):
            return windows.mean(axis=axes)
        # the divisor counts the window's cells inside the padded input (or the input)
        ones = type(self).ones(*self.shape[-nd:], dtype=dtypes.float32, device=self.device)
        if count_include_pad:
            ones = ones.pad(given, value=1.0)
            extra = [(0, a - ga) for (_, a), (_, ga) in zip(pads, given)]
        else:
            extra = pads
        count = ones.pad(extra)._pool(k, stride, dilation).sum(axis=axes)
        return windows.sum(axis=axes) / count.cast(windows.dtype if windows.dtype.is_float
                                                   else dtypes.float32)


def _pool_padding(x, kernel: tuple, stride: tuple, dilation: tuple, padding: list,
                  ceil_mode: bool) -> list[tuple[int, int]]:
    """Per-dim (before, after) padding of a pool; ceil_mode pads the end so the last,
    partial window counts, but only if it starts inside the input or its left padding."""
    nd = len(kernel)
    if x.ndim < nd:
        raise ShapeError(f"pooling with kernel {kernel} needs at least {nd} dims, got shape "
                         f"{x.shape}")
    if any(len(t) != nd for t in (stride, dilation, padding)):
        raise ValueError(f"pooling: kernel {kernel}, stride {stride}, dilation {dilation} and "
                         f"padding {padding} must have one entry per pooled dim")
    for (b, a), k, d in zip(padding, kernel, dilation):
        if max(b, a) > (d * (k - 1) + 1) // 2:
            raise ValueError(f"pool padding {padding} must be at most half of kernel {kernel} "
                             f"(dilation {dilation})")
    if not ceil_mode:
        return padding
    out = []
    for n, k, s, d, (b, a) in zip(x.shape[-nd:], kernel, stride, dilation, padding):
        span = n + b + a - d * (k - 1) - 1
        count = -(-span // s) + 1
        if (count - 1) * s >= n + b:
            count -= 1
        out.append((b, a + max(0, (count - 1) * s - span)))
    return out
