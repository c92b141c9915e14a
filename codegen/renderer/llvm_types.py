"""LLVM IR spellings of lazyten's dtypes: register and memory types, exact constants, and
the names of overloaded intrinsics. Shared by the renderer (llvmir.py) and its casts."""
from __future__ import annotations
import struct

from codegen.dtypes import DType, dtypes, round_float

LLVM_TYPES = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16",
              dtypes.uint16: "i16", dtypes.int32: "i32", dtypes.uint32: "i32",
              dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
              dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double"}
_MEM_TYPES = {dtypes.bool: "i8", dtypes.bfloat16: "i16"}  # where memory differs from registers
_FSUFFIX = {dtypes.float16: "f16", dtypes.float32: "f32", dtypes.float64: "f64"}


def ltype(dtype: DType) -> str:
    """The LLVM type of a value: a scalar, or a vector `<N x T>`."""
    scalar = LLVM_TYPES[dtype.scalar]
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def mem_type(dtype: DType) -> str:
    """How a dtype is stored in memory (bool is a byte, bfloat16 its 16 bits)."""
    scalar = _MEM_TYPES.get(dtype.scalar)
    if scalar is None:
        return ltype(dtype)
    return scalar if dtype.count == 1 else f"<{dtype.count} x {scalar}>"


def like(dtype: DType, scalar: DType) -> DType:
    """`scalar`, with as many lanes as `dtype`."""
    return scalar.vec(dtype.count) if dtype.count > 1 else scalar


def llvm_const(value: float, dtype: DType) -> str:
    """An exact LLVM literal: floats as hex so no digit is lost; vectors are splats."""
    if dtype.count > 1:
        return f"splat ({LLVM_TYPES[dtype.scalar]} {llvm_const(value, dtype.scalar)})"
    if dtype == dtypes.bool:
        return "true" if value else "false"
    if dtype.is_int:
        return str(dtypes.wrap(int(value), dtype))
    value = round_float(value, dtype)  # too big for the dtype is inf
    if dtype == dtypes.float16:
        return "0xH%04X" % struct.unpack("<H", struct.pack("<e", value))[0]
    # LLVM writes float literals as the double they widen to
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def suffix(dtype: DType) -> str:
    """The type part of an overloaded intrinsic's name: f32, v16f32, i64..."""
    suffix = _FSUFFIX.get(dtype.scalar) or LLVM_TYPES[dtype.scalar]
    return f"v{dtype.count}{suffix}" if dtype.count > 1 else suffix


def intrinsic(name: str, dtype: DType, nargs: int, used: set[str]) -> str:
    """`call <type> @llvm.<name>.<suffix>` for an overloaded intrinsic, declared in `used`."""
    ty, fn = ltype(dtype), f"@llvm.{name}.{suffix(dtype)}"
    used.add(f"declare {ty} {fn}({', '.join([ty] * nargs)})")
    return f"call {ty} {fn}"
