"""The CPU runtime's host: where compiled kernels are loaded and who runs them.

`Host.load` puts object files into MCJIT engines and returns function addresses;
`Host.piece` gives the function that runs one piece of a kernel's outer loop;
`Host.crew` gives the worker threads that run a job beside this one (runtimes/cpu_crew.py).
"""
from __future__ import annotations
import weakref
from typing import Any, Callable

import llvmlite.binding as llvm

from codegen.renderer.llvm_crew import piece_ir, support_ir
from codegen.renderer.llvm_launch import crew_run_ir, launcher_name, launchers_ir
from runtimes.base import Compiler
from runtimes.cpu_crew import Crew
from runtimes.cpu_launch import builtin, resolve_c_api
from runtimes.llvm_build import target_machine

_PIECE_LOOPS = 16  # piece functions for kernels with up to this many buffers come with the crew
_ENGINE_OBJECTS = 256  # binaries per MCJIT engine (an engine is freed with its last program)


_CREW: Crew | None = None  # the process's worker threads (Host.crew)


class Host:
    """What one CPU runtime's programs share: MCJIT engines (creating one costs about
    1.5 ms) and a way to the process's worker threads. Machine code lives
    as long as its engine: each engine takes _ENGINE_OBJECTS binaries, its programs keep
    it alive, and an engine none of whose programs is left (the engine's caches evicted
    them) is freed with its code."""

    def __init__(self, support: Compiler):
        self.support = support  # compiles the crew's support code
        self.engine: llvm.ExecutionEngine | None = None
        self.objects = 0  # binaries in the current engine
        # function name -> (address, the engine that holds it, weakly)
        self.loaded: dict[str, tuple[int, weakref.ref]] = {}
        # (buffers, bounds) -> builtin launcher (runtimes/cpu_launch.py), and their engines
        self.launchers: dict[tuple[int, bool], Callable[..., Any]] = {}
        self.launcher_engines: list[llvm.ExecutionEngine] = []
        self.native: bool | None = None  # whether launchers can be made (None: not tried)

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

    def crew(self) -> Crew:
        """The process's worker threads, made by the first host that splits a kernel and
        shared by all (one crew per process: two CPU devices would otherwise each keep a
        spinning thread per core). Its support code (about 10 ms to compile, once per
        machine: it is cached like kernels) lives in this host's current engine."""
        global _CREW
        if _CREW is None:
            names = ["crew_serve", "crew_post", "crew_finish", "crew_work"] + \
                [f"piece_{n}" for n in range(1, _PIECE_LOOPS + 1)]
            src = support_ir(llvm.get_process_triple(), _PIECE_LOOPS)
            # llvmlite serialises calls into LLVM itself, so this may run beside the compile pool
            binary = self.support.compile_cached(names[0], src)
            _, engine = self.load(names[0], binary, also=tuple(names[1:]))
            runner, runner_engine = self._crew_runner()
            _CREW = Crew({name: self.loaded[name][0] for name in names},
                         (engine, runner_engine), runner)
        return _CREW

    def _crew_runner(self) -> tuple[Callable[..., Any] | None, Any]:
        """(the crew_run builtin (codegen/renderer/llvm_launch.py), the engine holding its
        code), or (None, None) where builtins cannot be made."""
        if self.native is None:
            self.native = resolve_c_api()
        if not self.native:
            return None, None
        _, engine = self.load("crew_run", self.support.compile_cached("crew_run", crew_run_ir()))
        return builtin("crew_run", self.loaded["crew_run"][0]), engine

    def piece(self, buffers: int) -> int:
        """The address of `piece_<buffers>`, which runs one piece of a kernel with that many
        buffers (1 to 16 come with the crew; more get their own module)."""
        crew = self.crew()
        if buffers not in crew.pieces:
            name = f"piece_{buffers}"
            crew.pieces[buffers] = self.load(name, self.support.compile_cached(name, piece_ir(buffers)))
        return crew.pieces[buffers][0]

    def launcher(self, buffers: int, bounds: bool) -> Callable[..., Any] | None:
        """The builtin that calls kernels with `buffers` buffers, with thread bounds or
        without (codegen/renderer/llvm_launch.py); None where none can be made."""
        found = self.launchers.get((buffers, bounds))
        if found is not None:
            return found
        if self.native is None:
            self.native = resolve_c_api()
        if not self.native:
            return None
        names = (launcher_name(buffers, True), launcher_name(buffers, False))
        binary = self.support.compile_cached(names[0], launchers_ir(buffers))
        _, engine = self.load(names[0], binary, also=names[1:])
        self.launcher_engines.append(engine)  # the builtins' code lives as long as the host
        for name, with_bounds in zip(names, (True, False)):
            self.launchers[(buffers, with_bounds)] = builtin(name, self.loaded[name][0])
        return self.launchers[(buffers, bounds)]
