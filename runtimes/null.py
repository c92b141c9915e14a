"""NULL runtime: the smallest complete runtime, for teaching and for counting launches.

It renders kernels with the OpenCL renderer (so DEBUG=4 shows real source), compiles
nothing and runs nothing: a launch only increments `launches`. Buffers are host
bytearrays, so copies in and out work; values computed by kernels are not (they stay
zero). docs/porting.md walks through this file.
"""
from __future__ import annotations
import functools

from codegen.renderer import ProgramSpec
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

    def __call__(self, *bufs, global_size, local_size, wait=False):
        self.runtime.launches += 1
        return 0.0 if wait else None


class NullRuntime(Runtime):
    """A device that counts kernel launches."""

    def __init__(self, name: str):
        super().__init__(name, NullAllocator(), NullCompiler(),
                         functools.partial(NullProgram, runtime=self), OpenCLRenderer())
        self.launches = 0


def make_runtime(name: str = "NULL") -> Runtime:
    """The NULL device."""
    return NullRuntime(name)
