"""The engine: run a schedule. Get each kernel's program (programs.py: lowered,
compiled, cached in memory by AST and on disk by source), launch it, and print what
DEBUG asks for (to stderr); a cached schedule's plan launches without ScheduleItems.
"""
from __future__ import annotations
import atexit
from functools import partial
import threading
import weakref
from typing import Any, Callable, NamedTuple, cast

from codegen.helpers import debug_level, prod, settings_memo
from codegen.opt import opt_settings
from codegen.ops import LoadOps
from codegen.renderer import ProgramSpec
from lazyten.index_check import raise_if_bad, verify
from lazyten.lazy import LazyBuffer
# (Stats and get_program are also read from here by the tests and tools)
from lazyten.programs import Stats, get_program, log, schedule_programs
from lazyten.schedule import ScheduleItem, copy_ast, create_schedule
from lazyten.schedule_cache import lookup
from lazyten.graph_expand import restore_graphs
from lazyten.plan import Plan
from lazyten.varying import lift_varying
from runtimes import Buffer, Program, Window


class Launch(NamedTuple):
    """One recorded step of the engine. With a spec: `program` launched on `buffers`
    (the output first). Without: a host step, `program(*buffers)` (a copy between
    devices, or reading an index check's flag)."""
    spec: ProgramSpec | None
    program: Callable[..., Any]  # a Program (with a spec) or a host function
    buffers: list


class _Capture(threading.local):
    """This thread's recording, for the JIT. While `items` is a list, every kernel launch
    and host step this thread's engine runs is appended to it (as a Launch), every buffer
    it allocates to `allocated`, every Tensor assigned in place to `assigned`, and every
    LazyBuffer given a copy of its old value to `copied`; `uploaded` holds the memory it
    filled with host data (Tensor(numpy)), which a replay does not fill again. Other
    threads are never recorded."""
    items: list[Launch] | None = None
    allocated: list[Buffer] | None = None
    assigned: list | None = None  # the Tensors given an in-place update (Tensor.assign)
    copied: list | None = None  # weak references to the LazyBuffers copied on write
    uploaded: dict | None = None  # id -> Buffer filled from the host (not replayed)


Capture = _Capture()


def run_schedule(schedule: list[ScheduleItem]) -> list[tuple[ProgramSpec, Program] | None]:
    """Execute schedule items in order and mark their outputs realized; the programs they
    ran (None for host steps). The schedule is consumed: each item lets go of its inputs
    once it has run (see `_keep_old_value`)."""
    programs = schedule_programs(schedule)
    timing = debug_level() >= 2  # read once per schedule, not per launch
    for item, found in zip(schedule, programs):
        out = item.out
        if item.ast is None:
            if out.op is LoadOps.COPY:
                out.realized = _allocate(out)
                _record_and_run(Launch(None, _copy, [out.realized, item.inputs[0].realized]))
            elif out.realized is None:
                out.realized = _allocate(out)
        else:
            _run_kernel(item, found, timing)
            if out.index_check is not None:  # raise before anything reads bad indices
                if Capture.items is not None:
                    Capture.items.append(Launch(None, partial(raise_if_bad, out.index_check),
                                                [out.realized]))
                verify(out)
        out.src, out.arg = (), None  # drop the graph so its buffers can be freed
        if out.saved:  # (a traced forward's values: read only by a node not yet realized)
            out.saved = None
        if out.checks:  # (its index checks ran before it: their flags' buffers go too)
            out.checks = ()
        item.inputs = []
    return programs


def _allocate(out: LazyBuffer) -> Buffer:
    return _allocated(out.allocate())


def _allocated(buffer: Buffer) -> Buffer:
    if Capture.allocated is not None:
        Capture.allocated.append(buffer)
    return buffer


