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
    """AST. One input, same dtype out (CAST changes dtype, arg=(dtype, bitcast): with
    bitcast True it reinterprets the bits as a dtype of the same itemsize, never bool).
    EXP is e**x and COS is cos(x) in their own right: exp2(x * log2(e)) and sin(pi/2 - x)
    round their argument first (62 float32 ulps off for exp near overflow; float32
    cos(1e4) wrong in its fourth digit). docs/numerics.md states each backend's bounds."""
    EXP2 = auto()
    EXP = auto()
    LOG2 = auto()
    SIN = auto()
    COS = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    CAST = auto()


class BinaryOps(_Op):
    """AST. Two inputs of one dtype. CMPLT and CMPNE yield bool.
    FDIV is float division, correctly rounded as IEEE 754 says (never a * (1/b)).
    IDIV and MOD truncate toward zero, as C does (the Tensor layer builds floor division).
    SHL and SHR shift integers by a count in [0, bits) (the Tensor layer handles others):
    SHL wraps, SHR is arithmetic for signed dtypes and logical for unsigned ones."""
    ADD = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()
    MOD = auto()
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()


class TernaryOps(_Op):
    """AST. WHERE(cond, a, b)."""
    WHERE = auto()


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

# ops whose result is one of their (already representable) inputs, or exact: a bfloat16
# result of them needs no rounding
EXACT_OPS = {BinaryOps.MAX, UnaryOps.NEG, TernaryOps.WHERE, BinaryOps.MOD}

# ops that cost tens of instructions each (polynomials in IR, D5): worth reading a value
# back rather than computing it twice, and worth overlapping across rows
TRANSCENDENTAL = {UnaryOps.EXP2, UnaryOps.EXP, UnaryOps.LOG2, UnaryOps.SIN, UnaryOps.COS}

# ops where f(0, ..., 0) == 0: a padded (masked) region stays zero through them
ZERO_PRESERVING = {BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.CMPLT,
                   BinaryOps.CMPNE, BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR,
                   BinaryOps.SHL, BinaryOps.SHR,
                   UnaryOps.NEG, UnaryOps.SQRT, UnaryOps.SIN, UnaryOps.CAST,
                   TernaryOps.WHERE}


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
    """A node of a kernel AST: op, sources, and an argument (axes, MemBuffer, ...).

    An AST is a DAG: a value used twice is one node with two users. Everything here
    (keys, hashes, printing, rewriting) visits each node once, so it costs time linear in
    the DAG; the tree the DAG unfolds to can be exponentially larger ((x*3).round()
    applied n times reads x 2**n ways)."""
    op: Op
    src: tuple[LazyOp, ...] = ()
    arg: Any = None

    def key(self) -> tuple[Any, ...]:
        """Structural identity, used to cache compiled kernels: one row (op, indices of
        the sources' rows, argument) per distinct subtree, sources before users. Equal
        subtrees are one row whether or not they are one object."""
        key: tuple[Any, ...] | None = self.__dict__.get("_key")
        if key is None:
            rows: dict[tuple[Any, ...], int] = {}
            index: dict[int, int] = {}
            for node in self.walk():
                row = (node.op, tuple(index[id(s)] for s in node.src), _arg_key(node.arg))
                index[id(node)] = rows.setdefault(row, len(rows))
            key = tuple(rows)
            object.__setattr__(self, "_key", key)
        return key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyOp) and (self is other or self.key() == other.key())

    def __hash__(self) -> int:
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = hash(self.key())
            object.__setattr__(self, "_hash", h)
        return h

    def walk(self) -> tuple[LazyOp, ...]:
        """Every node once, sources before users, this one last (computed once: the AST is
        immutable; what is kept leaves this node out, so an AST holds no reference to
        itself and is freed when dropped, not left for the cycle collector)."""
        below: tuple[LazyOp, ...] | None = self.__dict__.get("_walk")
        if below is None:
            seen: dict[int, LazyOp] = {}
            stack: list[tuple[LazyOp, bool]] = [(self, False)]
            while stack:  # a loop, not recursion: a long chain of ops is no deeper
                node, expanded = stack.pop()
                if id(node) in seen:
                    continue
                if expanded:
                    seen[id(node)] = node
                    continue
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.src) if id(s) not in seen)
            below = tuple(seen.values())[:-1]
            object.__setattr__(self, "_walk", below)
        return below + (self,)

    def replace(self, old: LazyOp, new: LazyOp) -> LazyOp:
        """This AST with the node `old` (by identity) replaced by `new`; subtrees that
        were shared stay shared."""
        done: dict[int, LazyOp] = {id(old): new}
        for node in self.walk():
            if id(node) in done:
                continue
            srcs = tuple(done[id(s)] for s in node.src)
            same = all(a is b for a, b in zip(srcs, node.src))
            done[id(node)] = node if same else LazyOp(node.op, srcs, node.arg)
        return done[id(self)]

    def __repr__(self) -> str:
        """One line per node, indented under its user. A node with several users is
        printed in full once, labelled `[n]`, and as `[n]` wherever it is used again."""
        users: dict[int, int] = {}
        for node in self.walk():
            for s in node.src:
                users[id(s)] = users.get(id(s), 0) + 1
        labels: dict[int, int] = {}
        lines: list[str] = []
        stack: list[tuple[LazyOp, int]] = [(self, 0)]
        while stack:
            node, depth = stack.pop()
            pad = "  " * depth
            if id(node) in labels:
                lines.append(f"{pad}[{labels[id(node)]}]")
                continue
            label = ""
            if users.get(id(node), 0) > 1:
                labels[id(node)] = len(labels)
                label = f"[{labels[id(node)]}] "
            lines.append(pad + label + _describe(node))
            stack.extend((s, depth + 1) for s in reversed(node.src))
        return "\n".join(lines)


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, (MemBuffer, ConstBuffer)):
        val = arg.val if isinstance(arg, ConstBuffer) else arg.idx
        if isinstance(val, float):  # by repr: -0.0 is not 0.0 (1/x differs), nan is nan
            val = repr(val)
        return (type(arg).__name__, val, arg.dtype, arg.st)
    return arg


def _describe(node: LazyOp) -> str:
    arg = node.arg
    if isinstance(arg, (MemBuffer, ConstBuffer)):
        st = arg.st
        head = f"buf{arg.idx}" if isinstance(arg, MemBuffer) else f"const {arg.val!r}"
        views = "; ".join(f"shape={v.shape} strides={v.strides} offset={v.offset}"
                          + (f" mask={v.mask}" if v.mask else "") for v in st.views)
        arg = f"{head} {arg.dtype.name} [{views}]"
    return node.op.name + (f" {arg}" if arg is not None else "")
