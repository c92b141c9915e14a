"""CPU passes for reduces walked along rows: several rows at once (a streaming reduce, a
row kernel's exp), and vector lanes along the reduce axis (whole, padded, or several
vectors per step), for tiles whose outputs form no vectors. Split from tiling.py, which
tiles the outputs; docs/decisions.md (D54, D55, D57, D60, D65) gives the measurements.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.kernel import Kernel, Opt, OptOps, leaves
from codegen.ops import TRANSCENDENTAL, BinaryOps, BufferOps
from codegen.target import Target

_STREAM_MIN = 256            # reduces this long stream several rows at a time
_PAD_VECTORS = 4             # a reduce this many vectors long pads its last one (D54)
_ROW_CHAINS = ((64, 4), (32, 2))  # a row walked alone, this many vectors long: accumulators
_COSTLY_PAD = 5              # rows with exp or log this wide pad to whole vectors at any width
_HALF_LANES = 8              # half a vector narrower than this pads instead, where loads are shared

# the shortest reduce read as dot products (`dot_products`): on AVX2, batched
# q @ k^T of 4x4x128 with 32-long rows took 0.32 ms as dot products and 0.24 with lanes
# gathered across k's rows, 64-long rows the same either way, Linear's 100 to 784 long
# ones are faster (32 x 300 x 300: 0.072 ms, against 0.096 for packed panels plus 0.07
# for the pack)
DOT_REDUCE = 96


def divides_integers(k: Kernel) -> bool:
    """Whether the kernel divides integers: padded lanes compute on zeros, and an integer
    division by zero is undefined (x86 traps; LLVM may assume it never happens)."""
    return any(n.op in (BinaryOps.IDIV, BinaryOps.MOD) for n in k.ast.walk())


def stream_rows(k: Kernel, target: Target) -> list[Opt]:
    """A long contiguous reduce with no reuse (a row sum) streams its input once; doing
    several rows at once keeps more memory requests in flight per core and gives the
    reduce independent accumulators. The rows become a tile, so the reduce takes vector
    lanes (reduce_lanes, padded where the width is odd). On the 2-core machine a 4096 x
    4096 row sum went from 3.2 to 3.0 ms (8 rows); the rows are taken from the innermost
    output axis that 8 (else 4, 2) divides: a split reduce's chunks (64 x 29) from the 64."""
    if k.reduceop is None or not target.tile or k.upcasts or prod(k.reduce_shape) < _STREAM_MIN:
        return []
    return _rows_at_once(k, target, "a long streaming reduce: rows at once")


