"""OpenCL C dialect of the C-style renderer (LinearKernel -> OpenCL C source).

half is kept in memory and converted with vload_half/vstore_half, which OpenCL 1.2 has
without the cl_khr_fp16 extension, so half tensors work on every device.
"""
from __future__ import annotations

from codegen.dtypes import DType, dtypes
from codegen.linearizer import KernelOptions, LinearKernel
from codegen.renderer.cstyle import CStyleRenderer, uses

_ROUND_HALF = ("float {name}({type} x) {{ ushort h; vstore_half(x, 0, (half*)&h); "
               "return vload_half(0, (half*)&h); }}")


class OpenCLRenderer(CStyleRenderer):
    """`__kernel` functions over `__global` buffers, indexed by get_global_id."""
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    int64_suffix = "L"
    types = {**CStyleRenderer.types, dtypes.int8: "char", dtypes.uint8: "uchar",
             dtypes.int64: "long"}
    mem_types = {dtypes.bool: "uchar", dtypes.float16: "half"}
    specials = {"gidx": lambda d: f"get_global_id({d})", "lidx": lambda d: f"get_local_id({d})",
                "grp": lambda d: f"get_group_id({d})"}

    def __init__(self, local_size: int = 256):
        self.kernel_options = KernelOptions(gpu=True, local_size=local_size)

    def prelude(self, kernel: LinearKernel) -> list[str]:
        lines = []
        if uses(kernel, dtypes.float64):
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if uses(kernel, dtypes.float16):
            lines.append(_ROUND_HALF.format(name="round_half", type="float"))
            if uses(kernel, dtypes.float64):
                lines.append(_ROUND_HALF.format(name="round_half_d", type="double"))
        return lines

    def load_half(self, buf: str, idx: str) -> str:
        return f"vload_half({idx}, {buf})"

    def store_half(self, buf: str, idx: str, value: str) -> str:
        return f"vstore_half({value}, {idx}, {buf})"

    def round_half(self, x: str, src: DType) -> str:
        return f"round_half_d({x})" if src == dtypes.float64 else f"round_half({x})"