def _run_kernel(item: ScheduleItem, found: tuple[ProgramSpec, Program] | None,
                timing: bool) -> None:
    out = item.out
    if found is None:  # nothing to compute: the output gets its (empty) memory
        out.realized = _keep_old_value(out) if out.op is LoadOps.ASSIGN else _allocate(out)
        return
    buffers: list[Any] = [b.realized for b in item.inputs]
    if item.shifts:  # a kernel whose loads were rebased reads windows (D120)
        buffers = [Window(b, s) if s else b for b, s in zip(buffers, item.shifts)]
    out.realized = _keep_old_value(out) if out.op is LoadOps.ASSIGN else _allocate(out)
    buffers.insert(0, out.realized)
    if Capture.items is None:  # not recording: launch straight away
        launch(found[0], found[1], buffers, out.device, timing)
    else:
        _record_and_run(Launch(found[0], found[1], buffers))


def _record_and_run(step: Launch) -> None:
    if Capture.items is not None:
        Capture.items.append(step)
    replay(step, step.buffers)


def replay(step: Launch, buffers: list[Buffer], timing: bool | None = None) -> None:
    """Run a recorded step on `buffers` (its own or others of the same sizes); `timing`
    as `launch`'s (a replay of many steps reads DEBUG once)."""
    if step.spec is None:
        step.program(*buffers)
    else:
        launch(step.spec, cast(Program, step.program), buffers, buffers[0].device, timing)


def _copy(dest: Buffer, src: Buffer) -> None:
    """A copy between devices, through the host."""
    host = memoryview(bytearray(src.nbytes))
    src.copyout(host)
    dest.copyin(host)


def _keep_old_value(assign: LazyBuffer) -> Buffer:
    """The memory an ASSIGN writes into: its target's buffer. If anything still alive can
    read the target's old value later (a view or a Tensor made before the update, a lazy
    result that reads it and is not realized yet), that value is copied first and the
    target's LazyBuffer is pointed at the copy (copy on write), so every Tensor keeps the
    value it had. The test is exact, not a guess: the kernel's AST is already built, so
    the engine drops its own references to the target (the assign's sources; the inputs
    of the items that ran, which `run_schedule` clears) and asks a weak reference whether
    the target is still alive."""
    target = assign.src[1].base
    memory = target.realized
    assert memory is not None, "an ASSIGN targets a realized buffer"
    if Capture.uploaded and id(memory) in Capture.uploaded:
        _restored_each_replay(Capture.uploaded.pop(id(memory)), target.shape, target.device)
    alive = weakref.ref(target)
    assign.src = ()  # the value's graph is in the kernel's AST now
    del target
    old = alive()
    if old is not None:
        copy_on_write(old)
    return memory


def _restored_each_replay(memory: Buffer, shape: tuple[int, ...], device: str) -> None:
    """`memory` was filled from the host during a JIT capture and is about to be written in
    place for the first time. A replay does not upload again, so it would start from the
    last call's result: the capture keeps a copy of the upload, and a copy back is the
    replay's first step (before any kernel reads the memory: the old value of an assign
    that reads its target shifted is one, made before the assign)."""
    assert Capture.items is not None, "only a capture notes uploads"
    if prod(shape) == 0:
        return
    kept = Buffer(memory.runtime, memory.size, memory.dtype)
    spec, program = get_program(copy_ast(shape, memory.dtype), device)
    launch(spec, program, [kept, memory], device)  # now, once: not recorded
    Capture.items.insert(0, Launch(spec, program, [memory, kept]))


def copy_on_write(old: LazyBuffer) -> None:
    """Point `old`, a realized base whose memory is about to be overwritten while
    something can still read it, at a copy of that memory."""
    memory = old.realized
    assert memory is not None, "copy on write of a realized buffer"
    Stats.copies_on_write += 1
    old.realized = _allocated(Buffer(memory.runtime, memory.size, memory.dtype))
    if Capture.copied is not None:
        Capture.copied.append(weakref.ref(old))
    _launch_copy(old.realized, memory, old.shape, old.device)


def _launch_copy(dest: Buffer, src: Buffer, shape: tuple[int, ...], device: str) -> None:
    if prod(shape) == 0:
        return
    spec, program = get_program(copy_ast(shape, src.dtype), device)
    _record_and_run(Launch(spec, program, [dest, src]))


