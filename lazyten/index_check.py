"""Out-of-range indices raise IndexError, on every device, when the result is realized.

Integer-tensor indexing, gather, one_hot, Embedding and the class labels of the losses
are built from one-hot comparisons (`index == arange(n)`), which silently read 0 for an
index outside the range. Where only the data can tell, the check is data too, like
CUDA's device-side asserts: a flag computed on the device beside the result.

- `check_index(result, index, size, op)` builds the flag lazily: the largest offending
  index, or the int64 minimum when every index is in range (one small reduce over the
  index tensor), and attaches it to the base of `result` (`LazyBuffer.checks`).
- The scheduler realizes the flags of every base it schedules, before the kernels that
  read that base; the engine reads each flag right after its kernel and raises before
  anything that depends on the result runs (`verify`). A failed flag is left
  unrealized, so reading the result again raises again.
- Under @jit the flag kernels are captured like any other and read after each replay.
"""
from __future__ import annotations

import numpy as np

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, ReduceOps, TernaryOps
from lazyten.lazy import LazyBuffer

_NONE_BAD = int(np.iinfo(np.int64).min)  # the flag's value when every index is in range


def as_index(index):
    """An integer index tensor that compares with int64 (`arange`): uint64 becomes int64,
    its values from 2**62 on (never a valid index) pinned to 2**62 so that they stay out
    of range instead of wrapping to negative (valid) indices."""
    if index.dtype != dtypes.uint64:
        return index
    return (index >= 2 ** 62).where(2 ** 62, index).cast(dtypes.int64)


def check_index(result, index, size: int, op: str, allow_negative: bool = False):
    """`result` (a Tensor), which reads `index` (an integer Tensor) into a dimension of
    `size`, raises IndexError when realized if an index is outside [0, size) (or
    [-size, size) with `allow_negative`)."""
    if index.numel() == 0:
        return result
    attach_check(result.lazydata, index.lazydata, size, op, -size if allow_negative else 0)
    return result


def attach_check(result: LazyBuffer, index: LazyBuffer, size: int, op: str, low: int) -> None:
    """check_index on LazyBuffers (for Functions that build their one-hot comparisons):
    `index` must be in [low, size)."""
    idx = index.cast(dtypes.int64)
    below = idx.e(BinaryOps.CMPLT, idx.const(low))
    in_range = idx.e(BinaryOps.CMPLT, idx.const(size))
    bad = below.e(BinaryOps.OR, in_range.e(BinaryOps.CMPNE, in_range.const(True)))
    worst = bad.e(TernaryOps.WHERE, idx, idx.const(_NONE_BAD))
    flag = worst.r(ReduceOps.MAX, tuple(range(len(idx.shape)))).base
    flag.index_check = (op, size, low)
    base = result.base
    base.checks = base.checks + (flag,)


def verify(flag: LazyBuffer) -> None:
    """Raise IndexError if a realized flag found an index out of range; the flag is then
    made unrealized again (its graph is still there), so the next read raises again."""
    assert flag.index_check is not None, "verify() takes a flag made by check_index"
    try:
        raise_if_bad(flag.index_check, flag.realized)
    except IndexError:
        flag.realized = None
        raise


def raise_if_bad(index_check: tuple, buffer) -> None:
    """Read one flag's buffer (also what a @jit replay calls after its kernels). A device
    that computes no values (NULL) has no flag to read."""
    if not buffer.runtime.computes:
        return
    value = np.empty(1, dtype=np.int64)
    buffer.copyout(value.view(np.uint8).data)
    worst = int(value[0])
    if worst != _NONE_BAD:
        op, size, low = index_check
        raise IndexError(f"{op}: index {worst} is out of range for a dimension of size "
                         f"{size} (valid indices: {low} to {size - 1})")
