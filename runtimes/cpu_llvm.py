"""CPU runtime: LLVM IR -> native code with llvmlite, run through ctypes.

Buffers are 64-byte aligned host memory. Compiled kernels are object files (cached on
disk); each Program loads one into its own MCJIT engine. The outer loop of a kernel is
split across THREADS worker threads: ctypes releases the GIL during the call.
"""
from __future__ import annotations
import ctypes
import functools
import os
import queue
import threading
import time

import llvmlite.binding as llvm

from codegen.helpers import getenv
from codegen.renderer.llvmir import LLVMRenderer
from codegen.renderer import ProgramSpec
from runtimes.base import Allocator, Compiler, Program, Runtime

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
_TARGET_MACHINE = llvm.Target.from_default_triple().create_target_machine(
    cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
    opt=3, reloc="pic", codemodel="default", jit=True)
_CPUS = os.cpu_count() or 1
_CHUNKS_PER_THREAD = 16  # the outer loop is cut into this many pieces per thread
_MIN_WORK_PER_THREAD = 1 << 16  # below this many loop iterations per thread, stay serial


class CPUAllocator(Allocator):
    """Host memory from ctypes, aligned for vector loads."""

    def _alloc(self, nbytes: int):
        raw = (ctypes.c_uint8 * (nbytes + 64))()
        offset = (-ctypes.addressof(raw)) % 64
        return (raw, ctypes.addressof(raw) + offset)

    def copyin(self, dest, src: memoryview) -> None:
        ctypes.memmove(dest[1], (ctypes.c_char * src.nbytes).from_buffer_copy(src), src.nbytes)

    def copyout(self, dest: memoryview, src) -> None:
        ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src[1], dest.nbytes)


class LLVMCompiler(Compiler):
    """LLVM IR -> optimised object code for this CPU."""
    key = f"llvm-{llvm.llvm_version_info}-{llvm.get_host_cpu_name()}-{llvm.get_host_cpu_features().flatten()}"
    threaded = True  # llvmlite releases the GIL in LLVM calls (and serialises them itself)

    def compile(self, src: str) -> bytes:
        mod = llvm.parse_assembly(src)
        mod.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=getenv("OPT", 3))
        tuning.loop_vectorization = tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(_TARGET_MACHINE, tuning)
        builder.getModulePassManager().run(mod, builder)
        return _TARGET_MACHINE.emit_object(mod)


class _Host:
    """What one CPU runtime's programs share: an MCJIT engine (creating one costs about
    1.5 ms) and the worker threads that split a kernel's outer loop."""

    def __init__(self):
        self.engine: llvm.ExecutionEngine | None = None
        self.loaded: dict[str, int] = {}  # function name -> address
        self.threads: list[queue.SimpleQueue] = []  # one job queue per worker thread
        self.pid = os.getpid()

    def load(self, function: str, binary: bytes) -> int:
        """The address of `function`, loading `binary` into the shared engine unless it is
        there already (functions are named after their bodies: same name, same code)."""
        if function not in self.loaded:
            if self.engine is None:
                self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _TARGET_MACHINE)
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
            self.engine.finalize_object()
            self.loaded[function] = self.engine.get_function_address(function)
        return self.loaded[function]

    def address(self, function: str) -> int:
        """The address of a function in a binary already loaded."""
        return self.engine.get_function_address(function)

    def run(self, job, helpers: int) -> None:
        """Run `job` on `helpers` worker threads and on this one; return when all are done.
        Workers wait on SimpleQueues: a hand-off costs about 15 us, against 60 us for a
        ThreadPoolExecutor's submit and result."""
        if self.pid != os.getpid():  # a forked child has none of its parent's threads
            self.threads, self.pid = [], os.getpid()
        while len(self.threads) < helpers:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_worker, args=(jobs,), daemon=True).start()
            self.threads.append(jobs)
        done: queue.SimpleQueue = queue.SimpleQueue()
        for jobs in self.threads[:helpers]:
            jobs.put((job, done))
        job()
        for _ in range(helpers):
            error = done.get()
            if error is not None:
                raise error


def _worker(jobs: queue.SimpleQueue) -> None:
    while True:
        job, done = jobs.get()
        try:
            job()
            done.put(None)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            done.put(e)


class CPUProgram(Program):
    """A kernel loaded into its host's MCJIT engine and called through ctypes."""

    def __init__(self, spec: ProgramSpec, binary: bytes, host: _Host):
        super().__init__(spec, binary)
        self.host = host
        # thread bounds go as 64-bit ints; an i32 parameter reads the low half (x86-64 ABI)
        argtypes = [ctypes.c_void_p] * len(spec.buf_dtypes) + [ctypes.c_int64] * len(spec.var_names)
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(host.load(spec.entry, binary))
        self.threaded = len(spec.var_names) == 2
        if self.threaded:  # the renderer's piece loop (see codegen/renderer/llvmir.py)
            chunked = [ctypes.c_void_p] * (len(spec.buf_dtypes) + 1) + [ctypes.c_int64] * 2
            self.chunks = ctypes.CFUNCTYPE(None, *chunked)(host.address(f"{spec.entry}_chunks"))
        self.work = max(spec.flops, spec.mem_bytes // 4)

    def __call__(self, *bufs, global_size, local_size, vals=(), wait=False):
        ptrs = [b[1] for b in bufs]
        start = time.perf_counter()
        if not self.threaded:
            self.fn(*ptrs)
        else:
            n = global_size[0]
            threads = min(getenv("THREADS", _CPUS), n)
            if threads <= 1 or self.work < threads * _MIN_WORK_PER_THREAD:
                self.fn(*ptrs, 0, n)
            else:
                # pieces go in order to whichever thread is free (an atomic counter in the
                # kernel's piece loop), so a thread that wakes late or shares its core with
                # another process does less of the work
                taken = ctypes.c_int64(0)
                args = (*ptrs, ctypes.addressof(taken), n, min(n, threads * _CHUNKS_PER_THREAD))
                self.host.run(lambda: self.chunks(*args), threads - 1)
        return time.perf_counter() - start if wait else None


def make_runtime(name: str = "CPU") -> Runtime:
    """The CPU device."""
    program = functools.partial(CPUProgram, host=_Host())  # kernels share one engine, one pool
    return Runtime(name, CPUAllocator(), LLVMCompiler(), program, LLVMRenderer())
