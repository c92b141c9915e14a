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
from typing import Any, Callable, cast
from ctypes import byref, c_char_p, c_float, c_int, c_uint64, c_void_p

from codegen.helpers import getenv
from codegen.renderer import ProgramSpec
from codegen.renderer.llvm_launch import CUDA_RECORD
from codegen.renderer.cuda import CUDARenderer
from codegen.target import Target, gpu
from runtimes.base import Allocator, Program, Runtime
from runtimes.cuda_api import _API, _CU, _NVRTC, arg_block, dims3, load_library
from runtimes.cuda_graph import CUDAGraph
from runtimes.cuda_nvrtc import CUDACompiler
from runtimes.cuda_launch import LaunchRecords, c_address, native_launch


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

    def copy_within(self, dest: int, src: int, offset: int, nbytes: int) -> None:
        """A run of device memory copied on the default stream, after the kernels before
        it (a slice made its own buffer: lazyten/varying.py)."""
        self.dev.call("cuMemcpyDtoD_v2", dest, src + offset, nbytes)


class CUDAProgram(Program):
    """A kernel in its own module, launched on the default stream.

    A launch is one call of the native `cuda_launch` builtin where the device has it
    (D99: a launch record per launch size, made once), else the fewest driver calls
    ctypes can make (issue 16: 27 us per kernel of a replayed jit on an H100, where torch
    launches in 14): the argument block is built once and refilled, the context is made
    current only where another is (torch and lazyten share the device's primary
    context), and the timing events are recorded only when the caller waits for the time
    (DEBUG>=2, the thread trial)."""

    def __init__(self, spec: ProgramSpec, binary: bytes, dev: CUDARuntime):
        super().__init__(spec, binary)
        self.dev, self.module, self.function = dev, c_void_p(), c_void_p()
        dev.call("cuModuleLoadData", byref(self.module), binary)
        dev.call("cuModuleGetFunction", byref(self.function), self.module, spec.entry.encode())
        self.events = (c_void_p(), c_void_p())  # start and end of a timed launch
        for event in self.events:
            dev.call("cuEventCreate", byref(event), 0)
        self.launch = (tuple(spec.global_size), tuple(spec.local_size))
        self._dims = (list(spec.global_size), list(spec.local_size),
                      dims3(spec.global_size), dims3(spec.local_size))  # the usual launch
        self._arity = -1
        self._args: ctypes.Array = (c_uint64 * 0)()
        self._params: ctypes.Array = (c_void_p * 0)()
        self._records = LaunchRecords(dev.driver, dev.context.value or 0, self.function.value or 0)

    def launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """A launch with these sizes (what the engine's plans keep): through the native
        `cuda_launch` where the device has it (D99), its record made once; it holds this
        program, whose module must stay loaded while a plan may call it."""
        if self.dev.native is None:
            return super().launcher(global_size, local_size)
        call, at = self.dev.native, self._records.at(global_size, local_size,
                                                     len(self.spec.buf_dtypes))

        def launch(*bufs: int, _program: CUDAProgram = self) -> None:
            status = call(at, *bufs)
            if status:
                _program.dev.cu.raise_for("cuLaunchKernel", status)
        return launch

    def __call__(self, *bufs, global_size, local_size, wait=False):
        if not wait and self.dev.native is not None:  # one builtin call (D99)
            status = self.dev.native(self._records.at(global_size, local_size, len(bufs)), *bufs)
            if status:
                self.dev.cu.raise_for("cuLaunchKernel", status)
            return None
        if len(bufs) != self._arity:
            self._arity = len(bufs)
            self._args, self._params = arg_block(self._arity)
        self._args[:] = bufs  # read by cuLaunchKernel before it returns: reused safely
        given, local, grid, block = self._dims
        if global_size != given or local_size != local:
            grid, block = dims3(global_size), dims3(local_size)
        dev, (start, end) = self.dev, self.events
        dev.make_current()
        if wait:
            dev.cu("cuEventRecord", start, None)
        status = dev.launch_kernel(self.function, *grid, *block, 0, None, self._params, None)
        if status:
            dev.cu.raise_for("cuLaunchKernel", status)
        if not wait:
            return None
        dev.cu("cuEventRecord", end, None)
        dev.cu("cuEventSynchronize", end)
        ms = c_float()
        dev.cu("cuEventElapsedTime", byref(ms), start, end)
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
        self.graph_calls: dict | None = None  # the graph API, once looked up
        self.launch_kernel = cuda.cuLaunchKernel  # called bare on the hot path
        self._current = cuda.cuCtxGetCurrent
        self._now = c_void_p()
        # the builtin launch (D99) and the driver functions it calls, where both exist
        driver = [c_address(getattr(cuda, name)) for name in CUDA_RECORD[:3]]
        self.driver: list[int] = [a for a in driver if a is not None]
        self.native = native_launch() if len(self.driver) == 3 and \
            getenv("CUDA_NATIVE_LAUNCH", 1) else None
        self.arch = "".join(str(self.attribute(a)) for a in (75, 76))  # COMPUTE_CAPABILITY
        super().__init__(name, CUDAAllocator(self), CUDACompiler(self),
                         functools.partial(CUDAProgram, dev=self), CUDARenderer(self.target()))

    def attribute(self, attr: int) -> int:
        """cuDeviceGetAttribute of this device (CUdevice_attribute numbers, cuda.h)."""
        return self.cu.ints("cuDeviceGetAttribute", 1, attr, self.device)[0]

    def target(self) -> Target:
        """The optimiser's Target from the device's limits: work-items per group (1), per
        group dim (2-4), work-groups per dim (5-7), static shared memory per group (8),
        warp size (10)."""
        threads, memory = self.attribute(1), self.attribute(8)
        return gpu("CUDA", local_size=min(256, threads), local_memory=min(48 << 10, memory),
                   max_local=tuple(self.attribute(a) for a in (2, 3, 4)),
                   max_global=tuple(self.attribute(a) for a in (5, 6, 7)), max_group=threads,
                   warp=self.attribute(10))

    def _cu_error_name(self, status: int) -> str:
        text = c_char_p()
        self.cu.lib.cuGetErrorName(status, byref(text))
        return (text.value or b"CUDA_ERROR_UNKNOWN").decode()

    def call(self, name: str, *args) -> None:
        """A driver call with this device's context current (devices may share a thread)."""
        self.make_current()
        self.cu(name, *args)

    def make_current(self) -> None:
        """Make this device's context the thread's current one, where it is not already
        (another device, or a library that switched, may have made another current)."""
        if self._current(byref(self._now)) != 0 or self._now.value != self.context.value:
            self.cu("cuCtxSetCurrent", self.context)

    def graph(self, launches: list[tuple[Program, list[int]]]) -> CUDAGraph:
        """The launches (program, device pointers), in order, as one CUDA graph."""
        return CUDAGraph(self, [(cast(CUDAProgram, p), ptrs) for p, ptrs in launches])

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")


def make_runtime(name: str = "CUDA") -> Runtime:
    """The CUDA device `name` ("CUDA" or "CUDA:N"); RuntimeError says what is missing."""
    _, _, index = name.partition(":")
    return CUDARuntime(name, int(index or 0))
