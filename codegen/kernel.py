"""One kernel being optimised: its loop shape, the ShapeTrackers of its leaves, and the
decisions (`Opt`s) applied to it so far.

A kernel AST is one STORE of elementwise ops over LOAD/CONST leaves with at most one
REDUCE. Every leaf's ShapeTracker views the kernel's full shape (leaves under the reduce)
or its output shape (the others: reduced axes have size 1). A row kernel (D55) stores at
the full shape and may hold several reduces over the same axes, each read as one value per
row: all its leaves view the full shape, and its output shape is that of the reduces'
outputs, so its axes split into global and reduce axes as in any kernel. A `Kernel` keeps the two
shapes and the trackers in step while the passes (codegen/opt/) reshape and permute
them. Its axes are, in order: global axes (loops on a CPU, work-items on a GPU), reduce
axes, then upcast axes (unrolled into registers; the last may be vector lanes).

Every change goes through `Kernel.apply(opt)`, so what the passes decided is a list of
values (`Kernel.applied`) that DEBUG=3 prints and DEBUG_DIR writes.
"""
from __future__ import annotations
import copy
from dataclasses import dataclass
from enum import Enum, auto
from typing import Callable

from codegen.ops import BufferOps, LazyOp, ReduceOps
from codegen.shape.shapetracker import ShapeTracker


class OptOps(Enum):
    """The kinds of decision a pass can make."""
    SQUEEZE = auto()       # drop the size-1 axes
    MERGE = auto()         # merge `axis` with axis + 1 (both walked contiguously)
    UPCAST = auto()        # split global `axis` by `amount`; the new axis is unrolled in registers
    STRIDE_UPCAST = auto()  # the same, but the `amount` copies are size // amount apart (GPU:
    #                        neighbouring work-items keep reading neighbouring elements)
    LANES = auto()         # the last upcast axis (`amount` wide) becomes vector lanes
    PAD = auto()           # pad the innermost reduce axis to a multiple of `amount` (identity)
    PAD_OUT = auto()       # pad global `axis` to a multiple of `amount` (not stored; the row
    #                        the output is contiguous in, and one other axis, at most)
    REDUCE_LANES = auto()  # split the innermost reduce axis: `amount` lanes across it
    OUTER = auto()         # move `axis` outermost (the loop the threads split)
    GROUP = auto()         # GPU: one work-group of `amount` work-items per output reduces together
    LOCAL = auto()         # GPU: hardware dim `axis` gets work-groups of `amount` work-items
    FLATTEN = auto()       # GPU: every global axis goes into hardware dim 0
    STAGE = auto()         # GPU: the reduce in steps of `amount`, the operands a work-group
    #                        shares copied into local memory once per step


@dataclass(frozen=True)
class Opt:
    """One decision: what to do, to which axis, how much, and why (for the reader)."""
    op: OptOps
    axis: int = 0
    amount: int = 0
    why: str = ""

    def __str__(self) -> str:
        what = self.op.name if self.op is OptOps.SQUEEZE else \
            f"{self.op.name} axis={self.axis}" + (f" amount={self.amount}" if self.amount else "")
        return f"{what:<32} {self.why}"


def format_opts(opts: list[Opt]) -> str:
    """The passes' decisions, one per line (DEBUG=3, DEBUG_DIR's .opts file)."""
    return "\n".join(f"{i:3d} {opt}" for i, opt in enumerate(opts)) or "(none)"


class OptError(ValueError):
    """A decision that does not apply to this kernel (the passes never make one)."""


# the key of the tracker whose validity says which reduce elements are real, after a PAD
REDUCE_VALID = 0


def leaves(ast: LazyOp) -> list[LazyOp]:
    return [n for n in ast.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE)]


