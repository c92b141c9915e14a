"""The CPU's worker threads: `Crew.run` posts a job (a kernel's outer loop cut into
pieces) to a mailbox in memory, takes part in it, and returns once every piece is
finished. Every thread takes pieces in native code (codegen/renderer/llvm_crew.py: the
IR, the mailbox's layout and why a late worker never runs a finished job's piece). A
worker spins for SPIN_US after its last piece, so the next kernel needs no wake-up, then
sleeps until a job finds it asleep: on a futex in native code where runtimes/crew_sleep.py
finds one (D133: woken in Python, it had to take the GIL from the caller first), else on
a Python queue.
"""
from __future__ import annotations
import atexit
import ctypes
import functools
import os
import queue
import threading
import time
from typing import Callable

from codegen.renderer.llvm_crew import LEFT
from runtimes.crew_sleep import futex, wake, work_loop

_SPIN_US = 300  # a worker polls this long after its last piece before it sleeps: longer
# than the Python between two kernels of a schedule (20-60 us), so it rarely sleeps mid-step
_MAX_WORKERS = 256
SERVING = _MAX_WORKERS  # flags[SERVING + i]: 1 while worker i serves (the second half)
_CALIBRATION_POLLS = 20000  # polls timed once to turn SPIN_US into a poll count


