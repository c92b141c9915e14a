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
from lazyten.schedule_cache import lookup, save_value
from lazyten.graph_expand import restore_graphs
from lazyten.varying import lift_varying
from runtimes import Buffer, Program, Window
from runtimes.cpu_choice import SequenceChoice, sequence_choice


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


class Plan:
    """A cached schedule's launches, kept with its template (schedule_cache.Template)
    once it has run: for each kernel the program it ran, the positions of its output and
    inputs (>= 0: in the graph's bases, as the key numbers them; < 0: a buffer the
    schedule made for itself, a pack panel), what its output's memory is, and whether
    it is an index check to read (a node), or where to save it (a value inside a
    traced forward's graph: its GRAPH node's position, the trace node, the shape;
    D80). A graph with the template's key runs it with no ScheduleItems and no program
    lookups (D78). A schedule with an ASSIGN runs as run_schedule does, letting go of
    each step's bases once it has run (`_run_assigning`, D155); one with a host step or
    an empty output keeps the engine's general path. It holds its programs, so they stay
    loaded while the schedule is cached (SCHEDULE_CACHE bounds both). `threads`: with
    CPU kernels near the thread bound, whether they choose their ways or run serial,
    timed over whole runs (D134)."""
    __slots__ = ("steps", "settings", "costs", "flops", "mem", "threads", "assigns")

    def __init__(self, steps: list[tuple], settings: str, costs: list[tuple[int, int]],
                 threads: SequenceChoice | None = None, assigns: frozenset[int] = frozenset()):
        self.steps, self.settings, self.costs = steps, settings, costs  # costs: (flops, bytes)
        self.flops, self.mem = sum(c[0] for c in costs), sum(c[1] for c in costs)
        self.threads = threads
        self.assigns = assigns  # the steps that write their output into its target's memory

    @staticmethod
    def of(items: list[tuple], programs: list, schedule: list[ScheduleItem]) -> Plan | bool:
        """The plan of a template's `items`, given the schedule that ran (the same items,
        rebound) and its programs; False if it cannot have one."""
        if not len(items) == len(programs) == len(schedule):
            return False
        steps: list[tuple] = []
        costs: list[tuple[int, int]] = []
        assigns: list[int] = []
        for (ast, out, inputs, new), found, item in zip(items, programs, schedule):
            node = item.out
            if found is None or ast is None:
                return False
            if node.op is LoadOps.ASSIGN:
                assigns.append(len(steps))
            spec, program = found
            memory = node.realized
            assert memory is not None, "a kernel's output is realized once it has run"
            costs.append((spec.flops, spec.mem_bytes))
            # (the memory position and byte shift of each input a rebased kernel reads
            # from a window, D120)
            moves = tuple([(k + 1, s) for k, s in enumerate(item.shifts) if s])
            shifted = (cast(Any, memory.runtime.allocator).offset, moves) if moves else None
            steps.append((program.launcher(spec.global_size, spec.local_size), out,
                          tuple(inputs), memory.runtime, memory.size, memory.dtype,
                          memory.runtime.allocator.alloc, memory.nbytes or 1,
                          node.index_check is not None if out >= 0 else
                          None if new[5] is None else (*new[5], node.shape), shifted))
        return Plan(steps, opt_settings(), costs, sequence_choice(p for _, p in programs),
                    frozenset(assigns))

    def run(self, nodes: list[LazyBuffer]) -> None:
        """Launch every step on this graph's bases, as run_schedule would, the way
        `threads` picks if there is one. (It runs once per kernel of every eager op, so it
        is written for speed: one list of memory per launch, and the statistics added
        once, for the steps that ran.)"""
        if self.assigns:
            self._run_assigning(nodes)
            return
        threads = self.threads
        way, start = threads.begin() if threads is not None else (True, 0.0)
        finished = False
        fresh: list[Buffer] = []  # the schedule's own buffers, by ~position
        ran = 0
        try:
            for launch, out, inputs, runtime, size, dtype, alloc, nbytes, after, shifted \
                    in self.steps:
                memory = Buffer(runtime, size, dtype)  # (allocated here: ensure_allocated
                memory._buf = alloc(nbytes)            # inlined, this runs once per kernel)
                memories = [memory._buf]
                for i in inputs:  # (a loop in this frame: a comprehension is a call)
                    buffer = nodes[i].realized if i >= 0 else fresh[~i]
                    memories.append(buffer._buf if buffer._buf is not None
                                    else buffer.ensure_allocated())
                if shifted is not None:  # windows of its inputs (D120)
                    offset, moves = shifted
                    for position, shift in moves:
                        memories[position] = offset(memories[position], shift)
                launch(*memories)
                ran += 1
                if out < 0:
                    fresh.append(memory)
                    if after is not None:  # a value inside a traced forward's graph (D80)
                        save_value(nodes[after[0]], after[1],
                                   LazyBuffer.from_buffer(memory, after[2]))
                    continue
                node = nodes[out]
                node.realized = memory
                if after:  # an index check: raise before anything reads bad indices
                    verify(node)
                node.src, node.arg = (), None  # drop the graph so its buffers can be freed
                if node.saved:
                    node.saved = None
            finished = True
        finally:
            self._ran(ran, way, start, finished)

    def _run_assigning(self, nodes: list[LazyBuffer]) -> None:
        """`run` for a plan with assigns, holding what run_schedule holds: each step's
        output and inputs until the step has run, and no other base (`nodes` is emptied:
        the engine's list of the graph's bases). So an assign's copy on write
        (`_keep_old_value`) finds its target alive only where something can still read
        the old value: a Tensor of the program's, or a step still to run."""
        held: list[tuple | None] = []
        for step in self.steps:
            out, inputs, after = step[1], step[2], step[8]
            # (a value inside a traced forward's graph is saved on its GRAPH node if that
            # is still alive: held weakly, as the general path holds no base for it)
            graph = weakref.ref(nodes[after[0]]) if out < 0 and after is not None else None
            held.append((nodes[out] if out >= 0 else None,
                         [nodes[i] if i >= 0 else i for i in inputs], graph))
        nodes.clear()
        threads = self.threads
        way, start = threads.begin() if threads is not None else (True, 0.0)
        finished = False
        fresh: list[Buffer] = []
        ran = 0
        try:
            for k, (launch, _out, _, runtime, size, dtype, alloc, nbytes, after, shifted) \
                    in enumerate(self.steps):
                pair = held[k]
                assert pair is not None
                node, reads, graph = pair
                held[k] = pair = None
                # (the output's memory goes first; `reads` holds the inputs until the step
                # has run, as a ScheduleItem does: an input only the graph held would be
                # freed, and its memory reused by the copy below, before the kernel read it)
                memories: list[Any] = [0] + [_memory(read, fresh) for read in reads]
                if k in self.assigns:  # its target's memory (copied first if still read)
                    memory = _keep_old_value(node)
                    memories[0] = memory._buf if memory._buf is not None \
                        else memory.ensure_allocated()
                else:
                    memory = Buffer(runtime, size, dtype)
                    memory._buf = memories[0] = alloc(nbytes)
                if shifted is not None:  # windows of its inputs (D120)
                    offset, moves = shifted
                    for position, shift in moves:
                        memories[position] = offset(memories[position], shift)
                launch(*memories)
                ran += 1
                if node is None:
                    fresh.append(memory)
                    saved_on = graph() if graph is not None else None
                    if saved_on is not None:  # (D80)
                        save_value(saved_on, after[1], LazyBuffer.from_buffer(memory, after[2]))
                    saved_on = None
                    continue
                node.realized = memory
                if after:
                    verify(node)
                node.src, node.arg = (), None
                if node.saved:
                    node.saved = None
                node = None
            finished = True
        finally:
            self._ran(ran, way, start, finished)

    def _ran(self, ran: int, way: bool, start: float, finished: bool) -> None:
        """Count the launches that ran (all, or up to an index check that raised)."""
        if self.threads is not None:
            self.threads.end(way, start, finished)
        Stats.kernels += ran
        if ran == len(self.steps):
            Stats.flops += self.flops
            Stats.mem += self.mem
        else:  # stopped by an index check: what ran
            Stats.flops += sum(c[0] for c in self.costs[:ran])
            Stats.mem += sum(c[1] for c in self.costs[:ran])


def _memory(read: LazyBuffer | int, fresh: list[Buffer]) -> Any:
    """The memory of a plan step's input: a base's, or (~position) the schedule's own."""
    buffer = read.realized if isinstance(read, LazyBuffer) else fresh[~read]
    assert buffer is not None, "a step's inputs are realized before it runs"
    return buffer._buf if buffer._buf is not None else buffer.ensure_allocated()


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
