"""LLVM IR for casts between lazyten's dtypes, bit casts, and bfloat16.

bfloat16 lives in memory as i16 and in registers as float: a load widens the bits
(`from_bf16`), and every op computes in float and rounds to the nearest bfloat16 (even on
ties) with integer instructions (`round_to_bf16`), which vectorise and need no libcall or
CPU feature. Each function takes `emit(instruction) -> name` and returns the result's name.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.renderer.llvm_types import intrinsic, like, llvm_const, ltype, mem_type

Emit = Callable[[str], str]  # appends `%name = <instruction>`, returns the name


def from_bf16(bits: str, dtype: DType, emit: Emit) -> str:
    """bfloat16 bits (i16) as the float they encode: the upper half of a float's bits."""
    i32 = like(dtype, dtypes.int32)
    wide = emit(f"zext {mem_type(dtype)} {bits} to {ltype(i32)}")
    shifted = emit(f"shl {ltype(i32)} {wide}, {llvm_const(16, i32)}")
    return emit(f"bitcast {ltype(i32)} {shifted} to {ltype(dtype)}")


def render_cast(src: DType, dst: DType, x: str, emit: Emit, used: set[str]) -> str:
    """Emit the instructions that convert `x` from src to dst; the result's name.
    bfloat16 values are floats in registers: casts from them are casts from float32."""
    if src.scalar == dtypes.bfloat16:
        src = like(src, dtypes.float32)
    if dst.scalar == dtypes.bool:
        zero = llvm_const(0, src)
        return emit(f"{'fcmp une' if src.is_float else 'icmp ne'} {ltype(src)} {x}, {zero}")
    if dst.scalar == dtypes.bfloat16:
        return to_bf16(src, x, emit, used)
    if src.is_float:
        return (_float_to_float if dst.is_float else _float_to_int)(src, dst, x, emit, used)
    return _int_to_float(src, dst, x, emit) if dst.is_float else _int_to_int(src, dst, x, emit)


def _float_to_float(src: DType, dst: DType, x: str, emit: Emit, used: set[str]) -> str:
    ts, td = ltype(src), ltype(dst)
    if src == dtypes.float64 and dst == dtypes.float16:  # no libcall: see F64_TO_F16
        used.add(F64_TO_F16)
        return emit(f"call half @lazyten_f64_to_f16(double {x})")
    if ts == td:  # bfloat16 to float32: the register already holds the value
        return x
    op = "fpext" if dst.itemsize > src.itemsize else "fptrunc"
    return emit(f"{op} {ts} {x} to {td}")


def _float_to_int(src: DType, dst: DType, x: str, emit: Emit, used: set[str]) -> str:
    """Through a wide signed conversion first, so unsigned targets wrap like numpy."""
    ts, td = ltype(src), ltype(dst)
    if dst.itemsize < 8:
        wide = ltype(like(src, dtypes.int64))
        return emit(f"trunc {wide} {emit(f'fptosi {ts} {x} to {wide}')} to {td}")
    if dst.scalar == dtypes.uint64:  # [2**63, 2**64) needs fptoui; negatives wrap
        big = emit(f"fcmp oge {ts} {x}, {llvm_const(2.0 ** 63, src)}")
        unsigned = emit(f"fptoui {ts} {x} to {td}")  # poison below 0, never selected
        return emit(f"select {ltype(like(src, dtypes.bool))} {big}, {td} {unsigned}, "
                    f"{td} {emit(f'fptosi {ts} {x} to {td}')}")
    return emit(f"fptosi {ts} {x} to {td}")


def _int_to_float(src: DType, dst: DType, x: str, emit: Emit) -> str:
    unsigned = src.is_unsigned or src.scalar == dtypes.bool
    return emit(f"{'uitofp' if unsigned else 'sitofp'} {ltype(src)} {x} to {ltype(dst)}")


def _int_to_int(src: DType, dst: DType, x: str, emit: Emit) -> str:
    """Truncate or extend (by the source's signedness); the same width is a copy."""
    ts, td = ltype(src), ltype(dst)
    if ts == td:
        return emit(f"add {ts} {x}, {llvm_const(0, src)}")
    if dst.itemsize < src.itemsize:
        return emit(f"trunc {ts} {x} to {td}")
    unsigned = src.is_unsigned or src.scalar == dtypes.bool
    return emit(f"{'zext' if unsigned else 'sext'} {ts} {x} to {td}")


def render_bitcast(src: DType, dst: DType, x: str, emit: Emit) -> str:
    """The bits of `x` read as dst (same itemsize). A bfloat16 register is a float whose
    upper half holds the bits, so it is shifted into (or out of) an i16 first."""
    if src.scalar == dtypes.bfloat16:
        f32, i32 = like(src, dtypes.float32), like(src, dtypes.int32)
        bits = emit(f"bitcast {ltype(f32)} {x} to {ltype(i32)}")
        high = emit(f"lshr {ltype(i32)} {bits}, {llvm_const(16, i32)}")
        x, src = emit(f"trunc {ltype(i32)} {high} to {mem_type(src)}"), like(src, dtypes.int16)
    if dst.scalar == dtypes.bfloat16:
        if src.scalar != dtypes.int16:
            x = emit(f"bitcast {ltype(src)} {x} to {ltype(like(src, dtypes.int16))}")
        return from_bf16(x, dst, emit)
    return x if ltype(src) == ltype(dst) else emit(f"bitcast {ltype(src)} {x} to {ltype(dst)}")


