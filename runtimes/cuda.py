"""CUDA runtime: the driver API (libcuda) and NVRTC (libnvrtc) through ctypes.

CUDA C -> NVRTC (11.1+) -> CUBIN for the device's sm_XY -> cuModuleLoadData -> cuLaunchKernel
on the default stream, timed with events. Importing needs no CUDA library; `make_runtime`
loads them and raises a RuntimeError naming the one it could not find. Any cu*/nvrtc*
status but success raises a RuntimeError with the error's name.
"""
from __future__ import annotations
import ctypes
import ctypes.util
import functools
import glob
import os
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p

from codegen.helpers import getenv
from codegen.renderer import ProgramSpec
from codegen.renderer.cuda import CUDARenderer
from runtimes.base import Allocator, Compiler, Program, Runtime

_P, _INT, _SIZE = POINTER(c_void_p), POINTER(c_int), POINTER(c_size_t)
_CU = {  # driver function -> argument types; each returns a CUresult (0 = success)
    "cuInit": [c_uint], "cuDeviceGetCount": [_INT], "cuDeviceGet": [_INT, c_int],
    "cuDeviceGetAttribute": [_INT, c_int, c_int], "cuDevicePrimaryCtxRetain": [_P, c_int],
    "cuCtxSetCurrent": [c_void_p], "cuCtxSynchronize": [],
    "cuMemAlloc_v2": [POINTER(c_uint64), c_size_t], "cuMemFree_v2": [c_uint64],
    "cuMemcpyHtoD_v2": [c_uint64, c_void_p, c_size_t],
    "cuMemcpyDtoH_v2": [c_void_p, c_uint64, c_size_t],
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
            raise RuntimeError(f"{name} failed: {self.error_name(status)} ({status})")

    def ints(self, name: str, n: int, *args) -> tuple[int, ...]:
        """Call name(&out_1, ..., &out_n, *args) and return the n ints it wrote."""
        outs = [c_int() for _ in range(n)]
        self(name, *map(byref, outs), *args)
        return tuple(o.value for o in outs)


class CUDAAllocator(Allocator):
    """Device memory as CUdeviceptr integers; copies are synchronous."""

    def __init__(self, dev: CUDARuntime):
        super().__init__()
        self.dev = dev

    def _alloc(self, nbytes: int) -> int:
        ptr = c_uint64()
        self.dev.call("cuMemAlloc_v2", byref(ptr), nbytes)
        return ptr.value

    def _free(self, opaque: int) -> None:
        self.dev.call("cuMemFree_v2", opaque)

    def copyin(self, dest: int, src: memoryview) -> None:
        self.dev.call("cuMemcpyHtoD_v2", dest, bytes(src), src.nbytes)

    def copyout(self, dest: memoryview, src: int) -> None:
        host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
        self.dev.call("cuMemcpyDtoH_v2", host, src, dest.nbytes)


class CUDACompiler(Compiler):
    """CUDA C -> CUBIN with NVRTC for this device's architecture."""

    def __init__(self, dev: CUDARuntime):
        super().__init__()
        self.dev = dev
        self.key = f"cuda-nvrtc{'.'.join(map(str, dev.nvrtc_version))}-sm_{dev.arch}"

    def compile(self, src: str) -> bytes:
        nvrtc, prog = self.dev.nvrtc, c_void_p()
        nvrtc("nvrtcCreateProgram", byref(prog), src.encode(), b"kernel.cu", 0, None, None)
        try:
            arch = f"--gpu-architecture=sm_{self.dev.arch}"  # CUBIN: the driver JITs nothing
            try:
                nvrtc("nvrtcCompileProgram", prog, 1, (c_char_p * 1)(arch.encode()))
            except RuntimeError as e:
                log = self._read(prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")
                raise RuntimeError(f"{e}\n--- NVRTC log ---\n{log}") from e
            return self._read(prog, "CUBIN")
        finally:
            nvrtc("nvrtcDestroyProgram", byref(prog))

    def _read(self, prog: c_void_p, what: str) -> bytes:
        """nvrtcGet<what>Size, then nvrtcGet<what>: the log or the CUBIN."""
        size = c_size_t()
        self.dev.nvrtc(f"nvrtcGet{what}Size", prog, byref(size))
        out = ctypes.create_string_buffer(size.value)
        self.dev.nvrtc(f"nvrtcGet{what}", prog, out)
        return out.raw


class CUDAProgram(Program):
    """A kernel in its own module, launched on the default stream."""

    def __init__(self, spec: ProgramSpec, binary: bytes, dev: CUDARuntime):
        super().__init__(spec, binary)
        self.dev, self.module, self.function = dev, c_void_p(), c_void_p()
        dev.call("cuModuleLoadData", byref(self.module), binary)
        dev.call("cuModuleGetFunction", byref(self.function), self.module, spec.entry.encode())
        self.events = (c_void_p(), c_void_p())  # start and end of a launch
        for event in self.events:
            dev.call("cuEventCreate", byref(event), 0)

    def __call__(self, *bufs, global_size, local_size, wait=False):
        cu, (start, end) = self.dev.call, self.events
        args = [c_uint64(b) for b in bufs]
        params = (c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        grid, block = (list(global_size) + [1, 1])[:3], (list(local_size) + [1, 1])[:3]
        cu("cuEventRecord", start, None)
        cu("cuLaunchKernel", self.function, *grid, *block, 0, None, params, None)
        cu("cuEventRecord", end, None)
        if not wait:
            return None
        cu("cuEventSynchronize", end)
        ms = c_float()
        cu("cuEventElapsedTime", byref(ms), start, end)
        return ms.value * 1e-3


class CUDARuntime(Runtime):
    """libcuda + libnvrtc and the primary context of device `index`."""

    def __init__(self, name: str, index: int):
        cuda = load_library("cuda", "the NVIDIA driver library")
        nvrtc = load_library("nvrtc", "NVRTC, from the CUDA toolkit")
        nvrtc.nvrtcGetErrorString.argtypes, nvrtc.nvrtcGetErrorString.restype = [c_int], c_char_p
        self.cu = _API(cuda, _CU, self._cu_error_name)
        self.nvrtc = _API(nvrtc, _NVRTC, lambda s: nvrtc.nvrtcGetErrorString(s).decode())
        self.nvrtc_version = self.nvrtc.ints("nvrtcVersion", 2)
        self.cu("cuInit", 0)
        count = self.cu.ints("cuDeviceGetCount", 1)[0]
        if index >= count:
            raise RuntimeError(f"CUDA:{index} does not exist: {count} CUDA device(s) found")
        self.device, self.context = self.cu.ints("cuDeviceGet", 1, index)[0], c_void_p()
        self.cu("cuDevicePrimaryCtxRetain", byref(self.context), self.device)
        self.arch = "".join(str(self.cu.ints("cuDeviceGetAttribute", 1, a, self.device)[0])
                            for a in (75, 76))  # COMPUTE_CAPABILITY_MAJOR, _MINOR
        super().__init__(name, CUDAAllocator(self), CUDACompiler(self),
                         functools.partial(CUDAProgram, dev=self), CUDARenderer())

    def _cu_error_name(self, status: int) -> str:
        text = c_char_p()
        self.cu.lib.cuGetErrorName(status, byref(text))
        return (text.value or b"CUDA_ERROR_UNKNOWN").decode()

    def call(self, name: str, *args) -> None:
        """A driver call with this device's context current (devices may share a thread)."""
        self.cu("cuCtxSetCurrent", self.context)
        self.cu(name, *args)

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")


def make_runtime(name: str = "CUDA") -> Runtime:
    """The CUDA device `name` ("CUDA" or "CUDA:N"); RuntimeError says what is missing."""
    _, _, index = name.partition(":")
    return CUDARuntime(name, int(index or 0))
