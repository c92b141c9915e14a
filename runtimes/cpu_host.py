"""The CPU runtime's host: where compiled kernels are loaded and who runs them.

`Host.load` puts object files into MCJIT engines and returns function addresses;
`Host.piece_loop` gives the native loop that hands out pieces of a kernel's outer loop;
`Host.run` runs a job on this thread and on worker threads. Imports codegen only.
"""
from __future__ import annotations
import ctypes
import os
import queue
import threading
import weakref
from typing import Callable

import llvmlite.binding as llvm

from codegen.renderer.llvmir import piece_loop
from runtimes.base import Compiler

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

_PIECE_LOOPS = 16  # piece loops for kernels with up to this many buffers come in one module
_ENGINE_OBJECTS = 256  # binaries per MCJIT engine (an engine is freed with its last program)


def target_machine(opt: int = 3) -> llvm.TargetMachine:
    """LLVM's code generator for this CPU. An MCJIT engine takes ownership of the one it
    is given (and frees it with itself), so every engine gets its own."""
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=opt, reloc="pic", codemodel="default", jit=True)



class Host:
    """What one CPU runtime's programs share: MCJIT engines (creating one costs about
    1.5 ms) and the worker threads that split a kernel's outer loop. Machine code lives
    as long as its engine: each engine takes _ENGINE_OBJECTS binaries, its programs keep
    it alive, and an engine none of whose programs is left (the engine's caches evicted
    them) is freed with its code."""

    def __init__(self, support: Compiler):
        self.support = support  # compiles the piece loops
        self.engine: llvm.ExecutionEngine | None = None
        self.objects = 0  # binaries in the current engine
        # function name -> (address, the engine that holds it, weakly)
        self.loaded: dict[str, tuple[int, weakref.ref]] = {}
        self.piece_loops: dict[int, tuple] = {}  # by buffer count: (function, engine)
        self.threads: list[queue.SimpleQueue] = []  # one job queue per worker thread
        self.pid = os.getpid()

    def load(self, function: str, binary: bytes, also: tuple[str, ...] = ()) -> tuple:
        """(address of `function`, its engine), loading `binary` into the current engine
        unless a live engine has it already (functions are named after their bodies:
        same name, same code). `also` names more functions the binary defines."""
        found = self.loaded.get(function)
        engine = found[1]() if found is not None else None
        if engine is None:
            if self.engine is None or self.objects >= _ENGINE_OBJECTS:
                self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
                self.objects = 0
            engine = self.engine
            engine.add_object_file(llvm.ObjectFileRef.from_data(binary))
            engine.finalize_object()
            self.objects += 1
            for name in (function,) + also:
                address = engine.get_function_address(name)
                if not address:  # calling address 0 would crash the process
                    raise RuntimeError(f"CPU binary has no function {name!r}")
                self.loaded[name] = (address, weakref.ref(engine))
        return self.loaded[function][0], engine

    def piece_loop(self, buffers: int):
        """The loop a thread runs to take pieces of a kernel's outer loop (the renderer's
        `piece_loop`), shared by all kernels with this many buffers. The loops for 1 to
        16 buffers are one module, compiled once."""
        if buffers not in self.piece_loops:
            counts = range(1, _PIECE_LOOPS + 1) if buffers <= _PIECE_LOOPS else [buffers]
            names = [f"pieces_{n}" for n in counts]
            src = "".join(piece_loop(n) for n in counts)
            # llvmlite serialises calls into LLVM itself, so this may run beside the compile pool
            binary = self.support.compile_cached(names[0], src)  # about 10 ms, once
            _, engine = self.load(names[0], binary, also=tuple(names[1:]))
            argtypes = [ctypes.c_void_p] * (buffers + 2) + [ctypes.c_int64] * 2
            self.piece_loops[buffers] = (ctypes.CFUNCTYPE(None, *argtypes)(
                self.loaded[f"pieces_{buffers}"][0]), engine)
        return self.piece_loops[buffers][0]

    def run(self, job, helpers: int, finished: Callable[[], bool],
            joined: Callable[[], int]) -> None:
        """Run `job` on `helpers` worker threads and on this one; return once `finished()`
        (every piece computed) and the `joined()` workers that entered the job are back.
        A worker that wakes late (15-25 us, longer on a busy machine) finds no piece left:
        this thread does not wait for it. One that took part is waited for (blocking,
        which lets it take the GIL back): else it would wait for the GIL while this thread
        runs on, and miss the next kernels. Workers wait on SimpleQueues: a hand-off costs
        about 15 us, against 60 us for a ThreadPoolExecutor's submit and result."""
        if self.pid != os.getpid():  # a forked child has none of its parent's threads
            self.threads, self.pid = [], os.getpid()
        while len(self.threads) < helpers:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_worker, args=(jobs,), daemon=True).start()
            self.threads.append(jobs)
        done: queue.SimpleQueue = queue.SimpleQueue()
        for jobs in self.threads[:helpers]:
            jobs.put((job, done))
        interrupted: BaseException | None = None
        try:
            job()  # takes pieces until none is left
        except Exception:  # the call itself failed, so do the workers' (the same arguments):
            raise          # no piece ran
        except BaseException as e:  # Ctrl-C: raised below, once the pieces are done
            interrupted = e
        waited = 0
        while True:  # the pieces the workers took run in native code (no GIL needed);
            try:     # even on Ctrl-C, wait for their stores
                if not finished():
                    continue
                while waited < joined():
                    done.get()
                    waited += 1
                break
            except BaseException as e:  # noqa: BLE001
                interrupted = e
        if interrupted is not None:
            raise interrupted


def _worker(jobs: queue.SimpleQueue) -> None:
    """Run piece loops, and say when one is over. Errors are not reported: the caller's
    own call of the job (the same arguments) raises them, and a loop that failed before
    taking a piece left its pieces to the others."""
    while True:
        job, done = jobs.get()
        try:
            job()
        except Exception:  # noqa: BLE001, S110
            pass
        done.put(None)


