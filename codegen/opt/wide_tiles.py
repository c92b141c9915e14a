"""CPU pass helpers: matmul tiles past the tile budget, each for the registers it was
measured on (codegen/opt/tiling.py's `tile` tries them once its own tile has lanes on the
output row). AVX-512's 8 rows x 3 vectors for a long row over a B streamed from the L2
(D142), AVX2's 3 rows x 4 vectors for a row of whole B panels (D143).
"""
from __future__ import annotations
from typing import Callable

from codegen.kernel import Kernel, Opt, OptOps, leaves
from codegen.lanes import ROW_VECTORS
from codegen.ops import BufferOps
from codegen.opt.reduce_rows import divides_integers
from codegen.opt.tile_measures import LONG_FILL, elements_read, masked_inputs, round_up, worth_unrolling
from codegen.target import Target

_WIDE_VECTORS, _WIDE_ROWS = 3, 8  # a long row's tile over a B streamed from the L2 (D142)
_PANEL_ROWS = 3  # rows of a tile a B panel wide, with 16 vector registers (D143)


def three_vector_tile(k: Kernel, target: Target) -> list[Opt] | None:
    """A long output row that no tile of 4 vectors divides (300, 500, 784, 1000 columns),
    over a B read in place that streams from the L2 (past the L1, within half the L2),
    gets 8 rows x 3 vectors, the row padded to a multiple of 3 vectors: 24 accumulators,
    11 loads for 24 updates and 3 lines of B a step. The budget's 16 give 16 rows x 1
    vector (17 loads for 16: the load ports bind) or, padded to 4 vectors, 4 rows x 4 (4
    lines of B a step for 16 updates, and B streamed again for every 4 rows: the L2
    binds). Where 32 vector registers hold it (AVX-512) and every input is 4 bytes wide
    (a float64 vector takes two), the row is lanes anyway, 7/8 of the padded row is real,
    and 7/8 of the rows axis (B ignores it) padded to a multiple of 8 (300 -> 304) [D142]."""
    row = _long_streamed_row(k, target) if _room_for_three_vectors(k, target) else None
    if row is None:
        return None
    streamed = [key for key in k.loads if k.strides(key, row) == 1]
    across = next((a for a in range(k.n_global) if a != row and
                   k.full_shape[a] >= LONG_FILL * round_up(k.full_shape[a], _WIDE_ROWS)
                   and all(k.strides(key, a) == 0 for key in streamed) and
                   worth_unrolling(k, a) is not None), None)
    if across is None:
        return None
    rows = k.full_shape[across]
    pad_rows = [] if rows % _WIDE_ROWS == 0 else [lambda t: Opt(
        OptOps.PAD_OUT, across, _WIDE_ROWS, f"{rows} rows: pad to {round_up(rows, _WIDE_ROWS)}")]
    return _in_turn(k, pad_rows + [
        lambda t: Opt(OptOps.PAD_OUT, row, _WIDE_VECTORS * target.lanes,
                      f"{k.full_shape[row]} columns: pad to tiles of {_WIDE_VECTORS} vectors"),
        lambda t: Opt(OptOps.UPCAST, row, target.lanes, "the row's vectors"),
        lambda t: Opt(OptOps.LANES, len(t.full_shape) - 1, target.lanes,
                      "memory is contiguous along the row"),
        lambda t: Opt(OptOps.UPCAST, row, _WIDE_VECTORS, f"{_WIDE_VECTORS} vectors of the row"),
        lambda t: Opt(OptOps.UPCAST, across, _WIDE_ROWS,
                      f"{_WIDE_ROWS} rows: each load of B feeds {_WIDE_ROWS} accumulators")])


def _room_for_three_vectors(k: Kernel, target: Target) -> bool:
    """32 vector registers, 4-byte inputs, no masked input, no integer division (D142)."""
    return target.vector_registers >= 32 and _plain_words(k)


def _plain_words(k: Kernel) -> bool:
    """4-byte inputs (a vector a register), none masked, no integer division."""
    return not masked_inputs(k) and not divides_integers(k) and \
        all(n.arg.dtype.itemsize == 4 for n in leaves(k.ast) if n.op is BufferOps.LOAD)


