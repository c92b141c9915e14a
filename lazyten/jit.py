"""@jit: capture the kernels a function launches, then replay them on new inputs.

Call 1 runs the function as written (compiling its kernels). Call 2 runs it again while
this thread's engine records every kernel launch and device copy, with the exact buffers
each touched. From call 3 on no Python of the function runs: the recorded launches are
replayed with the new input tensors' buffers swapped in and the returned tensors' buffers
swapped for fresh ones (nothing is traced, scheduled or compiled).

Every call, recorded or replayed:
  - first realizes the in-place updates (`assign`) this thread left pending;
  - takes as inputs the Tensor arguments, also those inside lists, tuples and dicts
    (recursively); a view or unrealized input is first made contiguous and realized
    (the caller's tensor then holds that copy);
  - realizes the returned tensors (also inside tuples, lists and dicts) and every
    in-place update the call made before it returns;
  - returns new, detached tensors that hold this call's values in memory of their own: a
    result kept from call 3 still holds call 3's value after call 4. A returned tensor
    whose memory comes from outside the call (an input, a parameter) is copied, so it
    is the value at the end of the call.

A jitted function may:
  - read tensors it was not passed (parameters, optimiser state) and update them in place
    with `assign`, as the optimisers do; the updates are replayed. Values follow the
    eager rule (docs/design.md, "Semantics"): a view, clone or lazy expression made from
    a parameter before a call keeps the parameter's old value (before each replay, a
    parameter whose LazyBuffer anything else holds has its old value copied on write);
  - make tensors from host data (Tensor(numpy), a list, arange) and update them in
    place: they are constants of the capture, and each replay starts from the uploaded
    values (a recorded copy puts them back before the first update);
  - draw random numbers (Tensor.rand, randn, randint, dropout): they come from the
    host generator, and each replay draws anew, in the order an eager call would (a
    recorded host step refills the memory), so `manual_seed` gives the eager sequence;
  - take non-tensor arguments (numbers, strings, flags, modules) and return non-tensor
    values. Both are fixed by the capture: each call must pass non-tensor arguments equal
    (same type, ==) to the first call's, else JitError names the argument; keyword order
    and defaults spelled out do not matter. To vary a number, pass it as a 0-d Tensor.
    Non-tensor return values are those of call 2;
  - call other jitted functions: inside a jitted function they run as plain functions,
    recorded with it;
  - be a method: `self` is an argument like the others, so one object per capture;
  - be called from several threads: calls of one jitted function take turns, and a
    capture records only its own thread's work.

Replay repeats the capture's decisions, so a jitted function must not:
  - branch on tensor values (`.item()`, `.numpy()`, `if t:`): they are read at capture;
  - hand results out other than by its return value and `assign`: a tensor it stores
    elsewhere (`self.h = y`, `p.replace(y)`, `p.grad`) is the capture's; after a replay
    it holds the latest call's value if it was realized inside the call, else a value
    that is not defined;
  - expect lazy work pending on a tensor it reads but was not passed (other than an
    assign) to happen once: the capture records it, so every replay redoes it from its
    sources' current contents. Realize such tensors before the first call.
Inputs must keep their shapes, dtypes, devices and requires_grad, and which of them are
the same tensor; a change raises JitError. numpy arrays are refused as arguments (the
capture would freeze their data): pass Tensors. `.reset()` forgets the capture.
"""
from __future__ import annotations
import functools
import inspect
import itertools
import sys
import threading
import weakref
from typing import Any, Callable, Optional, Union, cast

from codegen.helpers import debug_level, getenv
from codegen.ops import LoadOps
from codegen.renderer import ProgramSpec
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer, pending_assigns
from lazyten.programs import log
from lazyten.realize import (Capture, Launch, Stats, copy_on_write, count_launch, realize,
                             replay)
from lazyten.jit_values import (ABSENT, JitError, collect, flatten, rebuild,
                                same_value, show, tensor_spec)
from lazyten.tensor import Tensor
from runtimes import Buffer, Window
from runtimes.cpu_choice import SequenceChoice, sequence_choice


