"""The CUDA driver and NVRTC as ctypes libraries: their function tables, finding the
shared libraries, and a wrapper whose calls raise RuntimeError(the error's name)."""
from __future__ import annotations
import ctypes
import ctypes.util
import glob
import os
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

from codegen.helpers import getenv

_P, _INT, _SIZE = POINTER(c_void_p), POINTER(c_int), POINTER(c_size_t)
_CU = {  # driver function -> argument types; each returns a CUresult (0 = success)
    "cuInit": [c_uint], "cuDeviceGetCount": [_INT], "cuDeviceGet": [_INT, c_int],
    "cuDeviceGetAttribute": [_INT, c_int, c_int], "cuDevicePrimaryCtxRetain": [_P, c_int],
    "cuCtxSetCurrent": [c_void_p], "cuCtxGetCurrent": [_P], "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [POINTER(c_uint64), c_size_t], "cuMemFree_v2": [c_uint64],
    "cuMemcpyHtoD_v2": [c_uint64, c_void_p, c_size_t],
    "cuMemcpyDtoH_v2": [c_void_p, c_uint64, c_size_t],
    "cuMemcpyDtoD_v2": [c_uint64, c_uint64, c_size_t],
    "cuModuleLoadData": [_P, c_char_p], "cuModuleGetFunction": [_P, c_void_p, c_char_p],
    "cuLaunchKernel": [c_void_p] + [c_uint] * 7 + [c_void_p, _P, _P],
    "cuEventCreate": [_P, c_uint], "cuEventRecord": [c_void_p, c_void_p],
    "cuEventSynchronize": [c_void_p], "cuEventElapsedTime": [POINTER(c_float), c_void_p, c_void_p],
    "cuGetErrorName": [c_int, POINTER(c_char_p)]}
_NVRTC = {
    "nvrtcVersion": [_INT, _INT], "nvrtcCreateProgram": [_P, c_char_p, c_char_p, c_int, _P, _P],
    "nvrtcCompileProgram": [c_void_p, c_int, POINTER(c_char_p)], "nvrtcDestroyProgram": [_P],
    "nvrtcGetProgramLogSize": [c_void_p, _SIZE], "nvrtcGetProgramLog": [c_void_p, c_char_p],
    "nvrtcGetCUBINSize": [c_void_p, _SIZE], "nvrtcGetCUBIN": [c_void_p, c_char_p]}



def load_library(stem: str, what: str) -> ctypes.CDLL:
    """Open lib<stem>.so (any version) or raise a RuntimeError saying it is missing."""
    roots = [getenv("CUDA_PATH", ""), getenv("CUDA_HOME", ""), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    dirs = [os.path.join(r, sub) for r in roots if r
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib")]
    dirs += ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64"]
    names = [n for n in (ctypes.util.find_library(stem), f"lib{stem}.so.1", f"lib{stem}.so") if n]
    names += sorted((p for d in dirs for p in glob.glob(f"{d}/lib{stem}.so*")), reverse=True)
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError(f"CUDA: lib{stem}.so ({what}) not found; searched the loader path and "
                       f"{', '.join(dirs)} (set CUDA_PATH to your toolkit)")


class _API:
    """A ctypes library whose calls raise RuntimeError(the error's name) on failure."""

    def __init__(self, lib: ctypes.CDLL, table: dict, error_name):
        self.lib, self.error_name = lib, error_name
        for name, argtypes in table.items():
            getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, c_int

    def __call__(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            self.raise_for(name, status)

    def raise_for(self, name: str, status: int) -> None:
        raise RuntimeError(f"{name} failed: {self.error_name(status)} ({status})")

    def ints(self, name: str, n: int, *args) -> tuple[int, ...]:
        """Call name(&out_1, ..., &out_n, *args) and return the n ints it wrote."""
        outs = [c_int() for _ in range(n)]
        self(name, *map(byref, outs), *args)
        return tuple(o.value for o in outs)


def arg_block(n: int) -> tuple[ctypes.Array, ctypes.Array]:
    """A kernel's argument block for `n` device pointers: the values, and the array of
    pointers to them that cuLaunchKernel and a graph's kernel node take (the driver reads
    the values when called, so a block is refilled and reused)."""
    values = (c_uint64 * n)()
    return values, (c_void_p * n)(*[ctypes.addressof(values) + 8 * i for i in range(n)])


def dims3(sizes) -> list[int]:
    """Launch sizes as CUDA's three dims (the missing ones 1)."""
    return (list(sizes) + [1, 1])[:3]
