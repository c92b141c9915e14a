"""C dialect of the C-style renderer for loop targets (LinearKernel -> C99 for a host compiler).

No work-items: the linearizer emits the global dims as `for` loops, the outer one over
[core_start, core_end) (two int64 arguments after the buffers) so the runtime can split it
across threads. half lives in memory as its 16 bits and is converted by the helpers below
(integer code, round to nearest even), so no compiler needs _Float16.
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from codegen.linearizer import LinearKernel
from codegen.target import Target
from codegen.renderer.c_helpers import HalfFunctions, uses
from codegen.renderer.cstyle import CStyleRenderer

_HEADER = ["#include <math.h>", "#include <stdbool.h>",
           "static inline unsigned int as_uint(float f) { union { float f; unsigned int u; } x; "
           "x.f = f; return x.u; }",
           "static inline float as_float(unsigned int u) { union { float f; unsigned int u; } "
           "x; x.u = u; return x.f; }",
           "static inline unsigned long long as_ulong(double d) { union { double d; "
           "unsigned long long u; } x; x.d = d; return x.u; }",
           "static inline double as_double(unsigned long long u) { union { double d; "
           "unsigned long long u; } x; x.u = u; return x.d; }"]
# float -> half bits: subnormals by exact scaling and rintf (ties to even); a double first
# rounds to float toward zero with the last bit set where inexact (round to odd), so only
# the rounding to half counts
_HALF = [
    "static unsigned short f2h(float f) { unsigned int x = as_uint(f), ax = x & 0x7fffffffu; "
    "unsigned short s = (unsigned short)((x >> 16) & 0x8000u); if (ax > 0x7f800000u) "
    "return s | 0x7e00u | (unsigned short)((ax >> 13) & 0x3ffu); if (ax >= 0x477ff000u) "
    "return s | 0x7c00u; if (ax < 0x38800000u) return s | (unsigned short)rintf("
    "as_float(ax) * 16777216.0f); return s | (unsigned short)((ax - 0x38000000u + 0xfffu + "
    "((ax >> 13) & 1u)) >> 13); }",
    "static float h2f(unsigned short h) { unsigned int s = (h & 0x8000u) << 16, "
    "e = (h >> 10) & 0x1fu, m = h & 0x3ffu; if (e == 0) { float f = (float)m * "
    "5.9604644775390625e-08f; return s ? -f : f; } return as_float(s | (e == 31 ? "
    "0x7f800000u : (e + 112u) << 23) | (m << 13)); }",
    "static unsigned short d2h(double d) { float f = (float)d; unsigned int u = as_uint(f); "
    "if ((double)f != d && f == f) { if (fabs((double)f) > fabs(d)) u -= 1u; u |= 1u; } "
    "return f2h(as_float(u)); }",
]


class ClangRenderer(HalfFunctions, CStyleRenderer):
    """Plain C functions over host pointers; only the kernel itself is exported."""
    target = Target("CLANG")  # loops with the core_start/core_end thread split
    kernel_prefix = '__attribute__((visibility("default"))) '
    float_bits, bits_float = "as_uint", "as_float"
    double_bits, bits_double = "as_ulong", "as_double"

    def prelude(self, kernel: LinearKernel) -> list[str]:
        half = _HALF if uses(kernel, dtypes.float16) else []
        return _HEADER + half + [f"static {line}" for line in self.bf16_helpers(kernel)]
