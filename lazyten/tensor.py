"""Tensor: the user-facing, eager-looking, lazily evaluated array.

Each method records autograd Functions over LazyBuffers; nothing runs until
`realize()`, `numpy()`, `item()` or `tolist()`. Movement, reduction and neural-network
methods live in mixins (movement.py, reduce.py, nnops.py) so each file stays readable.
"""
from __future__ import annotations
from typing import Any

import numpy as np

from codegen.dtypes import DType, as_dtype, dtypes
from codegen.helpers import prod
from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer
from lazyten.attention import AttentionMixin
from lazyten.autograd import primitives as F
from lazyten.autograd.engine import describe, note_root, propagate, seed, take_roots
from lazyten.autograd.function import Function, hold
from lazyten.compat import CompatMixin
from lazyten.counting import CountingMixin
from lazyten.creation import (CreationMixin, _scalar_dtype, bf16_bits, bf16_values, copy_in,
                              default_device, storage_numpy_dtype, to_numpy_dtype)
from lazyten.einsum import EinsumMixin
from lazyten.elementwise import ElementwiseMixin
from lazyten.indexing import IndexingMixin
from lazyten.inplace import InPlaceMixin
from lazyten.interop import InteropMixin
from lazyten.logic import LogicMixin
from lazyten.mixin import MixinType
from lazyten.movement import MovementMixin
from lazyten.losses import LossMixin
from lazyten.nnops import NNMixin
from lazyten.numeric import NumericMixin
from lazyten.padding import PaddingMixin
from lazyten.pointwise import PointwiseMixin
from lazyten.pooling import PoolingMixin
from lazyten.realize import Capture, realize
from lazyten.rearrange import RearrangeMixin
from lazyten.reduce import ReduceMixin
from lazyten.resize import ResizeMixin
from lazyten.scatter import ScatterMixin
from lazyten.sorting import SortingMixin
from lazyten.stats import StatsMixin
from lazyten.traced_graph import traced_call
from lazyten.switches import _NO_GRAD, _TRAINING, no_grad, switch, training_mode  # noqa: F401
from runtimes import Buffer, canonical, get_runtime


class _TensorType(MixinType):
    """`Tensor.no_grad` and `Tensor.training` read and set the calling thread's switches."""
    no_grad = switch(_NO_GRAD)
    training = switch(_TRAINING)


