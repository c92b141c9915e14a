"""Masked vector loads in LLVM IR: a gated vector load that reads only the lanes its mask
lets through (a padded row's last vector, a window through padding) [D71].

LLVM 22's x86 backend mistreats `llvm.masked.load` in two ways this module steers
around: a masked load wider than one vector register, which it splits itself, aborts on an
assertion or reads masked-off lanes where it can prove a register's lanes all off; and a
one-register masked load whose mask it can prove all off (lanes 4-7 of a padded row's
`<8 x double>` on AVX2) becomes a plain load of all lanes. So a wide load is written one
register at a time, and a register whose lanes are all off by the uops' own constants is
not loaded at all: its lanes are zero. A third: a register of a wide vector whose
lanes are partly known off (lanes 4-7 of a padded row of 21 doubles on AVX2, mask
<x, 0, 0, 0>), loaded as one `<4 x double>` masked load, came out of O3 (after GVN merged
equal masks) with lane 4 never loaded: float64 3x3 convs at widths 13, 21 and 29 had
garbage in their last column (session 28; O0-O2 and 512-bit vectors were right). So such
a register is loaded lane by lane, each lane a `<1 x T>` masked load.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.ops import BinaryOps
from codegen.renderer.llvm_types import ltype, mem_type, suffix
from codegen.uops import UOp, UOps

Emit = Callable[[str], str]


def masked_load(emit: Emit, used: set[str], ptr: str, gate: UOp, mask: str, stored: DType,
                vector_bits: int) -> str:
    """The `stored` vector at `ptr`, 0 in the lanes where `gate` (its IR name `mask`) is
    false, loaded as registers of `vector_bits` (0: one piece)."""
    per = vector_bits // (8 * stored.itemsize) or stored.count
    known = known_lanes(gate, stored.count)
    if stored.count <= per:
        return _piece(emit, used, ptr, mask, stored, 0, stored.count, known)
    val = "zeroinitializer"
    for start in range(0, stored.count, per):
        first = min(start, stored.count - per)  # a last register overlaps the one before
        if any(lane is False for lane in known[first:first + per]):  # (see the docstring)
            for lane in range(max(start, first), first + per):
                piece = _piece(emit, used, ptr, mask, stored, lane, 1, known)
                val = _placed(emit, val, piece, stored, 1, lane, lane)
            continue
        piece = _piece(emit, used, ptr, mask, stored, first, per, known)
        val = _placed(emit, val, piece, stored, per, first, start)
    return val


def known_lanes(gate: UOp, count: int) -> list[bool | None]:
    """Each lane of a bool vector uop where the uops make it a constant, else None."""
    if gate.op is UOps.VECTORIZE:
        return [_known(lane) for lane in gate.src]
    if gate.op is UOps.ALU and gate.arg in (BinaryOps.AND, BinaryOps.OR):
        a, b = (known_lanes(src, count) for src in gate.src)
        return [_combine(gate.arg, x, y) for x, y in zip(a, b)]
    return [_known(gate)] * count if gate.op is UOps.CONST else [None] * count


def _known(u: UOp) -> bool | None:
    """A scalar bool uop's constant value, if the uops fix it."""
    if u.op is UOps.CONST:
        return bool(u.arg)
    if u.op is not UOps.ALU or u.arg not in (BinaryOps.AND, BinaryOps.OR, BinaryOps.CMPNE,
                                             BinaryOps.CMPLT):
        return None
    if u.arg in (BinaryOps.AND, BinaryOps.OR):
        return _combine(u.arg, _known(u.src[0]), _known(u.src[1]))
    if any(src.op is not UOps.CONST for src in u.src):
        return None
    a, b = (src.arg for src in u.src)
    return bool(a != b) if u.arg is BinaryOps.CMPNE else bool(a < b)


def _combine(op: object, x: bool | None, y: bool | None) -> bool | None:
    if op is BinaryOps.AND:
        return False if x is False or y is False else (True if x and y else None)
    return True if x is True or y is True else (False if x is False and y is False else None)


def _piece(emit: Emit, used: set[str], ptr: str, mask: str, stored: DType, first: int,
           lanes: int, known: list[bool | None]) -> str:
    """Lanes [first, first + lanes) of the vector at `ptr` under those lanes of `mask`:
    zeros where every one of them is known off, else one llvm.masked.load."""
    ty, mty = _vector(mem_type(stored.scalar), lanes), _vector("i1", lanes)
    if all(lane is False for lane in known[first:first + lanes]):
        return "zeroinitializer"
    if lanes < stored.count:
        whole = ltype(dtypes.bool.vec(stored.count))
        picks = ", ".join(f"i32 {first + i}" for i in range(lanes))
        mask = emit(f"shufflevector {whole} {mask}, {whole} poison, <{lanes} x i32> <{picks}>")
        ptr = emit(f"getelementptr {mem_type(stored.scalar)}, ptr {ptr}, i64 {first}")
    fn = f"@llvm.masked.load.v{lanes}{suffix(stored.scalar)}.p0"
    used.add(f"declare {ty} {fn}(ptr, i32 immarg, {mty}, {ty})")
    return emit(f"call {ty} {fn}(ptr {ptr}, i32 {stored.itemsize}, {mty} {mask}, "
                f"{ty} zeroinitializer)")


def _placed(emit: Emit, vec: str, piece: str, stored: DType, lanes: int, first: int,
            start: int) -> str:
    """`vec` (a `stored` vector) with its lanes from `start` to `first + lanes` taken from
    `piece`, which holds lanes [first, first + lanes)."""
    ty, short = mem_type(stored), _vector(mem_type(stored.scalar), lanes)
    widen = ", ".join(f"i32 {i}" if i < lanes else "i32 poison" for i in range(stored.count))
    wide = emit(f"shufflevector {short} {piece}, {short} poison, <{stored.count} x i32> "
                f"<{widen}>")
    blend = ", ".join(f"i32 {stored.count + i - first}" if start <= i < first + lanes
                      else f"i32 {i}" for i in range(stored.count))
    return emit(f"shufflevector {ty} {vec}, {ty} {wide}, <{stored.count} x i32> <{blend}>")


def _vector(element: str, lanes: int) -> str:
    """An LLVM vector type, `<1 x T>` too (a one-lane masked load's: the intrinsic takes
    vectors)."""
    return f"<{lanes} x {element}>"
