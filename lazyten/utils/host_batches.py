"""Batches gathered on the host, without kernels (lazyten/utils/data.py's fast path): a
batch of a dataset tensor in a host device's memory (CPU, CLANG) or of a numpy array is
one `np.take` from that memory straight into the batch's new buffer; a tensor numpy cannot
view is copied once, and the copy made again only when the tensor's value changes.
"""
from __future__ import annotations
import weakref
from typing import Any, Callable

import numpy as np

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from lazyten.creation import storage_numpy_dtype
from lazyten.lazy import LazyBuffer
from lazyten.realize import Capture
from lazyten.tensor import Tensor, _from_numpy
from runtimes import Buffer, get_runtime
from runtimes.base import HostAllocator

Index = Any  # a batch's indices: a slice (in order), a numpy int64 array or a list


def new_host_tensor(shape: tuple[int, ...], dtype: DType, device: str,
                fill: Callable[[np.ndarray], Any]) -> Tensor:
    """A realized tensor whose elements `fill(out)` writes into `out`, a numpy array over
    its own memory on a host device (no copy after), else a host array then uploaded."""
    runtime = get_runtime(device)
    if not isinstance(runtime.allocator, HostAllocator):
        out = np.empty(shape, storage_numpy_dtype(dtype))
        fill(out)
        return Tensor._wrap(_from_numpy(out, device, dtype))
    buf = Buffer(runtime, prod(shape), dtype)
    fill(buf.ensure_allocated()[0][:buf.nbytes].view(storage_numpy_dtype(dtype)).reshape(shape))
    if Capture.uploaded is not None:  # as Tensor(numpy): a constant of a @jit capture
        Capture.uploaded[id(buf)] = buf
    return Tensor._wrap(LazyBuffer.from_buffer(buf, shape))


def host_array(lazy: LazyBuffer) -> np.ndarray | None:
    """`lazy`'s elements as a numpy view of its realized memory on a host device (one
    strided view without a mask: slices, transposes, flips), else None."""
    base, views = lazy.base, lazy.st.views
    memory = base.realized
    if memory is None or len(views) != 1 or views[0].mask is not None or lazy.dtype != base.dtype \
            or not isinstance(memory.runtime.allocator, HostAllocator):
        return None
    dtype, view = storage_numpy_dtype(lazy.dtype), views[0]
    try:
        return np.ndarray(view.shape, dtype, memory.ensure_allocated()[0][:memory.nbytes],
                          view.offset * dtype.itemsize, [s * dtype.itemsize for s in view.strides])
    except (TypeError, ValueError):  # (not expected: the view stays inside its memory)
        return None


class HostView:
    """A dataset tensor as a numpy view of its memory (realized first if need be), made
    again once the tensor's value changed. It holds its LazyBuffer weakly: a strong
    reference would make an in-place update of the tensor copy all of it first."""

    def __init__(self, t: Tensor):
        lazy = t.lazydata
        self.key = weakref.ref(lazy)
        array, held = host_array(lazy), lazy
        if array is None:
            held = lazy.contiguous()  # (a copy only for a view that numpy cannot express)
            Tensor._wrap(held).realize()
            array = host_array(held)
        assert array is not None
        # the memory `array` reads (held), and the tensor's, which changes with its value
        self.array, self.memory, self.source = array, held.base.realized, lazy.base.realized

    def valid_for(self, t: Tensor) -> bool:
        return self.key() is t.lazydata and t.lazydata.base.realized is self.source


def gather_rows(t: Any, index: Index, cache: list, k: int) -> Any:
    """Rows `index` of tensor or array `t` as a Tensor: one gather, never per sample."""
    if isinstance(t, np.ndarray):  # (host data: an in-order batch is a copy too)
        rows = np.arange(index.start, index.stop) if isinstance(index, slice) else index
        return new_host_tensor((len(rows),) + t.shape[1:], dtypes.from_name(t.dtype.name),
                           Tensor._dev(None), lambda out: np.take(t, rows, axis=0, out=out))
    if isinstance(index, slice) or t.requires_grad:  # a view; or lazily, so gradients flow
        return t[index] if isinstance(index, slice) else t[Tensor(index, device=t.device)]
    if not isinstance(get_runtime(t.device).allocator, HostAllocator):
        return t[Tensor(index, device=t.device)]  # one gather kernel on the device
    view = cache[k]
    if view is None or not view.valid_for(t):
        view = cache[k] = HostView(t)
    return new_host_tensor((len(index),) + t.shape[1:], t.dtype, t.device,
                       lambda out: np.take(view.array, index, axis=0, out=out))