class Tensor(CreationMixin, ElementwiseMixin, LogicMixin, MovementMixin, IndexingMixin, ReduceMixin,
             NNMixin, PoolingMixin, SortingMixin, RearrangeMixin, EinsumMixin, PaddingMixin,
             LossMixin, StatsMixin, ResizeMixin, AttentionMixin, InPlaceMixin, InteropMixin,
             CompatMixin, PointwiseMixin, ScatterMixin, NumericMixin, CountingMixin,
             metaclass=_TensorType):
    """A lazily evaluated n-dimensional array with autograd."""
    # what a new tensor holds until set (`_wrap` sets only lazydata: every op's result
    # goes through it)
    requires_grad: bool | None = None
    grad: Tensor | None = None
    _ctx: Function | None = None
    _parents: tuple[Tensor, ...] = ()
    _version = 0  # bumped by each in-place update that changes the graph (inplace.py)
    _previous: Tensor | None = None  # the value and graph before that update
    _data_of: Tensor | None = None  # `.data` of that tensor: in-place updates land there too
    train = staticmethod(training_mode)  # `with Tensor.train():`, as Tensor.no_grad

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
            lazy = _from_numpy(_to_array(data, dtype), device, dtype)
        if lazy.device != device and not isinstance(data, (LazyBuffer, Tensor)):
            lazy = lazy.copy_to_device(device)
        if requires_grad and not lazy.dtype.is_float:
            raise RuntimeError(f"only floating point tensors can require gradients, this one "
                               f"is {lazy.dtype.name} (as in PyTorch)")
        self.lazydata: LazyBuffer = lazy
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self._ctx: Function | None = None
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
        return len(self.lazydata.shape)

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
        realize([self.lazydata, *[t.lazydata for t in others]] if others else [self.lazydata])
        return self

    def numpy(self) -> np.ndarray:
        """Realize and copy to a numpy array (bfloat16 comes back as float32, exact)."""
        shape = self.lazydata.shape
        if 0 in shape:  # no data, but its index checks still run
            realize([self.lazydata])
            return np.zeros(shape, dtype=to_numpy_dtype(self.dtype))
        lazy = self.lazydata.contiguous()
        realize([lazy])
        out = np.empty(shape, dtype=storage_numpy_dtype(lazy.dtype))
        lazy.buffer().copyout(out.data.cast("B"))  # (its bytes: no numpy views made)
        return bf16_values(out) if lazy.dtype.name == "bfloat16" else out

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def contiguous(self) -> Tensor:
        return self.apply(F.Contiguous)

    def to(self, *args, device: str | None = None, dtype: Any = None) -> Tensor:
        """This tensor on another device (a copy; gradients flow back) and/or cast, in
        PyTorch's spellings: to("CUDA"), to(dtypes.half), to(device, dtype), to(other)."""
        device, dtype = to_args(args, device, dtype)
        out = self if dtype is None else self.cast(dtype)
        if device is None:
            return out if out is not self else self._same()
        return out._to_device(device)

    def _to_device(self, device: str) -> Tensor:
        device = canonical(device)
        if device == self.device:
            return self._same()
        out = Tensor(self.lazydata.copy_to_device(device), device=device,
                     requires_grad=self.requires_grad)
        if self.requires_grad and not Tensor.no_grad:
            out._ctx, out._parents = F.ToDevice(self.device, [True]), (self,)
        return out

    def detach(self) -> Tensor:
        """The same value outside the autograd graph (optimisers detach every parameter
        and gradient on every step, so this skips __init__'s argument checks)."""
        out = Tensor._wrap(self.lazydata)
        out.requires_grad = False
        return out

    def clone(self) -> Tensor:
        """A copy in its own memory (gradients flow through, as in PyTorch)."""
        return self.apply(F.Clone)

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
        if Capture.assigned is not None and target._base is None and \
                target.op is LoadOps.ASSIGN and target.realized is None:
            # under @jit, a second update of one tensor in a call must write into the same
            # memory as the first (a replay rewrites only that memory): run the first now
            realize([target])
        if target._base is None and target.realized is not None:
            self.lazydata = target.assign(value.lazydata)
            if Capture.assigned is not None:  # the JIT keeps values taken from it
                Capture.assigned.append(self)
        else:
            self.lazydata = value.lazydata
        if self._data_of is not None:  # `p.data.clamp_(...)`: p changes too [D168]
            self._data_of.lazydata = self.lazydata
        return self

    def _same(self) -> Tensor:
        """This value as a new Tensor object: an op that changes nothing (a reshape to the
        same shape, a cast to the same dtype) still returns a new tensor, so an in-place
        update of one (`assign`, `+=`) never shows through the other."""
        if not self.requires_grad or Tensor.no_grad:
            return Tensor._wrap(self.lazydata)
        return self.apply(F.Same)

    def replace(self, other: Tensor) -> Tensor:
        self.lazydata = other.lazydata
        return self

    # ---- autograd ----
    def apply(self, fn: type[Function], *others: Tensor, **kwargs) -> Tensor:
        """Run an autograd Function with this tensor (and `others`) as inputs."""
        # forward saves what backward needs only if recording (the switch's variable is
        # read directly: this runs once per op, so one and two inputs are spelt out)
        record = not _NO_GRAD.get()
        tensors: tuple[Tensor, ...]
        if fn.traced:  # one graph node forward, one per gradient backward (D79, D80)
            tensors = (self,) + others
            needs: list[bool] | None = None
            if record:
                needs = [bool(t.requires_grad) for t in tensors]
                if True not in needs:
                    needs = None
            found = traced_call(fn, (self.lazydata,) if not others else
                                tuple([t.lazydata for t in tensors]), kwargs, needs)
            if found is not None:
                out = Tensor._wrap(found[0])
                if found[1] is not None and out.lazydata.dtype.is_float:
                    out.requires_grad, out._ctx, out._parents = True, found[1], tensors
                    found[1].versions = tuple([t._version for t in tensors])
                return out
        # (`_wrap` and the inputs' versions, see autograd.engine.inputs, are spelt out)
        out = object.__new__(Tensor)
        if not others:
            ctx = fn([record and bool(self.requires_grad)])
            out.lazydata = lazy = ctx.forward(self.lazydata, **kwargs)
            if ctx.requires_grad and lazy.dtype.is_float:  # as in PyTorch: only floats
                out.requires_grad, out._ctx, out._parents = True, ctx, (self,)  # have grads
                ctx.versions = (self._version,)
                hold(ctx)
        elif len(others) == 1:
            other = others[0]
            ctx = fn([record and bool(self.requires_grad),
                      record and bool(other.requires_grad)])
            out.lazydata = lazy = ctx.forward(self.lazydata, other.lazydata, **kwargs)
            if ctx.requires_grad and lazy.dtype.is_float:
                out.requires_grad, out._ctx, out._parents = True, ctx, (self, other)
                ctx.versions = (self._version, other._version)
                hold(ctx)
        else:
            tensors = (self,) + others
            ctx = fn([record and bool(t.requires_grad) for t in tensors])
            out.lazydata = lazy = ctx.forward(*[t.lazydata for t in tensors], **kwargs)
            if ctx.requires_grad and lazy.dtype.is_float:
                out.requires_grad, out._ctx, out._parents = True, ctx, tensors
                ctx.versions = tuple([t._version for t in tensors])
                hold(ctx)
        return out

    @classmethod
    def _wrap(cls, lazy: LazyBuffer) -> Tensor:
        """A Tensor around a LazyBuffer an op just made (what __init__ does for one, without
        checking arguments: every op's result goes through here)."""
        out = object.__new__(cls)
        out.lazydata = lazy  # the rest are the class's defaults
        return out

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> Tensor:
        """Accumulate d(self)/d(leaf) into each leaf's `.grad` (lazily), or into `inputs`'
        only; `retain_graph` keeps the graph for another backward (D170). A `.grad` an
        earlier backward left unread is computed first, all of them in one realize: added
        to lazily, it would hold that backward's graph and every buffer it reads, and the
        next one's, for as long as nobody reads it (D165)."""
        if create_graph:
            raise NotImplementedError(_NO_HIGHER_ORDER.format("backward(create_graph=True)"))
        wanted = None if inputs is None else _wanted(inputs)
        found = [(node, g) for node, g in propagate(self, seed(self, gradient, "backward"),
                                                    free=not retain_graph)
                 if (node._ctx is None and node.requires_grad if wanted is None
                     else id(node) in wanted)]
        pending = [node.grad for node, _ in found if node.grad is not None and
                   _holds_a_graph(node.grad.lazydata)]
        if pending:  # (with the values earlier backwards were called on, D167)
            pending[0].realize(*pending[1:], *take_roots())
        for node, g in found:
            new = Tensor._wrap(g)  # (a gradient is on its tensor's device)
            node.grad = new if node.grad is None else node.grad + new
        note_root(self)
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """[d(self)/d(t) for t in targets] (torch.autograd.grad): `.grad` is left alone and
        the graph is kept, so gradient() or backward() can follow."""
        for t in targets:
            if not isinstance(t, Tensor) or not t.requires_grad:
                raise RuntimeError(f"gradient(): target {describe(t)} does not require grad; "
                                   "create it with requires_grad=True so the graph records it")
        found: dict[int, LazyBuffer | None] = {id(t): None for t in targets}
        for node, g in propagate(self, seed(self, gradient, "gradient"), free=False):
            if id(node) in found:
                found[id(node)] = g
        for i, t in enumerate(targets):
            if found[id(t)] is None:
                raise RuntimeError(f"gradient(): target {i} ({describe(t)}) was not used to "
                                   "compute this tensor")
        return [Tensor(found[id(t)], device=t.device) for t in targets]

    # ---- dtype ----
    # below, methods named `float`, `int`, `bool` hide those builtins from the annotations
    # of the rest of the class body: annotations that name the builtins go above them
    def is_floating_point(self) -> bool:
        return self.dtype.is_float

    def cast(self, dtype) -> Tensor:
        dtype = as_dtype(dtype)
        return self._same() if dtype == self.dtype else self.apply(F.Cast, dtype=dtype)

    def bitcast(self, dtype) -> Tensor:
        """The same bits read as `dtype`, of the same itemsize (PyTorch's `view(dtype)`).
        Not differentiable: the result never requires grad."""
        dtype = as_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize or dtypes.bool in (dtype, self.dtype):
            raise TypeError(f"bitcast needs two non-bool dtypes of one itemsize, got "
                            f"{self.dtype.name} ({self.dtype.itemsize} bytes) to {dtype.name} "
                            f"({dtype.itemsize} bytes)")
        return Tensor(self.lazydata.bitcast(dtype), device=self.device)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def bfloat16(self) -> Tensor:
        return self.cast(dtypes.bfloat16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)


