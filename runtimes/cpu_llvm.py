"""CPU runtime: LLVM IR -> native code with llvmlite, run through ctypes.

Buffers are 64-byte aligned host memory. Compiled kernels are object files (cached on
disk), loaded into the MCJIT engines of the runtime's Host (runtimes/cpu_host.py). The
outer loop of a kernel is split across THREADS worker threads: ctypes releases the GIL
during the call.
"""
from __future__ import annotations
import ctypes
import functools
import math
import os
import time
from typing import Any, Callable

import llvmlite.binding as llvm

from codegen.helpers import getenv
from codegen.renderer.llvmir import LLVMRenderer
from codegen.renderer import ProgramSpec
from runtimes.base import Compiler, HostAllocator, Program, Runtime
from runtimes.cpu_host import Host
from runtimes.llvm_build import RECIPE, build, target_machine


_TARGET_MACHINE, _PLAIN_MACHINE = target_machine(), target_machine(0)  # the compiler's
_CPUS = os.cpu_count() or 1
_CHUNKS_PER_THREAD = 16  # the outer loop is cut into this many pieces per thread
_MIN_WORK_PER_THREAD = 1 << 16  # below this many loop iterations per thread, stay serial
_TRY_SERIAL = 64  # below this many times that, time calls both ways (ThreadChoice)...
_TRIALS = 3       # ...this many each at first, and keep the faster
_RECHECK = (16, 1024)  # then one more of each after 16 calls, 32, ... up to every 1024


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
    """A kernel loaded into its host's MCJIT engine and called through ctypes."""

    def __init__(self, spec: ProgramSpec, binary: bytes, host: Host):
        super().__init__(spec, binary)
        self.host = host
        # thread bounds go as 64-bit ints; an i32 parameter reads the low half (x86-64 ABI)
        argtypes = [ctypes.c_void_p] * len(spec.buf_dtypes) + [ctypes.c_int64] * len(spec.var_names)
        self.address, self.engine = host.load(spec.entry, binary)
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(self.address)
        self.threaded = spec.var_names == ["core_start", "core_end"]
        if self.threaded:
            self.piece = host.piece(len(spec.buf_dtypes))
        self.work = max(spec.flops, spec.mem_bytes // 4)
        # too little work for two threads whatever THREADS says: decided once, here
        self.serial = self.work < 2 * _MIN_WORK_PER_THREAD
        # near that bound the hand-off to the workers can cost more than it saves: calls
        # are timed both ways, and the faster is kept (the results are the same)
        self.choice: ThreadChoice | None = \
            ThreadChoice() if not self.serial and self.work < _TRY_SERIAL * _MIN_WORK_PER_THREAD else None

    def __call__(self, *bufs, global_size, local_size, wait=False):
        ptrs = [b[1] for b in bufs]
        start = time.perf_counter() if wait else 0.0
        if not self.threaded:
            self.fn(*ptrs)
        elif self.serial:
            self.fn(*ptrs, 0, global_size[0])
        else:
            n = global_size[0]
            threads = min(getenv("THREADS", _CPUS), n)
            if threads <= 1 or self.work < threads * _MIN_WORK_PER_THREAD:
                self.fn(*ptrs, 0, n)
            elif self.choice is not None:
                self.choose(ptrs, n, threads)
            else:
                self.run_pieces(ptrs, n, min(n, threads * _CHUNKS_PER_THREAD), threads - 1)
        return time.perf_counter() - start if wait else None

    def launcher(self, global_size: list[int], local_size: list[int]) -> Callable[..., Any]:
        """The ctypes function itself, given the addresses, where no call decides anything:
        a kernel without thread bounds, or one too small for two threads (`serial` is
        fixed when the program is made). The launcher holds this program (`_keep`): its
        code lives as long as the program's engine does, and a plan may outlive the
        program cache's entry (called after its engine had gone, it crashed the process)."""
        fn = self.fn
        if not self.threaded:
            return lambda *bufs, _keep=self: fn(*[b[1] for b in bufs])
        if self.serial:
            n = global_size[0]
            return lambda *bufs, _keep=self: fn(*[b[1] for b in bufs], 0, n)
        return super().launcher(global_size, local_size)

    def choose(self, ptrs: list[int], n: int, threads: int) -> None:
        """A call of a kernel near the thread bound: the way its ThreadChoice picks, timed
        where the choice asks for a timing."""
        choice = self.choice
        assert choice is not None
        split, timed = choice.next_way()
        begin = time.perf_counter() if timed else 0.0
        if split:
            self.run_pieces(ptrs, n, min(n, threads * _CHUNKS_PER_THREAD), threads - 1)
        else:
            self.fn(*ptrs, 0, n)
        if timed:
            choice.record(split, time.perf_counter() - begin)

    def run_pieces(self, ptrs: list[int], n: int, chunks: int, helpers: int) -> None:
        """The outer loop [0, n) in `chunks` pieces, on this thread and `helpers` workers:
        pieces go in order to whichever thread is free, so a thread that wakes late or
        shares its core does less of the work."""
        self.host.run([self.piece, self.address, n, chunks, *ptrs], chunks, helpers)


class ThreadChoice:
    """Serial or split for one kernel near the thread bound [D58]. A round of calls times
    both ways: the first round _TRIALS calls of each, alternating; later rounds one of
    each, after 16 calls, 32, ... up to every 1024. After each round the way with the
    faster best time is kept: the best time is what the way costs undisturbed, and a
    choice made while the second core was busy (another process; torch's threads still
    spinning after its own op, in a side-by-side run) is so corrected at the first round
    that runs undisturbed, instead of lasting as long as the process. A round begins with
    an untimed split call: it wakes the workers, so a timed split call measures what a
    run of split kernels costs, not a wake-up (after a long stretch of serial calls the
    workers sleep, and a wake-up timed as split's cost kept a kernel serial)."""
    __slots__ = ("best", "split", "calls", "countdown", "gap")

    def __init__(self) -> None:
        self.best = [math.inf, math.inf]  # serial, split: the best time of each way
        self.split = False  # the choice: split the outer loop across the threads
        # the rest of this round's calls (True: split, False: serial; None: an untimed split)
        self.calls: list[bool | None] = [None] + [True, False] * _TRIALS
        self.countdown = 0  # calls until the next round
        self.gap = _RECHECK[0]

    def next_way(self) -> tuple[bool, bool]:
        """(split, timed) for this call. Threads may call one kernel at once: a round's
        call that another thread took first leaves this one untimed (list.pop is atomic)."""
        if not self.calls:
            self.countdown -= 1
            if self.countdown > 0:
                return self.split, False
            self.calls = [None, True, False]
        try:
            way = self.calls.pop(0)
        except IndexError:
            return self.split, False
        return (True, False) if way is None else (way, True)

    def record(self, split: bool, seconds: float) -> None:
        """A timed call's time; after a round's last, the choice."""
        self.best[split] = min(self.best[split], seconds)
        if not self.calls:
            self.split = self.best[1] < self.best[0]
            self.countdown, self.gap = self.gap, min(2 * self.gap, _RECHECK[1])


def make_runtime(name: str = "CPU") -> Runtime:
    """The CPU device."""
    compiler = LLVMCompiler()
    program = functools.partial(CPUProgram, host=Host(SupportCompiler()))  # one engine, one pool
    return Runtime(name, HostAllocator(), compiler, program, LLVMRenderer())