class TinyJit:
    """The decorator object; see the module docstring."""

    def __init__(self, fn: Callable, read_views: bool = False):
        self.fn = fn
        # read a view of realized memory in place, and require the same view every call
        # (the optimisers' replay: gradients are often transposed views); else copy it
        self.read_views = read_views
        try:
            self._parameters: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have no signature
            self._parameters = None
        self._lock = threading.RLock()
        self.reset()
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):
        """As a method: `self` is an argument like the others (one capture per object; a
        call on another object raises JitError)."""
        return self if obj is None else functools.partial(self, obj)

    def reset(self) -> None:
        """Forget the capture (for example after changing the model)."""
        self.calls = 0
        self._parts: list | None = None  # the first call's arguments, flattened
        self._replay: _Replay | None = None

    def __call__(self, *args, **kwargs):
        with self._lock:
            if Capture.items is not None:  # inside another capture, which records this too
                return self.fn(*args, **kwargs)
            inputs = self._inputs(args, kwargs)
            self.calls += 1
            if self._replay is not None:
                return self._replay.run(inputs)
            result, self._replay = _record(self.fn, args, kwargs, inputs, self.calls >= 2)
            return result

    def _inputs(self, args: tuple, kwargs: dict) -> list[Buffer]:
        """Check the arguments against the first call's; return the input buffers."""
        leaves: list[tuple[str, Any]] = []
        for name, value in self._named(args, kwargs):
            flatten(value, name, leaves)
        tensors = [value for _, value in leaves if isinstance(value, Tensor)]
        todo = [t for t in tensors if not t.lazydata.is_realized or
                (t.lazydata._base is not None and not self.read_views)]
        for t in todo:  # inputs get memory of their own, outside the capture
            t.replace(t.contiguous())
        pending = pending_assigns()
        if todo or pending:
            realize([t.lazydata for t in todo] + pending)
        first: dict[int, str] = {}  # buffer -> the first argument that holds it
        parts = [(path, tensor_spec(v, path, first, self.read_views) if isinstance(v, Tensor) else v)
                 for path, v in leaves]
        if self._parts is None:
            self._parts = parts
        else:
            self._check(self._parts, parts)
        return [t.lazydata.buffer() for t in tensors]

    def _named(self, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
        """(name, value) of each argument, in the function's parameter order."""
        if self._parameters is not None:
            bound = self._parameters.bind(*args, **kwargs)
            bound.apply_defaults()
            return list(bound.arguments.items())
        return [(f"args[{i}]", a) for i, a in enumerate(args)] + sorted(kwargs.items())

    def _check(self, first: list, parts: list) -> None:
        """Raise JitError unless this call's flattened arguments match the first call's."""
        missing = (None, ABSENT)
        for (old_path, old), (path, new) in itertools.zip_longest(first, parts,
                                                                   fillvalue=missing):
            if old_path != path or not same_value(old, new):
                where = old_path if old_path == path else f"{old_path} / {path}"
                raise JitError(
                    f"jitted {getattr(self.fn, '__name__', 'function')}: argument {where} was "
                    f"{show(old)} when captured and is {show(new)} now. A capture replays "
                    "only for tensors of the same shapes, dtypes and devices and equal "
                    "non-tensor arguments: pass a 0-d Tensor to vary a number, or call "
                    ".reset() to capture again")


# a returned tensor as a replay makes it: (its slot among the returned buffers, the
# buffer's shape, the view of it or None), or for a value with no memory how to make it
Returned = Union[tuple[int, tuple[int, ...], Optional[ShapeTracker]], Callable[[], LazyBuffer]]


class _Replay:
    """The recorded launches of one call, with the buffers each call replaces: the
    inputs' (slots 0..n-1) and the returned tensors' (slots n..)."""

    def __init__(self, launches: list[Launch], inputs: list[Buffer], outputs: list[Buffer],
                 returned: list[Returned], template: Any,
                 assigned: list[Tensor]):
        slot: dict[int, int] = {}  # id(buffer) -> its slot
        for i, b in enumerate(inputs + outputs):
            slot.setdefault(id(b), i)
        # (pos, slot, shift): a window of an input or output (D120) is one again each call
        self.steps = [(step, [(pos, slot[id(_memory(b))], _shift(b))
                              for pos, b in enumerate(step.buffers) if id(_memory(b)) in slot])
                      for step in launches]
        self.outputs = outputs  # the capture's: each call gets new ones like them
        self.graph: Any = None  # the launches as one device graph (CUDA), once built
        self.launchers: list[Any] | None = None  # each kernel step's launcher, once made
        self.serial: list[Any] = []  # and its serial launcher (made with them)
        # with CPU kernels near the thread bound: split or serial, timed over whole
        # replays (D134), made with the launchers
        self.threads: SequenceChoice | None = None
        self.graph_tried = False
        self.first_output = len(inputs)
        self.returned, self.template = returned, template
        # tensors updated in place whose memory every replay overwrites (parameters):
        # (the tensor, weakly; its memory; how many references its LazyBuffer has when
        # nothing but the tensor holds it)
        self.updated: list[tuple[weakref.ref, Buffer, int]] = []
        for t in {id(t): t for t in assigned}.values():
            memory = t.lazydata.realized if t.lazydata._base is None else None
            if memory is not None and id(memory) not in slot:
                _keep_values_read_from(t)
                self.updated.append((weakref.ref(t), memory, _references(t)))

    def run(self, inputs: list[Buffer]) -> Any:
        for ref, memory, alone in self.updated:
            t = ref()
            if t is not None and _references(t) > alone and t.lazydata._base is None \
                    and t.lazydata.realized is memory:
                _keep_values_read_from(t)
        current = inputs + [Buffer(b.runtime, b.size, b.dtype) for b in self.outputs]
        timing = debug_level() >= 2
        if not timing and self._graph() is not None:
            self._run_graph(current)
        else:
            self._run_steps(current, timing)
        tensors = []
        for entry in self.returned:
            if callable(entry):  # a constant: made anew
                lb = entry()
            else:
                output, shape, st = entry
                lb = LazyBuffer.from_buffer(current[self.first_output + output], shape)
                lb = lb if st is None else lb._view(st)
            tensors.append(Tensor._wrap(lb))
        return rebuild(self.template, iter(tensors))

    def _run_steps(self, current: list[Buffer], timing: bool) -> None:
        """Each step in turn: a kernel through its program's launcher (what the engine's
        plans call, D78: no keywords, no per-launch statistics; CUDA's is its native
        launch, D99), a host step as it is; timed (DEBUG>=2) through `replay`."""
        if self.launchers is None:
            self.launchers = [None if step.spec is None else cast(Any, step.program).launcher(
                step.spec.global_size, step.spec.local_size) for step, _ in self.steps]
            self.threads = sequence_choice(step.program for step, _ in self.steps
                                           if step.spec is not None)
            # (each kernel's serial launcher, for the runs `threads` makes serial, D134)
            self.serial = self.launchers if self.threads is None else [
                None if step.spec is None else cast(Any, step.program).serial_launcher(
                    step.spec.global_size, step.spec.local_size) for step, _ in self.steps]
        way, start = self.threads.begin() if self.threads is not None and not timing \
            else (True, 0.0)
        kernels = flops = mem = 0
        finished = False
        try:
            for (step, patches), launcher in zip(self.steps,
                                                 self.launchers if way else self.serial):
                buffers = step.buffers
                if patches:
                    buffers = list(buffers)
                    for pos, slot, shift in patches:
                        buffers[pos] = Window(current[slot], shift) if shift else current[slot]
                if timing or launcher is None:
                    replay(step, buffers, timing)
                    continue
                launcher(*[b._buf if b._buf is not None else b.ensure_allocated()
                           for b in buffers])
                spec = cast(ProgramSpec, step.spec)
                kernels, flops, mem = kernels + 1, flops + spec.flops, mem + spec.mem_bytes
            finished = True
        finally:  # the statistics of the kernels launched here, added once
            Stats.kernels += kernels
            Stats.flops += flops
            Stats.mem += mem
            if self.threads is not None and not timing:
                self.threads.end(way, start, finished)

    def _graph(self) -> Any:
        """The replay as one device graph, where every step is a kernel launch on one
        device whose runtime makes graphs (CUDA) and JIT_GRAPH is not 0: built on the
        first replay (a driver that refuses leaves the launches one by one)."""
        if self.graph_tried or not getenv("JIT_GRAPH", 1):
            return self.graph
        self.graph_tried = True
        devices = {id(b.runtime): b.runtime for step, _ in self.steps for b in step.buffers}
        make = getattr(next(iter(devices.values()), None), "graph", None)
        if len(devices) != 1 or make is None or any(s.spec is None for s, _ in self.steps):
            return None
        try:
            self.graph = make([(step.program, [b.ensure_allocated() for b in step.buffers])
                               for step, _ in self.steps])
        except RuntimeError as e:
            if debug_level() >= 1:
                log(f"jit: no device graph ({e}); launching kernels one by one")
        return self.graph

    def _run_graph(self, current: list[Buffer]) -> None:
        """Point the nodes whose buffers change at this call's, then launch the graph."""
        for i, (step, patches) in enumerate(self.steps):
            if patches:
                buffers = list(step.buffers)
                for pos, slot, shift in patches:
                    buffers[pos] = Window(current[slot], shift) if shift else current[slot]
                self.graph.set_args(i, [b.ensure_allocated() for b in buffers])
        self.graph.launch()
        for step, _ in self.steps:
            count_launch(cast(ProgramSpec, step.spec))


def _memory(b: Any) -> Any:
    """The buffer a kernel argument is memory of (a window's buffer, D120)."""
    return b.base if isinstance(b, Window) else b


def _shift(b: Any) -> int:
    return b.shift if isinstance(b, Window) else 0


def _keep_values_read_from(t: Tensor) -> None:
    """Before memory that `t` owns is overwritten in place without Python (a replay): give
    `t` a LazyBuffer of its own, and if anything else still holds the old one (a view, a
    lazy clone or expression made from `t` since), point that at a copy (copy on write),
    as an eager assign does. Tensors made from `t` keep their values."""
    lb = t.lazydata
    alive = weakref.ref(lb)
    t.lazydata = LazyBuffer.from_buffer(lb.buffer(), lb.shape)
    del lb
    old = alive()
    if old is not None:
        copy_on_write(old)


def _references(t: Tensor) -> int:
    """References to `t`'s LazyBuffer (compared only with another call of this function,
    so the interpreter's own temporaries cancel out)."""
    return sys.getrefcount(t.lazydata)


def _record(fn: Callable, args: tuple, kwargs: dict, inputs: list[Buffer],
            replayable: bool) -> tuple[Any, _Replay | None]:
    """Run `fn` while this thread's launches are recorded; realize what it returns and the
    updates it made; return (its result as new detached tensors, the replay if asked)."""
    Capture.items, Capture.allocated, Capture.assigned, Capture.copied = [], [], [], []
    Capture.uploaded = {}
    try:
        result = fn(*args, **kwargs)
        returned: list[Tensor] = []
        collect(result, returned)
        realize([t.lazydata for t in returned] + pending_assigns())
        fresh = {id(b) for b in Capture.allocated}
        copies = {}  # memory from outside the call is copied, once per tensor
        lazy = []
        for t in returned:
            lb = t.lazydata
            if lb.base.realized is not None and id(lb.base.realized) not in fresh:
                if id(lb) not in copies:
                    copies[id(lb)] = LazyBuffer.loadop(LoadOps.CONTIGUOUS, lb.shape, lb.dtype,
                                                       lb.device, src=(lb,))
                lb = copies[id(lb)]
            lazy.append(lb)
        if copies:
            realize(list(copies.values()))
        launches, assigned, copied = Capture.items, Capture.assigned, Capture.copied
    finally:
        Capture.items = Capture.allocated = Capture.assigned = Capture.copied = None
        Capture.uploaded = None
    outputs: list[Buffer] = []
    slots: dict[int, int] = {}  # id(buffer) -> its index in outputs
    # what each returned tensor is, taken now: the LazyBuffers go back to the caller, and
    # their graph changes in place later (a window read at another offset becomes a kernel
    # input, varying.py: the replay rebuilt its returns from such a view and read element 0)
    returned_plan: list[Returned] = []
    for lb in lazy:
        buffer = lb.base.realized
        if buffer is None:
            returned_plan.append(_constant(lb))
            continue
        if id(buffer) not in slots:
            slots[id(buffer)] = len(outputs)
            outputs.append(buffer)
        returned_plan.append((slots[id(buffer)], lb.base.shape,
                              None if lb._base is None else lb.st))
    result = rebuild(result, iter([Tensor._wrap(lb) for lb in lazy]))
    if not replayable:
        return result, None
    for ref in copied:  # an old value kept by copy on write lives in the capture's memory,
        old = ref()     # which every replay overwrites: it gets a copy of its own
        if old is not None:
            copy_on_write(old)
    # the rebuilt result is the replay's template: it holds no autograd graph
    return result, _Replay(launches, inputs, outputs, returned_plan, result, assigned)


def _constant(lb: LazyBuffer) -> Callable[[], LazyBuffer]:
    """A returned value with no memory (a constant, or a view of one), made anew for each
    replay as it was at the capture: the caller's LazyBuffer may become memory later (a
    constant that varies is lifted into a buffer in place, D104)."""
    base = lb.base
    if base.op is not LoadOps.CONST:
        return lambda: lb
    device, st, dtype, value = base.device, base.st, base.dtype, base.arg
    view = None if lb._base is None else lb.st

    def make() -> LazyBuffer:
        new = LazyBuffer(device, st, dtype, LoadOps.CONST, (), value)
        return new if view is None else new._view(view)
    return make


def jit(fn: Callable) -> TinyJit:
    """Decorator: capture on the second call, replay from the third."""
    return TinyJit(fn)
