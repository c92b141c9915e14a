"""Numbers that change from call to call become kernel inputs (D104, D105).

A Python number in eager code (`x * lr`, `x > threshold`, `x.clamp(0, top)`) is a CONST
node, and the kernel that reads it has its value as a literal; a slice of a realized
tensor at a Python index (`x[i]`, `x[i:i + 8]`) is a view whose offset the kernel has as
a literal too. The schedule cache's key holds both, so a number that changes on every
call (a decayed learning rate, a step count, a loop's index) missed the cache and compiled
a new kernel each time: 6-13 ms a call where PyTorch takes microseconds.

The rule, applied on a cache miss (`realize`): the graph's key with every constant's value
and every window's offset left out names the graph's structure (a window: a view of a
realized buffer that is one contiguous run of its memory). The first graph of a structure
keeps its literals (most never change: an epsilon, a 0.5, a mask's 0, a fixed slice). A
later graph of that structure whose values differ from the first's at some positions has
those positions, and any found to differ before, made realized buffers in place, before
it is looked up again: a constant becomes a 0-d buffer holding its value (D104), a window
a buffer holding a copy of its run of memory (D105; values, not aliases: the copy is what
the view reads, taken before anything in this realize runs). The key then holds buffers,
not values, and every later value reuses one schedule and one kernel. Kernels read them as
they read a 0-d tensor argument or a contiguous tensor, so results are bit for bit the
literals'.

Not lifted: bool constants, 16-bit float ones (their literal is used in float32,
unrounded, where a buffer would hold it rounded), a value its dtype cannot hold (an int
past the dtype's range), windows on a runtime whose allocator cannot copy within device
memory (`copy_within`: the CPU runtimes, CUDA and OpenCL have it), and anything while a JIT captures
(`realize` asks only outside one): a captured call fixes its numbers anyway.
LIFT_CONSTANTS=1 lifts everything it can on first sight (the fuzzer runs so, to check
that a lifted value computes what its literal does).
"""
from __future__ import annotations
import struct

from codegen.dtypes import dtypes, round_float
from codegen.helpers import debug_level, getenv, prod
from codegen.ops import LoadOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.view import View
from lazyten.lazy import LazyBuffer
from lazyten.schedule_cache import Found, lookup, realized_since
from runtimes import Buffer, get_runtime

# the key with the values left out -> (the values its first graph had, in `_variables`'
# order; the places found to vary)
_SEEN: dict[tuple, tuple[tuple, frozenset]] = {}


def lift_varying(found: Found, outs: list[LazyBuffer]) -> Found | None:
    """Make the constants and windows of this graph (a cache miss: `found` is lookup's
    answer for `outs`) that vary between calls realized buffers, in place; the graph's
    lookup then, or None where none was lifted. Where only constants were, their parts of
    the key are patched rather than the graph walked again."""
    key, nodes, _ = found
    if key is None:
        return None
    structure, values, places = _variables(key, nodes)
    if not values:
        return None
    seen = _SEEN.get(structure)
    if seen is None and getenv("LIFT_CONSTANTS", 0):  # (the tests' switch: every one, at once)
        seen = _SEEN[structure] = ((None,) * len(values), frozenset())
    if seen is None:
        if len(_SEEN) >= getenv("SCHEDULE_CACHE", 1024):
            _SEEN.clear()
        _SEEN[structure] = (values, frozenset())
        return None
    first, varying = seen
    grown = varying | {p for p, now, then in zip(places, values, first) if now != then}
    if grown != varying:
        _SEEN[structure] = (first, grown)
        if debug_level() >= 2:
            print(f"*** {len(grown - varying)} numbers change between calls (constants, "
                  "slice offsets): kernel inputs from now on", flush=True)
    targets = {}  # each node once (a view two nodes read appears at both places)
    for node, src in grown:
        target = nodes[node] if src < 0 else nodes[node].src[src]
        targets[id(target)] = (target, node if src < 0 else None)
    constants, windows = [], False
    for target, position in targets.values():
        if position is not None:
            if _lift_constant(target):
                constants.append(position)
        elif _lift_window(target):
            windows = True
    if windows:  # a view became a buffer of its own: the graph is walked again
        return lookup(outs)
    return realized_since(found, constants) if constants else None


