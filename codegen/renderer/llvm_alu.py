"""LLVM IR for one ALU uop: op and operand names -> the right-hand side of an instruction.

Most binary ops are one instruction whose name depends only on the operands' kind (float,
signed, unsigned, bool): the `_BINARY` table. The rest have a function each in `_SPECIAL`.
bool is i1 and counts as unsigned; its ADD and MUL are OR and AND (a saturating 0/1).
Float add and mul carry fast-math `flags`: `contract` (a*b+c may become one fma, rounding
once) everywhere, and `reassoc` on a reduce's accumulation so LLVM may split it into
vector lanes and several partial sums.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.ops import BinaryOps, Op, TernaryOps, UnaryOps
from codegen.renderer import llvm_math
from codegen.renderer.llvm_types import intrinsic, llvm_const, ltype

_FLOAT, _SIGNED, _UNSIGNED, _BOOL = range(4)  # the operand kinds: columns of _BINARY

# op -> instruction for (float, signed, unsigned, bool) operands
_BINARY: dict[Op, tuple[str, str, str, str]] = {
    BinaryOps.ADD: ("fadd", "add", "add", "or"),
    BinaryOps.MUL: ("fmul", "mul", "mul", "and"),
    BinaryOps.FDIV: ("fdiv", "fdiv", "fdiv", "fdiv"),  # no fast-math: `arcp` allows a * (1/b)
    BinaryOps.IDIV: ("fdiv", "sdiv", "udiv", "udiv"),
    BinaryOps.MOD: ("frem", "srem", "urem", "urem"),
    BinaryOps.CMPLT: ("fcmp olt", "icmp slt", "icmp ult", "icmp ult"),
    BinaryOps.CMPNE: ("fcmp une", "icmp ne", "icmp ne", "icmp ne"),
    BinaryOps.AND: ("and", "and", "and", "and"),
    BinaryOps.OR: ("or", "or", "or", "or"),
    BinaryOps.XOR: ("xor", "xor", "xor", "xor"),
    BinaryOps.SHL: ("shl", "shl", "shl", "shl"),
    BinaryOps.SHR: ("ashr", "ashr", "lshr", "lshr"),
}
_FAST_MATH = {BinaryOps.ADD, BinaryOps.MUL}  # float instructions that carry `flags`

# float32 functions written in IR (vectorisable); other dtypes call the LLVM intrinsics
# (sin and cos on float32 too, for their lanes past llvm_math.REDUCE_LIMIT).
# They take the lane count and whether the target has AVX-512's vscalefps.
_IR_MATH: dict[Op, Callable[[int, bool], tuple[str, list[str]]]] = {
    UnaryOps.EXP2: llvm_math.exp2, UnaryOps.EXP: llvm_math.exp, UnaryOps.LOG2: llvm_math.log2,
    UnaryOps.SIN: llvm_math.sin, UnaryOps.COS: llvm_math.cos}
_INTRINSICS: dict[Op, str] = {
    UnaryOps.SQRT: "sqrt", UnaryOps.EXP2: "exp2", UnaryOps.EXP: "exp", UnaryOps.LOG2: "log2",
    UnaryOps.SIN: "sin", UnaryOps.COS: "cos"}


def _kind(dtype: DType) -> int:
    if dtype.is_float:
        return _FLOAT
    if dtype.scalar == dtypes.bool:
        return _BOOL
    return _UNSIGNED if dtype.is_unsigned else _SIGNED


def alu(op: Op, dtype: DType, src_dtype: DType, args: list[str], used: set[str],
        flags: str = "contract", scalef: bool = False) -> str:
    """The right-hand side of one instruction for `op` on operands of `src_dtype` giving
    `dtype`; declarations and helper functions it calls are added to `used`. `scalef`:
    the target has AVX-512's vscalefps (exp and exp2 use it)."""
    names = _BINARY.get(op)
    if op in _IR_MATH and src_dtype.scalar == dtypes.float32:
        t = ltype(src_dtype)
        name, definitions = _IR_MATH[op](src_dtype.count, scalef)
        used.update(definitions)
        return f"call {t} {name}({t} {args[0]})"
    if names is None:
        return _SPECIAL[op](dtype, src_dtype, args, used)
    kind = _kind(src_dtype)
    name = f"{names[kind]} {flags}" if kind == _FLOAT and op in _FAST_MATH else names[kind]
    return f"{name} {ltype(src_dtype)} {args[0]}, {args[1]}"


def _max(dtype: DType, src_dtype: DType, args: list[str], used: set[str]) -> str:
    """llvm.maximum for floats propagates NaN, as numpy.maximum; bool MAX is OR."""
    t, kind = ltype(src_dtype), _kind(src_dtype)
    if kind == _BOOL:
        return f"or {t} {args[0]}, {args[1]}"
    name = ("maximum", "smax", "umax")[kind]
    return f"{intrinsic(name, src_dtype, 2, used)}({t} {args[0]}, {t} {args[1]})"


def _where(dtype: DType, src_dtype: DType, args: list[str], used: set[str]) -> str:
    cond = ltype(dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool)
    return f"select {cond} {args[0]}, {ltype(dtype)} {args[1]}, {ltype(dtype)} {args[2]}"


def _neg(dtype: DType, src_dtype: DType, args: list[str], used: set[str]) -> str:
    t, kind, x = ltype(src_dtype), _kind(src_dtype), args[0]
    if kind == _FLOAT:
        return f"fneg {t} {x}"
    if kind == _BOOL:
        return f"xor {t} {x}, {llvm_const(True, src_dtype)}"
    return f"sub {t} {llvm_const(0, src_dtype)}, {x}"


def _recip(dtype: DType, src_dtype: DType, args: list[str], used: set[str]) -> str:
    t = ltype(src_dtype)
    return f"fdiv {t} {llvm_const(1.0, src_dtype)}, {args[0]}"


def _math_function(op: Op) -> Callable[[DType, DType, list[str], set[str]], str]:
    """The LLVM intrinsic (exp2, exp, log2 on float32 call our IR functions: `alu`)."""
    def render(dtype: DType, src_dtype: DType, args: list[str], used: set[str]) -> str:
        t = ltype(src_dtype)
        return f"{intrinsic(_INTRINSICS[op], src_dtype, 1, used)}({t} {args[0]})"
    return render


_SPECIAL: dict[Op, Callable[[DType, DType, list[str], set[str]], str]] = {
    BinaryOps.MAX: _max, TernaryOps.WHERE: _where,
    UnaryOps.NEG: _neg, UnaryOps.RECIP: _recip,
    **{op: _math_function(op) for op in _INTRINSICS},
}
