"""CUDA C dialect of the C-style renderer (LinearKernel -> CUDA C source for NVRTC).

half is kept in memory as 16 bits and converted with the PTX `cvt` instructions that
cuda_fp16.h wraps; writing them inline means NVRTC needs no include path.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.linearizer import LinearKernel
from codegen.ops import BinaryOps, UnaryOps
from codegen.renderer.c_helpers import HalfFunctions, uses
from codegen.renderer.cstyle import CStyleRenderer
from codegen.target import Target, gpu

_HALF = [
    "__device__ float h2f(unsigned short h) { float f; "
    "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }",
    "__device__ unsigned short f2h(float f) { unsigned short h; "
    "asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }",
    "__device__ unsigned short d2h(double d) { unsigned short h; "
    "asm(\"cvt.rn.f16.f64 %0, %1;\" : \"=h\"(h) : \"d\"(d)); return h; }",
]


def _suffix(dtype: DType) -> str:
    """C math names: float gets the `f` variant (sinf), double the plain one."""
    return "" if dtype == dtypes.float64 else "f"


def _math(name: str) -> Callable[[str, DType], str]:
    """The code_for_op entry of a one-argument C math function."""
    def render(x: str, dtype: DType) -> str:
        return f"{name}{_suffix(dtype)}({x})"
    return render


def _mod(a: str, b: str, dtype: DType) -> str:
    return f"fmod{_suffix(dtype)}({a}, {b})" if dtype.is_float else f"({a}%{b})"


class CUDARenderer(HalfFunctions, CStyleRenderer):
    """`extern "C" __global__` functions indexed by blockIdx * blockDim + threadIdx."""
    target = gpu("CUDA", local_size=256)
    kernel_prefix = 'extern "C" __global__ '
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    group_bound = "__launch_bounds__({size})"
    float_bits, bits_float = "__float_as_uint", "__uint_as_float"
    double_bits, bits_double = "__double_as_longlong", "__longlong_as_double"
    specials = {"gidx": lambda d: f"(blockIdx.{'xyz'[d]}*(long long)blockDim.{'xyz'[d]}"
                                  f"+threadIdx.{'xyz'[d]})",
                "lidx": lambda d: f"threadIdx.{'xyz'[d]}", "grp": lambda d: f"blockIdx.{'xyz'[d]}",
                "tid": lambda d: f"threadIdx.{'xyz'[d]}"}  # a stage's work-item (no group reduce)
    code_for_op = {**CStyleRenderer.code_for_op, UnaryOps.EXP2: _math("exp2"),
                   UnaryOps.EXP: _math("exp"), UnaryOps.LOG2: _math("log2"),
                   UnaryOps.SIN: _math("sin"), UnaryOps.COS: _math("cos"),
                   UnaryOps.SQRT: _math("sqrt"),
                   BinaryOps.MOD: _mod}

    def __init__(self, target: Target | None = None):
        """`target`: the device's limits (runtimes/cuda.py reads them); else a default."""
        if target is not None:
            self.target = target

    def prelude(self, kernel: LinearKernel) -> list[str]:
        helpers = [f"__device__ {line}" for line in self.bf16_helpers(kernel)]
        return (_HALF if uses(kernel, dtypes.float16) else []) + helpers

    def inf(self, dtype: DType) -> str:  # NVRTC has no math.h, so no INFINITY / NAN
        return ("__longlong_as_double(0x7ff0000000000000LL)" if dtype == dtypes.float64
                else "__int_as_float(0x7f800000)")

    def nan(self, dtype: DType) -> str:
        return ("__longlong_as_double(0x7ff8000000000000LL)" if dtype == dtypes.float64
                else "__int_as_float(0x7fc00000)")
