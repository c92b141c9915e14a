"""Constants whose value changes from call to call become kernel inputs (D104).

A Python number in eager code (`x * lr`, `x > threshold`, `x.clamp(0, top)`) is a CONST
node, and the kernel that reads it has its value as a literal: the schedule cache's key
holds the value, so a number that changes on every call (a decayed learning rate, a step
count, an annealed temperature) missed the cache and compiled a new kernel each time,
10-13 ms a call where PyTorch takes microseconds.

The rule, applied on a cache miss (`realize`): the graph's key with every constant's
value left out names the graph's structure. The first graph of a structure keeps its
constants as literals (most constants never change: an epsilon, a 0.5, a mask's 0). A
later graph of that structure whose constants differ from the first's in some positions
has the constants at those positions, and at any position found to differ before, made
0-d buffers holding their values, in place, before it is looked up again: its key then
holds buffers, not values, and every later value reuses one schedule and one kernel.
Kernels read such a buffer as they read a 0-d tensor argument (`x * Tensor(lr)`), so
results are those of the literal, bit for bit.

Not lifted: bool constants, 16-bit float ones (their literal is used in float32,
unrounded, where a buffer would hold it rounded), and a value its dtype cannot hold (an
int past the dtype's range): they stay literals. A JIT capture never lifts
(`realize` asks only outside one): a captured call fixes its numbers anyway.
LIFT_CONSTANTS=1 lifts every constant it can on first sight (the fuzzer runs so, to
check that a lifted constant computes what its literal does).
"""
from __future__ import annotations
import struct

from codegen.dtypes import dtypes, round_float
from codegen.helpers import debug_level, getenv
from codegen.ops import LoadOps
from lazyten.lazy import LazyBuffer
from lazyten.schedule_cache import Found
from runtimes import Buffer, get_runtime

# the key with the constants' values left out -> (the values its first graph had, in the
# key's order of constants; the positions, in the key's order of nodes, found to vary)
_SEEN: dict[tuple, tuple[tuple, frozenset[int]]] = {}


def lift_varying(found: Found) -> bool:
    """Make the constants of this graph (a cache miss: `found` is lookup's answer) that
    vary between calls 0-d buffers, in place; True if any was, and the caller looks the
    graph up again."""
    key, nodes, _ = found
    if key is None:
        return False
    parts = key[0]
    consts = [i for i, part in enumerate(parts) if part[0] is LoadOps.CONST]
    if not consts:
        return False
    values = tuple([parts[i][1] for i in consts])  # (floats by repr: -0.0 is not 0.0)
    structure = (tuple([(LoadOps.CONST, None, *part[2:]) if part[0] is LoadOps.CONST
                        else part for part in parts]), key[1])
    seen = _SEEN.get(structure)
    if seen is None and getenv("LIFT_CONSTANTS", 0):  # (the tests' switch: every one, at once)
        seen = _SEEN[structure] = ((None,) * len(values), frozenset())
    if seen is None:
        if len(_SEEN) >= getenv("SCHEDULE_CACHE", 1024):
            _SEEN.clear()
        _SEEN[structure] = (values, frozenset())
        return False
    first, varying = seen
    grown = varying | {i for i, now, then in zip(consts, values, first) if now != then}
    if grown != varying:
        _SEEN[structure] = (first, grown)
        if debug_level() >= 2:
            print(f"*** constants {sorted(parts[i][1] for i in grown - varying)} change "
                  "between calls: kernel inputs from now on", flush=True)
    lifted = False
    for i in grown:
        lifted = _lift(nodes[i]) or lifted
    return lifted


def _lift(base: LazyBuffer) -> bool:
    """Turn a CONST base into a realized 0-d buffer holding its value; False where it
    stays a literal."""
    dtype = base.dtype
    if base.op is not LoadOps.CONST or dtype == dtypes.bool or dtype.opmath is not dtype:
        return False  # (a 16-bit float's literal is used in float32, unrounded)
    try:  # (a float past the dtype's range rounds to an infinity, as its literal does)
        value = round_float(base.arg, dtype) if dtype.is_float else base.arg
        data = struct.pack("<" + dtype.fmt, value)
    except (struct.error, OverflowError):
        return False
    memory = Buffer(get_runtime(base.device), 1, dtype)
    memory.copyin(memoryview(data))
    base.op, base.arg, base.src = LoadOps.CUSTOM, None, ()
    base.realized = memory
    return True
