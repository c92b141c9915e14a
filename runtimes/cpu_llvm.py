"""CPU runtime: LLVM IR -> native code with llvmlite, run through native launchers.

Buffers are 64-byte aligned host memory. Compiled kernels are object files (cached on
disk), loaded into the MCJIT engines of the runtime's Host (runtimes/cpu_host.py). The
outer loop of a kernel is split across THREADS worker threads. A kernel run on the
calling thread goes through a launcher (runtimes/cpu_launch.py: a builtin function made
from native code, much cheaper to call than ctypes; ctypes where none can be made); both
release the GIL during the call.
"""
from __future__ import annotations
import ctypes
import functools
import os
import time
from typing import Any, Callable

import llvmlite.binding as llvm

from codegen.helpers import getenv, settings_memo
from codegen.renderer.llvmir import LLVMRenderer
from codegen.renderer import ProgramSpec
from runtimes.base import Compiler, HostAllocator, Program, Runtime
from runtimes.cpu_choice import SEQUENCE, ThreadChoice, pieces
from runtimes.cpu_crew import _SPIN_US
from runtimes.cpu_host import Host
from runtimes.llvm_build import RECIPE, build, target_machine


_TARGET_MACHINE, _PLAIN_MACHINE = target_machine(), target_machine(0)  # the compiler's
_CPUS = os.cpu_count() or 1
_MIN_WORK_PER_THREAD = 1 << 16  # below this many loop iterations per thread, stay serial
_TRY_SERIAL = 256  # below this many times that, time calls both ways (ThreadChoice)
_BOUNDS = ["core_start", "core_end"]  # the parameters of a kernel whose outer loop splits


class LLVMCompiler(Compiler):
    """LLVM IR -> optimised object code for this CPU."""
    machine = (f"llvm-{llvm.llvm_version_info}-{llvm.get_host_cpu_name()}-"
               f"{llvm.get_host_cpu_features().flatten()}")
    threaded = True  # llvmlite releases the GIL in LLVM calls (and serialises them itself)

    def __init__(self) -> None:
        super().__init__()
        # the LLVM, the CPU, what `build` does and OPT (from the environment, as the
        # worker processes read it): a binary built otherwise is not this compiler's
        self.key = f"{self.machine}-recipe{RECIPE}-O{getenv('OPT', 3)}"

    def compile(self, src: str) -> bytes:
        return build(src, _TARGET_MACHINE)

    def worker_class(self) -> str:
        """A worker builds with llvmlite alone (runtimes/llvm_build.py), unless a
        subclass changed what `compile` does."""
        if type(self).compile is LLVMCompiler.compile:
            return "runtimes.llvm_build:LLVMBuild"
        return super().worker_class()


class SupportCompiler(Compiler):
    """Support code (the piece loops of runtimes/cpu_host.py): LLVM IR emitted as written,
    at -O0. Optimising it gains nothing and would cost about 10 ms at start-up."""
    key = f"plain-{LLVMCompiler.machine}"

    def compile(self, src: str) -> bytes:
        return build(src, _PLAIN_MACHINE, optimise=False)