def launch(spec: ProgramSpec, program: Program, buffers: list, device: str,
           timing: bool | None = None) -> None:
    """Call a compiled program on device buffers (also used by JIT replay); `timing`
    (waits and prints the DEBUG=2 line) defaults to DEBUG >= 2."""
    if timing is None:
        timing = debug_level() >= 2
    # (a buffer's memory is `_buf` once allocated: read directly, as this runs per kernel)
    seconds = program(*[b._buf if b._buf is not None else b.ensure_allocated() for b in buffers],
                      global_size=spec.global_size, local_size=spec.local_size, wait=timing)
    count_launch(spec)
    if timing:
        assert seconds is not None, "a program returns its time when asked to wait"
        Stats.seconds += seconds
        _debug_line(spec, device, seconds)


def count_launch(spec: ProgramSpec) -> None:
    """Count one kernel launch in Stats (also each kernel of a replayed device graph)."""
    Stats.kernels += 1
    Stats.flops += spec.flops
    Stats.mem += spec.mem_bytes


def _debug_line(spec: ProgramSpec, device: str, seconds: float) -> None:
    gflops = spec.flops / seconds / 1e9 if seconds else 0.0
    gbs = spec.mem_bytes / seconds / 1e9 if seconds else 0.0
    sizes = "x".join(map(str, spec.global_size))
    log(f"*** {Stats.kernels:4d} {device:<8} {spec.name:<28} global {sizes:<12} "
        f"flops {_si(spec.flops):>7}  bytes {_si(spec.mem_bytes):>7}  "
        f"{seconds * 1e3:9.3f} ms  {gflops:8.2f} GFLOP/s  {gbs:7.2f} GB/s")


def _si(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.1f}{unit}" if unit else f"{int(n)}"
        n /= 1000
    return f"{n:.1f}P"


def realize(outs: list[LazyBuffer]) -> None:
    """Schedule and run everything needed for `outs`."""
    # all realized already (`.numpy()` after `.realize()`): nothing to schedule, since a
    # realized base's index checks ran with it (a loop, not all([...]): this runs once
    # per eager op, and a comprehension is a call)
    for out in outs:
        if (out._base or out).realized is None:
            break
    else:
        return
    found = lookup(outs)
    template = found[2]
    if template is None and Capture.items is None:
        lifted = lift_varying(found, outs)  # numbers that change between calls become
        if lifted is not None:              # inputs (D104, D105)
            found, template = lifted, lifted[2]
        del lifted  # (its bases too must go before anything runs: below)
    if template is not None and template.plan and Capture.items is None and \
            template.plan.settings == _plan_settings():
        Stats.schedules += 1
        Stats.plans += 1
        template.plan.run(found[1])
        return
    schedule = create_schedule(outs, found)
    # the bases must go before anything runs: they would keep each ASSIGN's target
    # alive, and `_keep_old_value` would copy every target before it is written
    del found
    if schedule:
        Stats.schedules += 1
    try:
        programs = run_schedule(schedule)
    finally:  # traced nodes the schedule expanded and did not realize are nodes again
        restore_graphs()
    if template is not None and template.plan is None:  # its second run: keep a plan
        template.plan = Plan.of(template.items, programs, schedule)


@settings_memo
def _plan_settings() -> str | None:
    """What a plan must have been made under to run now: the optimiser's settings, or
    None at DEBUG >= 2 (which prints each kernel, so runs the engine's general path)."""
    return opt_settings() if debug_level() < 2 else None


@atexit.register
def _summary() -> None:
    if debug_level() >= 2 and Stats.kernels:
        log(f"*** total: {Stats.kernels} kernels, {Stats.seconds * 1e3:.3f} ms, "
            f"{Stats.flops / 1e9:.3f} GFLOP, {Stats.mem / 1e9:.3f} GB, "
            f"{Stats.lowered} compiled")
    elif debug_level() >= 1 and Stats.kernels:
        log(f"lazyten: {Stats.kernels} kernels launched, {Stats.lowered} kernels built")
