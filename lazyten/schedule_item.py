"""ScheduleItem, the scheduler's unit of work, the copy kernel several passes add, and
`loop_target`, which the scheduler's CPU-only rules ask."""
from __future__ import annotations
import functools
from dataclasses import dataclass, field

from codegen.dtypes import DType
from codegen.ops import BufferOps, LazyOp, MemBuffer
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from runtimes import get_runtime


@dataclass
class ScheduleItem:
    """One step: a kernel `ast` (None for COPY/EMPTY) writing `out` from `inputs`; `shifts`:
    bytes into each input's memory its kernel reads from (lazyten/rebase.py, D120), or ()."""
    ast: LazyOp | None
    out: LazyBuffer
    inputs: list[LazyBuffer] = field(default_factory=list)
    shifts: tuple[int, ...] = ()


@functools.lru_cache(maxsize=1024)
def copy_ast(shape: tuple[int, ...], dtype: DType) -> LazyOp:
    """The kernel that copies buffer 1 into buffer 0, both contiguous of `shape`. The same
    object for the same arguments: an AST hashes once, so finding its compiled program
    is then cheap (copies on write happen in eager training steps, D10)."""
    st = ShapeTracker.from_shape(shape)
    return LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtype, st)),),
                  MemBuffer(0, dtype, st))


def loop_target(device: str) -> bool:
    """Whether the device's kernels are loops on a CPU (not GPU work-items): the rule for
    fused attention (D62) applies there only."""
    return not get_runtime(device).renderer.target.gpu


def row_target(device: str) -> bool:
    """Whether the device takes row kernels (D55): a CPU walks each row while it is in the
    cache; a GPU with local memory gives each row a work-group, which combines each of
    the row's reduces in local memory and then stores the row (D94). Not a CPU driven
    through work-items (pocl), which has no group reduces (D56)."""
    target = get_runtime(device).renderer.target
    return not target.gpu or (target.local_memory > 0 and target.local_size > 1)