class CPUProgram(Program):
    """A kernel loaded into its host's MCJIT engine, called through a launcher (a builtin
    made from native code: runtimes/cpu_launch.py) or, where there is none, ctypes."""

    def __init__(self, spec: ProgramSpec, binary: bytes, host: Host):
        super().__init__(spec, binary)
        self.host = host
        # thread bounds go as 64-bit ints; an i32 parameter reads the low half (x86-64 ABI)
        argtypes = [ctypes.c_void_p] * len(spec.buf_dtypes) + [ctypes.c_int64] * len(spec.var_names)
        self.address, self.engine = host.load(spec.entry, binary)
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(self.address)
        self.threaded = spec.var_names == _BOUNDS
        # the launcher of kernels with these buffers (None: ctypes), called with the
        # kernel's address first, then the bounds if it has them, then the memory
        self.native = host.launcher(len(spec.buf_dtypes), self.threaded) \
            if spec.var_names in ([], _BOUNDS) else None
        if self.threaded:
            self.piece = host.piece(len(spec.buf_dtypes))
        self.work = max(spec.flops, spec.mem_bytes // 4)
        # too little work for two threads whatever THREADS says: decided once, here
        self.serial = self.work < 2 * _MIN_WORK_PER_THREAD
        # near that bound the hand-off to the workers can cost more than it saves: calls
        # are timed both ways, the faster kept (the same results), one choice for calls
        # that find the workers spinning, one for calls that would wake them (D97)
        near = not self.serial and self.work < _TRY_SERIAL * _MIN_WORK_PER_THREAD
        self.choice: ThreadChoice | None = ThreadChoice() if near else None
        self.cold: ThreadChoice | None = ThreadChoice(wake=False) if near else None
        self.near_bound = near and self.threaded  # (a sequence may run them serial, D134)
        self.called = -1.0  # when `choose` last ran (perf_counter seconds)

    def __call__(self, *bufs, global_size, local_size, wait=False):
        start = time.perf_counter() if wait else 0.0
        if not self.threaded or self.serial:
            self.here(bufs, global_size[0])  # (n is read only with thread bounds)
        else:
            self.split(global_size[0], *bufs)
        return time.perf_counter() - start if wait else None

    def split(self, n: int, *bufs) -> None:
        """The kernel's outer loop [0, n) on THREADS threads where it has the work for
        them, else here (what a plan's launcher of a kernel big enough to split calls)."""
        threads, spin_us = _threading()
        threads = min(threads, n)
        if threads <= 1 or self.work < threads * _MIN_WORK_PER_THREAD or SEQUENCE.serial:
            self.here(bufs, n)  # (SEQUENCE.serial: a sequence that runs serial, D134)
        elif self.choice is not None:
            self.choose(bufs, n, threads, spin_us)
        else:
            self.run_pieces([b[1] for b in bufs], n, pieces(self.work, n, threads),
                            threads - 1, spin_us)

    def here(self, bufs: tuple, n: int) -> None:
        """Run the whole kernel on this thread (its outer loop [0, n), if it has bounds)."""
        if self.native is not None:
            if self.threaded:
                self.native(self.address, 0, n, *bufs)
            else:
                self.native(self.address, *bufs)
        elif self.threaded:
            self.fn(*[b[1] for b in bufs], 0, n)
        else:
            self.fn(*[b[1] for b in bufs])

    def launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """What the engine's plans call with the buffers' memory: the kernel's own launcher
        where no call decides anything (no thread bounds, or too small for two threads),
        else `split` with the size of its outer loop. A launcher holds this program: a plan
        may outlive the program cache's entry (called after its engine had gone, it
        crashed the process)."""
        if not self.threaded or self.serial:
            return self.serial_launcher(global_size, local_size)
        return functools.partial(self.split, global_size[0])

    def serial_launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """The kernel's own launcher over its whole outer loop (a partial of the native
        builtin: no Python runs between the plan and the kernel), also what a sequence
        run serial calls (D134, D157)."""
        bounds = (0, global_size[0]) if self.threaded else ()
        if self.native is not None:
            call = functools.partial(self.native, self.address, *bounds)
            call.program = self  # type: ignore[attr-defined]
            return call
        fn = self.fn
        return lambda *bufs, _keep=self: fn(*[b[1] for b in bufs], *bounds)

    def choose(self, bufs: tuple, n: int, threads: int, spin_us: int) -> None:
        """A call of a kernel near the thread bound, the way its ThreadChoice picks (the one
        for the workers' state: spinning, or asleep so that a split would wake them, D97;
        a call less than their spin after this kernel's last is in a loop of it, whose
        serial calls let them sleep: the first, D97's addendum), timed where it asks."""
        now = time.perf_counter()
        looping, self.called = now - self.called < spin_us * 1e-6, now
        choice = self.cold if not looping and self.workers_asleep(threads - 1) else self.choice
        assert choice is not None
        split, timed = choice.next_way()
        begin = time.perf_counter() if timed else 0.0
        if split:
            self.run_pieces([b[1] for b in bufs], n, pieces(self.work, n, threads),
                            threads - 1)
        else:
            self.here(bufs, n)
        if timed:
            choice.record(split, time.perf_counter() - begin)

    def workers_asleep(self, helpers: int) -> bool:
        """Whether a split call now would wake a worker (runtimes/cpu_crew.py)."""
        return self.host.crew().asleep(helpers)

    def run_pieces(self, ptrs: list[int], n: int, chunks: int, helpers: int,
                   spin_us: int | None = None) -> None:
        """The outer loop [0, n) in `chunks` pieces, on this thread and `helpers` workers:
        pieces go in order to whichever thread is free, so a thread that wakes late or
        shares its core does less of the work; taken in turn, each thread's pieces are one
        contiguous share (the thread count rides in the record above the chunks, D102).
        Workers spin `spin_us` (SPIN_US) after."""
        self.host.crew().run([self.piece, self.address, n, chunks | (helpers + 1) << 32,
                              *ptrs], chunks, helpers,
                             _threading()[1] if spin_us is None else spin_us)


@settings_memo
def _threading() -> tuple[int, int]:
    """THREADS and SPIN_US (runtimes/cpu_crew.py), read once per set of settings: a split
    kernel's launch reads them on every call."""
    return getenv("THREADS", _CPUS), getenv("SPIN_US", _SPIN_US)


def make_runtime(name: str = "CPU") -> Runtime:
    """The CPU device."""
    compiler = LLVMCompiler()
    program = functools.partial(CPUProgram, host=Host(SupportCompiler()))  # one engine, one pool
    return Runtime(name, HostAllocator(), compiler, program, LLVMRenderer())
