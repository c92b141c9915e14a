"""Tensor creation: constants, ranges, identity, random tensors and the *_like family.

Constants are lazy (a scalar viewed with zero strides); random numbers come from numpy's
Generator on the host, seeded by `manual_seed`, and are copied in. Mixed into Tensor.
"""
from __future__ import annotations
import functools
import math
import numbers
from typing import TYPE_CHECKING

import numpy as np

from codegen.dtypes import DType, as_dtype, dtypes
from codegen.helpers import argfix, getenv, prod
from lazyten.dims import as_int
from lazyten.errors import ArgumentError, DTypeError, ShapeError
from lazyten.lazy import LazyBuffer
from lazyten.mixin import TensorMixin
from lazyten.realize import Capture, Launch
from runtimes import canonical

if TYPE_CHECKING:  # same package; only for the return annotations
    from lazyten.tensor import Tensor

# numpy has no bfloat16: its values reach numpy as float32 (exact), and its memory holds
# the 16-bit patterns, which numpy sees as uint16
_NP_DTYPES = {d: np.dtype(d.fmt) for d in dtypes.all() if d != dtypes.bfloat16}
_NP_DTYPES[dtypes.bfloat16] = np.dtype(np.float32)


# Integer ranges already uploaded, by (start, stop, step, dtype, device): the one-hot
# comparisons (losses, gather, one_hot, argmax) make one on every call. Tensors share the
# realized buffer: an in-place update of one copies the old value first while the cache
# still holds it (realize.py `_keep_old_value`), so no tensor sees another's update.
_RANGES: dict[tuple, LazyBuffer] = {}
_RANGES_KEPT = 64  # ranges kept, the most recently made
_RANGE_CACHED_SIZE = 1 << 16  # longer ranges are made afresh


def _cacheable(start, stop, step, n: int) -> bool:
    """Integer arguments only: float ranges would need their keys told apart by repr."""
    return n <= _RANGE_CACHED_SIZE and all(type(v) is int for v in (start, stop, step))


def _remember_range(key: tuple, lazy: LazyBuffer) -> None:
    if len(_RANGES) >= _RANGES_KEPT:
        _RANGES.pop(next(iter(_RANGES)), None)  # (another thread may have taken it)
    _RANGES[key] = lazy


def _redraw(draw, dtype: DType, memory) -> None:
    """A replayed host step: fresh random numbers from the host generator into `memory`,
    in the order the function drew them, so a jitted step draws as the eager one does."""
    arr = draw()
    copy_in(memory, bf16_bits(arr) if dtype == dtypes.bfloat16 else arr)


def copy_in(memory, arr: np.ndarray) -> None:
    """arr's bytes into device memory (Tensor(numpy)'s upload, a replayed random draw)."""
    memory.copyin(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)


def default_device() -> str:
    return canonical(getenv("DEVICE", "CPU"))


def to_numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype of `.numpy()` of a tensor of `dtype` (float32 for bfloat16)."""
    return _NP_DTYPES[dtype]


def storage_numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype whose items have the bytes a device buffer of `dtype` holds (made
    once per format: `.numpy()` asks on every call)."""
    found = _STORAGE.get(dtype.fmt)
    if found is None:
        found = _STORAGE[dtype.fmt] = np.dtype(dtype.fmt)
    return found


_STORAGE: dict[str, np.dtype] = {}


