"""OpenCL C dialect of the C-style renderer (LinearKernel -> OpenCL C source).

half is kept in memory and converted with vload_half/vstore_half, which OpenCL 1.2 has
without the cl_khr_fp16 extension, so half tensors work on every device. bfloat16 uses
the shared helpers of cstyle.py (as_uint / as_float); a cast to it from float64 or a
32/64-bit integer goes through double, so needs cl_khr_fp64.
"""
from __future__ import annotations

from codegen.dtypes import DType, dtypes
from codegen.linearizer import LinearKernel
from codegen.target import Target, gpu
from codegen.renderer.c_helpers import needs_double_bf16, uses
from codegen.renderer.cstyle import CStyleRenderer

_ROUND_HALF = ("float {name}({type} x) {{ ushort h; vstore_half(x, 0, (half*)&h); "
               "return vload_half(0, (half*)&h); }}")


_HALF_BITS = [  # a half (a float in registers) and its 16 bits
    "ushort half_bits(float x) { ushort h; vstore_half(x, 0, (half*)&h); return h; }",
    "float bits_half(ushort h) { return vload_half(0, (half*)&h); }",
]


class OpenCLRenderer(CStyleRenderer):
    """`__kernel` functions over `__global` buffers, indexed by get_global_id."""
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    group_bound = "__attribute__((reqd_work_group_size({x}, {y}, {z})))"
    float_bits, bits_float = "as_uint", "as_float"
    double_bits, bits_double = "as_ulong", "as_double"
    suffixes = {dtypes.uint32: "u", dtypes.int64: "L", dtypes.uint64: "UL"}
    types = {**CStyleRenderer.types, dtypes.int8: "char", dtypes.uint8: "uchar",
             dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long",
             dtypes.uint64: "ulong"}
    mem_types = {dtypes.bool: "uchar", dtypes.float16: "half", dtypes.bfloat16: "ushort"}
    specials = {"gidx": lambda d: f"get_global_id({d})", "lidx": lambda d: f"get_local_id({d})",
                "grp": lambda d: f"get_group_id({d})",
                "tid": lambda d: f"get_local_id({d})"}  # a stage's work-item (no group reduce)

    def __init__(self, target: Target | None = None):
        self.target = target if target is not None else gpu("OPENCL")

    def prelude(self, kernel: LinearKernel) -> list[str]:
        lines = []
        if uses(kernel, dtypes.float64) or needs_double_bf16(kernel):
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if uses(kernel, dtypes.float16):
            lines.append(_ROUND_HALF.format(name="round_half", type="float"))
            lines += _HALF_BITS
            if uses(kernel, dtypes.float64):
                lines.append(_ROUND_HALF.format(name="round_half_d", type="double"))
        return lines + self.bf16_helpers(kernel)

    def load_half(self, buf: str, idx: str) -> str:
        return f"vload_half({idx}, {buf})"

    def store_half(self, buf: str, idx: str, value: str) -> str:
        return f"vstore_half({value}, {idx}, {buf})"

    def half_bits(self, x: str) -> str:
        return f"half_bits({x})"

    def bits_half(self, bits: str) -> str:
        return f"bits_half({bits})"

    def round_half(self, x: str, src: DType) -> str:
        return f"round_half_d({x})" if src == dtypes.float64 else f"round_half({x})"
