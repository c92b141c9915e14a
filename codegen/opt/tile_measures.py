"""What a CPU tile costs and where its lanes may go: the measures codegen/opt/tiling.py
ranks its unrolls by (loads per accumulator update, registers taken, which axes are worth
unrolling, which rows fill vectors). docs/decisions.md D28-D38, D57, D66, D125.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.kernel import Kernel
from codegen.lanes import FULL, row_fill
from codegen.target import Target

_SHORT_REDUCE = 16           # reduces this short may take vector lanes across strided outputs
LONG_FILL = 0.875  # share of a long padded row that is real, for wider tiles
WHOLE = 8                    # an axis this short may be unrolled whole, whatever its size


def elements_read(k: Kernel, key: int) -> int:
    """Elements of input `key` the whole kernel reads: its extent along every axis it
    walks (an input ignoring an axis reads the same elements again there)."""
    strides = k.sts[key].real_strides(ignore_valid=True)
    return prod(s for s, st in zip(k.full_shape, strides) if st != 0)


def _halvings(start: int) -> list[int]:
    """start, start / 2, ... down to 2: the widths an axis may be unrolled by."""
    out = []
    while start >= 2:
        out.append(start)
        start //= 2
    return out

def _lane_loads(k: Kernel, key: int, lanes: int, target: Target) -> int:
    """Loads of one input across `lanes` lanes: one per lane where it gathers (a known
    stride over 1: a strided operand), else a vector per register (contiguous, or an
    index the views hide, as through a padded window, which the linearizer loads as a
    vector where the live lanes are contiguous)."""
    stride = k.strides(key, len(k.full_shape) - 1)
    return lanes if stride is not None and stride > 1 else -(-lanes // target.lanes)

def gathers(k: Kernel, axis: int) -> bool:
    """Whether an input walks this axis at a known stride over 1: as vector lanes, a load
    per lane."""
    return any((stride := k.strides(key, axis)) is not None and stride > 1 for key in k.loads)

def full_row(k: Kernel, axis: int, target: Target) -> bool:
    """Whether the output's own row makes full vectors along this axis: contiguous, no input
    gathers along it, and 3/4 of the lanes busy. It is then the lane axis; where it is not
    (a conv's rows of 7 or 8, or of stride 2), the widest unroll is, which may be an axis
    only an input is contiguous along (a conv's output channels) [D66]. A row with idle
    lanes (14 of 16) gives way to such an axis that whole vectors divide (D125)."""
    if k.strides(k.out_key, axis) != 1 or \
            any(k.strides(key, axis) not in (0, 1) for key in k.loads):
        return False
    fill = row_fill(k.full_shape[axis], target.lanes)
    return fill == 1.0 or fill >= FULL and not whole_vectors_elsewhere(k, axis, target)

def whole_vectors_elsewhere(k: Kernel, row: int, target: Target) -> bool:
    """Whether whole vectors fill another output axis, one the output is not contiguous
    along and an input is (a conv's output channels, in a weight copied with them
    innermost: D66, D125): its lanes are all busy where the row's are not."""
    return any(axis != row and k.full_shape[axis] % target.lanes == 0 and
               k.strides(k.out_key, axis) != 1 and any(k.strides(key, axis) == 1 for key in k.loads)
               for axis in range(k.n_global))

def _registers(k: Kernel, target: Target) -> int:
    """Registers the tile's accumulators take: a lane axis narrower than a register still
    takes a whole one, a wider one several."""
    if not k.lanes:
        return prod(k.upcasts)
    return prod(k.upcasts[:-1]) * -(-k.lanes // target.lanes)

def fits_registers(t: Kernel, target: Target) -> bool:
    """Whether the tile of `t` (an unroll tried) fits the target's accumulator registers."""
    return _registers(t, target) <= target.tile // target.lanes

def loads_per_update(t: Kernel, target: Target) -> float:
    """Loads per vector accumulator update in one step of the reduce of `t` (an unroll
    tried): every input is loaded once per unrolled copy of the axes it depends on (a
    vector per register of lanes along the vector axis, one broadcast where it does not
    depend on it, a load per lane where it gathers). A conv's input ignores the output
    channel, its weight every position: unrolling channels shares the input's vector
    loads."""
    first = len(t.full_shape) - len(t.upcasts)
    lane_axis = len(t.full_shape) - 1 if t.lanes else -1
    loads = 0
    for key in t.loads:
        copies = 1
        for axis, amount in enumerate(t.upcasts, start=first):
            if t.strides(key, axis) == 0:
                continue
            copies *= _lane_loads(t, key, amount, target) if axis == lane_axis else amount
        loads += copies
    return loads / _registers(t, target)

def unroll_amount(size: int, want: int, room: int, whole: int = WHOLE) -> int:
    """The widest unroll of an axis of `size` up to `want` that fits in `room`: a power of
    two that divides the axis, or the whole axis when it is short (up to `whole`; 0:
    none)."""
    fits = [d for d in _halvings(want) if size % d == 0]
    fits += [size] if want // 2 < size <= max(want, whole) and size % want else []
    return max((d for d in fits if d <= room), default=0)

def worth_unrolling(k: Kernel, axis: int) -> str | None:
    """Why unrolling this global axis pays, or None."""
    strides = [k.sts[key].real_strides(ignore_valid=True) for key in k.loads]
    red_axes = range(k.n_global, k.n_global + k.n_reduce)
    # reuse that matters: an input read at every reduce step that ignores this axis
    if any(s[axis] == 0 and any(s[r] != 0 for r in red_axes) for s in strides):
        return "reuse: a walked input ignores this axis"
    red_contig = any(s[k.n_global + k.n_reduce - 1] == 1 for s in strides)
    if not red_contig and any(s[axis] == 1 for s in strides):
        return "vectors: an input is contiguous along it, none along the reduce"
    if _short_reduce_lanes(k, axis, strides):
        return "vectors: a short reduce, lanes across the outputs"
    return None

def _short_reduce_lanes(k: Kernel, axis: int, strides: list[tuple[int | None, ...]]) -> bool:
    """A short reduce (a pool window) is better vectorised across outputs, even when the
    inputs walk them with a small stride (lanes gather from a short span)."""
    if prod(k.reduce_shape) > _SHORT_REDUCE or k.strides(k.out_key, axis) != 1:
        return False
    steps = [s[axis] for s in strides]
    return any(steps) and all(st is not None and 0 <= st <= 4 for st in steps)


def masked_inputs(k: Kernel) -> bool:
    """Whether an input under the reduce is read through a mask (a padded conv window)."""
    return any(view.mask is not None for key in k.loads for view in k.sts[key].views)


def round_up(size: int, amount: int) -> int:
    return size + -size % amount
