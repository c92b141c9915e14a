"""ScheduleItem, the scheduler's unit of work, and the copy kernel several passes add."""
from __future__ import annotations
from dataclasses import dataclass, field

from codegen.dtypes import DType
from codegen.ops import BufferOps, LazyOp, MemBuffer
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer


@dataclass
class ScheduleItem:
    """One step: a kernel `ast` (None for COPY/EMPTY) writing `out` from `inputs`."""
    ast: LazyOp | None
    out: LazyBuffer
    inputs: list[LazyBuffer] = field(default_factory=list)


def copy_ast(shape: tuple[int, ...], dtype: DType) -> LazyOp:
    """The kernel that copies buffer 1 into buffer 0, both contiguous of `shape`."""
    st = ShapeTracker.from_shape(shape)
    return LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(1, dtype, st)),),
                  MemBuffer(0, dtype, st))
