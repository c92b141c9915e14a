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

A pool thread does nothing that waits for the GIL between two compiles of its worker:
it keeps IN_FLIGHT sources sent ahead, and the caches are read by the thread that
submits and written by the thread that waits (`Compiler.submit`, `result`). The engine's
lowering holds the GIL for up to the switch interval (5 ms) at each of a pool thread's
system calls; with a send, a reply and a cache write in turn, a cold LeNet step's worker
sat idle 40-110 ms between compiles of 7-25 ms (D116).

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
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from codegen.helpers import getenv
from runtimes.build_progress import BuildProgress
from runtimes.compile_error import CompileError
from runtimes.worker_link import WorkerLink, stop

IN_FLIGHT = 2  # sources a pool thread keeps sent to its worker process (`_feed`)


class CompilePool:
    """A queue of jobs (each a source the compiler's caches lack: Compiler.submit looks
    first), taken by threads that each feed a worker process, and by the engine's thread
    while it waits (`result`). The binaries go into the compiler's caches from the thread
    that waits, not from a pool thread: a pool thread's file writes (ten system calls a
    binary) would each wait for the GIL, up to the switch interval, while the engine
    lowers (55 ms for the first binary of a cold LeNet step, 17 for the next)."""

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
        self._fresh: list[tuple[str, str, bytes]] = []  # compiled, not yet in the caches
        self.compiled_here = 0
        self._procs: list[subprocess.Popen] = []  # the worker processes running
        self._links: list[WorkerLink] = []  # each pool thread's
        self.progress = BuildProgress()
        atexit.register(self.close)

    def _start_thread(self) -> None:
        self._local.role = next(self._roles)
        self._local.link = WorkerLink(self.compiler, self._procs)
        self._links.append(self._local.link)

    @property
    def workers_started(self) -> int:
        return sum(link.started for link in self._links)

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
            self._compile_here(*taken)
        try:
            return job.result()
        finally:
            while self._fresh:  # (a job's binary is listed before the job is done)
                self.compiler.store(*self._fresh.pop())

    def close(self) -> None:
        """Stop the worker processes (they exit when their stdin closes)."""
        for proc in list(self._procs):
            stop(proc)
        self._procs.clear()

    def _take(self) -> None:
        """In a pool thread: run the oldest queued job, if the engine has not taken it: in
        this thread's worker process (`_feed`), or here where there is none (without
        worker processes until COMPILE_HERE_MAX compiles here, or after a worker died)."""
        taken = self._next()
        if taken is None:
            return
        local = self._local
        if not local.link.dead and (
                local.role > 0 or self.compiled_here >= getenv("COMPILE_HERE_MAX", 1000)):
            self._feed(taken)
        else:
            self._compile_here(*taken)

    def _feed(self, taken: tuple[str, str, Future] | None) -> None:
        """Send queued jobs to this thread's worker process ahead of their replies, up to
        IN_FLIGHT at once, and finish each job as its reply comes. The worker compiles the
        next source while this thread waits for the GIL to read a reply and send more
        (the engine's lowering holds it for up to the switch interval, 5 ms, at each of
        those steps): one job at a time, the worker sat idle 40-60 ms between compiles
        of 7-25 ms in a cold LeNet step. Jobs a dead worker held compile here."""
        link: WorkerLink = self._local.link
        sent: deque[tuple[str, str, Future]] = deque()
        while True:
            while taken is not None:
                if link.send(taken[1]):
                    sent.append(taken)
                else:  # no worker (it cannot start, or died): what a dead one held too
                    for held in (*sent, taken):
                        self._compile_here(*held)
                    sent.clear()
                taken = self._next() if len(sent) < self._depth() else None
            if not sent:
                return
            name, src, job = sent.popleft()
            reply = link.reply()
            if reply is None:  # the worker died: what it held compiles here
                for held in ((name, src, job), *sent):
                    self._compile_here(*held)
                return
            if reply[:1] == b"E":
                job.set_exception(CompileError(name, reply[1:].decode(errors="replace"), src))
            else:
                self._fresh.append((name, src, reply[1:]))
                job.set_result(reply[1:])
            taken = self._next() if len(sent) < self._depth() else None

    def _depth(self) -> int:
        """Sources to keep sent to this thread's worker: one until it has replied once (a
        worker still starting holds nothing the engine's thread could compile itself)."""
        return IN_FLIGHT if self._local.link.replies else 1

    def _next(self) -> tuple[str, str, Future] | None:
        with self._queue_lock:
            return self._queue.popleft() if self._queue else None

    def _compile_here(self, name: str, src: str, job: Future) -> None:
        """Compile in this process (one compile at a time) and finish `job`."""
        try:
            with self._here:
                binary = self.compiler.compile_checked(name, src)
                self.compiled_here += 1
        except Exception as e:  # noqa: BLE001 - whoever waits for the job raises it
            job.set_exception(e)
        except BaseException as e:  # Ctrl-C while the engine compiles: no job is left
            job.set_exception(e)    # unfinished for another waiter
            raise
        else:
            self._fresh.append((name, src, binary))
            job.set_result(binary)
