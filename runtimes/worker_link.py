"""One compile worker process and the pool thread that feeds it (runtimes/compile_pool.py):
started on the first source sent, replaced between batches after COMPILE_WORKER_JOBS
replies (LLVM keeps memory per compile in the compiling process), and given up once it
cannot start or has died. The protocol: runtimes/compile_worker.py.
"""
from __future__ import annotations
import os
import subprocess
import sys
from typing import Any

from codegen.helpers import getenv
from runtimes.compile_worker import receive, send


class WorkerLink:
    """A pool thread's worker process: `send` a source, `reply` the answer to the oldest
    source sent. `procs` is the pool's list of running workers (it stops them at exit);
    `started` counts the workers this link started."""

    def __init__(self, compiler: Any, procs: list[subprocess.Popen]):
        self.compiler, self.procs = compiler, procs
        self.proc: subprocess.Popen | None = None
        self.dead = False  # it could not start, or it died: the thread compiles here
        self.started = 0
        self.replies = self.sent = 0  # of the process running now

    def send(self, src: str) -> bool:
        """Send `src` (starting or replacing the process first); False if there is none."""
        if self.proc is not None and self.replies >= getenv("COMPILE_WORKER_JOBS", 2000) \
                and self.sent == self.replies:
            self.procs.remove(self.proc)  # its LLVM memory goes with it
            stop(self.proc)
            self.proc, self.replies, self.sent = None, 0, 0
        if self.proc is None and not self.dead:
            self._start()
        if self.proc is None:
            return False
        try:
            send(self.proc.stdin, src.encode())
        except OSError:
            self._died()
            return False
        self.sent += 1
        return True

    def reply(self) -> bytes | None:
        """The answer to the oldest source sent and not yet answered (b"K" + binary or
        b"E" + the error); None if the worker died."""
        if self.proc is None:  # it died (a send found it dead)
            return None
        try:
            reply = receive(self.proc.stdout)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            self._died()
            return None
        self.replies += 1
        return reply

    def _start(self) -> None:
        path = os.pathsep.join(p for p in sys.path if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runtimes.compile_worker", self.compiler.worker_class(),
                 *self.compiler.worker_args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path})
        except OSError:
            self.dead = True
            return
        self.procs.append(self.proc)
        self.started += 1

    def _died(self) -> None:
        if self.proc is not None and self.proc in self.procs:
            self.procs.remove(self.proc)
            stop(self.proc)  # (reaped: no zombie)
        self.proc, self.dead = None, True


def stop(proc: subprocess.Popen) -> None:
    """Stop a worker (it exits when its stdin closes)."""
    assert proc.stdin is not None and proc.stdout is not None, "workers are started with pipes"
    try:
        proc.stdin.close()
    except OSError:  # a dead worker: what the buffer held cannot be flushed to it
        pass
    proc.stdout.close()  # a worker still writing a reply gets a broken pipe
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
