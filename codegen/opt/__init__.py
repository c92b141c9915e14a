"""Optimisation passes over a `Kernel` (codegen/kernel.py).

A pass looks at a kernel and a `Target` and returns a list of decisions (`Opt`s); it
changes nothing. `optimize` runs the passes in order and applies each pass's decisions
with `apply_opts` before the next pass looks, so every change a kernel goes through is a
value in `Kernel.applied`: DEBUG=3 prints them, DEBUG_DIR writes them, and NOOPT=1
applies none.

The passes, in order:
  simplify      drop size-1 axes, merge neighbouring axes walked contiguously (all targets)
  tile          unroll output axes of a reduce into a register tile, vector lanes (CPU)
  stream_rows   several rows of a long streaming reduce at once (CPU)
  reduce_lanes  vector lanes across the reduce (padded to whole vectors where the width is
                odd), for a tile without output lanes (CPU)
  order_loops   the outer loop re-reads the fewest bytes (CPU)
  interleave_pieces  a join's pieces side by side in one iteration, sharing their work (CPU)
  gather_lanes  explicit lanes for elementwise kernels LLVM cannot vectorise (CPU)
  transpose_lanes  a block of a transposed input read as vectors and transposed in
                registers (CPU)
  block_runs    a copy of runs shorter than a cache line from lines far apart walks
                them in blocks, so the rest of each line is read while it is in cache (CPU)
  item_tile     a register tile of accumulators per work-item (a CPU through work-items)
  gpu_layout    work-group sizes, or one work-group per output of a long reduce (GPU)
A row kernel (D55) gets simplify, row_kernel_rows (several rows at once where it computes
exp or log) and reduce_lanes only on a CPU; on a GPU, gpu_layout gives each row a
work-group (D94).
"""
from __future__ import annotations
from typing import Callable

from codegen.helpers import getenv, settings_memo
from codegen.kernel import Kernel, Opt
from codegen.opt.elementwise import block_runs, gather_lanes, transpose_lanes
from codegen.opt.gpu import gpu_layout, item_tile
from codegen.opt.simplify import simplify
from codegen.opt.reduce_rows import reduce_lanes, row_kernel_rows, stream_rows
from codegen.opt.loop_order import order_loops
from codegen.opt.pieces import interleave_pieces
from codegen.opt.tiling import tile
from codegen.target import Target

Pass = Callable[[Kernel, Target], list[Opt]]
PASSES: list[Pass] = [simplify, tile, stream_rows, reduce_lanes, order_loops,
                      interleave_pieces, gather_lanes,
                      transpose_lanes, block_runs, item_tile, gpu_layout]
# a row kernel (codegen/rows.py): its reduce and store loops share the lanes across the row
ROW_PASSES: list[Pass] = [simplify, row_kernel_rows, reduce_lanes, gpu_layout]


def apply_opts(k: Kernel, opts: list[Opt]) -> Kernel:
    """Apply decisions in order (OptError if one does not apply)."""
    for opt in opts:
        k.apply(opt)
    return k


@settings_memo
def opt_settings() -> str:
    """The settings that change what `optimize` decides, for the program caches' keys (a
    program tuned by the passes must not be reused with NOOPT=1)."""
    return f"NOOPT={getenv('NOOPT', 0)}"


def optimize(k: Kernel, target: Target) -> Kernel:
    """Run every pass, applying its decisions; with NOOPT=1, none."""
    if getenv("NOOPT", 0):
        return k
    for run in ROW_PASSES if k.rows else PASSES:
        apply_opts(k, run(k, target))
    return k
