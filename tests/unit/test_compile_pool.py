"""Parallel compilation: the compile thread, worker processes, and kernels that share a body.

The pool must give the same binaries as compiling here, pass compile errors back with the
source, survive a worker that dies, and compile a source queued twice once.
"""
import os
import random

import numpy as np
import pytest

from codegen.linearizer import linearize
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import CompileError, get_runtime
from runtimes.compile_pool import CompilePool
from runtimes.cpu_llvm import LLVMCompiler


NONCE = random.getrandbits(40)  # sources no earlier run has left in the disk cache


def kernel(i: int) -> str:
    return f"define void @k{i}(ptr %out) {{\n  store i64 {NONCE + i}, ptr %out\n  ret void\n}}\n"


def test_worker_binaries_match_local_ones():
    compiler = LLVMCompiler()
    pool = CompilePool(compiler, workers=1)
    try:
        jobs = [pool.submit(f"k{i}", kernel(i)) for i in range(12)]
        binaries = [j.result() for j in jobs]
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
        assert len({j.result() for j in jobs}) == 1
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
