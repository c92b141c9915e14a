"""Linear IR: the flat instruction list a renderer turns into source.

A UOpGraph is built by the linearizer. Adding a uop deduplicates it (common
subexpressions are computed once) and places it in the outermost loop it depends on
(loop-invariant values are hoisted), so every renderer gets both for free.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from codegen.dtypes import DType


class UOps(Enum):
    """Instructions of the linear IR; `arg` meaning in each comment."""
    DEFINE_GLOBAL = auto()  # arg=(name, dtype of elements); dtype=None (a pointer)
    DEFINE_VAR = auto()     # a scalar kernel argument, arg=name (CPU thread bounds)
    SPECIAL = auto()        # a GPU work-item index, arg=(name, size)
    CONST = auto()          # arg=python value
    LOOP = auto()           # src=(start, end); the loop variable
    END = auto()            # src=(loop,); closes the loop
    DEFINE_ACC = auto()     # an accumulator, arg=initial value
    ACC_READ = auto()       # src=(acc,); current value of an accumulator
    ACC_UPDATE = auto()     # src=(acc, value); acc = value; arg=True: may be reassociated
    LOAD = auto()           # src=(buffer, idx) or (buffer, idx, valid): 0 where not valid
    STORE = auto()          # src=(buffer, idx, value[, gate]): a gate stores only its lanes
    #                         (a scalar's: only where it holds)
    #                         arg="each": every work-item stores its own (else, in a group
    #                         reduce, work-item 0 stores the group's one value)
    ALU = auto()            # arg=UnaryOps/BinaryOps/TernaryOps member
    CAST = auto()           # src=(x,), dtype=target
    BITCAST = auto()        # src=(x,), dtype=target of the same itemsize: the same bits
    VECTORIZE = auto()      # src=lanes (scalars); dtype=a vector (all lanes equal: a splat)
    EXTRACT = auto()        # src=(vector,), arg=lane; the scalar in that lane
    IF = auto()             # src=(cond,), arg=its loop: up to its ENDIF, runs where cond holds
    DEFINE_LOCAL = auto()   # GPU local memory, arg=(name, dtype of elements, count): a buffer
    BARRIER = auto()        # GPU: every work-item of the group waits here (local memory)
    ENDIF = auto()          # src=(if,); closes the block


@dataclass(eq=False)
class UOp:
    """One instruction. `loops` are the LOOP uops whose variable it depends on."""
    op: UOps
    dtype: DType | None
    src: tuple[UOp, ...] = ()
    arg: Any = None
    loops: frozenset[UOp] = field(default_factory=frozenset)

    def __repr__(self) -> str:  # operands by kind; format_uops numbers them
        dt = self.dtype.name if self.dtype is not None else ""
        return f"{self.op.name:<13} {dt:<8} {[v.op.name for v in self.src]} {self.arg}"


def format_uops(uops: list[UOp]) -> str:
    """The linear IR as DEBUG=5 prints it: one numbered line per uop, operands given by the
    numbers of the uops that compute them."""
    number = {id(u): i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        dt = (u.dtype.name + (f"x{u.dtype.count}" if u.dtype.count > 1 else "")) \
            if u.dtype is not None else ""
        operands = ", ".join(str(number.get(id(v), "?")) for v in u.src)
        lines.append(f"{i:4d} {u.op.name:<13} {dt:<10} [{operands}] {u.arg}")
    return "\n".join(lines)


# an ACC_READ is never shared: a read after the reduce loops must not reuse the one inside
_NEVER_CSE = {UOps.LOOP, UOps.END, UOps.DEFINE_ACC, UOps.ACC_READ, UOps.ACC_UPDATE, UOps.STORE,
              UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR, UOps.SPECIAL, UOps.IF, UOps.ENDIF,
              UOps.DEFINE_LOCAL, UOps.BARRIER}


# these never move out of the loops open when they are added
_IN_PLACE = {UOps.LOOP, UOps.STORE, UOps.ACC_UPDATE, UOps.IF, UOps.BARRIER}


def dtype_of(u: UOp) -> DType:
    """The dtype of a uop that has one (every uop but DEFINE_GLOBAL, STORE, ACC_UPDATE, END)."""
    assert u.dtype is not None, f"{u.op} has no dtype"
    return u.dtype


class UOpGraph:
    """An ordered uop list with CSE and placement into the outermost possible loop."""

    def __init__(self) -> None:
        self._main: list[UOp] = []          # in order, but what was hoisted before a loop
        self._before: dict[int, list[UOp]] = {}  # loop id -> uops hoisted before it
        self._open: list[UOp] = []          # loops not yet closed, outermost first
        self._cache: dict[tuple[Any, ...], UOp] = {}
        self._written: set[int] = set()     # the buffers stored to so far

    def add(self, op: UOps, dtype: DType | None, src: tuple[UOp, ...] = (), arg: Any = None,
            extra_loops: frozenset[UOp] = frozenset()) -> UOp:
        """Append (or reuse) a op; it lands after the innermost open loop it depends on.
        A load of a buffer already stored to (a row kernel reading back its output row)
        stays where it is added, after the stores, and is never shared."""
        if op is UOps.STORE and src[0].op is UOps.DEFINE_GLOBAL:  # (a stage's local memory
            self._written.add(id(src[0]))                         # is read after a barrier)
        pinned = op is UOps.LOAD and id(src[0]) in self._written
        key = (op, dtype, tuple(id(v) for v in src), _hashable(arg))
        if op not in _NEVER_CSE and not pinned and key in self._cache:
            return self._cache[key]
        loops = self._loops(extra_loops.union(*(v.loops for v in src)), op in _IN_PLACE or pinned)
        node = UOp(op, dtype, tuple(src), arg, loops)
        if op in (UOps.LOOP, UOps.IF):
            node.loops = loops | {node}
        self._insert(node, loops)
        if op in (UOps.LOOP, UOps.IF):
            self._open.append(node)
        if op not in _NEVER_CSE and not pinned:
            self._cache[key] = node
        return node

    def _loops(self, loops: frozenset[UOp], in_place: bool) -> frozenset[UOp]:
        """The loops (and IF blocks) a new uop is inside."""
        if in_place:
            loops |= frozenset(self._open)
        guard = self._open[-1] if self._open and self._open[-1].op is UOps.IF else None
        if guard is not None and guard.arg in loops:
            loops |= {guard}  # what runs in the guarded loop's body runs under the guard
        return loops

    def open_if(self, cond: UOp) -> UOp:
        """A block run where `cond` holds, inside the innermost open loop: what is added
        to that loop until `end_loop(block)` goes in the block (what does not depend on the
        loop is still hoisted out of it)."""
        assert self._open and self._open[-1].op is UOps.LOOP, "a block opens inside a loop"
        return self.add(UOps.IF, None, (cond,), self._open[-1])

    def end_loop(self, loop: UOp) -> None:
        """Close the innermost loop (or IF block); values that depend on it are forgotten
        by the cache."""
        assert self._open and self._open[-1] is loop, "loops must close innermost first"
        end = UOps.ENDIF if loop.op is UOps.IF else UOps.END
        self._main.append(UOp(end, None, (loop,), None, frozenset()))
        self._open.pop()
        self._cache = {k: v for k, v in self._cache.items() if loop not in v.loops}

    def _insert(self, node: UOp, loops: frozenset[UOp]) -> None:
        # hoist: a uop independent of the inner open loops goes before the first of them,
        # after what was hoisted there before it (kept aside, so an insertion costs O(1):
        # a list insert at the loop's position made a kernel of 100 000 uops quadratic)
        for depth, loop in enumerate(self._open):
            if not any(l in loops for l in self._open[depth:]):
                self._before.setdefault(id(loop), []).append(node)
                return
        self._main.append(node)

    @property
    def uops(self) -> list[UOp]:
        """The uops in order: each loop preceded by what was hoisted before it (a loop or IF
        is never hoisted itself, so one level of lists)."""
        if not self._before:
            return self._main
        out: list[UOp] = []
        for u in self._main:
            hoisted = self._before.get(id(u))
            if hoisted is not None:
                out.extend(hoisted)
            out.append(u)
        return out


def _hashable(arg: Any) -> Any:
    """A uop argument as a CSE key: numbers by type and value, floats by their bits, so
    -0.0 is not 0.0 (they compare equal: a kernel with both constants used one for the
    other) and every NaN is one key."""
    if isinstance(arg, float):
        return "nan" if arg != arg else (float, arg.hex())
    return (type(arg), arg) if isinstance(arg, (int, bool)) else arg