def to_bf16(src: DType, x: str, emit: Emit, used: set[str]) -> str:
    """`x` rounded once to bfloat16 (as a float). Values that float holds exactly are
    widened to float; the rest go through double and `_to_float_odd`, whose round-to-odd
    makes the final rounding the only one that matters (as for F64_TO_F16)."""
    f32, f64 = like(src, dtypes.float32), like(src, dtypes.float64)
    if src.is_float:
        wide = src if src.itemsize >= 4 else f32
        if src.itemsize < 4:
            x = emit(f"fpext {ltype(src)} {x} to {ltype(f32)}")
    else:
        wide = f32 if src.itemsize <= 2 else f64
        unsigned = src.is_unsigned or src.scalar == dtypes.bool
        x = emit(f"{'uitofp' if unsigned else 'sitofp'} {ltype(src)} {x} to {ltype(wide)}")
    if wide.scalar == dtypes.float64:
        x = _to_float_odd(x, f64, emit, used)
    return round_to_bf16(x, f32, emit)


def _to_float_odd(x: str, f64: DType, emit: Emit, used: set[str]) -> str:
    """A double rounded to float toward zero, with the last bit set where that was
    inexact (round to odd): rounding the result again to fewer than 22 bits rounds once."""
    d, f, i, b = ltype(f64), ltype(like(f64, dtypes.float32)), ltype(like(f64, dtypes.int32)), \
        ltype(like(f64, dtypes.bool))
    near = emit(f"fptrunc {d} {x} to {f}")
    back = emit(f"fpext {f} {near} to {d}")
    exact = emit(f"fcmp oeq {d} {back}, {x}")
    bits = emit(f"bitcast {f} {near} to {i}")
    fabs = intrinsic("fabs", f64, 1, used)
    over = emit(f"fcmp ogt {d} {emit(f'{fabs}({d} {back})')}, {emit(f'{fabs}({d} {x})')}")
    toward0 = emit(f"sub {i} {bits}, {emit(f'zext {b} {over} to {i}')}")
    odd = emit(f"or {i} {toward0}, {llvm_const(1, like(f64, dtypes.int32))}")
    return emit(f"bitcast {i} {emit(f'select {b} {exact}, {i} {bits}, {i} {odd}')} to {f}")


def bf16_bits(x: str, f32: DType, emit: Emit) -> str:
    """The float `x` rounded to the nearest bfloat16, even on ties, as the i32 whose upper
    half holds the bfloat16 (lower half zero). NaN stays NaN (made quiet, sign kept);
    values past the largest bfloat16 round to inf."""
    i32 = like(f32, dtypes.int32)
    i, f, b = ltype(i32), ltype(f32), ltype(like(f32, dtypes.bool))
    bits = emit(f"bitcast {f} {x} to {i}")
    odd = emit(f"and {i} {emit(f'lshr {i} {bits}, {llvm_const(16, i32)}')}, {llvm_const(1, i32)}")
    up = emit(f"add {i} {bits}, {emit(f'add {i} {odd}, {llvm_const(0x7FFF, i32)}')}")
    quiet = emit(f"or {i} {bits}, {llvm_const(0x400000, i32)}")
    nan = emit(f"fcmp uno {f} {x}, {x}")
    return emit(f"and {i} {emit(f'select {b} {nan}, {i} {quiet}, {i} {up}')}, "
                f"{llvm_const(-65536, i32)}")


def round_to_bf16(x: str, f32: DType, emit: Emit) -> str:
    """The float `x` rounded to bfloat16, as a float."""
    return emit(f"bitcast {ltype(like(f32, dtypes.int32))} {bf16_bits(x, f32, emit)} "
                f"to {ltype(f32)}")


# double -> half without the __truncdfhf2 libcall (MCJIT does not link it): round to float
# with round-to-odd (truncate toward zero, set the last bit if inexact), then to half, so
# the value is rounded once, exactly as a direct conversion would
F64_TO_F16 = """define internal half @lazyten_f64_to_f16(double %x) alwaysinline {
  %f = fptrunc double %x to float
  %back = fpext float %f to double
  %exact = fcmp oeq double %back, %x
  %bits = bitcast float %f to i32
  %ax = call double @llvm.fabs.f64(double %x)
  %ab = call double @llvm.fabs.f64(double %back)
  %over = fcmp ogt double %ab, %ax
  %dec = zext i1 %over to i32
  %toward0 = sub i32 %bits, %dec
  %odd = or i32 %toward0, 1
  %sel = select i1 %exact, i32 %bits, i32 %odd
  %r = bitcast i32 %sel to float
  %h = fptrunc float %r to half
  ret half %h
}
declare double @llvm.fabs.f64(double)"""
