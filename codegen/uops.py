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
    LOOP = auto()           # vin=(start, end); the loop variable
    END = auto()            # vin=(loop,); closes the loop
    DEFINE_ACC = auto()     # an accumulator, arg=initial value
    ACC_READ = auto()       # vin=(acc,); current value of an accumulator
    ACC_UPDATE = auto()     # vin=(acc, value); acc = value; arg=True: may be reassociated
    LOAD = auto()           # vin=(buffer, idx) or (buffer, idx, valid): 0 where not valid
    STORE = auto()          # vin=(buffer, idx, value)
    ALU = auto()            # arg=UnaryOps/BinaryOps/TernaryOps member
    CAST = auto()           # vin=(x,), dtype=target
    BITCAST = auto()        # vin=(x,), dtype=target of the same itemsize: the same bits
    VECTORIZE = auto()      # vin=lanes (scalars); dtype=a vector (all lanes equal: a splat)
    EXTRACT = auto()        # vin=(vector,), arg=lane; the scalar in that lane


@dataclass(eq=False)
class UOp:
    """One instruction. `loops` are the LOOP uops whose variable it depends on."""
    uop: UOps
    dtype: DType | None
    vin: tuple[UOp, ...] = ()
    arg: Any = None
    loops: frozenset[UOp] = field(default_factory=frozenset)

    def __repr__(self) -> str:  # operands by kind; format_uops numbers them
        dt = self.dtype.name if self.dtype is not None else ""
        return f"{self.uop.name:<13} {dt:<8} {[v.uop.name for v in self.vin]} {self.arg}"


def format_uops(uops: list[UOp]) -> str:
    """The linear IR as DEBUG=5 prints it: one numbered line per uop, operands given by the
    numbers of the uops that compute them."""
    number = {id(u): i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        dt = (u.dtype.name + (f"x{u.dtype.count}" if u.dtype.count > 1 else "")) \
            if u.dtype is not None else ""
        operands = ", ".join(str(number.get(id(v), "?")) for v in u.vin)
        lines.append(f"{i:4d} {u.uop.name:<13} {dt:<10} [{operands}] {u.arg}")
    return "\n".join(lines)


# an ACC_READ is never shared: a read after the reduce loops must not reuse the one inside
_NEVER_CSE = {UOps.LOOP, UOps.END, UOps.DEFINE_ACC, UOps.ACC_READ, UOps.ACC_UPDATE, UOps.STORE,
              UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR, UOps.SPECIAL}


# these never move out of the loops open when they are added
_IN_PLACE = {UOps.LOOP, UOps.STORE, UOps.ACC_UPDATE}


class UOpGraph:
    """An ordered uop list with CSE and placement into the outermost possible loop."""

    def __init__(self) -> None:
        self.uops: list[UOp] = []
        self._open: list[UOp] = []          # loops not yet closed, outermost first
        self._cache: dict[tuple[Any, ...], UOp] = {}

    def add(self, uop: UOps, dtype: DType | None, vin: tuple[UOp, ...] = (), arg: Any = None,
            extra_loops: frozenset[UOp] = frozenset()) -> UOp:
        """Append (or reuse) a uop; it lands after the innermost open loop it depends on."""
        key = (uop, dtype, tuple(id(v) for v in vin), _hashable(arg))
        if uop not in _NEVER_CSE and key in self._cache:
            return self._cache[key]
        loops = extra_loops.union(*(v.loops for v in vin))
        if uop in _IN_PLACE:
            loops |= frozenset(self._open)
        node = UOp(uop, dtype, tuple(vin), arg, loops)
        if uop is UOps.LOOP:
            node.loops = loops | {node}
        self._insert(node, loops)
        if uop is UOps.LOOP:
            self._open.append(node)
        if uop not in _NEVER_CSE:
            self._cache[key] = node
        return node

    def end_loop(self, loop: UOp) -> None:
        """Close the innermost loop; values that depend on it are forgotten by the cache."""
        assert self._open and self._open[-1] is loop, "loops must close innermost first"
        self.uops.append(UOp(UOps.END, None, (loop,), None, frozenset()))
        self._open.pop()
        self._cache = {k: v for k, v in self._cache.items() if loop not in v.loops}

    def _insert(self, node: UOp, loops: frozenset[UOp]) -> None:
        # hoist: a uop independent of the inner open loops goes before the first of them
        for depth, loop in enumerate(self._open):
            if not any(l in loops for l in self._open[depth:]):
                self.uops.insert(self.uops.index(loop), node)
                return
        self.uops.append(node)


def _hashable(arg: Any) -> Any:
    if isinstance(arg, float) and arg != arg:
        return "nan"
    return (type(arg), arg) if isinstance(arg, (int, float, bool)) else arg
