"""LazyBuffer: a node of the lazy graph. Building one runs nothing.

A LazyBuffer is either a *base* (an op over source LazyBuffers, or realized memory) or a
*view* of a base through a ShapeTracker (movement ops never copy). The scheduler cuts the
graph of bases into kernels; the engine realizes them and drops the ops so unreachable
intermediate buffers are freed.
"""
from __future__ import annotations
import functools
import itertools
import threading
import weakref
from typing import Any, Callable

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.ops import BinaryOps, LoadOps, ReduceOps, TernaryOps, UnaryOps
from codegen.shape.shapetracker import ShapeTracker
from runtimes import Buffer, get_runtime


class LazyBuffer:
    """A lazily computed array: (device, shape via `st`, dtype) plus how to compute it."""
    # flags realized with this base that raise if its indices were out of range
    # (lazyten/index_check.py); `index_check` marks such a flag
    checks: tuple[LazyBuffer, ...] = ()
    index_check: tuple | None = None
    # n where this realized base holds 0..n-1 (Tensor.arange): kernels that compare with it
    # may read what it picks directly (lazyten/indirect.py, D69)
    range_len = 0
    # a realized base lazyten made for itself and never writes (an interpolation's weights,
    # lazyten/resize.py): a traced Function may read it as a constant of its trace
    frozen = False
    # traced graphs (lazyten/traced_graph.py, D80): on a forward's GRAPH node, the values
    # its graph computed in an earlier schedule (trace node id -> LazyBuffer), which a
    # later expansion reads instead of computing again; on such a value, (id of that
    # GRAPH node, trace node id), so that a cached schedule saves it again
    saved: dict[int, LazyBuffer] | None = None
    origin: tuple[int, int] | None = None
    # how many recorded autograd Functions keep this value for a backward not built yet
    # (autograd/function.py `hold`, D146): a kernel that computes it on the way to
    # something else stores it, so a backward built after the forward was realized
    # (`loss.item()` first) reads it instead of computing it again
    held = 0
    # a realized base's part of the schedule cache's key (schedule_cache.py), made once:
    # its shape, dtype, device and range_len never change
    key_part: tuple | None = None

    def __init__(self, device: str, st: ShapeTracker, dtype: DType, op=None,
                 src: tuple[LazyBuffer, ...] = (), arg: Any = None,
                 base: LazyBuffer | None = None):
        self.device, self.st, self.dtype = device, st, dtype
        self.shape = st.shape
        self._base = base
        if base is None:
            self.op, self.src, self.arg = op, src, arg
            self.realized: Buffer | None = None

    # ---- identity ----
    @property
    def base(self) -> LazyBuffer:
        return self if self._base is None else self._base

    @property
    def is_realized(self) -> bool:
        return self.base.realized is not None

    def __repr__(self) -> str:
        kind = "realized" if self.is_realized else getattr(self.base.op, "name", "?")
        view = "" if self._base is None else " view"
        return f"<LB {self.device} {self.shape} {self.dtype.name} {kind}{view}>"

    # ---- creation ----
    @staticmethod
    def loadop(op: LoadOps, shape: tuple[int, ...], dtype: DType, device: str,
               arg: Any = None, src: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
        return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, op, src, arg)

    @staticmethod
    def const_like(value, shape: tuple[int, ...], dtype: DType, device: str) -> LazyBuffer:
        """A constant broadcast to `shape`: a scalar base viewed with zero strides."""
        scalar = LazyBuffer(device, _SCALAR, dtype, LoadOps.CONST, (), _coerce(value, dtype))
        if not shape:
            return scalar
        # one view of the scalar, not a view of a view (what `_view` gives: the tracker of
        # a non-empty shape is never the scalar's own)
        shape = shape if type(shape) is tuple else tuple(shape)
        return LazyBuffer(device, broadcast_scalar(shape), dtype, base=scalar)

    @staticmethod
    def from_buffer(buffer: Buffer, shape: tuple[int, ...]) -> LazyBuffer:
        lb = LazyBuffer.loadop(LoadOps.CUSTOM, shape, buffer.dtype, buffer.device)
        lb.realized = buffer
        return lb

    def const(self, value) -> LazyBuffer:
        """A constant with this buffer's shape, dtype and device."""
        return LazyBuffer.const_like(value, self.shape, self.dtype, self.device)

    # ---- compute ----
    def e(self, op, *srcs: LazyBuffer, arg: Any = None) -> LazyBuffer:
        """Elementwise op over same-shaped buffers (broadcasting is done by the Tensor)."""
        all_srcs = (self,) + srcs
        for s in srcs:
            assert s.shape == self.shape, f"elementwise {op} on shapes {[x.shape for x in all_srcs]}"
        if op in _OWN_DTYPE:  # the common case: the result has the first source's dtype
            dtype = self.dtype
        elif op is UnaryOps.CAST:
            dtype = arg[0]
        elif op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
            dtype = dtypes.bool
        elif op is TernaryOps.WHERE:
            dtype = srcs[0].dtype
        else:
            dtype = self.dtype
        # a base's tracker is already the contiguous one of its shape
        st = self.st if self._base is None else ShapeTracker.from_shape(self.shape)
        return LazyBuffer(self.device, st, dtype, op, all_srcs, arg)

    def pending_checks(self) -> tuple[LazyBuffer, ...]:
        """The unrealized index checks (index_check.py) anywhere in this buffer's graph:
        what a value folded to a constant must still run."""
        found: list[LazyBuffer] = []
        seen: set[int] = set()
        stack = [self.base]
        while stack:
            base = stack.pop()
            if id(base) in seen or base.realized is not None:
                continue
            seen.add(id(base))
            found.extend(flag for flag in base.checks if flag.realized is None)
            stack.extend(src.base for src in base.src)
        return tuple(found)

    def cast(self, dtype: DType) -> LazyBuffer:
        return self if dtype == self.dtype else self.e(UnaryOps.CAST, arg=(dtype, False))

    def bitcast(self, dtype: DType) -> LazyBuffer:
        """The same bits read as `dtype` (of the same itemsize)."""
        return self.e(UnaryOps.CAST, arg=(dtype, True))

    def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
        """Reduce `axis` to size 1 (keepdim); an empty input gives the op's identity."""
        new_shape = tuple([1 if i in axis else s for i, s in enumerate(self.shape)])
        if not axis or new_shape == self.shape:
            return self
        if 0 in self.shape:
            identity = 0 if op is ReduceOps.SUM else dtypes.min(self.dtype)
            out = LazyBuffer.const_like(identity, new_shape, self.dtype, self.device)
            out.base.checks = self.pending_checks()  # an empty input's bad index still raises
            return out
        return LazyBuffer(self.device, ShapeTracker.from_shape(new_shape), self.dtype, op,
                          (self,), tuple(sorted(axis)))

    def contiguous(self) -> LazyBuffer:
        """A base with its own memory in row-major order (a copy only if needed)."""
        if self.base.op is not LoadOps.CONST and (self._base is None or self.st.contiguous):
            return self  # already in memory order (a pure reshape of its base)
        return LazyBuffer.loadop(LoadOps.CONTIGUOUS, self.shape, self.dtype, self.device,
                                 src=(self,))

    def materialize(self) -> LazyBuffer:
        """Computed once into its own buffer, even if it is elementwise (which the
        scheduler would otherwise recompute inside every kernel that reads it)."""
        if self.base.realized is not None and self._base is None:
            return self
        return LazyBuffer.loadop(LoadOps.CONTIGUOUS, self.shape, self.dtype, self.device,
                                 src=(self,))

    def copy_to_device(self, device: str) -> LazyBuffer:
        src = self.contiguous()
        return LazyBuffer.loadop(LoadOps.COPY, self.shape, self.dtype, device, src=(src,))

    def assign(self, value: LazyBuffer) -> LazyBuffer:
        """Write `value` into this (realized, contiguous) buffer's memory. (The scheduler
        makes a value that reads this buffer through another view read a copy.)"""
        out = LazyBuffer.loadop(LoadOps.ASSIGN, self.shape, self.dtype, self.device,
                                src=(value, self))
        _ASSIGNS.add(out)
        return out

    # ---- movement: views only ----
    def _view(self, st: ShapeTracker) -> LazyBuffer:
        base = self if self._base is None else self._base
        if st.contiguous and st.shape == base.shape:
            return base
        return LazyBuffer(self.device, st, self.dtype, base=base)

    def reshape(self, shape: tuple[int, ...]) -> LazyBuffer:
        return self if shape == self.shape else self._view(self.st.reshape(shape))

    def permute(self, order: tuple[int, ...]) -> LazyBuffer:
        return self if order == tuple(range(len(order))) else self._view(self.st.permute(order))

    def expand(self, shape: tuple[int, ...]) -> LazyBuffer:
        return self if shape == self.shape else self._view(self.st.expand(shape))

    def pad(self, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        return self if all(p == (0, 0) for p in arg) else self._view(self.st.pad(arg))

    def shrink(self, arg: tuple[tuple[int, int], ...]) -> LazyBuffer:
        for (b, e), s in zip(arg, self.shape):  # (a loop: split makes a shrink per piece)
            if b != 0 or e != s:
                return self._view(self.st.shrink(arg))
        return self

    def stride(self, arg: tuple[int, ...]) -> LazyBuffer:
        return self if all(a == 1 for a in arg) else self._view(self.st.stride(arg))

    # ---- realized data ----
    def buffer(self) -> Buffer:
        assert self.base.realized is not None, "realize first"
        return self.base.realized

    @staticmethod
    def empty(shape, dtype: DType, device: str) -> LazyBuffer:
        return LazyBuffer.loadop(LoadOps.EMPTY, shape, dtype, device)

    def allocate(self) -> Buffer:
        """Create (not yet fill) this base's device buffer."""
        return Buffer(get_runtime(self.device), prod(self.shape), self.dtype)


# elementwise ops whose result has their first source's dtype (a set: an enum member's
# class lookup costs more than a set probe, and `e` runs once per op)
_OWN_DTYPE = frozenset(op for op in (*UnaryOps, *BinaryOps, *TernaryOps)
                       if op not in (UnaryOps.CAST, BinaryOps.CMPLT, BinaryOps.CMPNE,
                                     TernaryOps.WHERE))


class _Assigns(threading.local):
    """The ASSIGNs this thread made, held weakly and in the order they were made: the JIT
    finishes the unrealized ones so a call's in-place updates happen inside that call.
    The order is part of the schedule cache's key (the outputs are numbered in it), so
    it must be the same each time the same code runs: not a WeakSet's, which follows
    memory addresses and missed the cache on a training step with two BatchNorms."""

    def __init__(self) -> None:
        self.made: weakref.WeakValueDictionary[int, LazyBuffer] = weakref.WeakValueDictionary()
        self.count = itertools.count()

    def add(self, lb: LazyBuffer) -> None:
        self.made[next(self.count)] = lb


_ASSIGNS = _Assigns()


def pending_assigns() -> list[LazyBuffer]:
    """This thread's in-place updates that are still unrealized, in the order they were
    made (the realized ones are forgotten)."""
    made = _ASSIGNS.made
    if not made:
        return []
    pending = [(n, lb) for n, lb in made.items() if lb.realized is None]
    made.clear()
    made.update(pending)
    return [lb for _, lb in pending]


_SCALAR = ShapeTracker.from_shape(())


@functools.lru_cache(maxsize=4096)  # eager code makes constants of the same shapes
def broadcast_scalar(shape: tuple[int, ...]) -> ShapeTracker:
    """The tracker that views a 0-d constant at `shape`."""
    return _SCALAR.reshape((1,) * len(shape)).expand(shape)


def _coerce(value, dtype: DType):
    """A Python value of the kind the dtype holds (so constants render exactly)."""
    kind = _KIND.get(dtype)
    if kind is None:
        kind = _KIND[dtype] = bool if dtype == dtypes.bool else int if dtype.is_int else float
    return kind(value)


_KIND: dict[DType, type] = {}  # dtype -> the Python type of its constants


def rewrite_bases(outs: list[LazyBuffer], visit: Callable[[LazyBuffer], LazyBuffer]) -> None:
    """A scheduler pass's walk: `visit(base)` once for each unrealized base reachable from
    `outs` (through sources and index checks), sources after their consumer; it may
    rewrite the base in place and returns the node whose sources to walk on (the base,
    or what the rewrite put under it, which is not visited)."""
    seen: set[int] = set()
    stack = [o.base for o in outs]
    while stack:
        base = stack.pop()
        if id(base) in seen or base.realized is not None:
            continue
        seen.add(id(base))
        base = visit(base)
        seen.add(id(base))
        stack.extend(src.base for src in base.src)
        stack.extend(base.checks)
