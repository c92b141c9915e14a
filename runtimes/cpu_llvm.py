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
import numpy as np

from codegen.helpers import getenv
from codegen.renderer.llvmir import PLAIN, LLVMRenderer, piece_loop
from codegen.renderer import ProgramSpec
from runtimes.base import Allocator, Compiler, Program, Runtime

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()


def _target_machine(opt: int = 3) -> llvm.TargetMachine:
    """LLVM's code generator for this CPU. An MCJIT engine takes ownership of the one it
    is given (and frees it with itself), so every engine gets its own."""
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=opt, reloc="pic", codemodel="default", jit=True)


_TARGET_MACHINE, _PLAIN_MACHINE = _target_machine(), _target_machine(0)  # the compiler's
_CPUS = os.cpu_count() or 1
_CHUNKS_PER_THREAD = 16  # the outer loop is cut into this many pieces per thread
_PIECE_LOOPS = 16  # piece loops for kernels with up to this many buffers come in one module
_MIN_WORK_PER_THREAD = 1 << 16  # below this many loop iterations per thread, stay serial


class CPUAllocator(Allocator):
    """Host memory: (numpy bytes, address), 64-byte aligned for vector loads (a ctypes
    array type per size cost 10 us an allocation)."""

    def _alloc(self, nbytes: int):
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        block = raw[(-raw.ctypes.data) % 64:][:nbytes]
        return (block, block.ctypes.data)

    def copyin(self, dest, src: memoryview) -> None:
        dest[0][:src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, src) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = src[0][:dest.nbytes]


class LLVMCompiler(Compiler):
    """LLVM IR -> optimised object code for this CPU."""
    key = f"llvm-{llvm.llvm_version_info}-{llvm.get_host_cpu_name()}-{llvm.get_host_cpu_features().flatten()}"
    threaded = True  # llvmlite releases the GIL in LLVM calls (and serialises them itself)

    def compile(self, src: str) -> bytes:
        mod = llvm.parse_assembly(src)
        mod.verify()
        if src.startswith(PLAIN):  # support code: as written (see the renderer's PLAIN)
            return _PLAIN_MACHINE.emit_object(mod)
        tuning = llvm.create_pipeline_tuning_options(speed_level=getenv("OPT", 3))
        tuning.loop_vectorization = tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(_TARGET_MACHINE, tuning)
        builder.getModulePassManager().run(mod, builder)
        return _TARGET_MACHINE.emit_object(mod)


class _Host:
    """What one CPU runtime's programs share: an MCJIT engine (creating one costs about
    1.5 ms) and the worker threads that split a kernel's outer loop."""

    def __init__(self, compiler: Compiler):
        self.compiler = compiler
        self.engine: llvm.ExecutionEngine | None = None
        self.loaded: dict[str, int] = {}  # function name -> address
        self.piece_loops: dict[int, ctypes._CFuncPtr] = {}  # by buffer count
        self.threads: list[queue.SimpleQueue] = []  # one job queue per worker thread
        self.pid = os.getpid()

    def load(self, function: str, binary: bytes, also: tuple[str, ...] = ()) -> int:
        """The address of `function`, loading `binary` into the shared engine unless it is
        there already (functions are named after their bodies: same name, same code).
        `also` names more functions the binary defines, recorded at the same time."""
        if function not in self.loaded:
            if self.engine is None:
                self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
            self.engine.finalize_object()
            for name in (function,) + also:
                address = self.engine.get_function_address(name)
                if not address:  # calling address 0 would crash the process
                    raise RuntimeError(f"CPU binary has no function {name!r}")
                self.loaded[name] = address
        return self.loaded[function]

    def piece_loop(self, buffers: int):
        """The loop a thread runs to take pieces of a kernel's outer loop (the renderer's
        `piece_loop`), shared by all kernels with this many buffers. The loops for 1 to
        16 buffers are one module, compiled once."""
        if buffers not in self.piece_loops:
            counts = range(1, _PIECE_LOOPS + 1) if buffers <= _PIECE_LOOPS else [buffers]
            names = [f"pieces_{n}" for n in counts]
            src = "".join(piece_loop(n) for n in counts)
            # through the compiler's queue: LLVM must not compile on two threads at once
            binary = self.compiler.submit(names[0], src).result()  # about 10 ms, once
            self.load(names[0], binary, also=tuple(names[1:]))
            argtypes = [ctypes.c_void_p] * (buffers + 2) + [ctypes.c_int64] * 2
            self.piece_loops[buffers] = ctypes.CFUNCTYPE(None, *argtypes)(
                self.loaded[f"pieces_{buffers}"])
        return self.piece_loops[buffers]

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
        errors: list[BaseException | None] = []
        try:
            job()
        except BaseException as e:  # noqa: BLE001 - raised below, once the workers are done
            errors.append(e)
        finished = 0
        while finished < helpers:  # even on Ctrl-C: the workers still use the job's memory
            try:
                errors.append(done.get())
                finished += 1
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        for error in errors:
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
        self.address = host.load(spec.entry, binary)
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(self.address)
        self.threaded = spec.var_names == ["core_start", "core_end"]
        if self.threaded:
            self.pieces = host.piece_loop(len(spec.buf_dtypes))
        self.work = max(spec.flops, spec.mem_bytes // 4)

    def __call__(self, *bufs, global_size, local_size, vals=(), wait=False):
        ptrs = [b[1] for b in bufs]
        start, n = time.perf_counter(), global_size[0]
        threads = min(getenv("THREADS", _CPUS), n) if self.threaded else 1
        if not self.threaded:
            self.fn(*ptrs)
        elif threads <= 1 or self.work < threads * _MIN_WORK_PER_THREAD:
            self.fn(*ptrs, 0, n)
        else:
            self.run_pieces(ptrs, n, min(n, threads * _CHUNKS_PER_THREAD), threads - 1)
        return time.perf_counter() - start if wait else None

    def run_pieces(self, ptrs: list[int], n: int, chunks: int, helpers: int) -> None:
        """The outer loop [0, n) in `chunks` pieces, on this thread and `helpers` workers:
        each runs the piece loop, which hands out pieces in order to whichever thread is
        free, so a thread that wakes late or shares its core does less of the work."""
        taken = ctypes.c_int64(0)  # byref keeps the counter alive as long as the job
        args = (self.address, *ptrs, ctypes.byref(taken), n, chunks)
        self.host.run(lambda: self.pieces(*args), helpers)


def make_runtime(name: str = "CPU") -> Runtime:
    """The CPU device."""
    compiler = LLVMCompiler()
    program = functools.partial(CPUProgram, host=_Host(compiler))  # one engine, one pool
    return Runtime(name, CPUAllocator(), compiler, program, LLVMRenderer())