class Crew:
    """Worker threads and their mailbox: one per process, shared by every CPU runtime.
    `functions` maps crew_serve, crew_post and crew_finish to their addresses; `keep`
    holds what must live as long as that code (its MCJIT engine)."""

    def __init__(self, functions: dict[str, int], keep: object,
                 runner: Callable[..., int | None] | None = None):
        self.keep = keep
        # the crew_run builtin (codegen/renderer/llvm_launch.py): post and finish in one
        # call; None: two ctypes calls
        self.runner = runner
        self.functions = functions
        # buffers -> (address of piece_N, what keeps its code alive)
        self.pieces: dict[int, tuple[int, object]] = {
            int(name[6:]): (address, keep) for name, address in functions.items()
            if name.startswith("piece_")}
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.serve = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, i64)(functions["crew_serve"])
        self.work = ctypes.CFUNCTYPE(None, ptr, ptr, ptr, i64)(functions["crew_work"])
        self.futex = futex()  # (syscall's address, the futex call's number) or None
        self.post = ctypes.CFUNCTYPE(i64, ptr, i64, i64, ptr, i64, ptr)(functions["crew_post"])
        self.finish = ctypes.CFUNCTYPE(None, ptr, i64)(functions["crew_finish"])
        self.lock = threading.Lock()  # one job at a time: callers on other threads wait
        self.polls_per_us = self._calibrate()
        self.spins: dict[float, int] = {}  # SPIN_US -> polls
        self._start()
        # a forked child has none of the parent's threads, and its lock may have been held
        # by one of them: it starts a crew of its own (checked here once, not per job)
        if hasattr(os, "register_at_fork"):  # (no fork where it is missing: Windows)
            os.register_at_fork(after_in_child=self._restart)
        atexit.register(self.stop)

    def stop(self, timeout: float = 0.2) -> None:
        """End every worker's spin and native sleep and wait (at most `timeout` s) until all
        are asleep in Python, out of native code: at exit, before the engine holding that
        code can go away. Jobs after it still run: they wake the workers in Python."""
        self.mailbox[17] = 0
        self.mailbox[18] = 0  # sleep in Python from now on
        deadline = time.monotonic() + timeout
        while not all(out.is_set() for out in self.outs):
            if time.monotonic() > deadline:
                return
            if self.futex is not None:  # (again and again: a worker may have read the
                # address just before it was cleared, and gone to its futex after a wake)
                wake(self.futex, [self.flags_address + 8 * i for i in range(len(self.wakeups))])
            time.sleep(0.0005)

    def _restart(self) -> None:
        """In a forked child: a new lock and a fresh crew."""
        self.lock = threading.Lock()
        self._start()

    def _start(self) -> None:
        """A fresh crew: no workers yet (also in a forked child, which has none of its
        parent's threads)."""
        self.mailbox = (ctypes.c_int64 * 24)()
        # [i]: 1 while worker i is asleep (a job must wake it); [SERVING + i]: 1 while
        # it serves (takes pieces or spins: a job finds it ready)
        self.flags = (ctypes.c_int64 * (SERVING + _MAX_WORKERS))()
        self.woken = (ctypes.c_int64 * _MAX_WORKERS)()
        self.address, self.flags_address, self.woken_address = (
            ctypes.addressof(a) for a in (self.mailbox, self.flags, self.woken))
        self.records: list[ctypes.Array] = []  # every record made: a late reader may read one
        self.record_address = 0  # the last record's
        self.wakeups: list[queue.SimpleQueue] = []
        self.outs: list[threading.Event] = []  # set while worker i is out of native code
        self.seq = 0
        if self.futex is not None:
            self.mailbox[18], self.mailbox[19] = self.futex
        self.native = None if self.runner is None else functools.partial(
            self.runner, self.functions["crew_post"], self.functions["crew_finish"],
            self.address, self.flags_address, self.woken_address)

    def _calibrate(self) -> float:
        """Polls per microsecond of an idle worker's spin (crew_serve on an empty mailbox)."""
        empty, flag, serving = _calibration_buffers()
        empty[17] = _CALIBRATION_POLLS
        start = time.perf_counter()
        self.serve(ctypes.addressof(empty), ctypes.addressof(flag), ctypes.addressof(serving), 1)
        return _CALIBRATION_POLLS / max((time.perf_counter() - start) * 1e6, 1.0)

    def run(self, values: list[int], chunks: int, helpers: int, spin_us: float) -> None:
        """Post the job `values` (`[piece_N, kernel, n, chunks, data0, ...]`) in `chunks`
        pieces, wake up to `helpers` sleeping workers, take pieces here too, and return
        once every piece is finished. Workers spin `spin_us` after their last piece (those
        with a core of their own: the first cores - 1)."""
        helpers = min(helpers, _MAX_WORKERS)
        spins = self.spins.get(spin_us)
        if spins is None:
            spins = self.spins[spin_us] = int(spin_us * self.polls_per_us)
        with self.lock:
            while len(self.wakeups) < helpers:
                self._hire()
            record = self._record(len(values))
            self.seq = (self.seq + 1) & LEFT
            word = (self.seq << 32) | chunks
            finished = False
            try:
                if self.native is not None:
                    # fill the record and post, and where no worker was asleep, finish,
                    # in one call (None); else it posted and says how many sleep. It
                    # raises only before it posts (bad arguments)
                    asleep = self.native(word, spins, helpers, chunks, self.record_address,
                                         *values)
                    finished = asleep is None
                else:
                    record[:len(values)] = values
                    self.mailbox[16] = self.record_address
                    asleep = self.post(self.address, word, spins, self.flags_address,
                                       helpers, self.woken_address)
                if asleep:
                    for i in range(helpers):
                        if self.woken[i]:
                            self.wakeups[i].put(None)
            finally:  # even on Ctrl-C: the workers' pieces use the buffers, and the next
                # post resets the count of finished ones. Only a job that was posted (the
                # mailbox holds its number); finishing a finished one returns at once
                if not finished and (self.mailbox[0] >> 32) & LEFT == self.seq:
                    self.finish(self.address, chunks)

    def asleep(self, helpers: int) -> bool:
        """Whether a job for `helpers` workers would have to wait for one: asleep, woken
        but not yet serving (a worker that sleeps in Python needs the GIL first, which
        the caller's Python holds for up to the switch interval), or not started. A
        wake-up costs 15-30 us on a 2-core machine (D97, D133). Read without the lock: a
        worker that falls asleep just after is woken by the job as usual."""
        if len(self.wakeups) < helpers:
            return True
        flags = self.flags
        for i in range(SERVING, SERVING + helpers):
            if not flags[i]:
                return True
        return False

    def _record(self, slots: int) -> ctypes.Array:
        """A record with room for `slots` values: the last one, or a bigger one (the old
        ones stay alive); `record_address` is its address."""
        if not self.records or len(self.records[-1]) < slots:
            self.records.append((ctypes.c_int64 * max(slots, 32))())
            self.record_address = ctypes.addressof(self.records[-1])
        return self.records[-1]

    def _hire(self) -> None:
        """Start the next worker; it looks for pieces at once."""
        wakeup: queue.SimpleQueue = queue.SimpleQueue()
        index = len(self.wakeups)
        self.wakeups.append(wakeup)
        out = threading.Event()
        self.outs.append(out)
        spinner = int(index + 2 <= _cores())  # the caller and the spinners have a core each
        flag, serving = (self.flags_address + 8 * i for i in (index, SERVING + index))
        threading.Thread(target=work_loop, daemon=True, name=f"lazyten-cpu-{index}",
                         args=(self, self.address, flag, serving, spinner, wakeup, out)).start()


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _calibration_buffers() -> tuple[ctypes.Array, ctypes.c_int64, ctypes.c_int64]:
    """An empty mailbox, and the flag and serving flag of the calibration's spin."""
    return (ctypes.c_int64 * 24)(), ctypes.c_int64(), ctypes.c_int64()
