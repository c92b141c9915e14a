"""NULL runtime: the smallest complete runtime, for teaching and for counting launches.

It renders kernels with the OpenCL renderer (so DEBUG=4 shows real source), compiles
nothing and runs nothing: a launch only increments `launches`. Buffers are host
bytearrays, so copies in and out work; values computed by kernels are not (they stay
zero). docs/porting.md walks through this file.

NULL_CUDA is the same device rendering CUDA C: it exercises the CUDA renderer on any
machine (CI has no GPU), and `sources` keeps every kernel's source so a test can hand
them all to nvcc where one is installed (tests/backend/test_cuda.py).
"""
from __future__ import annotations
import functools

from codegen.renderer import ProgramSpec, Renderer
from codegen.renderer.cuda import CUDARenderer
from codegen.renderer.opencl import OpenCLRenderer
from runtimes.base import Allocator, Compiler, Program, Runtime


class NullAllocator(Allocator):
    """Host bytearrays stand in for device memory."""

    def _alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def copyin(self, dest: bytearray, src: memoryview) -> None:
        dest[:src.nbytes] = src.cast("B")

    def copyout(self, dest: memoryview, src: bytearray) -> None:
        dest.cast("B")[:] = src[:dest.nbytes]


class NullCompiler(Compiler):
    """The 'binary' is the source itself."""
    key = "null"

    def compile(self, src: str) -> bytes:
        return src.encode()


class NullProgram(Program):
    """Launching counts, nothing more."""

    def __init__(self, spec: ProgramSpec, binary: bytes, runtime: NullRuntime):
        super().__init__(spec, binary)
        self.runtime = runtime
        runtime.sources.add(spec.src)

    def __call__(self, *bufs, global_size, local_size, wait=False):
        self.runtime.launches += 1
        return 0.0 if wait else None


class NullRuntime(Runtime):
    """A device that counts kernel launches."""
    computes = False

    def __init__(self, name: str, renderer: Renderer):
        super().__init__(name, NullAllocator(), NullCompiler(),
                         functools.partial(NullProgram, runtime=self), renderer)
        self.launches = 0
        self.sources: set[str] = set()  # the source of every program loaded


def make_runtime(name: str = "NULL") -> Runtime:
    """The NULL device (OpenCL C), or NULL_CUDA (CUDA C)."""
    return NullRuntime(name, CUDARenderer() if name.startswith("NULL_CUDA") else OpenCLRenderer())
