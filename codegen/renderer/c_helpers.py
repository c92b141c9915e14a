"""C helper functions the dialects' preludes share, and which of them a kernel needs.

bfloat16 rounding is written once here (each dialect supplies only its bit casts);
`HalfFunctions` spells half through functions the prelude defines (CUDA, CLANG).
"""
from __future__ import annotations

from codegen.dtypes import DType, dtypes
from codegen.linearizer import LinearKernel
from codegen.uops import UOps, dtype_of

# bfloat16 <-> float, written once for every dialect: {F} and {U} are the dialect's
# float -> bits and bits -> float casts. A value goes to bfloat16 rounded to nearest, ties
# to even; NaN stays NaN (quiet, sign kept); past the largest bfloat16 it is inf.
# round_bf_d rounds a double to float toward zero, setting the last bit where inexact
# (round to odd), so the one rounding to bfloat16 after it is the only one that counts.
BF16 = [
    "float bf2f(unsigned short b) {{ return {U}(((unsigned int)b) << 16); }}",
    "unsigned short f2bf(float f) {{ unsigned int u = {F}(f); if (f != f) return "
    "(unsigned short)((u >> 16) | 0x40u); return (unsigned short)((u + 0x7FFFu + "
    "((u >> 16) & 1u)) >> 16); }}",
    "float round_bf(float f) {{ return bf2f(f2bf(f)); }}",
]
BF16_DOUBLE = [
    "float round_bf_d(double d) {{ float f = (float)d; double back = (double)f; "
    "unsigned int u = {F}(f); if (back != d) {{ if (fabs(back) > fabs(d)) u -= 1u; "
    "u |= 1u; }} return round_bf({U}(u)); }}",
]


class HalfFunctions:
    """half through functions the dialect's prelude defines: h2f (16 bits -> float) and
    f2h / d2h (float / double -> 16 bits, to nearest even). For CUDA and CLANG."""

    def load_half(self, buf: str, idx: str) -> str:
        return f"h2f({buf}[{idx}])"

    def store_half(self, buf: str, idx: str, value: str) -> str:
        return f"{buf}[{idx}] = f2h({value})"

    def half_bits(self, x: str) -> str:  # exact: x holds a half value
        return f"f2h({x})"

    def bits_half(self, bits: str) -> str:
        return f"h2f({bits})"

    def round_half(self, x: str, src: DType) -> str:
        return f"h2f({'d2h' if src == dtypes.float64 else 'f2h'}({x}))"


def uses(kernel: LinearKernel, dtype: DType) -> bool:
    """Whether any value or buffer of the kernel has this dtype (to pick helpers, pragmas)."""
    return dtype in kernel.buf_dtypes or any(u.dtype == dtype for u in kernel.uops)


def needs_double_bf16(kernel: LinearKernel) -> bool:
    """Whether a cast to bfloat16 goes through double (from float64 or a 32/64-bit int)."""
    return any(u.op is UOps.CAST and u.dtype == dtypes.bfloat16 and
               bf16_through_double(dtype_of(u.src[0])) for u in kernel.uops)


def bf16_through_double(src: DType) -> bool:
    """Whether a cast from src to bfloat16 goes through double: float holds neither float64
    nor every 32/64-bit integer exactly, so it would round twice."""
    return src == dtypes.float64 or (src.is_int and src.itemsize >= 4)
