"""CUDA C dialect of the C-style renderer (LinearKernel -> CUDA C source for NVRTC).

half is kept in memory as 16 bits and converted with the PTX `cvt` instructions that
cuda_fp16.h wraps; writing them inline means NVRTC needs no include path.
"""
from __future__ import annotations
from typing import Callable

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.linearizer import LinearKernel
from codegen.ops import BinaryOps, Op, UnaryOps
from codegen.renderer.c_helpers import HalfFunctions, uses
from codegen.renderer.cstyle import CStyleRenderer, _CKernel
from codegen.target import Target, gpu
from codegen.uops import UOp, dtype_of

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


# the types __shfl_xor_sync exchanges (a group reduce's accumulator: a 16-bit float's is float)
_SHUFFLED = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64,
             dtypes.uint64)


class CUDARenderer(HalfFunctions, CStyleRenderer):
    """`extern "C" __global__` functions indexed by blockIdx * blockDim + threadIdx."""
    target = gpu("CUDA", local_size=256, warp=32)
    kernel_prefix = 'extern "C" __global__ '
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    group_bound = "__launch_bounds__({size})"
    make_vector = "make_{type}({lanes})"
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

    def _group_combine(self, k: _CKernel, acc: UOp, op: Op) -> None:
        """Across a work-group of whole warps: each warp combines its 32 values by an
        exchange of registers (`__shfl_xor_sync`: every lane gets the warp's result), lane
        0 of each warp puts it in local memory, and after one barrier every warp combines
        those the same way, so every work-item holds the group's result (D96: the tree in
        local memory takes a barrier per halving, 10 for a row kernel's 1024 work-items).
        Other group sizes and types, or a target without `warp` 32: the tree."""
        size, dtype = prod(k.kernel.local_size), dtype_of(acc)
        warps = size // 32
        if self.target.warp != 32 or size % 32 or warps & (warps - 1) or dtype not in _SHUFFLED:
            return super()._group_combine(k, acc, op)
        scratch, lidx, name = f"red_{k.names[acc]}", k.lidx[0], k.names[acc]
        self._butterfly(k, name, op, dtype, 32)
        if warps == 1:
            return
        k.prologue.append(f"  __shared__ {self.mem_type(dtype)} {scratch}[{warps}];")
        k.emit(f"if (({lidx} & 31) == 0) {scratch}[{lidx} >> 5] = {name};")
        k.emit("__syncthreads();")
        k.emit(f"{name} = {scratch}[{lidx} & {warps - 1}];")
        self._butterfly(k, name, op, dtype, warps)

    def _butterfly(self, k: _CKernel, name: str, op: Op, dtype: DType, lanes: int) -> None:
        """name = op over each aligned run of `lanes` lanes of a warp, in every lane."""
        step = lanes // 2
        while step:
            other = k.fresh("sh")
            k.emit(f"{self.types[dtype]} {other} = __shfl_xor_sync(0xffffffffu, {name}, {step});")
            k.emit(f"{name} = {self.code_for_op[op](name, other, dtype)};")
            step //= 2

    def prelude(self, kernel: LinearKernel) -> list[str]:
        helpers = [f"__device__ {line}" for line in self.bf16_helpers(kernel)]
        return (_HALF if uses(kernel, dtypes.float16) else []) + helpers

    def inf(self, dtype: DType) -> str:  # NVRTC has no math.h, so no INFINITY / NAN
        return ("__longlong_as_double(0x7ff0000000000000LL)" if dtype == dtypes.float64
                else "__int_as_float(0x7f800000)")

    def nan(self, dtype: DType) -> str:
        return ("__longlong_as_double(0x7ff8000000000000LL)" if dtype == dtypes.float64
                else "__int_as_float(0x7fc00000)")