def _variables(key: tuple, nodes: list[LazyBuffer]) -> tuple[tuple, tuple, list[tuple[int, int]]]:
    """(the key with every constant's value and window's offset left out, those values,
    where each is: (node, -1) for a constant node, (node, j) for its j-th source)."""
    parts, masked, values, places = key[0], [], [], []
    for i, part in enumerate(parts):
        if part[0] is LoadOps.CONST:
            masked.append((LoadOps.CONST, None, *part[2:]))
            values.append(part[1])  # (floats by repr: -0.0 is not 0.0)
            places.append((i, -1))
            continue
        srcs = part[5] if part[0] != "buffer" else ()
        new = None
        for j, src in enumerate(srcs):
            if type(src) is tuple and nodes[src[0]].realized is not None and _is_window(src[1]):
                view = src[1].views[0]
                new = list(srcs) if new is None else new
                new[j] = (src[0], view.shape, view.strides)
                values.append(view.offset)
                places.append((i, j))
        masked.append(part if new is None else (*part[:5], tuple(new), *part[6:]))
    return (tuple(masked), key[1]), tuple(values), places


def _is_window(st: ShapeTracker) -> bool:
    """One unmasked view of memory (any strides: a row `x[i]`, a column `x[:, t]`)."""
    return len(st.views) == 1 and st.views[0].mask is None


def _lift_constant(base: LazyBuffer) -> bool:
    """Turn a CONST base into a realized 0-d buffer holding its value; False where it
    stays a literal."""
    dtype = base.dtype
    if base.op is not LoadOps.CONST or dtype == dtypes.bool or dtype.opmath is not dtype:
        return False  # (a 16-bit float's literal is used in float32, unrounded)
    fmt = "<" + dtype.fmt
    try:  # (packing rounds a float as a cast does; past the dtype's range it overflows,
        data = struct.pack(fmt, base.arg)  # where the literal rounds to an infinity)
    except OverflowError:
        try:
            data = struct.pack(fmt, round_float(base.arg, dtype))  # (an infinity)
        except (OverflowError, struct.error):  # (an int past every float)
            return False
    except struct.error:
        return False
    memory = Buffer(get_runtime(base.device), 1, dtype)
    memory.copyin(memoryview(data))
    base.op, base.arg, base.src = LoadOps.CUSTOM, None, ()
    base.realized = memory
    return True


def _lift_window(view: LazyBuffer) -> bool:
    """Copy the run of memory a view of a realized buffer reads (from its lowest element to
    its highest) into a buffer of its own: a view reading all of it in order becomes that
    buffer, any other (a column, a flip) a view of it at an offset that no longer moves.
    False where it stays as it is (no `copy_within`, or a run over _MOST_COPIED bytes:
    a copy that long costs what a compile does)."""
    base = view._base
    if base is None or base.realized is None or base.realized._buf is None:
        return False
    source, itemsize = base.realized, view.dtype.itemsize
    copy = getattr(source.runtime.allocator, "copy_within", None)
    v = view.st.views[0]
    low = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides) if s < 0)
    high = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.strides) if s > 0)
    run = high - low + 1
    if copy is None or prod(v.shape) == 0 or run * itemsize > _MOST_COPIED:
        return False
    memory = Buffer(source.runtime, run, view.dtype)
    copy(memory.ensure_allocated(), source._buf, low * itemsize, run * itemsize)
    rebased = View.create(v.shape, v.strides, v.offset - low)
    if rebased.contiguous and run == prod(v.shape):  # all of it, in order: the buffer itself
        view._base, view.st = None, ShapeTracker.from_shape(view.shape)
        view.op, view.arg, view.src = LoadOps.CUSTOM, None, ()
        view.realized = memory
    else:
        view._base, view.st = LazyBuffer.from_buffer(memory, (run,)), ShapeTracker((rebased,))
    return True


_MOST_COPIED = 16 << 20  # bytes: about a compile's time of copying on the CPU