def _to_array(data, dtype: DType | None) -> np.ndarray:
    """`data` as a numpy array holding the bytes of a buffer of `dtype` (or of the dtype
    numpy's type names); numbers for bfloat16 are rounded to it on the host."""
    if isinstance(data, np.ndarray) and dtype is None and data.dtype.name not in \
            {d.name for d in dtypes.all()}:
        raise TypeError(f"unsupported numpy dtype {data.dtype}; supported: "
                        f"{', '.join(d.name for d in dtypes.all())}")
    if dtype == dtypes.bfloat16:
        return bf16_bits(np.asarray(data))
    if dtype is not None:
        return np.asarray(data, dtype=to_numpy_dtype(dtype))
    arr = np.asarray(data)
    if not isinstance(data, (np.ndarray, np.generic)):  # Python lists: PyTorch's defaults
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
    if arr.dtype.name not in {d.name for d in dtypes.all()}:
        raise TypeError(f"cannot make a tensor from data of numpy dtype {arr.dtype}")
    return arr


def _from_numpy(arr: np.ndarray, device: str, dtype: DType | None = None) -> LazyBuffer:
    """A realized buffer holding `arr`'s bytes (a bfloat16 buffer takes uint16 patterns)."""
    dtype = dtype or dtypes.from_name(arr.dtype.name)
    buf = Buffer(get_runtime(device), arr.size, dtype)
    if arr.size:
        copy_in(buf, arr)
        if Capture.uploaded is not None:  # a JIT capture: replays do not upload again
            Capture.uploaded[id(buf)] = buf
    return LazyBuffer.from_buffer(buf, tuple(arr.shape))


def to_args(args: tuple, device: str | None, dtype: Any) -> tuple[str | None, Any]:
    """(device, dtype) from `to`'s arguments in PyTorch's spellings: a device, a dtype,
    both, or a tensor (its device and dtype); None where one is not given."""
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, str) and device is None:
            device = arg
        elif dtype is None and not isinstance(arg, str):
            dtype = arg
        else:
            raise TypeError(f"to() takes a device, a dtype, both, or a tensor: got {args}")
    return device, dtype


def _holds_a_graph(lazy: LazyBuffer) -> bool:
    """Unrealized, and more than a constant (zero_grad(set_to_none=False)'s zeros)."""
    base = lazy._base or lazy
    return base.realized is None and base.op is not LoadOps.CONST


_NO_HIGHER_ORDER = ("{}: higher-order gradients are not built in lazyten (a gradient's graph "
                    "is not itself differentiable), so a loss that reads a gradient (a "
                    "gradient penalty, MAML) cannot be differentiated again")


def _wanted(inputs: Any) -> set[int]:
    """backward(inputs=...): the tensors to accumulate into, by identity, each checked."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"backward(inputs=...): {describe(t)} does not require grad")
    return {id(t) for t in inputs}