def row_kernel_rows(k: Kernel, target: Target) -> list[Opt]:
    """A row kernel (D55) takes several rows at once, whatever their width, where its
    loops compute a transcendental op (softmax's exp) and the target's registers hold
    them: the rows' independent work hides its latency (AVX-512: 2048 x 128 softmax 0.14
    -> 0.11 ms, 4096 x 1000 1.43 -> 1.20 ms, interleaved, best of 30). Each row keeps an
    accumulator and its row value (the max) in registers beside the op's ~16 constants
    and temporaries, so AVX2's 16 registers hold one row: eight spilled, and one row at a
    time is faster there (4096 x 1000 softmax 2.4-2.9 -> 1.9-2.0 ms, 64 x 1000 51-64 ->
    41 us). A short row (up to _SHORT_ROW vectors) takes four rows even where they spill:
    its fixed costs (the reduces' horizontal steps, the masked last vector, the loops'
    set-up) outweigh the spills (AVX2, 512 rows, each way compiled in one process, best
    of 30 alternating: log_softmax x 17 32.2 -> 27.0 us, x 100 77.6 -> 68.8, x 128 93.5 ->
    89.2; softmax x 64 43.3 -> 39.0; from 300 wide one row was faster: x 300 softmax 144
    -> 170). Where the kernel has work for every thread (`_SPLIT_ELEMENTS`), each thread
    keeps rows of its own (8 x 50257 takes 4 at once, 2 x 50257 one). Plain sums
    (layernorm) take `_PLAIN_ROWS` rows (`plain_rows`). Where the
    input and output exceed half the shared cache (`Target.l3_bytes`), the rows come from
    memory and a short row is walked alone, as in `plain_rows` (D85: AVX-512, one thread,
    softmax 8192 x 512 1.54x, 16384 x 256 1.59x, log_softmax 4096 x 1000 1.31x)."""
    if not k.rows or not target.tile or k.upcasts:
        return []
    if not any(n.op in TRANSCENDENTAL for n in k.ast.walk()):
        return plain_rows(k, target)
    if target.l3_bytes and _short_rows_from_memory(k, target.l3_bytes // 4):
        return []  # input and output over half the shared cache: one row at a time (D85)
    fit = (target.vector_registers - _TRANSCENDENTAL_REGISTERS) // 2
    width = k.full_shape[k.n_global + k.n_reduce - 1]
    if fit < 4 and width <= _SHORT_ROW * target.lanes:
        fit = 4
    rows = prod(k.full_shape[:k.n_global])
    if rows * width >= _SPLIT_ELEMENTS:  # work for every thread: each keeps rows of its own
        fit = min(fit, rows // max(1, target.threads))
    return _rows_at_once(k, target, "a row kernel's exp or log: rows at once", fit)


def plain_rows(k: Kernel, target: Target) -> list[Opt]:
    """A row kernel of plain sums (layernorm: a mean, a variance reading it, then the
    store) takes four rows at once (else two) where the rows left still give every thread
    some, and the rows are in the cache or long. One row at a time, each pass is a chain
    of adds that wait on each other, and the passes wait on each other (the variance on
    the mean, the store on both), so a row is latency-bound while its data sits in the
    cache; four rows give four independent chains at every step (D83; AVX2,
    tools/kernel_ab.py, best of 7 rounds alternating, three runs: 64 x 1000 1.04-1.23x,
    512 x 128 1.67-2.10x, 256 x 3000 1.04-1.10x, 4096 x 1000 1.21-1.27x, 64 x 4096 1.14x,
    128 x 50257 1.30x, 1024 x 768 0.93-1.05x; eight rows: 64 x 4096 0.30x).

    Where the input comes from memory (more than `_RESIDENT_L2` L2 caches of it for each
    thread) the row is bandwidth-bound instead, and four short rows read as four
    interleaved streams ran at half the speed of one row after another on AVX-512 (D85:
    4096 x 1000 0.60x, 8192 x 512 0.39-0.44x, 16384 x 256 0.38-0.41x, 10922 x 768 0.52x);
    rows of `_LONG_ROW` bytes or more still gained (2048 x 3000 1.17x, 2048 x 2000 1.07x),
    so they keep the rule."""
    if _short_rows_from_memory(k, _RESIDENT_L2 * target.l2_bytes * target.threads):
        return []
    rows = prod(k.full_shape[:k.n_global])
    fit = next((n for n in (_PLAIN_ROWS, 2) if rows // n >= max(2, target.threads)), 0)
    return _rows_at_once(k, target, "a row kernel's chains of adds: rows at once", fit)


def _short_rows_from_memory(k: Kernel, resident: int) -> bool:
    """Whether a row kernel's input (its rows of its widest input dtype) is over
    `resident` bytes, so it streams from memory, and its rows are under `_LONG_ROW`
    bytes: short rows taken several at once are short interleaved streams there (D85)."""
    itemsize = max((int(n.arg.dtype.itemsize) for n in leaves(k.ast)
                    if n.op is BufferOps.LOAD), default=4)
    row_bytes = k.full_shape[k.n_global + k.n_reduce - 1] * itemsize
    return prod(k.full_shape[:k.n_global]) * row_bytes > resident and row_bytes < _LONG_ROW


_PLAIN_ROWS = 4  # rows a row kernel of plain sums takes at once (plain_rows)
# (plain_rows, D85) an input over this many L2 caches a thread streams from memory:
# AVX-512, 1 MB L2s, one thread: one row at a time was as fast at 4 MB (1024 x 1000
# 1.08x, 4096 x 256 0.76-0.9x) and up to 2x as fast from 8 MB (8192 x 256 1.28x, 8192 x
# 1000 1.79x)
_RESIDENT_L2 = 2
_LONG_ROW = 8000  # bytes: a row this long streams well four at a time (2000 float32)
_TRANSCENDENTAL_REGISTERS = 16  # an exp's constants and temporaries, about (llvm_math.py)
_SHORT_ROW = 16  # vectors: a row kernel's row this short takes rows at once in any registers
# (row_kernel_rows) a row kernel of exps over this many elements leaves every thread rows
# of its own: 8 rows of 50257 taken at once were one piece of work, on one thread
# (log_softmax 8 x 50257 0.77x torch's time on the 2-core machine)
_SPLIT_ELEMENTS = 1 << 15


def _rows_at_once(k: Kernel, target: Target, why: str, fit: int = 8) -> list[Opt]:
    """Upcast the innermost output axis that 8 (else 4, 2; none over `fit`) divides, for
    a reduce whose input is contiguous along it and that takes vector lanes."""
    if fit < 2:
        return []
    inner = k.n_global + k.n_reduce - 1
    if not k.n_global or not k.n_reduce or not _reduce_lane_width(
            k.full_shape[inner], target, may_pad=not divides_integers(k), costly=_costly_row(k))[0]:
        return []
    if not any(k.strides(key, inner) == 1 for key in k.loads):
        return []
    for rows in [r for r in (8, 4, 2) if r <= fit]:
        for axis in reversed(range(k.n_global)):
            opt = Opt(OptOps.UPCAST, axis, rows, why)
            if k.full_shape[axis] % rows == 0 and k.can_apply(opt):
                return [opt]
    return []


def dot_products(k: Kernel, target: Target) -> bool:
    """Whether every input the reduce walks is contiguous along its innermost axis, which
    is at least DOT_REDUCE long (x @ W.T, Linear's forward without a packed W): the tile
    then leaves the lanes to the reduce (reduce_lanes), a vector of partial sums per
    output, rather than taking lanes across outputs that would gather one element at a
    time from an input strided along them."""
    axis = k.n_global + k.n_reduce - 1
    walked = [key for key in k.loads if k.strides(key, axis) != 0]
    return k.full_shape[axis] >= DOT_REDUCE and bool(walked) and \
        all(k.strides(key, axis) == 1 for key in walked) and \
        reduce_lane_width(k, target, True)[0] > 0


def reduce_lanes(k: Kernel, target: Target) -> list[Opt]:
    """Vector lanes along the innermost reduce axis, for a tile whose output rows form
    no vectors (a conv weight gradient: its output is a 5 x 5 window of taps; a row sum)
    while an input walks the reduce contiguously. Each accumulator becomes a vector of
    partial reductions, summed across its lanes once, after the reduce loops. A full
    vector wide where the axis divides; else, from 4 vectors long, padded to whole
    vectors (the last step is masked, after the loop); else half a vector. A row kernel
    (D55) takes them with no tile: its reduce and store loops walk the row in vectors."""
    if k.reduceop is None or not target.tile or not (k.upcasts or k.rows) or k.lanes:
        return []
    axis = k.n_global + k.n_reduce - 1
    size = k.full_shape[axis]
    lanes, pad = _row_chains(k, target, size, reduce_lane_width(k, target))
    why = f"{size} is no multiple of {lanes}: pad the last vector"
    opts = [Opt(OptOps.PAD, axis, lanes, why)] if pad else []
    opts.append(Opt(OptOps.REDUCE_LANES, axis, lanes, "an input is contiguous along the reduce"))
    t = k.copy()
    for opt in opts:
        if not lanes or not t.can_apply(opt):
            return []
        t.apply(opt)
    return opts


def reduce_lane_width(k: Kernel, target: Target, reuse: bool | None = None) -> tuple[int, bool]:
    """(lanes, whether to pad) the innermost reduce axis of `k` takes as vector lanes
    ((0, False): none, no input is contiguous along it or it is too short); `reuse`:
    whether the tile's copies share loads (None: as `k`'s do). The tile asks too: where
    the reduce takes the lanes, each of its accumulators is a vector."""
    axis = k.n_global + k.n_reduce - 1
    if not k.n_reduce or not any(k.strides(key, axis) == 1 for key in k.loads):
        return 0, False
    return _reduce_lane_width(k.full_shape[axis], target,
                              _shares_loads(k) if reuse is None else reuse,
                              not divides_integers(k), _costly_row(k))


def _row_chains(k: Kernel, target: Target, size: int, chosen: tuple[int, bool]) -> tuple[int, bool]:
    """(lanes, pad): `chosen`, or for a row kernel that walks one row at a time in whole
    vectors and may pad (layernorm), 2 or 4 vectors per step from 32 or 64 vectors on:
    each reduce keeps that many accumulators (LLVM splits the wide vector into registers)
    whose adds do not wait on each other: 64 rows x 1023 17.2 -> 14.7 us; under 32 vectors
    the padded last step costs more (x 100: 25 -> 27 us) [D60]."""
    lanes = chosen[0]
    if not k.rows or k.upcasts or lanes != target.lanes or divides_integers(k):
        return chosen
    lanes *= next((n for least, n in _ROW_CHAINS if size >= least * lanes), 1)
    return lanes, size % lanes != 0


def _costly_row(k: Kernel) -> bool:
    """A row kernel (D55) that computes a transcendental op (softmax's exp) per element."""
    return bool(k.rows) and any(n.op in TRANSCENDENTAL for n in k.ast.walk())


def _reduce_lane_width(size: int, target: Target, reuse: bool = False,
                       may_pad: bool = True, costly: bool = False) -> tuple[int, bool]:
    """(lanes, whether to pad) for a reduce axis of `size`; (0, False): no lanes. A tile
    whose copies share loads (reuse: compute, not memory, bounds it) and that neither a
    vector nor half a vector divides pads where 3/4 of the padded lanes are busy: a conv
    weight gradient's 14- or 28-wide rows take 16 lanes, 14/16 or 28/32 busy, instead
    of scalar code; a 3-tap reduce stays scalar, and a 17-long one (17/32: measured
    slower) [D57] (where half a vector of at least _HALF_LANES divides, it stays: LeNet's
    24-wide rows were slower padded to 32 on AVX-512; AVX2's 4-lane half pads); a
    streaming reduce pads only from _PAD_VECTORS vectors (D54), but a row kernel that
    computes exp or log per element (`costly`) from _COSTLY_PAD wide, to half a vector
    or a whole one: a vector exp costs about one scalar exp (softmax 4096 x 33: 197 ->
    97 us; 4096 x 4: LLVM's own loop, 13 us, against 49 padded). Never where the kernel
    divides integers (`may_pad`: the padding computes on zeros)."""
    wide = target.lanes
    exact = next((d for d in (wide, wide // 2) if d and size % d == 0), 0)
    if not may_pad or not wide or size % wide == 0:
        return exact, False
    # (AVX2's half is 4 lanes, half its multiply-add width: a 16 x 64 x 28 conv's weight
    # gradient, 28 wide, took 26.0 ms on 4 lanes, 14.8 padded to 8 [D57 addendum])
    if reuse and exact < _HALF_LANES and 4 * size >= 3 * (size + -size % wide):  # 3/4 busy
        return wide, True
    if costly and not exact and size >= _COSTLY_PAD:  # an exp per lane, not per element
        return (wide // 2 if 2 * size <= wide else wide), True
    if size >= _PAD_VECTORS * wide:
        return wide, True
    return exact, False


def _shares_loads(k: Kernel) -> bool:
    """Whether some input is read once for several copies of the tile (it ignores an
    unrolled axis)."""
    first = len(k.full_shape) - len(k.upcasts)
    return any(k.strides(key, axis) == 0 for key in k.loads
               for axis in range(first, len(k.full_shape)))
