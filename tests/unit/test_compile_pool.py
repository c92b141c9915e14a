"""Parallel compilation: worker processes, the engine's thread, and kernels that share a body.

The pool must give the same binaries as compiling here, pass compile errors back with the
source, survive a worker that dies, compile a source queued twice once, and leave the
engine's core to lowering until the engine waits (D43 addendum).
"""
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from codegen.linearizer import linearize
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import CompileError, get_runtime
from runtimes import compile_pool
from runtimes.compile_pool import CompilePool
from runtimes.cpu_llvm import LLVMCompiler
from runtimes.llvm_build import LLVMBuild
from runtimes.worker_link import WorkerLink


NONCE = random.getrandbits(40)  # sources no earlier run has left in the disk cache


def kernel(i: int) -> str:
    return f"define void @k{i}(ptr %out) {{\n  store i64 {NONCE + i}, ptr %out\n  ret void\n}}\n"


def test_worker_binaries_match_local_ones():
    compiler = LLVMCompiler()
    pool = CompilePool(compiler, workers=1)
    try:
        jobs = [pool.submit(f"k{i}", kernel(i)) for i in range(12)]
        binaries = [pool.result(j) for j in jobs]  # (the waiting thread caches them)
        assert len(pool._procs) == 1, "the second thread should have started its worker"
    finally:
        pool.close()
    assert binaries == [LLVMCompiler().compile(kernel(i)) for i in range(12)]
    assert compiler.compiled == 12


def test_worker_compile_error_shows_the_source():
    pool = CompilePool(LLVMCompiler(), workers=1)
    broken = f"define void @broken() {{\n  nonsense\n}}\n; {NONCE}"
    try:
        jobs = [pool.submit(f"b{i}", broken.replace("nonsense", f"nonsense{i}")) for i in range(4)]
        for i, job in enumerate(jobs):
            with pytest.raises(CompileError) as info:
                job.result()
            assert f"nonsense{i}" in str(info.value) and "broken" in str(info.value)
    finally:
        pool.close()


class DyingCompiler(LLVMCompiler):
    """In a worker process (no DYING_PARENT mark) every compile kills the worker."""

    def compile(self, src: str) -> bytes:
        if os.environ.get("DYING_PARENT") != str(os.getpid()):
            os._exit(3)
        return super().compile(src)


def test_a_dead_worker_leaves_its_jobs_to_this_process(monkeypatch):
    monkeypatch.setenv("DYING_PARENT", str(os.getpid()))
    pool = CompilePool(DyingCompiler(), workers=1)
    try:
        binaries = [j.result() for j in [pool.submit(f"k{i}", kernel(i)) for i in range(8)]]
    finally:
        pool.close()
    assert binaries == [LLVMCompiler().compile(kernel(i)) for i in range(8)]


def test_a_source_queued_twice_compiles_once():
    compiler = LLVMCompiler()
    pool = CompilePool(compiler, workers=1)
    try:
        jobs = [pool.submit("k", kernel(100)) for _ in range(5)]
        assert len({pool.result(j) for j in jobs}) == 1
    finally:
        pool.close()
    assert compiler.compiled == 1


def test_kernels_that_differ_only_in_length_share_a_function():
    """Adam's update of every parameter is one body: the length is the loop bound."""
    renderer = get_runtime("CPU").renderer
    sizes = [13, 840, 10080]
    outs = [Tensor(np.arange(n, dtype=np.float32)) * 1.5 - 2 for n in sizes]
    specs = [renderer.program(linearize(create_schedule([o.lazydata])[-1].ast,
                                        renderer.target)) for o in outs]
    assert [s.name for s in specs] == [f"E_{n}" for n in sizes]
    assert len({s.src for s in specs}) == 1 and len({s.entry for s in specs}) == 1
    for n, out in zip(sizes, outs):
        np.testing.assert_allclose(out.numpy(), np.arange(n, dtype=np.float32) * 1.5 - 2)
    # a different body gets a different function
    other = Tensor(np.arange(13, dtype=np.float32)) * 2.5 - 2
    spec = renderer.program(linearize(create_schedule([other.lazydata])[-1].ast,
                                      renderer.target))
    assert spec.entry != specs[0].entry


