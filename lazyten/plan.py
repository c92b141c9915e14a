"""Plans: a cached schedule's launches, run again with no ScheduleItems and no program
lookups (D78), in-place updates included (D155). The engine (realize.py) makes one from a
template's second run and runs it for every later graph with the template's key.
"""
from __future__ import annotations
import weakref
from typing import Any, cast

from codegen.opt import opt_settings
from codegen.ops import LoadOps
from lazyten.index_check import verify
from lazyten.lazy import LazyBuffer
from lazyten.programs import Stats
from lazyten.schedule_item import ScheduleItem
from lazyten.schedule_cache import save_value
from runtimes import Buffer
from runtimes.cpu_choice import SequenceChoice, sequence_choice


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
    __slots__ = ("steps", "settings", "costs", "flops", "mem", "threads", "assigns", "serial")

    def __init__(self, steps: list[tuple], settings: str, costs: list[tuple[int, int]],
                 threads: SequenceChoice | None = None, assigns: frozenset[int] = frozenset(),
                 serial: list[tuple] | None = None):
        self.steps, self.settings, self.costs = steps, settings, costs  # costs: (flops, bytes)
        self.flops, self.mem = sum(c[0] for c in costs), sum(c[1] for c in costs)
        self.threads = threads
        # the steps with each kernel's serial launcher, for the runs `threads` makes serial
        self.serial = serial if serial is not None else steps
        self.assigns = assigns  # the steps that write their output into its target's memory

    @staticmethod
    def of(items: list[tuple], programs: list, schedule: list[ScheduleItem]) -> Plan | bool:
        """The plan of a template's `items`, given the schedule that ran (the same items,
        rebound) and its programs; False if it cannot have one."""
        if not len(items) == len(programs) == len(schedule):
            return False
        steps: list[tuple] = []
        serial: list[tuple] = []
        costs: list[tuple[int, int]] = []
        assigns: list[int] = []
        for (ast, out, inputs, new, _), found, item in zip(items, programs, schedule):
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
            rest = (out, tuple(inputs), memory.runtime, memory.size, memory.dtype,
                    memory.runtime.allocator.alloc, memory.nbytes or 1,
                    node.index_check is not None if out >= 0 else
                    None if new[5] is None else (*new[5], node.shape), shifted)
            steps.append((program.launcher(spec.global_size, spec.local_size), *rest))
            serial.append((program.serial_launcher(spec.global_size, spec.local_size), *rest))
        threads = sequence_choice(p for _, p in programs)
        return Plan(steps, opt_settings(), costs, threads, frozenset(assigns),
                    serial if threads is not None else None)

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
                    in (self.steps if way else self.serial):
                memory = Buffer(runtime, size, dtype)  # (allocated here: ensure_allocated
                memory._buf = alloc(nbytes)            # inlined, this runs once per kernel)
                memories = [memory._buf]
                for i in inputs:  # (a loop in this frame: a comprehension is a call)
                    buffer = nodes[i].realized if i >= 0 else fresh[~i]
                    memories.append(buffer._buf if buffer._buf is not None
                                    else buffer.ensure_allocated())
                if shifted is not None:  # windows of its inputs (D120)
                    _windows(memories, shifted)
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
                if node.checks:  # (they ran before it: their flags' buffers go too)
                    node.checks = ()
            finished = True
        finally:
            self._ran(ran, way, start, finished)

    def _run_assigning(self, nodes: list[LazyBuffer]) -> None:
        """`run` for a plan with assigns, holding what run_schedule holds: each step's
        output and inputs until the step has run, and no other base (`nodes` is emptied:
        the engine's list of the graph's bases). So an assign's copy on write
        (`_keep_old_value`) finds its target alive only where something can still read
        the old value: a Tensor of the program's, or a step still to run."""
        held: list[tuple] = []
        for step in self.steps:
            out, inputs, after = step[1], step[2], step[8]
            # (a value inside a traced forward's graph is saved on its GRAPH node if that
            # is still alive: held weakly, as the general path holds no base for it)
            graph = weakref.ref(nodes[after[0]]) if out < 0 and after is not None else None
            held.append((nodes[out] if out >= 0 else None,
                         [nodes[i] if i >= 0 else i for i in inputs], graph))
        nodes.clear()
        held.reverse()  # (popped in order: a step that ran is held no more)
        from lazyten.realize import _keep_old_value  # (the engine imports this module)
        threads = self.threads
        way, start = threads.begin() if threads is not None else (True, 0.0)
        finished = False
        fresh: list[Buffer] = []
        ran = 0
        try:
            for k, (launch, _, _, runtime, size, dtype, alloc, nbytes, after, shifted) \
                    in enumerate(self.steps if way else self.serial):
                node, reads, graph = held.pop()
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
                if shifted is not None:
                    _windows(memories, shifted)
                launch(*memories)
                ran += 1
                if node is None:
                    fresh.append(memory)
                    saved_on = graph() if graph is not None else None
                    if saved_on is not None:  # (D80)
                        save_value(saved_on, after[1], LazyBuffer.from_buffer(memory, after[2]))
                    saved_on = None  # (a GRAPH node this frame held would be alive to the check)
                    continue
                node.realized = memory
                if after:
                    verify(node)
                node.src, node.arg = (), None
                if node.saved:
                    node.saved = None
                if node.checks:
                    node.checks = ()
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


def _windows(memories: list, shifted: tuple) -> None:
    """A rebased kernel's inputs read from windows (D120): `shifted` is the allocator's
    offset function and (memory position, byte shift) pairs."""
    offset, moves = shifted
    for position, shift in moves:
        memories[position] = offset(memories[position], shift)
