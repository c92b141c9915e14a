"""CPU pass for elementwise kernels: explicit vector lanes where LLVM's loop vectoriser
gives up (a load whose index is not affine along the innermost axis, or is masked along
it). Reduces are tiled in codegen/opt/tiling.py.
"""
from __future__ import annotations

from codegen.kernel import Kernel, Opt, OptOps
from codegen.ops import BufferOps, LazyOp, UnaryOps
from codegen.target import Target


def gather_lanes(k: Kernel, target: Target) -> list[Opt]:
    """An elementwise kernel is left to LLVM's loop vectoriser, unless a load's index is
    not affine along the innermost axis (an upsampled gradient reads x // 2) or a
    contiguous load is masked along it (a padded copy): the vectoriser gives up there,
    so that axis becomes explicit vector lanes. Such a load reads the span its lanes
    touch once and shuffles, or is one masked vector load (codegen/linearizer.py). So
    does a kernel with sin or cos (`_BRANCHING`), its row padded to whole vectors where
    it has none (the last one's store masked)."""
    if k.reduceop is not None or not target.tile or not k.full_shape or k.upcasts:
        return []
    axis = len(k.full_shape) - 1
    if k.strides(k.out_key, axis) != 1:
        return []
    size, wide = k.full_shape[axis], target.lanes
    why = _why_lanes(k, axis)
    if why is None:
        return []
    pad = _pad_odd_row(axis, size, wide) if why == _BRANCH else []
    size += -size % wide if pad else 0
    lanes = next((d for d in (wide, wide // 2) if d and size % d == 0),
                 size if wide // 2 < size <= wide else 0)
    opts = [*pad, Opt(OptOps.UPCAST, axis, lanes, why),
            Opt(OptOps.LANES, axis + 1, lanes, "explicit lanes for that load")]
    return opts if lanes and k.tried(*opts) is not None else []


_BRANCH = "sin / cos branch to libm for large inputs: LLVM's vectoriser gives up"


def _why_lanes(k: Kernel, axis: int) -> str | None:
    """Why the kernel needs explicit lanes along `axis`, if it does."""
    if any(_needs_lanes(k, key, axis) for key in k.mem):
        return "a load LLVM's vectoriser gives up on"
    return _BRANCH if any(n.op in _BRANCHING for n in k.ast.walk()) else None


def _pad_odd_row(axis: int, size: int, wide: int) -> list[Opt]:
    """A row longer than a vector that half vectors do not divide is padded to whole
    vectors, the last one's store masked."""
    if not wide or size <= wide or size % (wide // 2) == 0:
        return []
    return [Opt(OptOps.PAD_OUT, axis, wide, f"{size} is no multiple of {wide}")]


# ops whose float32 code (codegen/renderer/llvm_math.py) holds a branch, around the rare
# lanes that need libm: the loop vectoriser does not vectorise a loop with a call under a
# branch, so their kernels take explicit lanes, whose code branches once a vector [D139]
_BRANCHING = {UnaryOps.SIN, UnaryOps.COS}


def _needs_lanes(k: Kernel, key: int, axis: int) -> bool:
    stride = k.strides(key, axis)
    tangled = stride is None and len(k.sts[key].views) > 1
    masked = stride == 1 and k.strides(key, axis, ignore_valid=False) is None
    return tangled or masked


def transpose_lanes(k: Kernel, target: Target) -> list[Opt]:
    """An elementwise kernel whose output is contiguous along its innermost axis A and
    that reads an input contiguous along another axis B and strided along A (a
    transposing copy: a matmul operand packed into panels, x.T.contiguous()): A becomes
    vector lanes and B as many copies, and the emitter reads that input as one vector per
    lane along B and transposes the block in registers (codegen/emit.py `_transposed`),
    where LLVM gathered it element by element (784 x 256: 102 -> 19 us, D95)."""
    if k.reduceop is not None or not target.tile or k.upcasts or len(k.full_shape) < 2:
        return []
    a, lanes = len(k.full_shape) - 1, target.lanes
    if lanes < 2 or k.full_shape[a] % lanes or k.strides(k.out_key, a) != 1:
        return []
    found = [_contiguous_axis(k, key, a, lanes) for key in k.mem]
    b = next((axis for axis in found if axis is not None), None)
    if b is None:
        return []
    opts = [Opt(OptOps.UPCAST, a, lanes, "the output's contiguous axis: vector lanes"),
            Opt(OptOps.UPCAST, b, lanes, "an input contiguous here: a block transposed"),
            Opt(OptOps.LANES, a + 1, lanes, "the lanes of the transposed block")]
    return opts if k.tried(*opts) is not None else []


def _contiguous_axis(k: Kernel, key: int, a: int, lanes: int) -> int | None:
    """The axis before `a` along which leaf `key`, strided along `a`, is contiguous and
    unmasked, and that whole blocks of `lanes` divide (None: none, or not strided)."""
    if k.strides(key, a) in (0, 1, None):
        return None
    return next((i for i in range(a) if k.full_shape[i] % lanes == 0 and
                 k.strides(key, i, ignore_valid=False) == 1), None)


_LINE = 64  # bytes of a cache line


def block_runs(k: Kernel, target: Target) -> list[Opt]:
    """An elementwise kernel whose innermost loop reads a run of an input shorter than a
    cache line, whose next loop out jumps a line or more, and whose run an outer loop
    continues (a copy into panels of 8 rows, pack.py: P[i // 8, r, i % 8] from a buffer
    contiguous along i): each line is half read, and the rest waits until the outer loop
    comes back, after the jumping loop has walked every line of a column (4 KB apart in
    attention's backward at 1024 keys, where they fight for a few cache sets and come back
    from L3 or memory). The jumping loop is cut into blocks of 8 (unrolled) and its blocks
    put outermost, so the outer loop comes back to the same 8 lines while they are in L1
    [D166]."""
    if k.reduceop is not None or not target.tile or k.upcasts or len(k.full_shape) < 3:
        return []
    y, run = len(k.full_shape) - 2, k.full_shape[-1]
    block = next((b for b in (8, 4) if k.full_shape[y] % b == 0 and k.full_shape[y] > b), 0)
    jump = max([_jump(k, load, y, run) for load in k.ast.walk() if load.op is BufferOps.LOAD],
               default=0)
    if not block or not jump or k.strides(k.out_key, y + 1) != 1 or \
            k.strides(k.out_key, y) != run:
        return []
    opts = [Opt(OptOps.UPCAST, y, block, f"runs of {run} elements, lines {jump} bytes apart: "
                "blocks of lines"),
            Opt(OptOps.OUTER, y, why="the blocks outermost: an outer loop reads the rest of "
                "their lines while they are in cache")]
    return opts if k.tried(*opts) is not None else []


def _jump(k: Kernel, load: LazyOp, y: int, run: int) -> int:
    """Bytes between the lines axis `y` of the kernel steps `load` by, where `load` reads
    runs of `run` elements shorter than a line, `y` jumps a line or more and an outer axis
    continues the run; else 0."""
    key, size = id(load), load.arg.dtype.itemsize
    jump = k.strides(key, y)
    if k.strides(key, len(k.full_shape) - 1) != 1 or run * size >= _LINE or jump is None or \
            jump * size < _LINE:
        return 0
    return jump * size if any(k.strides(key, x) == run for x in range(y)) else 0
