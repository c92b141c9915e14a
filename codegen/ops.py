"""Primitive ops: the whole instruction set a backend implements.

Every Tensor method is built from these. Ops marked "AST" may appear inside a kernel AST;
LoadOps only exist on the lazy graph and are executed by the engine, not compiled.
"""
from __future__ import annotations
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any


class _Op(Enum):
    """Members are singletons, so they hash by identity: Enum's own __hash__ is a Python
    function, and ops are hashed in every AST and schedule-cache key."""
    __hash__ = object.__hash__


class UnaryOps(_Op):
    """AST. One input, same dtype out (CAST changes dtype, arg=(dtype, bitcast))."""
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    CAST = auto()


class BinaryOps(_Op):
    """AST. Two inputs of one dtype. CMPLT and CMPNE yield bool.
    IDIV and MOD truncate toward zero, as C does (the Tensor layer builds floor division)."""
    ADD = auto()
    MUL = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()


class TernaryOps(_Op):
    """AST. WHERE(cond, a, b); MULACC(a, b, c) = a*b + c only appears inside codegen."""
    WHERE = auto()
    MULACC = auto()


class ReduceOps(_Op):
    """AST. Reduce the axes given in arg (a tuple) to size 1."""
    SUM = auto()
    MAX = auto()


class BufferOps(_Op):
    """AST leaves and root: LOAD/CONST read through a ShapeTracker, STORE writes."""
    LOAD = auto()
    CONST = auto()
    STORE = auto()


class LoadOps(_Op):
    """Lazy graph only, executed by the engine: EMPTY allocates, CONST fills, COPY moves
    between devices, CONTIGUOUS forces a copy in memory order, ASSIGN writes in place,
    CUSTOM wraps data that is already realized (from numpy)."""
    EMPTY = auto()
    CONST = auto()
    COPY = auto()
    CONTIGUOUS = auto()
    ASSIGN = auto()
    CUSTOM = auto()


Op = UnaryOps | BinaryOps | TernaryOps | ReduceOps | BufferOps | LoadOps

# ops where f(0, ..., 0) == 0: a padded (masked) region stays zero through them
ZERO_PRESERVING = {BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.CMPLT,
                   BinaryOps.CMPNE, BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR,
                   UnaryOps.NEG, UnaryOps.SQRT, UnaryOps.SIN, UnaryOps.CAST,
                   TernaryOps.WHERE, TernaryOps.MULACC}


@dataclass(frozen=True)
class MemBuffer:
    """A buffer argument of a kernel: its index in the argument list, dtype, and view."""
    idx: int
    dtype: Any
    st: Any  # ShapeTracker


@dataclass(frozen=True)
class ConstBuffer:
    """A constant broadcast through a view (the view's mask makes padding zero)."""
    val: Any
    dtype: Any
    st: Any


@dataclass(frozen=True, eq=False)
class LazyOp:
    """A node of a kernel AST: op, sources, and an argument (axes, MemBuffer, ...)."""
    op: Op
    src: tuple[LazyOp, ...] = ()
    arg: Any = None

    def key(self) -> tuple:
        """Structural identity, used to cache compiled kernels."""
        if not hasattr(self, "_key"):
            object.__setattr__(self, "_key", (self.op, tuple(s.key() for s in self.src),
                                              _arg_key(self.arg)))
        return self._key

    def __eq__(self, other) -> bool:
        return isinstance(other, LazyOp) and self.key() == other.key()

    def __hash__(self) -> int:
        if not hasattr(self, "_hash"):
            object.__setattr__(self, "_hash", hash(self.key()))
        return self._hash

    def walk(self) -> tuple[LazyOp, ...]:
        """Every node once, sources before users (computed once: the AST is immutable)."""
        if not hasattr(self, "_walk"):
            seen: dict[int, LazyOp] = {}

            def visit(node: LazyOp):
                if id(node) in seen:
                    return
                for s in node.src:
                    visit(s)
                seen[id(node)] = node
            visit(self)
            object.__setattr__(self, "_walk", tuple(seen.values()))
        return self._walk

    def __repr__(self) -> str:
        return _pretty(self, 0)


def _arg_key(arg):
    if isinstance(arg, (MemBuffer, ConstBuffer)):
        val = arg.val if isinstance(arg, ConstBuffer) else arg.idx
        if isinstance(val, float):  # by repr: -0.0 is not 0.0 (1/x differs), nan is nan
            val = repr(val)
        return (type(arg).__name__, val, arg.dtype, arg.st)
    return arg


def _pretty(node: LazyOp, depth: int) -> str:
    pad = "  " * depth
    arg = node.arg
    if isinstance(arg, (MemBuffer, ConstBuffer)):
        st = arg.st
        head = f"buf{arg.idx}" if isinstance(arg, MemBuffer) else f"const {arg.val!r}"
        views = "; ".join(f"shape={v.shape} strides={v.strides} offset={v.offset}"
                          + (f" mask={v.mask}" if v.mask else "") for v in st.views)
        arg = f"{head} {arg.dtype.name} [{views}]"
    text = f"{pad}{node.op.name}" + (f" {arg}" if arg is not None else "")
    return "\n".join([text] + [_pretty(s, depth + 1) for s in node.src])
