"""Compiling kernels in parallel, for a Compiler that sets `threaded`.

Jobs wait in a queue. Each pool thread feeds one worker process, `python -m
runtimes.compile_worker MODULE:CLASS ARGS...`, which compiles with its own instance of the
same Compiler class, made from the compiler's `worker_args` (llvmlite runs one LLVM call
at a time per process, and pocl one build, so threads alone would not use a second core).
The engine's own thread compiles nothing while it still has kernels to lower: lowering
is what the compiles wait for, and a compile thread of its own would take its core
(D43 addendum). Once it has lowered them all it waits for their binaries with `result`,
which compiles queued jobs here until the one it waits for is done. With no worker
processes (COMPILE_WORKERS=0) one pool thread compiles here beside the lowering, as LLVM
releases the GIL. A worker starts when its thread first gets a job; one that cannot start
or dies leaves its jobs to this process. COMPILE_WORKERS sets the number of worker
processes (default: one per core beyond the first, at most 3).

Memory: LLVM keeps about 60 KB per compiled module in the compiling process, whatever is
freed (docs/design.md). So a long-running process compiles at most COMPILE_HERE_MAX kernels
itself and sends the rest to worker processes, and a worker is replaced after
COMPILE_WORKER_JOBS compiles: the growth stays bounded by those two settings.

While a build takes more than a second, a counter on stderr says how far it is
(runtimes/build_progress.py): on a terminal only, so logs, pipes and tests see nothing.

The worker processes run runtimes/compile_worker.py (its docstring has the protocol).
"""
from __future__ import annotations
import atexit
import itertools
import os
import subprocess
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from codegen.helpers import getenv
from runtimes.build_progress import BuildProgress
from runtimes.compile_error import CompileError
from runtimes.compile_worker import receive, send


class CompilePool:
    """A queue of jobs (each a source to look up in the compiler's caches and, on a miss,
    to compile), taken by threads that each feed a worker process, and by the engine's
    thread while it waits (`result`)."""

    def __init__(self, compiler: Any, workers: int | None = None):
        self.compiler = compiler
        if workers is None:
            workers = getenv("COMPILE_WORKERS", min((os.cpu_count() or 1) - 1, 3))
        # with worker processes every pool thread feeds one (role >= 1); without, one
        # pool thread compiles here (role 0)
        self._roles = itertools.count(1 if workers > 0 else 0)
        self._here = threading.Lock()  # compiles in this process run one at a time
        self._local = threading.local()
        self._executor = ThreadPoolExecutor(max(1, workers), thread_name_prefix="compile",
                                            initializer=self._start_thread)
        self._queue: deque[tuple[str, str, Future]] = deque()  # jobs no thread has taken
        self._queue_lock = threading.Lock()
        self._pending: dict[str, Future] = {}  # a source queued twice is compiled once
        self.compiled_here = 0
        self.workers_started = 0
        self._procs: list[subprocess.Popen] = []
        self.progress = BuildProgress()
        atexit.register(self.close)

    def _start_thread(self) -> None:
        self._local.role, self._local.proc, self._local.jobs = next(self._roles), None, 0

    def submit(self, name: str, src: str) -> Future:
        job = self._pending.get(src)
        if job is None:
            self.progress.queued()
            job = Future()
            self._pending[src] = job
            job.add_done_callback(lambda _: self._pending.pop(src, None))
            job.add_done_callback(lambda _: self.progress.done())
            with self._queue_lock:
                self._queue.append((name, src, job))
            self._executor.submit(self._take)  # a pool thread takes the oldest job
        return job

    def result(self, job: Future) -> bytes:
        """`job`'s binary. Until it is done, this thread compiles queued jobs here (the
        engine calls this once it has nothing left to lower); then it waits."""
        while not job.done() and self.compiled_here < getenv("COMPILE_HERE_MAX", 1000):
            with self._queue_lock:
                taken = self._queue.pop() if self._queue else None  # the newest: a pool
            if taken is None:  # thread takes the oldest, which the engine needs first
                break
            self._run(*taken, here=True)
        return job.result()

    def close(self) -> None:
        """Stop the worker processes (they exit when their stdin closes)."""
        for proc in list(self._procs):
            _stop(proc)
        self._procs.clear()

    def _take(self) -> None:
        """In a pool thread: run the oldest queued job, if the engine has not taken it."""
        with self._queue_lock:
            taken = self._queue.popleft() if self._queue else None
        if taken is not None:
            self._run(*taken, here=False)

    def _run(self, name: str, src: str, job: Future, here: bool) -> None:
        try:
            binary = self.compiler.lookup(src)
            if binary is None:
                binary = self._compile_here(name, src) if here else self._compile(name, src)
                self.compiler.store(name, src, binary)
        except Exception as e:  # noqa: BLE001 - whoever waits for the job raises it
            job.set_exception(e)
        except BaseException as e:  # Ctrl-C while the engine compiles: no job is left
            job.set_exception(e)    # unfinished for another waiter
            raise
        else:
            job.set_result(binary)

    def _compile_here(self, name: str, src: str) -> bytes:
        with self._here:
            binary = self.compiler.compile_checked(name, src)
            self.compiled_here += 1
        return binary

    def _compile(self, name: str, src: str) -> bytes:
        """In this thread's worker process, else here (one compile at a time)."""
        binary = None
        here_full = self.compiled_here >= getenv("COMPILE_HERE_MAX", 1000)
        if getattr(self._local, "role", 0) > 0 or here_full:
            try:
                binary = self._remote(src)
            except RuntimeError as e:  # the worker's compile failed: the source is at fault
                raise CompileError(name, str(e), src) from e
        return binary if binary is not None else self._compile_here(name, src)

    def _remote(self, src: str) -> bytes | None:
        """Compile in this thread's worker process; None if it is not available."""
        if not hasattr(self._local, "role"):  # a thread outside the pool
            self._start_thread()
        if self._local.proc and self._local.jobs >= getenv("COMPILE_WORKER_JOBS", 2000):
            self._procs.remove(self._local.proc)  # its LLVM memory goes with it
            _stop(self._local.proc)
            self._local.proc, self._local.jobs = None, 0
        if self._local.proc is None:
            target = self.compiler.worker_class()
            path = os.pathsep.join(p for p in sys.path if p)
            try:
                self._local.proc = subprocess.Popen(
                    [sys.executable, "-m", "runtimes.compile_worker", target,
                     *self.compiler.worker_args],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONPATH": path})
                self._procs.append(self._local.proc)
                self.workers_started += 1
            except OSError:
                self._local.proc = False
        proc = self._local.proc
        if not proc:
            return None
        try:
            send(proc.stdin, src.encode())
            reply = receive(proc.stdout)
        except OSError:
            reply = None
        if reply is None:  # the worker died: this thread compiles here from now on
            self._local.proc = False
            return None
        self._local.jobs += 1
        if reply[:1] == b"E":
            raise RuntimeError(reply[1:].decode(errors="replace"))
        return reply[1:]


def _stop(proc: subprocess.Popen) -> None:
    """Stop a worker (it exits when its stdin closes)."""
    assert proc.stdin is not None and proc.stdout is not None, "workers are started with pipes"
    proc.stdin.close()
    proc.stdout.close()  # a worker still writing a reply gets a broken pipe
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
