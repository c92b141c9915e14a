"""A counter on stderr while kernels build: `building kernels: 12/40`, erased when done.

Fed by the compile pool (runtimes/compile_pool.py): `queued` when a kernel is handed to
it, `done` when its binary (or error) is ready. Shown only where a person is watching.
"""
from __future__ import annotations
import sys
import threading
import time

from codegen.helpers import debug_level, getenv

_PROGRESS_AFTER = 1.0  # seconds a build runs before its counter shows (shorter: no news)


class BuildProgress:
    """`building kernels: 12/40`, redrawn in place on stderr once a build (kernels queued
    since the pool was last idle) has run for a second, and erased when it ends, so what
    the program prints next takes the line. Only where stderr is a terminal, DEBUG < 3
    (which prints every kernel as it lowers) and BUILD_PROGRESS is not 0. The total grows
    while the engine is still lowering."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = self.finished = 0
        self._start, self._shown = 0.0, False
        self._width = 0  # of the longest line written, to erase it

    def queued(self) -> None:
        with self._lock:
            if self.finished == self.total:  # idle until now: a new build
                self.total = self.finished = 0
                self._start, self._shown = time.perf_counter(), False
            self.total += 1

    def done(self) -> None:
        with self._lock:
            self.finished += 1
            elapsed = time.perf_counter() - self._start
            if self.finished == self.total and self._shown:
                self._write("\r" + " " * self._width + "\r")
            elif self.finished < self.total and elapsed >= _PROGRESS_AFTER and self._visible():
                line = f"building kernels: {self.finished}/{self.total}"
                self._width = max(self._width, len(line))
                self._write("\r" + line)
                self._shown = True

    @staticmethod
    def _visible() -> bool:
        stream = sys.stderr
        return bool(getenv("BUILD_PROGRESS", 1)) and debug_level() < 3 and \
            stream is not None and stream.isatty()

    @staticmethod
    def _write(text: str) -> None:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed stream: the build goes on without news
            pass
