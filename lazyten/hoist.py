"""A reduce computed once per distinct value: output axes none of its inputs depend on (D136).

A kernel with a reduce whose every leaf (each load and constant) reads the same value at
every position of an output axis (stride 0 there, and no mask along it) computes the same
result at each position: the reduce runs again for every one. This is no rare shape:
`out.sum().backward()` seeds the backward with a constant broadcast to out's shape, and a
matmul against it (`ones @ v^T`, attention's dP; `ones^T @ x`, a Linear's weight gradient)
is a reduce whose every output along the constant's rows is the same sum. Attention at
(4, 12, 197, 64) spent 18 of its 21 ms of `.sum().backward()` there, one
multiply-add per element of a 197-times repeated reduce, with no tile (its loads read no
output axis in common).

The rule, a schedule pass after fusion (so that it sees each kernel's whole expression):
such a kernel, unless its result is an in-place update, is split in two. The first
computes the expression with those axes at size 1 (each leaf's view shrunk to their
first position: the same values) into a buffer of its own; the second copies that
buffer, broadcast along the axes, into the output. Only where the reduce work saved is
at least `_MIN_SAVED` element steps: below, the second kernel's launch costs more than
the repeats. Leaves other than plain loads and constants (an indirect load reads at a
computed offset) keep the kernel as it is.
"""
from __future__ import annotations
from dataclasses import replace

from codegen.helpers import prod
from codegen.ops import (BinaryOps, BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps,
                         TernaryOps, UnaryOps)
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem

_MIN_SAVED = 1 << 15  # element steps of the reduce the split must save (a launch is ~2 us)
_PURE = (UnaryOps, BinaryOps, TernaryOps, ReduceOps)


def hoist_broadcasts(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """The schedule with every kernel that repeats its reduce along broadcast output
    axes split into the reduce over one position of them and a broadcast copy."""
    out: list[ScheduleItem] = []
    for item in items:
        out.extend(_split(item))
    return out


def _split(item: ScheduleItem) -> list[ScheduleItem]:
    ast = item.ast
    if ast is None or item.out.op is LoadOps.ASSIGN or ast.op is not BufferOps.STORE:
        return [item]
    axes = broadcast_axes(ast)
    if not axes:
        return [item]
    store: MemBuffer = ast.arg
    shape = store.st.shape
    small_shape = tuple(1 if a in axes else s for a, s in enumerate(shape))
    small_st = ShapeTracker.from_shape(small_shape)
    small = LazyBuffer(item.out.device, small_st, store.dtype, LoadOps.CONTIGUOUS)
    reduce_ast = _shrunk(ast, axes, MemBuffer(0, store.dtype, small_st))
    read = small_st.expand(shape)
    copy = LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(1, store.dtype, read)),),
                  store)
    return [ScheduleItem(reduce_ast, small, list(item.inputs)), ScheduleItem(copy, item.out, [small])]


def broadcast_axes(ast: LazyOp) -> tuple[int, ...]:
    """The output axes (of size > 1, and reduced by no reduce: a row kernel's STORE has
    its reduces' input shape) along which no leaf of the kernel `ast` (a STORE with a
    reduce) reads a different value, where splitting them off saves enough; () if
    none, or if the kernel has no reduce or a leaf that is not a plain load or constant."""
    reduces = [n for n in ast.walk() if isinstance(n.op, ReduceOps)]
    if not reduces:
        return ()
    shape = ast.arg.st.shape
    reduced = {a for n in reduces for a in n.arg}  # (a row kernel stores at its reduces'
    candidates = [a for a, s in enumerate(shape) if s > 1 and a not in reduced]  # shape)
    candidates = _ignored_by_every_leaf(ast, candidates)
    if not candidates:
        return ()
    repeats = prod(shape[a] for a in candidates)
    work = max(_work(n.src[0]) for n in reduces)
    return tuple(candidates) if work * (repeats - 1) // repeats >= _MIN_SAVED else ()


def _ignored_by_every_leaf(ast: LazyOp, candidates: list[int]) -> list[int]:
    """The `candidates` (output axes of the STORE `ast`) that every leaf ignores; none if
    a leaf is not a plain load or constant (an indirect load, or an op this rule does
    not know)."""
    shape = ast.arg.st.shape
    for node in ast.walk():
        if node is ast or isinstance(node.op, _PURE):
            continue
        if not _plain_leaf(node):
            return []
        candidates = [a for a in candidates if _ignores(node.arg.st, a, shape)]
        if not candidates:
            return []
    return candidates


def _plain_leaf(node: LazyOp) -> bool:
    """A load at the address its tracker gives (no computed offset), or a constant."""
    if node.op is BufferOps.LOAD:
        return not node.src and isinstance(node.arg, MemBuffer)
    return node.op is BufferOps.CONST and isinstance(node.arg, ConstBuffer)


def _work(reduce_src: LazyOp) -> int:
    """The elements a reduce's source walks (the shape of its leaves)."""
    shapes = [n.arg.st.shape for n in reduce_src.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST)]
    return max((prod(s) for s in shapes), default=0)


def _ignores(st: ShapeTracker, axis: int, shape: tuple[int, ...]) -> bool:
    """Whether a leaf read through `st` gives the same value at every position of the
    output axis `axis`: its last view does not move along it and has no mask there (the
    views under it see one index whatever the position)."""
    if len(st.shape) != len(shape) or st.shape[axis] != shape[axis]:
        return False
    view = st.views[-1]
    return view.strides[axis] == 0 and (view.mask is None or view.mask[axis] == (0, shape[axis]))


def _shrunk(ast: LazyOp, axes: tuple[int, ...], store: MemBuffer) -> LazyOp:
    """`ast` with each leaf's view shrunk to the first position of `axes`, and `store` as
    its root's buffer (shared subtrees stay shared)."""
    done: dict[int, LazyOp] = {}
    for node in ast.walk():
        arg = node.arg
        if node is ast:
            arg = store
        elif isinstance(arg, (MemBuffer, ConstBuffer)):
            arg = replace(arg, st=arg.st.shrink(tuple((0, 1) if a in axes else (0, n)
                                                      for a, n in enumerate(arg.st.shape))))
        done[id(node)] = LazyOp(node.op, tuple(done[id(s)] for s in node.src), arg)
    return done[id(ast)]
