"""Programs for kernel ASTs: lower each (linearize, render), compile it through its
runtime (on disk by source, `runtime.compiler`'s cache), and keep the loaded programs in
memory by AST (the PROGRAM_CACHE most recently used), with the DEBUG 3-5 dumps and
DEBUG_DIR's files; and `Stats`, the engine's counters (realize.py launches what this
module makes).
"""
from __future__ import annotations
import hashlib
import os
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING

from codegen.attention import is_attention_kernel
from codegen.helpers import debug_level, getenv
from codegen.kernel import Kernel, format_opts
from codegen.linearizer import linearize
from codegen.opt import opt_settings, optimize
from codegen.renderer import ProgramSpec
from codegen.uops import format_uops
from runtimes import Program, get_runtime

if TYPE_CHECKING:
    from lazyten.schedule_item import ScheduleItem


class Counters:
    """Counters the tests and DEBUG read: kernels launched and compiled, time spent. One
    instance, `Stats`: every eager op adds to it, and adding to an instance's slot costs a
    third of setting a class attribute (which invalidates the type's lookup cache)."""
    __slots__ = ("kernels", "schedules", "plans", "lowered", "flops", "mem", "seconds",
                 "copies_on_write")

    def __init__(self) -> None:
        self.kernels = self.schedules = self.lowered = self.flops = self.mem = 0
        self.plans = 0  # schedules launched from their template's plan (D78)
        self.copies_on_write = 0
        self.seconds = 0.0


Stats = Counters()


# (device, ast, settings) -> (spec, loaded program), the PROGRAM_CACHE most recently used:
# an evicted program comes back from the disk cache, and the CPU frees its machine code
_PROGRAMS: OrderedDict[tuple, tuple[ProgramSpec, Program]] = OrderedDict()


def _key(device: str, ast) -> tuple:
    """A program's key in memory: the AST (it hashes once and compares by structure), the
    device, and the settings that change what the passes decide (NOOPT)."""
    return (device, ast, opt_settings())


def log(text: str) -> None:
    print(text, file=sys.stderr)


def get_program(ast, device: str) -> tuple[ProgramSpec, Program]:
    """The compiled program for an AST on a device (memory cache, then disk cache)."""
    key = _key(device, ast)
    found = _PROGRAMS.get(key)
    if found is None:
        prepare([(ast, device)])
        found = _PROGRAMS[key]
    else:
        _PROGRAMS.move_to_end(key)
    return found


def prepare(kernels: list[tuple]) -> None:
    """Make the programs for (ast, device) pairs not yet in memory: load them from the
    program cache, else lower and compile them."""
    seen, compiling = set(), []
    for ast, device in kernels:
        key = _key(device, ast)
        if key in _PROGRAMS or key in seen:
            continue
        seen.add(key)
        runtime = get_runtime(device)
        # the disk cache by AST skips lowering; DEBUG=5 wants the linear IR, so it lowers
        disk_key = f"{runtime.renderer.target!r}\n{opt_settings()}\n{ast.key()!r}"
        lowers = debug_level() >= 5 or getenv("DEBUG_DIR", "")  # they want the uops too
        saved = runtime.compiler.load_program(disk_key) if not lowers else None
        if saved is not None:
            spec, binary = saved
            if debug_level() >= 3:  # as if lowered here: the dumps do not depend on the cache
                opts = [] if is_attention_kernel(ast) else \
                    optimize(Kernel(ast), runtime.renderer.target).applied  # no emission
                log(f"--- AST of {spec.name} (from the program cache) ---\n{ast}")
                log(f"--- decisions of {spec.name} ---\n{format_opts(opts)}")
            if debug_level() >= 4:
                log(f"--- source of {spec.name} (from the program cache) ---\n{spec.src}")
            _PROGRAMS[key] = (spec, runtime.program(spec, binary))
            continue
        spec = _lower(ast, runtime)  # while the kernels before this one compile
        compiling.append((key, runtime, disk_key, spec,
                          runtime.compiler.submit(spec.name, spec.src)))
    for key, runtime, disk_key, spec, job in compiling:
        binary = runtime.compiler.result(job)  # compiling queued jobs meanwhile
        runtime.compiler.save_program(disk_key, spec, binary)
        _PROGRAMS[key] = (spec, runtime.program(spec, binary))
    # a schedule's own programs are the newest: keep at least those
    limit = max(getenv("PROGRAM_CACHE", 2048), len(kernels))
    while len(_PROGRAMS) > limit:
        _PROGRAMS.popitem(last=False)


def _lower(ast, runtime) -> ProgramSpec:
    """AST -> linear IR -> source, with the DEBUG 3-5 dumps."""
    kernel = linearize(ast, runtime.renderer.target)
    spec = runtime.renderer.program(kernel)
    Stats.lowered += 1
    if debug_level() >= 3:
        log(f"--- AST of {spec.name} ---\n{ast}")
        log(f"--- decisions of {spec.name} ---\n{format_opts(kernel.opts)}")
    if debug_level() >= 5:
        log(f"--- linear IR of {spec.name} ---\n{format_uops(kernel.uops)}")
    if debug_level() >= 4:
        log(f"--- source of {spec.name} ---\n{spec.src}")
    if getenv("DEBUG_DIR", ""):
        _write_stages(getenv("DEBUG_DIR", ""), spec.name, ast,
                      {"ast": str(ast), "opts": format_opts(kernel.opts),
                       "uops": format_uops(kernel.uops), "src": spec.src})
    return spec


_DUMP_FAILED: list[str] = []


def _write_stages(directory: str, name: str, ast, stages: dict[str, str]) -> None:
    """DEBUG_DIR: each stage of a kernel in its own file, `<name>-<ast digest>.<stage>`, so
    the files of two runs pair up by name and diff (`diff -r run1 run2`)."""
    digest = hashlib.sha256(repr(ast.key()).encode()).hexdigest()[:10]
    try:
        os.makedirs(directory, exist_ok=True)
        for stage, text in stages.items():
            with open(os.path.join(directory, f"{name}-{digest}.{stage}"), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")
    except OSError as e:
        if not _DUMP_FAILED:  # say it once; the run goes on without the files
            _DUMP_FAILED.append(directory)
            log(f"DEBUG_DIR: cannot write kernel stages to {directory}: {e}")


def schedule_programs(schedule: list[ScheduleItem]) -> list[tuple[ProgramSpec, Program] | None]:
    """Each item's compiled program (None for host steps and empty outputs), looked up
    once: the programs not in memory are made together (`prepare`), so they compile in
    parallel."""
    found: list[tuple[ProgramSpec, Program] | None] = []
    missing: list[tuple[int, tuple]] = []  # (position in the schedule, key)
    settings = opt_settings()  # as _key, read once
    for item in schedule:
        program = None
        if item.ast is not None and 0 not in item.out.shape:
            key = (item.out.device, item.ast, settings)
            program = _PROGRAMS.get(key)
            if program is None:
                missing.append((len(found), key))
            else:
                _PROGRAMS.move_to_end(key)
        found.append(program)
    if missing:
        prepare([(ast, device) for _, (device, ast, _) in missing])
        for i, key in missing:  # prepare keeps at least the programs it was asked for
            found[i] = _PROGRAMS[key]
    return found