def bf16_bits(values) -> np.ndarray:
    """Numbers rounded once to the nearest bfloat16 (ties to even) as uint16 bit patterns.
    NaN stays NaN (quiet, sign kept); magnitudes past the largest bfloat16 give inf.
    float32 is rounded directly; anything else goes through float64 (exact for every
    integer below 2**53) and a round-to-odd float32 (inexact results get their last bit
    set), so the final rounding is the only one, as the kernels do it."""
    x = np.asarray(values)
    if x.dtype == np.float32:
        bits = x.view(np.uint32)
    else:
        wide = x.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            near = wide.astype(np.float32)
            back = near.astype(np.float64)
        bits = near.view(np.uint32)
        inexact = (back != wide) & ~np.isnan(wide)
        toward_zero = bits - (np.abs(back) > np.abs(wide)).astype(np.uint32)
        bits = np.where(inexact, toward_zero | np.uint32(1), bits).astype(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x40)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, quiet, rounded).astype(np.uint16).reshape(x.shape)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 patterns as the float32 values they encode (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _scalar_dtype(value) -> DType:
    if isinstance(value, bool):
        return dtypes.bool
    if isinstance(value, int):
        return dtypes.int64
    return dtypes.default_float


def _check_shape(shape: tuple) -> tuple[int, ...]:
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0:
            raise ValueError(f"invalid shape {shape}: sizes must be non-negative ints")
    return tuple(int(s) for s in shape)



class CreationMixin(TensorMixin):
    """Class methods that make new tensors, and the *_like methods."""
    _rng = np.random.default_rng(getenv("SEED", 0))

    @classmethod
    def _dev(cls, device: str | None) -> str:
        return canonical(device) if device is not None else default_device()

    @classmethod
    def full(cls, shape, fill_value, dtype=None, device=None, requires_grad=None) -> Tensor:
        shape = _check_shape(argfix(shape) if not isinstance(shape, int) else (shape,))
        dtype = as_dtype(dtype) if dtype is not None else _scalar_dtype(fill_value)
        lazy = LazyBuffer.const_like(fill_value, shape, dtype, cls._dev(device))
        return cls(lazy, device=lazy.device, requires_grad=requires_grad)

    @classmethod
    def zeros(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls.full(argfix(*shape), 0.0, dtype=dtype or dtypes.default_float,
                           device=device, requires_grad=requires_grad)

    @classmethod
    def ones(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls.full(argfix(*shape), 1.0, dtype=dtype or dtypes.default_float,
                           device=device, requires_grad=requires_grad)

    @classmethod
    def empty(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        shape = _check_shape(argfix(*shape))
        lazy = LazyBuffer.empty(shape, as_dtype(dtype or dtypes.default_float), cls._dev(device))
        return cls(lazy, device=lazy.device, requires_grad=requires_grad)

    @classmethod
    def arange(cls, start, stop=None, step=1, dtype=None, device=None, requires_grad=None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must be nonzero")
        if dtype is None:
            is_int = all(isinstance(v, int) for v in (start, stop, step))
            dtype = dtypes.int64 if is_int else dtypes.default_float
        n = max(0, math.ceil((stop - start) / step))
        key = (start, stop, step, as_dtype(dtype), cls._dev(device))
        # not inside a JIT capture: the capture would read (and might write in place) the
        # cached memory, which a later eager update of another range tensor overwrites
        cached = _cacheable(start, stop, step, n) and Capture.items is None
        lazy = _RANGES.get(key) if cached else None
        if lazy is None:
            # a cumulative sum of a constant would be O(n^2); build the values on the host
            data = (start + step * np.arange(n, dtype=np.float64)).astype(to_numpy_dtype(key[3]))
            lazy = cls(data, device=key[4], dtype=key[3]).lazydata
            if start == 0 and step == 1 and key[3].is_int and n <= dtypes.max(key[3]):
                lazy.range_len = n  # 0..n-1, every value exact
            if cached:
                _remember_range(key, lazy)
        return cls(lazy, device=lazy.device, requires_grad=requires_grad)

    @classmethod
    def eye(cls, n: int, m: int | None = None, dtype=None, device=None, requires_grad=None) -> Tensor:
        m = n if m is None else m
        rows = cls.arange(n, device=device).reshape(n, 1)
        cols = cls.arange(m, device=device).reshape(1, m)
        out = (rows == cols).cast(dtype or dtypes.default_float)
        return cls(out.lazydata, device=out.device, requires_grad=requires_grad)

    @classmethod
    def manual_seed(cls, seed: int = 0) -> None:
        cls._rng = np.random.default_rng(seed)

    @classmethod
    def _random(cls, shape, sample, dtype, device, requires_grad) -> Tensor:
        shape = _check_shape(argfix(*shape))
        dtype = as_dtype(dtype or dtypes.default_float)

        def draw() -> np.ndarray:
            return sample(cls._rng, shape).astype(to_numpy_dtype(dtype))
        out = cls(draw(), device=device, dtype=dtype, requires_grad=requires_grad)
        if Capture.items is not None and out.numel():  # a JIT capture: replays draw anew
            memory = out.lazydata.buffer()
            assert Capture.uploaded is not None, "a capture notes host uploads"
            Capture.uploaded.pop(id(memory), None)  # refilled, not put back
            Capture.items.append(Launch(None, functools.partial(_redraw, draw, dtype),
                                        [memory]))
        return out

    @classmethod
    def rand(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls._random(shape, lambda r, s: r.random(s), dtype, device, requires_grad)

    @classmethod
    def randn(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls._random(shape, lambda r, s: r.standard_normal(s), dtype, device, requires_grad)

    @classmethod
    def uniform(cls, *shape, low=0.0, high=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls._random(shape, lambda r, s: r.uniform(low, high, s), dtype, device,
                              requires_grad)

    @classmethod
    def normal(cls, *shape, mean=0.0, std=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
        return cls._random(shape, lambda r, s: r.normal(mean, std, s), dtype, device,
                              requires_grad)

    @classmethod
    def randint(cls, *args, size=None, low=None, high=None, dtype=None, device=None,
                requires_grad=None) -> Tensor:
        """Random integers in [low, high): PyTorch's randint(high, size) and
        randint(low, high, size) (int64), or tinygrad's randint(*shape, low=0, high=10)
        (int32)."""
        torch_style = size is not None or (args and isinstance(args[-1], (tuple, list)))
        if torch_style:
            if size is None:
                args, size = args[:-1], args[-1]
            if len(args) > 2 or (args and (low is not None or high is not None) and
                                 len(args) + (low is not None) + (high is not None) > 2):
                raise TypeError(f"randint takes (high, size) or (low, high, size), got {args}")
            if len(args) == 2:
                low, high = args
            elif len(args) == 1:
                low, high = (low if low is not None else 0), args[0]
            if high is None:
                raise TypeError("randint(low, high, size): high is missing")
            shape, dtype = tuple(size), dtype or dtypes.int64
        else:
            shape, dtype = args, dtype or dtypes.int32
            low, high = (0 if low is None else low), (10 if high is None else high)
        low = 0 if low is None else low
        if not high > low:
            raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
        return cls._random(shape, lambda r, s: r.integers(low, high, s), dtype, device,
                           requires_grad)

    @classmethod
    def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        shape = _check_shape(argfix(*shape))
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    @classmethod
    def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
        """He normal: std sqrt(2 / (1 + a^2)) / sqrt(fan_in), fan_in = prod(shape[1:])."""
        shape = _check_shape(argfix(*shape))
        std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
        return cls.normal(*shape, mean=0.0, std=std, **kwargs)

    @classmethod
    def scaled_uniform(cls, *shape, **kwargs) -> Tensor:
        """Uniform on [-1, 1) scaled by 1 / sqrt(numel) (tinygrad's)."""
        shape = _check_shape(argfix(*shape))
        scale = prod(shape) ** -0.5 if prod(shape) else 1.0
        return cls.uniform(*shape, low=-scale, high=scale, **kwargs)

    @classmethod
    def glorot_uniform(cls, *shape, **kwargs) -> Tensor:
        """Xavier uniform: bound sqrt(6 / (shape[0] + prod(shape[1:])))."""
        shape = _check_shape(argfix(*shape))
        fans = shape[0] + prod(shape[1:]) if shape else 1
        bound = math.sqrt(6 / fans) if fans else 1.0
        return cls.uniform(*shape, low=-bound, high=bound, **kwargs)

    def _like(self, maker, *args, **kwargs) -> Tensor:
        kwargs.setdefault("dtype", self.dtype)
        kwargs.setdefault("device", self.device)
        return maker(*args, **kwargs)

    def zeros_like(self, **kw) -> Tensor:
        return self._like(type(self).zeros, self.shape, **kw)

    def ones_like(self, **kw) -> Tensor:
        return self._like(type(self).ones, self.shape, **kw)

    def full_like(self, fill_value, **kw) -> Tensor:
        return self._like(type(self).full, self.shape, fill_value, **kw)

    def empty_like(self, **kw) -> Tensor:
        return self._like(type(self).empty, self.shape, **kw)

    def rand_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(type(self).rand, self.shape, **kw)

    def randn_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(type(self).randn, self.shape, **kw)

    def uniform_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(type(self).uniform, self.shape, **kw)

    def normal_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(type(self).normal, self.shape, **kw)

    @classmethod
    def linspace(cls, start, end, steps: int, dtype=None, device=None,
                 requires_grad=None) -> Tensor:
        """`steps` evenly spaced values from start to end, both exact: as PyTorch, the first
        half is start + i * step and the second end - (steps - 1 - i) * step (one step
        gives start), in the dtype's own arithmetic (float64 for integer dtypes, which
        truncate). Built on the host like arange."""
        steps = as_int(steps, "linspace: steps")
        if steps < 0:
            raise ValueError(f"linspace: steps must be non-negative, got {steps}")
        for name, value in (("start", start), ("end", end)):
            if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
                raise TypeError(f"linspace: {name} must be a number, got {value!r}")
        dtype = as_dtype(dtype or dtypes.default_float)
        if dtype == dtypes.bool:
            raise DTypeError("linspace does not support dtype bool (as PyTorch)")
        if dtype.is_float:
            math_type = to_numpy_dtype(dtype).type
        else:  # PyTorch converts start and end to the dtype first, then steps in double
            math_type, start, end = np.float64, int(start), int(end)
        first, last = math_type(start), math_type(end)
        index = np.arange(steps)
        step = (last - first) / math_type(max(steps - 1, 1))
        with np.errstate(over="ignore", invalid="ignore"):
            forward = first + step * index.astype(math_type)
            backward = last - step * (steps - 1 - index).astype(math_type)
        data = np.where(index < steps // 2, forward, backward).astype(math_type)
        data[:1] = first  # one step is start (PyTorch fills it), not end
        return cls(data.astype(to_numpy_dtype(dtype)), device=device, dtype=dtype,
                   requires_grad=requires_grad)

    def meshgrid(self, *tensors, indexing: str = "ij") -> tuple:
        """Coordinate grids of 0-d or 1-d tensors as expanded views (no copies); 'ij'
        (PyTorch's default) gives shape (n0, n1, ...), 'xy' swaps the first two dims.
        `Tensor.meshgrid(a, b)`, `Tensor.meshgrid([a, b])` and `a.meshgrid(b)` agree."""
        tensors = argfix(self, *tensors)
        if indexing not in ("ij", "xy"):
            raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        if not tensors:
            raise ValueError("meshgrid needs at least one tensor")
        for t in tensors:
            if not isinstance(t, CreationMixin):
                raise TypeError(f"meshgrid takes tensors, got {type(t).__name__}")
            if t.ndim > 1:
                raise ShapeError(f"meshgrid: tensors must be 0-d or 1-d, got shapes "
                                 f"{[u.shape for u in tensors]}")
        if len({(t.dtype, t.device) for t in tensors}) != 1:
            raise TypeError(f"meshgrid: tensors must share a dtype and device, got "
                            f"{[(t.dtype.name, t.device) for t in tensors]}")
        order = list(range(len(tensors)))
        if indexing == "xy" and len(tensors) > 1:
            order[0], order[1] = 1, 0
        shape = tuple(tensors[k].numel() for k in order)
        grids = []
        for k, t in enumerate(tensors):
            view = [1] * len(tensors)
            view[order.index(k)] = t.numel()
            grids.append(t.reshape(view).expand(shape))
        return tuple(grids)
