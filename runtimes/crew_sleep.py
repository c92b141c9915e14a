"""How the CPU's worker threads (runtimes/cpu_crew.py) sleep, D133: an idle worker sleeps on
the futex of its "asleep" flag in native code (codegen/renderer/llvm_crew.py's
`crew_work`), and a job's post wakes it there, through the C library's `syscall`, whose
address and the machine's futex call number the crew's mailbox holds (so the object code
names neither). Linux on x86-64 and AArch64 only; elsewhere workers sleep in Python, on
a queue."""
from __future__ import annotations
import ctypes
import platform
import queue
import sys
import threading
from typing import Any, Callable

from codegen.renderer.llvm_crew import FUTEX_WAKE

_NUMBERS = {"x86_64": 202, "aarch64": 98}  # the futex system call's number, by machine


def futex() -> tuple[int, int] | None:
    """(the address of the C library's `syscall`, the futex call's number), or None where
    workers sleep in Python: not Linux, a machine whose number is not known here, or no
    `syscall` in the C library."""
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in _NUMBERS:
        return None
    try:
        function = ctypes.CDLL(None).syscall
    except (OSError, AttributeError):
        return None
    address = ctypes.cast(function, ctypes.c_void_p).value
    return (address, _NUMBERS[machine]) if address else None


def wake(found: tuple[int, int], addresses: list[int]) -> None:
    """Wake a thread asleep on the futex at each address (`found`: what futex() gave)."""
    syscall = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long,
                               ctypes.c_long)(found[0])
    for address in addresses:
        syscall(found[1], address, FUTEX_WAKE, 1)


def work_loop(crew: Any, mailbox: int, flag: int, serving: int, spinner: int,
              wakeup: queue.SimpleQueue, out: threading.Event) -> None:
    """A worker: serve jobs (native, without the GIL) until idle, then sleep until woken,
    in native code (crew_work returns only once the crew stops) or here. A worker beyond
    the cores (THREADS above the core count) does not spin."""
    work: Callable[[int, int, int, int], None] = crew.work
    while True:
        out.clear()
        work(mailbox, flag, serving, spinner)
        out.set()
        wakeup.get()