class Kernel:
    """The shapes and trackers of one kernel AST, reduce axes last."""

    def __init__(self, ast: LazyOp):
        self.ast = ast
        self.reduceops = _reduces_inner_first(ast)
        self.reduceop = self.reduceops[-1] if self.reduceops else None
        self.rows = self.reduceop is not None and _is_row_kernel(ast, self.reduceop)
        assert self.rows or len(self.reduceops) <= 1, "only a row kernel holds several reduces"
        assert all(r.arg == self.reduceops[0].arg for r in self.reduceops), \
            "the reduces of a row kernel reduce the same axes"
        under = leaves(ast if self.rows else self.reduceop) if self.reduceop else []
        self.pre = set(map(id, under))  # leaves under the reduce: they view the full shape
        self.mem = {id(n) for n in leaves(ast) if n.op is BufferOps.LOAD}
        self.sts: dict[int, ShapeTracker] = {id(n): n.arg.st for n in leaves(ast)}
        # an indirect load (codegen/gather.py) -> the leaves its address offset reads
        self.indirect = _indirect(ast)
        self.out_shape: tuple[int, ...] = ast.arg.st.shape
        self.full_shape: tuple[int, ...] = under[0].arg.st.shape if under else self.out_shape
        if self.rows:  # axes are global or reduce as in the reduces' output
            assert self.reduceop is not None
            self.out_shape = _kept(self.full_shape, self.reduceop.arg)
        self.upcasts: list[int] = []  # sizes of the trailing axes unrolled into registers
        self.lanes = 0                # > 1: the last upcast axis is vector lanes this wide
        self.reduce_lanes = False     # the lane axis is a reduce axis (summed after the loops)
        self.padded = False           # the innermost reduce axis was padded (sts[REDUCE_VALID])
        self.padded_axis = -1         # the output's row OptOps.PAD_OUT padded (-1: none)
        self.padded_rows = -1         # another global axis it padded (a matmul's rows)
        self.clamped: frozenset[int] = frozenset()  # loads masked only by PAD_OUT
        self.group = 0                # GPU: work-items per work-group of a group reduce
        self.local: dict[int, int] = {}  # GPU: hardware dim -> work-group size
        self.flat = False             # GPU: all global axes in hardware dim 0
        self.stage = 0                # GPU: reduce steps per local-memory stage (STAGE)
        self.applied: list[Opt] = []
        self._permute(_reduce_last(self.full_shape, self.out_shape))
        self.name_shape = self._split_shape()  # the kernel's name shows its shape before tiling

    def copy(self) -> Kernel:
        """A copy to try decisions on (trackers are immutable and shared)."""
        k = copy.copy(self)
        k.sts, k.upcasts, k.local, k.applied = dict(self.sts), list(self.upcasts), \
            dict(self.local), list(self.applied)
        return k

    # ---- the axes ----
    @property
    def n_reduce(self) -> int:
        """Reduce axes that are loops (reduce lanes are an upcast axis)."""
        loops = len(self.full_shape) - len(self.upcasts)
        return sum(f != o for f, o in zip(self.full_shape[:loops], self.out_shape[:loops]))

    @property
    def n_global(self) -> int:
        """Axes that are loops (CPU) or work-items (GPU): all but reduce and upcast axes."""
        return len(self.full_shape) - self.n_reduce - len(self.upcasts)

    @property
    def reduce_shape(self) -> tuple[int, ...]:
        return self.full_shape[self.n_global:self.n_global + self.n_reduce]

    @property
    def global_shape(self) -> tuple[int, ...]:
        return self.full_shape[:self.n_global]

    def strides(self, key: int, axis: int, ignore_valid: bool = True) -> int | None:
        """The stride of leaf `key` along `axis` (None where its index is not affine, or
        comes from data along it: an indirect load whose offset depends on the axis)."""
        if any(self.sts[s].real_strides()[axis] != 0 for s in self.indirect.get(key, ())):
            return None
        return self.sts[key].real_strides(ignore_valid=ignore_valid)[axis]

    @property
    def loads(self) -> list[int]:
        """The memory leaves under the reduce (what the reduce loop reads)."""
        return [k for k in self.pre if k in self.mem]

    @property
    def out_key(self) -> int:
        return id(self.ast)

    def _split_shape(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.full_shape[:self.n_global], self.full_shape[self.n_global:]

    # ---- applying decisions ----
    def apply(self, opt: Opt) -> None:
        """Apply one decision, or raise OptError (the kernel is then unchanged)."""
        trial = self.copy()
        _APPLY[opt.op](trial, opt)
        trial.applied.append(opt)
        self.__dict__.update(trial.__dict__)

    def tried(self, *opts: Opt) -> Kernel | None:
        """A copy with `opts` applied in order, or None where one does not apply: a pass
        that weighs a decision reads the trial, rather than applying it again to ask each
        question."""
        trial = self.copy()
        try:
            for opt in opts:
                trial.apply(opt)
        except OptError:
            return None
        return trial

    def can_apply(self, opt: Opt) -> bool:
        return self.tried(opt) is not None

    def _move(self, fn_full: Callable[[ShapeTracker], ShapeTracker],
              fn_out: Callable[[ShapeTracker], ShapeTracker], merged: int | None = None,
              grow: bool = False) -> None:
        """Apply a movement to every tracker, or raise OptError if a tracker would grow a
        view (unless `grow`: splitting a padded axis) or, for a merge, the merged axis would
        not read every multi-view tracker affinely: merging the rows of an upsampled view
        (y // 2, x // 2) turns its index into a div/mod tangle that no vector lane can follow."""
        new = {}
        for key, st in self.sts.items():
            moved = fn_full(st) if key in self.pre else fn_out(st)
            if len(moved.views) > len(st.views) and not grow:
                raise OptError(f"a view of leaf {key} does not survive the movement")
            if merged is not None and len(moved.views) > 1 and \
                    moved.real_strides(ignore_valid=True)[merged] is None:
                raise OptError(f"merging axis {merged} tangles a view")
            new[key] = moved
        self.sts = new

    def _reshape(self, full: tuple[int, ...], out: tuple[int, ...], merged: int | None = None,
                 grow: bool = False) -> None:
        self._move(lambda st: st.reshape(full), lambda st: st.reshape(out), merged, grow)
        self.full_shape, self.out_shape = full, out

    def _permute(self, order: tuple[int, ...]) -> None:
        self._move(lambda st: st.permute(order), lambda st: st.permute(order))
        self.full_shape = tuple(self.full_shape[i] for i in order)
        self.out_shape = tuple(self.out_shape[i] for i in order)


def _indirect(ast: LazyOp) -> dict[int, list[int]]:
    """Each indirect load's key -> the keys of the leaves its offset reads."""
    return {id(n): [id(s) for s in leaves(n.src[0])] for n in ast.walk()
            if n.op is BufferOps.LOAD and n.src}


def _reduces_inner_first(ast: LazyOp) -> list[LazyOp]:
    """The reduces of an AST, each after the reduces its input reads (a row kernel's order
    of evaluation): an iterative post-order walk."""
    order: list[LazyOp] = []
    seen: set[int] = set()
    stack: list[tuple[LazyOp, bool]] = [(ast, False)]
    while stack:
        node, done = stack.pop()
        if done:
            if isinstance(node.op, ReduceOps):
                order.append(node)
        elif id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((src, False) for src in reversed(node.src))
    return order


def is_row_kernel(ast: LazyOp) -> bool:
    """Is this kernel AST a row kernel (D55)?"""
    reduce = next((n for n in ast.walk() if isinstance(n.op, ReduceOps)), None)
    return reduce is not None and _is_row_kernel(ast, reduce)


def _is_row_kernel(ast: LazyOp, reduce: LazyOp) -> bool:
    """Does the kernel store at the shape its reduce reads, reduced axes and all (D55)?"""
    shape: tuple[int, ...] = leaves(reduce)[0].arg.st.shape
    return bool(ast.arg.st.shape == shape and _kept(shape, reduce.arg) != shape)


def _kept(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _reduce_last(full: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
    """The axis order that puts the reduced axes (full != out) last, keeping their order."""
    kept = [i for i in range(len(full)) if full[i] == out[i]]
    return tuple(kept + [i for i in range(len(full)) if i not in kept])


def _squeeze(k: Kernel, opt: Opt) -> None:
    keep = [i for i in range(len(k.full_shape)) if k.full_shape[i] != 1]
    k._reshape(tuple(k.full_shape[i] for i in keep), tuple(k.out_shape[i] for i in keep))
    k.name_shape = k._split_shape()


def _merge(k: Kernel, opt: Opt) -> None:
    i, full, out = opt.axis, k.full_shape, k.out_shape
    if not 0 <= i < len(full) - 1 or (full[i] == out[i]) != (full[i + 1] == out[i + 1]):
        raise OptError(f"axes {i} and {i + 1} of {full} are not both global or both reduce")
    if k.padded and full[i] != out[i]:
        raise OptError("a padded reduce keeps its axes: its last step is the partial one")
    k._reshape(full[:i] + (full[i] * full[i + 1],) + full[i + 2:],
               out[:i] + (out[i] * out[i + 1],) + out[i + 2:], merged=i)
    k.name_shape = k._split_shape()


def _split(shape: tuple[int, ...], axis: int, amount: int) -> tuple[int, ...]:
    return shape[:axis] + (shape[axis] // amount, amount) + shape[axis + 1:]


def _upcast(k: Kernel, opt: Opt) -> None:
    """Split `axis` into (size // amount, amount) and move the new axis to the end,
    before the earlier upcasts: the first (widest) varies fastest. STRIDE_UPCAST splits it
    into (amount, size // amount) and moves the outer part instead."""
    axis, amount = opt.axis, opt.amount
    strided = opt.op is OptOps.STRIDE_UPCAST
    if not 0 <= axis < k.n_global or amount < 2 or k.full_shape[axis] % amount or \
            (strided and (k.lanes or axis in (k.padded_axis, k.padded_rows))):
        raise OptError(f"cannot upcast axis {axis} of {k.full_shape} by {amount}")
    split = _split_outer if strided else _split
    # splitting a padded axis may split its mask: a view more
    k._reshape(split(k.full_shape, axis, amount), split(k.out_shape, axis, amount),
               grow=axis in (k.padded_axis, k.padded_rows))
    moved = axis if strided else axis + 1
    rest = [i for i in range(len(k.full_shape)) if i != moved]
    at = len(rest) - len(k.upcasts)
    k._permute(tuple(rest[:at] + [moved] + rest[at:]))
    k.upcasts.insert(0, amount)


def _split_outer(shape: tuple[int, ...], axis: int, amount: int) -> tuple[int, ...]:
    return shape[:axis] + (amount, shape[axis] // amount) + shape[axis + 1:]


def _lanes(k: Kernel, opt: Opt) -> None:
    if k.lanes or not k.upcasts or k.upcasts[-1] != opt.amount:
        raise OptError(f"the last upcast axis of {k.upcasts} is not {opt.amount} wide")
    k.lanes = opt.amount


def _pad(k: Kernel, opt: Opt) -> None:
    """Pad the innermost reduce axis up to a multiple of `amount`, so that it splits into
    whole vectors. The loads under the reduce read nothing in the padding; the tracker
    kept at REDUCE_VALID says where the reduce's input is real, so the linearizer adds
    the reduce's identity there instead."""
    axis, amount = k.n_global + k.n_reduce - 1, opt.amount
    if k.lanes or k.padded or not k.n_reduce or k.group or amount < 2 or \
            axis != opt.axis or k.full_shape[axis] % amount == 0:
        raise OptError(f"cannot pad reduce axis {opt.axis} of {k.full_shape} to {amount}")
    arg = tuple((0, -size % amount if i == axis else 0) for i, size in enumerate(k.full_shape))
    k.sts[REDUCE_VALID] = ShapeTracker.from_shape(k.full_shape)
    k.clamped = frozenset()  # their masks are the reduce's too
    k.pre = k.pre | {REDUCE_VALID}
    k._move(lambda st: st.pad(arg), lambda st: st)
    k.full_shape = tuple(s + a for s, (_, a) in zip(k.full_shape, arg))
    k.padded = True


def _pad_out(k: Kernel, opt: Opt) -> None:
    """Pad global `axis` up to a multiple of `amount`, so that an output row splits into
    whole vectors [D57]. A leaf that depends on the axis reads nothing in the padding (its
    view is padded: a mask), the store writes nothing there; a leaf that ignores the axis
    (stride 0: a conv's weight across positions) is only widened, so it stays one
    broadcast and gets no mask. Besides the output's row, one other axis may be padded (a
    matmul's rows, D68); a load whose only masks are these pads is `clamped`: the
    padding's values reach only outputs that are not stored, so it may read any element
    there."""
    axis, amount = opt.axis, opt.amount
    row = k.strides(k.out_key, axis) == 1 if 0 <= axis < k.n_global else False
    if k.upcasts or k.group or (k.padded_axis if row else k.padded_rows) >= 0 or amount < 2 or \
            not 0 <= axis < k.n_global or k.full_shape[axis] % amount == 0:
        raise OptError(f"cannot pad global axis {axis} of {k.full_shape} to {amount}")
    size = k.full_shape[axis]
    new = size + -size % amount
    if not k.padded:  # what they read in the padding reaches only outputs never stored
        k.clamped |= {key for key in k.mem if all(v.mask is None for v in k.sts[key].views)}
    k.sts = {key: _pad_axis(st, axis, new) for key, st in k.sts.items()}
    k.full_shape = k.full_shape[:axis] + (new,) + k.full_shape[axis + 1:]
    k.out_shape = k.out_shape[:axis] + (new,) + k.out_shape[axis + 1:]
    if row:
        k.padded_axis = axis
    else:
        k.padded_rows = axis


def _pad_axis(st: ShapeTracker, axis: int, new: int) -> ShapeTracker:
    """`st` with `axis` grown to `new`: widened where neither index nor mask depends on it,
    else padded at the end (masked)."""
    size = st.shape[axis]
    if st.real_strides()[axis] == 0:
        one = tuple((0, 1) if i == axis else (0, s) for i, s in enumerate(st.shape))
        return st.shrink(one).expand(st.shape[:axis] + (new,) + st.shape[axis + 1:])
    return st.pad(tuple((0, new - size) if i == axis else (0, 0) for i in range(len(st.shape))))


def _reduce_lanes(k: Kernel, opt: Opt) -> None:
    """Split the innermost reduce axis into (size // lanes, lanes) and make the lanes the
    last axis; a size-1 reduce axis left behind would pass for an output, so a reduce
    exactly `lanes` long moves whole."""
    axis, lanes = k.n_global + k.n_reduce - 1, opt.amount
    if k.lanes or not k.n_reduce or k.full_shape[axis] % lanes:
        raise OptError(f"cannot take {lanes} reduce lanes from {k.full_shape}")
    full, out = k.full_shape, k.out_shape
    if full[axis] > lanes:
        k._reshape(_split(full, axis, lanes), out[:axis] + (1, 1) + out[axis + 1:],
                   grow=k.padded)
        axis += 1
    k._permute(tuple(i for i in range(len(k.full_shape)) if i != axis) + (axis,))
    k.upcasts.append(lanes)
    k.lanes, k.reduce_lanes = lanes, True


def _outer(k: Kernel, opt: Opt) -> None:
    if not 0 <= opt.axis < k.n_global:
        raise OptError(f"axis {opt.axis} is not a global axis of {k.full_shape}")
    k._permute((opt.axis,) + tuple(i for i in range(len(k.full_shape)) if i != opt.axis))
    k.padded_axis, k.padded_rows = (_moved_out(a, opt.axis) for a in (k.padded_axis, k.padded_rows))


def _moved_out(axis: int, outer: int) -> int:
    """Where global `axis` is once `outer` moved outermost (-1 stays -1)."""
    return axis if not 0 <= axis <= outer else 0 if axis == outer else axis + 1


def _group(k: Kernel, opt: Opt) -> None:
    if k.reduceop is None or k.padded or opt.amount < 2 or opt.amount & (opt.amount - 1):
        raise OptError(f"a group reduce needs a reduce and a power of two, got {opt.amount}")
    k.group = opt.amount


def _local(k: Kernel, opt: Opt) -> None:
    k.local[opt.axis] = opt.amount


def _flatten(k: Kernel, opt: Opt) -> None:
    k.flat = True


def _stage(k: Kernel, opt: Opt) -> None:
    """Split the one reduce axis into (size // amount, amount): the outer loop walks the
    stages, the inner one the steps of a stage (OptOps.STAGE)."""
    axis, amount = k.n_global, opt.amount
    if k.n_reduce != 1 or k.padded or k.group or k.lanes or k.stage or amount < 2 or \
            k.full_shape[axis] % amount or k.full_shape[axis] <= amount:
        raise OptError(f"cannot stage the reduce of {k.full_shape} by {opt.amount}")
    k._reshape(_split(k.full_shape, axis, amount), k.out_shape[:axis] + (1, 1) +
               k.out_shape[axis + 1:])
    k.stage = amount


_APPLY: dict[OptOps, Callable[[Kernel, Opt], None]] = {
    OptOps.SQUEEZE: _squeeze, OptOps.MERGE: _merge, OptOps.UPCAST: _upcast,
    OptOps.STRIDE_UPCAST: _upcast,
    OptOps.LANES: _lanes, OptOps.PAD: _pad, OptOps.PAD_OUT: _pad_out,
    OptOps.REDUCE_LANES: _reduce_lanes,
    OptOps.OUTER: _outer, OptOps.GROUP: _group, OptOps.LOCAL: _local, OptOps.FLATTEN: _flatten,
    OptOps.STAGE: _stage}