@pytest.mark.parametrize("renderer", ["OpenCLRenderer", "CUDARenderer", "ClangRenderer"])
def test_c_kernels_that_differ_only_in_length_share_a_source(renderer):
    """The same for the C dialects (D42): an OpenCL or CUDA kernel's length is its launch
    size, a CLANG kernel's its loop bound, so Adam's updates are one build each."""
    from codegen.renderer.clang import ClangRenderer
    from codegen.renderer.cuda import CUDARenderer
    from codegen.renderer.opencl import OpenCLRenderer
    r = {"OpenCLRenderer": OpenCLRenderer, "CUDARenderer": CUDARenderer,
         "ClangRenderer": ClangRenderer}[renderer]()
    sizes = [13, 840, 10080]

    def spec(n: int, scale: float):
        out = Tensor(np.arange(n, dtype=np.float32)) * scale - 2
        return r.program(linearize(create_schedule([out.lazydata])[-1].ast, r.target))
    specs = [spec(n, 1.5) for n in sizes]
    assert [s.name for s in specs] == [f"E_{n}" for n in sizes]
    assert len({s.src for s in specs}) == 1 and specs[0].entry in specs[0].src
    assert spec(13, 2.5).entry != specs[0].entry  # another body, another name


def test_long_runs_move_compiles_to_recycled_workers(monkeypatch):
    """LLVM keeps memory per compile in the compiling process, so after COMPILE_HERE_MAX
    compiles here the pool sends the rest to workers, each replaced after
    COMPILE_WORKER_JOBS compiles; the binaries do not change."""
    from codegen.helpers import getenv
    monkeypatch.setenv("COMPILE_HERE_MAX", "4")
    monkeypatch.setenv("COMPILE_WORKER_JOBS", "3")
    getenv.cache_clear()
    compiler = LLVMCompiler()
    pool = CompilePool(compiler, workers=0)
    try:
        binaries = [pool.submit(f"r{i}", kernel(1000 + i)).result() for i in range(14)]
        assert pool.compiled_here == 4, f"compiled here: {pool.compiled_here}, expected 4"
        # 10 compiles in workers of 3 jobs each: 4 workers, at most one still running
        assert pool.workers_started == 4, f"workers started: {pool.workers_started}"
        assert len(pool._procs) == 1
    finally:
        pool.close()
        getenv.cache_clear()
    assert binaries == [LLVMCompiler().compile(kernel(1000 + i)) for i in range(14)]


class SlowBuild(LLVMBuild):
    """A worker's compiler that takes 2 s to start (a loaded machine's worker)."""

    def __init__(self):
        time.sleep(2)
        super().__init__()


class RecordingCompiler(LLVMCompiler):
    """Notes the thread of every compile in this process; its workers start slowly."""

    def worker_class(self) -> str:
        return f"{__name__}:SlowBuild"

    def __init__(self):
        super().__init__()
        self.threads: list[int] = []

    def compile(self, src: str) -> bytes:
        self.threads.append(threading.get_ident())
        return super().compile(src)


def test_the_waiting_thread_compiles_while_the_worker_starts():
    """With a worker process, no pool thread compiles in this process (it would take the
    core the engine lowers on); the thread that waits with `result` compiles the queued
    jobs itself, newest first, while the worker is still starting."""
    compiler = RecordingCompiler()
    pool = CompilePool(compiler, workers=1)
    try:
        jobs = [pool.submit(f"w{i}", kernel(2000 + i)) for i in range(6)]
        time.sleep(0.2)  # nothing compiles here until someone waits
        assert compiler.threads == []
        binaries = [pool.result(job) for job in jobs]
    finally:
        pool.close()
    assert binaries == [LLVMCompiler().compile(kernel(2000 + i)) for i in range(6)]
    # the pool thread took the oldest job to its (sleeping) worker; this thread did the rest
    assert compiler.threads == [threading.get_ident()] * 5


def test_a_subclass_that_changes_compile_is_its_own_worker():
    """Only LLVMCompiler's own `compile` is what the light builder does."""
    assert LLVMCompiler().worker_class() == "runtimes.llvm_build:LLVMBuild"
    assert DyingCompiler().worker_class() == f"{__name__}:DyingCompiler"