def panel_tile(k: Kernel, target: Target) -> list[Opt] | None:
    """With 16 vector registers of 8 lanes (AVX2), an output row that is whole B panels
    (4 vectors, `Target.pack`; or B read in place along it), over a B past the L1, and
    rows (an axis B ignores) that 3 divides get 3 rows x 4 vectors: 12 accumulators, each
    of B's 4 vectors a step feeding 3 of them, 3 broadcasts of A. The budget's 8 (4 rows
    x 2 vectors) walk half a panel a step and leave the FMAs' 4-cycle latency x 2 units
    no slack: one thread on Zen 3, 384 x 256 x 512 1.4x faster, 768 rows 1.1-1.2x. Rows
    padded to a multiple of 3 measured from 1.2x faster to 1.14x slower (1024 x 128 x
    256), so they keep the budget's tile [D143]."""
    row = _panel_row(k, target)
    if row is None:
        return None
    streamed = [key for key in k.loads if k.strides(key, row) != 0]
    across = next((a for a in range(k.n_global) if a != row and
                   k.full_shape[a] % _PANEL_ROWS == 0 and
                   all(k.strides(key, a) == 0 for key in streamed) and
                   worth_unrolling(k, a) is not None), None)
    if across is None:
        return None
    opts = _in_turn(k, [
        lambda t: Opt(OptOps.UPCAST, row, target.lanes, "the row's vectors"),
        lambda t: Opt(OptOps.LANES, len(t.full_shape) - 1, target.lanes,
                      "memory is contiguous along the row"),
        # the rows before the vectors: the unrolled body then walks B's vectors in turn,
        # each feeding 3 accumulators (12 + 3 broadcasts + 1 vector of B: the 16 registers);
        # the other order holds B's 4 vectors for every row and spills (2-3x slower)
        lambda t: Opt(OptOps.UPCAST, across, _PANEL_ROWS,
                      f"{_PANEL_ROWS} rows: each vector of B feeds {_PANEL_ROWS} accumulators"),
        lambda t: Opt(OptOps.UPCAST, row, ROW_VECTORS, f"{ROW_VECTORS} vectors: a B panel")])
    return opts if opts is not None and _reads_whole_panels(k, opts, streamed, target) else None


def _panel_row(k: Kernel, target: Target) -> int | None:
    """The output's row (D143), if the target has 16 registers of 8 lanes, the row is a
    multiple of 4 vectors, the inputs are plain words and those walking it are past the
    L1."""
    row = next((a for a in range(k.n_global) if k.strides(k.out_key, a) == 1), None)
    if row is None or target.vector_registers >= 32 or target.lanes != 8 or \
            k.full_shape[row] % (ROW_VECTORS * target.lanes) or not _plain_words(k):
        return None
    streamed = [key for key in k.loads if k.strides(key, row) != 0]
    past_l1 = all(4 * elements_read(k, key) > target.cached_bytes for key in streamed)
    return row if streamed and past_l1 else None


def _reads_whole_panels(k: Kernel, opts: list[Opt], streamed: list[int], target: Target) -> bool:
    """Whether, with `opts` applied, each streamed input reads the tile's 4 vectors as one
    contiguous run: its lanes at stride 1, its vectors at stride `lanes`, its rows at 0 (a
    panel of B, or B in place; not a gather). The tile's three upcasts are the last axes."""
    t = k.copy()
    for opt in opts:
        t.apply(opt)
    n = len(t.full_shape)
    return all(t.strides(key, n - 1) == 1 and
               sorted([t.strides(key, n - 3) or 0, t.strides(key, n - 2) or 0]) == [0, target.lanes]
               for key in streamed)


def _long_streamed_row(k: Kernel, target: Target) -> int | None:
    """The output's row (D142), if it is past 4 vectors, no multiple of 4 vectors, 7/8
    real once padded to 3, every input a vector load or a broadcast along it, and the
    inputs walking it past the L1 and within half the L2."""
    row = next((a for a in range(k.n_global) if k.strides(k.out_key, a) == 1), None)
    if row is None:
        return None
    size, four = k.full_shape[row], ROW_VECTORS * target.lanes
    if size <= four or size % four == 0 or \
            size < LONG_FILL * round_up(size, _WIDE_VECTORS * target.lanes) or \
            any(k.strides(key, row) not in (0, 1) for key in k.loads):
        return None
    streamed = [4 * elements_read(k, key) for key in k.loads if k.strides(key, row) == 1]
    fits = all(target.cached_bytes < nbytes <= target.l2_bytes // 2 for nbytes in streamed)
    return row if streamed and fits else None


def _in_turn(k: Kernel, steps: list[Callable[[Kernel], Opt]]) -> list[Opt] | None:
    """The decisions each step makes from the kernel as the steps before left it, or None
    where one does not apply."""
    t, opts = k.copy(), []
    for step in steps:
        opt = step(t)
        if not t.can_apply(opt):
            return None
        t.apply(opt)
        opts.append(opt)
    return opts
