"""Tensor: the user-facing, eager-looking, lazily evaluated array.

Each method records autograd Functions over LazyBuffers; nothing runs until
`realize()`, `numpy()`, `item()` or `tolist()`. Movement, reduction and neural-network
methods live in mixins (movement.py, reduce.py, nnops.py) so each file stays readable.
"""
from __future__ import annotations
import math
from contextlib import contextmanager
from typing import Any, Sequence

import numpy as np

from codegen.dtypes import DType, as_dtype, dtypes, promote, scalar_result
from codegen.helpers import argfix, getenv, prod
from codegen.ops import BinaryOps
from lazyten import function as F
from lazyten.lazy import LazyBuffer
from lazyten.elementwise import ElementwiseMixin
from lazyten.movement import MovementMixin
from lazyten.nnops import NNMixin
from lazyten.realize import realize
from lazyten.reduce import ReduceMixin
from runtimes import Buffer, canonical, get_runtime

_NP_DTYPES = {d: np.dtype(d.fmt) for d in dtypes.all()}


def default_device() -> str:
    return canonical(getenv("DEVICE", "CPU"))


def to_numpy_dtype(dtype: DType) -> np.dtype:
    return _NP_DTYPES[dtype]


class Tensor(ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin):
    """A lazily evaluated n-dimensional array with autograd."""
    training: bool = False
    no_grad: bool = False
    _rng = np.random.default_rng(getenv("SEED", 0))

    def __init__(self, data: Any, device: str | None = None, dtype: Any = None,
                 requires_grad: bool | None = None):
        device = canonical(device) if device is not None else default_device()
        dtype = as_dtype(dtype) if dtype is not None else None
        if isinstance(data, LazyBuffer):
            lazy = data if dtype is None else data.cast(dtype)
        elif isinstance(data, Tensor):
            lazy = data.lazydata if dtype is None else data.lazydata.cast(dtype)
        elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
            dtype = dtype or _scalar_dtype(data)
            lazy = LazyBuffer.const_like(data, (), dtype, device)
        else:
            lazy = _from_numpy(_to_array(data, dtype), device)
        if lazy.device != device and not isinstance(data, (LazyBuffer, Tensor)):
            lazy = lazy.copy_to_device(device)
        self.lazydata: LazyBuffer = lazy
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self._ctx: F.Function | None = None
        self._parents: tuple[Tensor, ...] = ()

    # ---- properties ----
    @property
    def shape(self) -> tuple[int, ...]:
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        return self.lazydata.dtype

    @property
    def device(self) -> str:
        return self.lazydata.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = "realized" if self.lazydata.is_realized else "lazy"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"<Tensor shape={self.shape} dtype={self.dtype.name} device={self.device} {state}{grad}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
        return bool(self.item())

    # ---- realization ----
    def realize(self, *others: Tensor) -> Tensor:
        """Run every kernel needed to compute this tensor (and `others`)."""
        realize([t.lazydata for t in (self,) + others])
        return self

    def numpy(self) -> np.ndarray:
        """Realize and copy to a numpy array."""
        if self.numel() == 0:
            return np.zeros(self.shape, dtype=to_numpy_dtype(self.dtype))
        lazy = self.lazydata.contiguous()
        realize([lazy])
        out = np.empty(self.shape, dtype=to_numpy_dtype(self.dtype))
        lazy.buffer().copyout(memoryview(out.reshape(-1).view(np.uint8)))
        return out

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def data(self) -> np.ndarray:
        return self.numpy()

    def contiguous(self) -> Tensor:
        return self.apply(F.Contiguous)

    def to(self, device: str) -> Tensor:
        """This tensor on another device (a copy; gradients flow back)."""
        device = canonical(device)
        if device == self.device:
            return self
        out = Tensor(self.lazydata.copy_to_device(device), device=device,
                     requires_grad=self.requires_grad)
        if self.requires_grad and not Tensor.no_grad:
            out._ctx, out._parents = _ToDevice(self.device, [True]), (self,)
        return out

    def detach(self) -> Tensor:
        return Tensor(self.lazydata, device=self.device, requires_grad=False)

    def clone(self) -> Tensor:
        return Tensor(self.lazydata.contiguous() if self.lazydata._base is None else
                      self.lazydata, device=self.device) + 0

    def assign(self, value: Tensor | Any) -> Tensor:
        """Write `value` into this tensor's memory in place (used by optimisers)."""
        if not isinstance(value, Tensor):
            value = Tensor.full(self.shape, value, dtype=self.dtype, device=self.device)
        if value.shape != self.shape:
            raise ValueError(f"assign shape mismatch: {self.shape} <- {value.shape}")
        if value.device != self.device:
            raise ValueError(f"assign device mismatch: {self.device} <- {value.device}")
        if value.dtype != self.dtype:
            raise TypeError(f"assign dtype mismatch: {self.dtype} <- {value.dtype}")
        target = self.lazydata
        if target._base is None and target.realized is not None:
            self.lazydata = target.assign(value.lazydata)
        else:
            self.lazydata = value.lazydata
        return self

    def replace(self, other: Tensor) -> Tensor:
        self.lazydata = other.lazydata
        return self

    # ---- autograd ----
    def apply(self, fn: type[F.Function], *others: Tensor, **kwargs) -> Tensor:
        """Run an autograd Function with this tensor (and `others`) as inputs."""
        tensors = (self,) + others
        ctx = fn([bool(t.requires_grad) for t in tensors])
        out = Tensor(ctx.forward(*[t.lazydata for t in tensors], **kwargs), device=self.device)
        if ctx.requires_grad and not Tensor.no_grad:
            out.requires_grad, out._ctx, out._parents = True, ctx, tensors
        return out

    def _toposort(self) -> list[Tensor]:
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node._parents if p._ctx is not None or p.requires_grad)
        return order

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into each leaf's `.grad` (lazily)."""
        if gradient is None:
            if self.numel() != 1:
                raise ValueError(f"backward() on a tensor of shape {self.shape} needs an "
                                 "explicit gradient (only one-element tensors imply 1)")
            gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient shape {gradient.shape} != tensor shape {self.shape}")
        if gradient.dtype != self.dtype or gradient.device != self.device:
            raise TypeError(f"gradient is {gradient.dtype} on {gradient.device} but the tensor "
                            f"is {self.dtype} on {self.device}")
        if self._ctx is None and not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad")
        grads = {id(self): gradient.lazydata}
        for node in reversed(self._toposort()):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node._ctx is None:
                if getattr(node, "_freed", False):
                    raise RuntimeError("backward through a graph a second time: its saved "
                                       "values were freed by the first backward()")
                if node.requires_grad:
                    new = Tensor(g, device=node.device)
                    node.grad = new if node.grad is None else node.grad + new
                continue
            in_grads = node._ctx.backward(g)
            if not isinstance(in_grads, tuple):
                in_grads = (in_grads,)
            for parent, pg in zip(node._parents, in_grads):
                if pg is None or not parent.requires_grad:
                    continue
                assert pg.shape == parent.shape, f"grad shape {pg.shape} != {parent.shape}"
                prev = grads.get(id(parent))
                grads[id(parent)] = pg if prev is None else prev.e(BinaryOps.ADD, pg)
            node._ctx, node._parents = None, ()  # free the graph, as PyTorch does
            node._freed = True
        return self

    # ---- creation ----
    @staticmethod
    def _dev(device: str | None) -> str:
        return canonical(device) if device is not None else default_device()

    @staticmethod
    def full(shape, fill_value, dtype=None, device=None, requires_grad=None) -> Tensor:
        shape = _check_shape(argfix(shape) if not isinstance(shape, int) else (shape,))
        dtype = as_dtype(dtype) if dtype is not None else _scalar_dtype(fill_value)
        lazy = LazyBuffer.const_like(fill_value, shape, dtype, Tensor._dev(device))
        return Tensor(lazy, device=lazy.device, requires_grad=requires_grad)

    @staticmethod
    def zeros(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor.full(argfix(*shape), 0.0, dtype=dtype or dtypes.default_float,
                           device=device, requires_grad=requires_grad)

    @staticmethod
    def ones(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor.full(argfix(*shape), 1.0, dtype=dtype or dtypes.default_float,
                           device=device, requires_grad=requires_grad)

    @staticmethod
    def empty(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        shape = _check_shape(argfix(*shape))
        lazy = LazyBuffer.empty(shape, as_dtype(dtype or dtypes.default_float), Tensor._dev(device))
        return Tensor(lazy, device=lazy.device, requires_grad=requires_grad)

    @staticmethod
    def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad=None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange step must be nonzero")
        if dtype is None:
            is_int = all(isinstance(v, int) for v in (start, stop, step))
            dtype = dtypes.int64 if is_int else dtypes.default_float
        n = max(0, math.ceil((stop - start) / step))
        # a cumulative sum of a constant would be O(n^2); build the values on the host
        data = (start + step * np.arange(n, dtype=np.float64)).astype(to_numpy_dtype(as_dtype(dtype)))
        return Tensor(data, device=device, dtype=dtype, requires_grad=requires_grad)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=None) -> Tensor:
        m = n if m is None else m
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        out = (rows == cols).cast(dtype or dtypes.default_float)
        out.requires_grad = requires_grad
        return out

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        Tensor._rng = np.random.default_rng(seed)

    @staticmethod
    def _random(shape, sample, dtype, device, requires_grad) -> Tensor:
        shape = _check_shape(argfix(*shape))
        dtype = as_dtype(dtype or dtypes.default_float)
        data = sample(Tensor._rng, shape).astype(to_numpy_dtype(dtype))
        return Tensor(data, device=device, dtype=dtype, requires_grad=requires_grad)

    @staticmethod
    def rand(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor._random(shape, lambda r, s: r.random(s), dtype, device, requires_grad)

    @staticmethod
    def randn(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor._random(shape, lambda r, s: r.standard_normal(s), dtype, device, requires_grad)

    @staticmethod
    def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor._random(shape, lambda r, s: r.uniform(low, high, s), dtype, device,
                              requires_grad)

    @staticmethod
    def normal(*shape, mean=0.0, std=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
        return Tensor._random(shape, lambda r, s: r.normal(mean, std, s), dtype, device,
                              requires_grad)

    @staticmethod
    def randint(*shape, low=0, high=10, dtype=None, device=None) -> Tensor:
        return Tensor._random(shape, lambda r, s: r.integers(low, high, s),
                              dtype or dtypes.int32, device, None)

    @staticmethod
    def kaiming_uniform(*shape, a: float = 0.01, **kwargs) -> Tensor:
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(argfix(*shape)[1:]))
        return Tensor.uniform(*shape, low=-bound, high=bound, **kwargs)

    def _like(self, maker, *args, **kwargs) -> Tensor:
        kwargs.setdefault("dtype", self.dtype)
        kwargs.setdefault("device", self.device)
        return maker(*args, **kwargs)

    def zeros_like(self, **kw) -> Tensor:
        return self._like(Tensor.zeros, self.shape, **kw)

    def ones_like(self, **kw) -> Tensor:
        return self._like(Tensor.ones, self.shape, **kw)

    def full_like(self, fill_value, **kw) -> Tensor:
        return self._like(Tensor.full, self.shape, fill_value, **kw)

    def empty_like(self, **kw) -> Tensor:
        return self._like(Tensor.empty, self.shape, **kw)

    def rand_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(Tensor.rand, self.shape, **kw)

    def randn_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(Tensor.randn, self.shape, **kw)

    def uniform_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(Tensor.uniform, self.shape, **kw)

    def normal_like(self, **kw) -> Tensor:
        kw.setdefault("dtype", self.dtype if self.dtype.is_float else None)
        return self._like(Tensor.normal, self.shape, **kw)

    # ---- dtype ----
    def cast(self, dtype) -> Tensor:
        dtype = as_dtype(dtype)
        return self if dtype == self.dtype else self.apply(F.Cast, dtype=dtype)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def is_floating_point(self) -> bool:
        return self.dtype.is_float


class _ToDevice(F.Function):
    """Gradient of a device copy: copy the gradient back."""

    def __init__(self, device: str, needs: list[bool]):
        super().__init__(needs)
        self.device = device

    def backward(self, grad):
        return grad.copy_to_device(self.device)


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


def _to_array(data, dtype: DType | None) -> np.ndarray:
    if isinstance(data, np.ndarray) and dtype is None and data.dtype.name not in \
            {d.name for d in dtypes.all()}:
        raise TypeError(f"unsupported numpy dtype {data.dtype}; supported: "
                        f"{', '.join(d.name for d in dtypes.all())}")
    if dtype is not None:
        return np.asarray(data, dtype=to_numpy_dtype(dtype))
    arr = np.asarray(data)
    if not isinstance(data, np.ndarray):  # Python lists follow PyTorch's defaults
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
    if arr.dtype.name not in {d.name for d in dtypes.all()}:
        raise TypeError(f"cannot make a tensor from data of numpy dtype {arr.dtype}")
    return arr


def _from_numpy(arr: np.ndarray, device: str) -> LazyBuffer:
    dtype = dtypes.from_name(arr.dtype.name)
    buf = Buffer(get_runtime(device), arr.size, dtype)
    if arr.size:
        buf.copyin(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)))
    return LazyBuffer.from_buffer(buf, tuple(arr.shape))


@contextmanager
def _training(mode: bool = True):
    """Inside this block Tensor.training is `mode` (dropout and batchnorm read it)."""
    previous, Tensor.training = Tensor.training, mode
    try:
        yield
    finally:
        Tensor.training = previous


Tensor.train = staticmethod(_training)


@contextmanager
def no_grad():
    """Inside this block no autograd graph is recorded."""
    previous, Tensor.no_grad = Tensor.no_grad, True
    try:
        yield
    finally:
        Tensor.no_grad = previous