def test_a_compile_worker_imports_no_numpy():
    """A worker builds with llvmlite alone (runtimes/llvm_build.py): importing the pool and
    the builder must not import numpy or the runtime, or the worker starts ~3x later."""
    code = ("import sys, runtimes.compile_worker, runtimes.llvm_build; "
            "print(sorted(m for m in ('numpy', 'runtimes.base', 'lazyten') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.stdout.strip() == "[]", out.stdout


class PipeBuild(LLVMBuild):
    """A worker's compiler that answers whether the next source had already arrived when
    it finished this one (it waits 30 ms first, a compile's time)."""

    def compile(self, src: str) -> bytes:
        time.sleep(0.03)
        stdin = sys.stdin.buffer  # (the next request may be in its buffer already)
        os.set_blocking(stdin.fileno(), False)
        try:
            waiting = bool(stdin.peek(1))
        except BlockingIOError:
            waiting = False
        finally:
            os.set_blocking(stdin.fileno(), True)
        return b"queued" if waiting else b"alone"


class PipeCompiler(LLVMCompiler):
    def worker_class(self) -> str:
        return f"{__name__}:PipeBuild"


def test_a_worker_gets_the_next_sources_before_it_replies():
    """A pool thread keeps IN_FLIGHT sources sent to its worker, so the worker never waits
    for the thread (which needs the GIL, held by the engine's lowering, to read a reply
    and send more); one source only until the worker has replied once."""
    pool = CompilePool(PipeCompiler(), workers=1)
    try:
        jobs = [pool.submit(f"p{i}", kernel(3000 + i)) for i in range(8)]
        binaries = [job.result() for job in jobs]  # (not pool.result: none compiles here)
    finally:
        pool.close()
    assert binaries == [b"alone"] + [b"queued"] * 6 + [b"alone"], binaries


class DyingThirdBuild(LLVMBuild):
    """A worker's compiler that dies at its third compile, with sources still sent to it."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def compile(self, src: str) -> bytes:
        self.count += 1
        if self.count == 3:
            os._exit(3)
        time.sleep(0.02)
        return super().compile(src)


class DyingThirdCompiler(LLVMCompiler):
    def worker_class(self) -> str:
        return f"{__name__}:DyingThirdBuild"


def test_the_jobs_a_dead_worker_held_compile_here():
    compiler = DyingThirdCompiler()
    pool = CompilePool(compiler, workers=1)
    try:
        jobs = [pool.submit(f"d{i}", kernel(4000 + i)) for i in range(8)]
        binaries = [job.result() for job in jobs]
    finally:
        pool.close()
    assert binaries == [LLVMCompiler().compile(kernel(4000 + i)) for i in range(8)]
    assert pool.compiled_here >= 6  # the third, the two sent after it, and the rest


class LateLink(WorkerLink):
    """A link that sends its fourth source only once the worker has exited: the worker
    (DyingThirdBuild) dies on the third, so that send finds it dead, with the third still
    sent and unanswered."""

    def send(self, src: str) -> bool:
        if self.proc is not None and self.sent == 3:
            self.proc.wait(timeout=30)
        return super().send(src)


def test_a_send_that_finds_the_worker_dead_compiles_what_it_held(monkeypatch):
    """The third job, held by a worker found dead by the next send (not by a reply),
    compiles here too: it was left unfinished, and its waiter hung, once in 150 runs of
    the test above (the worker had died before the fourth source was sent)."""
    monkeypatch.setattr(compile_pool, "WorkerLink", LateLink)
    pool = CompilePool(DyingThirdCompiler(), workers=1)
    try:
        jobs = [pool.submit(f"l{i}", kernel(4100 + i)) for i in range(6)]
        binaries = [job.result(timeout=60) for job in jobs]
    finally:
        pool.close()
    assert binaries == [LLVMCompiler().compile(kernel(4100 + i)) for i in range(6)]
    assert pool.compiled_here == 4 and not pool._procs  # the dead worker is reaped


class StoringCompiler(LLVMCompiler):
    """Notes the thread of every cache write."""

    def __init__(self):
        super().__init__()
        self.stored_on: list[int] = []

    def store(self, name: str, src: str, binary: bytes) -> None:
        self.stored_on.append(threading.get_ident())
        super().store(name, src, binary)


def test_binaries_are_cached_by_the_thread_that_waits():
    """A pool thread's file writes would each wait for the GIL while the engine lowers:
    the thread that calls `result` writes them; the thread that submits reads the caches."""
    compiler = StoringCompiler()
    jobs = [compiler.submit(f"s{i}", kernel(5000 + i)) for i in range(6)]
    try:
        binaries = [compiler.result(job) for job in jobs]
    finally:
        compiler._pool.close()
    assert compiler.stored_on == [threading.get_ident()] * 6
    assert binaries == [LLVMCompiler().compile(kernel(5000 + i)) for i in range(6)]
    again = StoringCompiler()  # a new process's compiler: the disk cache has them
    found = [again.submit(f"s{i}", kernel(5000 + i)) for i in range(6)]
    assert all(job.done() for job in found) and again._pool is None
    assert [job.result() for job in found] == binaries
