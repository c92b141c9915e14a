"""CPU pass: register tiling and vector lanes.

Which output axes of a reduce to unroll into a tile of accumulators, which axis becomes
vector lanes (an output axis, an axis an input is contiguous along, or the reduce); the
outer loop is codegen/opt/loop_order.py's. Several rows of a reduce at once and lanes
along the reduce are in codegen/opt/reduce_rows.py; elementwise kernels' lanes in
codegen/opt/elementwise.py; the matmul tiles past the budget (D142, D143) in
codegen/opt/wide_tiles.py; what a tile costs (loads per update, registers, the axes
worth unrolling) in codegen/opt/tile_measures.py.
Each pass returns `Opt`s (codegen/kernel.py); the widths come from the `Target` (16
float lanes with AVX-512, 8 with AVX2). docs/decisions.md gives the rules' measurements.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.kernel import Kernel, Opt, OptOps
from codegen.lanes import ROW_VECTORS
from codegen.opt.reduce_rows import divides_integers, dot_products, reduce_lane_width
from codegen.opt.tile_measures import (LONG_FILL, WHOLE, elements_read, fits_registers, full_row,
                                       gathers, loads_per_update, masked_inputs, round_up,
                                       unroll_amount, whole_vectors_elsewhere, worth_unrolling)
from codegen.opt.wide_tiles import panel_tile, three_vector_tile
from codegen.target import Target

_SCALAR_TILE = 16            # most scalar accumulators a tile without vector lanes gets
_WORK_PER_ACC = 4096         # a tile gets at most one accumulator per this many iterations
# vector accumulators any tile may have: an FMA's latency (4 cycles) times the FMAs a cycle
# (2) on AVX-512 and AVX2 cores, so independent chains keep both units busy (D138)
_LATENCY_VECTORS = 8
_ROW_TILE = 4               # rows a padded matmul's tile takes (its other axis: vectors)
_TILE_ROUNDS = 4             # most upcasts in one tile
_POSITIONS = 16              # most output positions a tile with channel lanes unrolls (D125)


def tile_budget(k: Kernel, target: Target) -> int:
    """Most accumulators for this kernel: the target's limit, less for small kernels,
    where a big tile buys little run time and costs lowering and compile time, but never
    fewer than `_LATENCY_VECTORS` vectors: each accumulator is a chain of adds as long as
    the reduce, and fewer chains leave the FMA units waiting on them (D138)."""
    floor = max(_SCALAR_TILE, _LATENCY_VECTORS * target.lanes)
    return min(target.tile, max(floor, prod(k.full_shape) // _WORK_PER_ACC))


def tile(k: Kernel, target: Target) -> list[Opt]:
    """Register tiling: unroll output axes into a tile of accumulators.

    An output axis is worth unrolling when some input of the reduce does not depend on
    it (stride 0: a matmul's A does not depend on the column), so one load feeds many
    accumulators, or when an input walks it with stride 1 and the reduce walks no input
    contiguously, so the unrolled copies form vectors. The first unroll is the axis the
    output is contiguous in, a vector register wide: it becomes vector lanes. Then 4 on
    each other such axis, then 4 more on the vector axis, within the budget. With
    AVX-512, a matmul gets a 4 x 64 tile: 16 vector accumulators, and per step of the
    reduce 4 broadcasts and 4 vector loads feed 16 vector FMAs."""
    if k.reduceop is None or not target.tile:
        return []
    t, opts = _tile(k, target, pad_row=True)
    if t.padded_axis >= 0 and not _row_is_lanes(t):
        # the row was padded for vector lanes no unroll gave it (a 3x3 pool's row of 12 on
        # AVX2): the padding would be computed and stored as outputs, so tile it unpadded
        t, opts = _tile(k, target, pad_row=False)
    if _row_is_lanes(t):
        wide = three_vector_tile(k, target) or panel_tile(k, target)
        if wide is not None:
            return wide
    return opts


def _row_is_lanes(t: Kernel) -> bool:
    """Whether the vector lanes run along the output's row (the only axis the output is
    contiguous along), so a padded row's stores are masked vectors."""
    return bool(t.lanes) and t.strides(t.out_key, len(t.full_shape) - 1) == 1


def _tile(k: Kernel, target: Target, pad_row: bool) -> tuple[Kernel, list[Opt]]:
    """The tile's decisions and a copy of `k` with them applied; `pad_row`: may the
    output's row be padded to whole vectors (D57)."""
    t, opts, split = k.copy(), [], set[int]()
    budget = tile_budget(t, target)
    masked = masked_inputs(t)  # before the pads add masks of their own
    pad = _pad_row(t, budget, target, masked) if pad_row else None
    if pad is not None:
        t.apply(pad)
        opts.append(pad)
    rows = None if masked else _pad_rows(t, budget, target)
    if rows is not None:
        t.apply(rows)
        opts.append(rows)
    for _ in range(_TILE_ROUNDS):
        upcast = _best_upcast(t, budget, split, target)
        if upcast is None:
            break
        opt, t = upcast
        opts.append(opt)
        split.add(opt.axis)
        if len(t.upcasts) == 1:
            lanes = _first_lanes(t, target)
            if lanes is not None:
                t.apply(lanes)
                opts.append(lanes)
            else:
                budget = min(budget, _laneless_budget(t, target))
            positions = _row_of_positions(t, budget, target)
            if positions is not None:
                t.apply(positions)
                opts.append(positions)
            whole = _whole_row(t)
            if whole is not None:
                t.apply(whole)
                opts.append(whole)
    return t, opts


def _row_of_positions(k: Kernel, budget: int, target: Target) -> Opt | None:
    """Once the lanes run across an axis the output is not contiguous along (a conv's
    output channels, D66), the second unroll is the output's row: as many positions as
    divide it, up to _POSITIONS and the registers (a row of 14 whole, 28 as 2 x 14, 8
    whole). Each position is a broadcast, cheap; the lanes' operand (the weight, copied
    channels innermost) streams from L2, its tile's slice of the reduce being larger
    than L1, so what the tile must maximise is the positions sharing each of its vector
    loads: 14 positions x 1 vector ran 3.2 ms (290 GFLOP/s) where D66's 4 x 4 (fewer
    loads per update, 4 positions a weight vector) ran 4.5, at 16x128x14. Where the L1
    holds the lanes' operand over the reduce (a weight gradient's A^T, 96 long), loads
    per update still rank the unrolls (7 of 301 columns ran 115 us against 95, at
    256 x 96 x 301) [D125]."""
    lane_axis = len(k.full_shape) - 1
    if not k.lanes or k.strides(k.out_key, lane_axis) == 1 or \
            k.lanes * prod(k.reduce_shape) * 4 <= target.cached_bytes:
        return None  # (a vector operand the L1 holds: loads per update rank the unrolls)
    room = min(budget // k.lanes, target.tile // target.lanes, _POSITIONS)
    for axis in range(k.n_global):
        if k.strides(k.out_key, axis) != 1 or worth_unrolling(k, axis) is None:
            continue
        amount = max((d for d in range(2, room + 1) if k.full_shape[axis] % d == 0), default=0)
        opt = Opt(OptOps.UPCAST, axis, amount, "channel lanes: positions share each vector load")
        return opt if amount and k.can_apply(opt) else None
    return None


def _laneless_budget(k: Kernel, target: Target) -> int:
    """Accumulators for a tile whose copies take no output lanes: where the reduce will
    take them, each is a vector register, and as many as a tile with output lanes keeps
    leave its loads room (a conv weight gradient: 4 x 4 copies with 8 vector loads each
    step spilled, 2.17 ms, where 4 x 2 ran in 1.39 at 8 x 64 x 16 on AVX2); else scalar
    code, kept few (compile time)."""
    return target.tile // target.lanes if _reduce_takes_lanes(k, target) else _SCALAR_TILE


def _reduce_takes_lanes(k: Kernel, target: Target) -> bool:
    """Whether `reduce_lanes` will give the reduce of this tile (no output lanes) the vector
    lanes: each copy is then a vector accumulator, and each input a vector load per copy
    of the axes it depends on. Before any unroll, as if the copies will share loads (they
    are unrolled for that)."""
    return not k.lanes and reduce_lane_width(k, target, None if k.upcasts else True)[0] > 0


def _pad_row(k: Kernel, budget: int, target: Target, masked: bool) -> Opt | None:
    """Pad the output's contiguous axis to whole vectors when that fills the registers
    better than the widest power of two dividing it: a 28-wide conv row becomes two
    16-lane vectors (the second masked: 28/32 of the lanes busy) instead of seven of 4
    lanes (1/4) [D57]. At most _ROW_VECTORS vectors, within the budget: the row is
    unrolled whole (_whole_row). Only where every input under the reduce is a vector
    load or a broadcast along the row (a gathered operand gains nothing from wider
    lanes), and not where the kernel divides integers (the padded lanes compute on zeros:
    a division by zero is undefined)."""
    wide = target.lanes
    if budget < wide or divides_integers(k):
        return None
    for axis in range(k.n_global):
        size = k.full_shape[axis]
        if not _partial_row(k, axis, wide):
            continue
        exact, padded = unroll_amount(size, wide, budget), round_up(size, wide)
        if padded > ROW_VECTORS * wide:
            return None if masked else _pad_long_row(k, axis, wide)
        if whole_vectors_elsewhere(k, axis, target):
            continue
        if any(k.strides(key, axis) not in (0, 1) for key in k.loads):
            continue
        if padded <= min(ROW_VECTORS * wide, budget) and size * wide > exact * padded:
            opt = Opt(OptOps.PAD_OUT, axis, wide, f"{size} is no multiple of {wide}: pad the row")
            return opt if k.can_apply(opt) else None
    return None


def _partial_row(k: Kernel, axis: int, wide: int) -> bool:
    """Whether `axis` is the output's row, worth unrolling, and no whole number of vectors."""
    size = k.full_shape[axis]
    return k.strides(k.out_key, axis) == 1 and size > wide and size % wide != 0 and \
        worth_unrolling(k, axis) is not None


def _pad_long_row(k: Kernel, axis: int, wide: int) -> Opt | None:
    """Pad an output row longer than _ROW_VECTORS vectors to whole tiles of vectors, walked
    in a loop like any row (a matmul's 300 columns: 320, five tiles of 4 vectors, the last
    vector of the last tile masked), so the tile and the packed panels apply as at 320.
    (Whole vectors no tile of 4 divides are left alone: 784 = 49 vectors padded to 832
    took a 4 x 4 tile over an unpacked B, 0.94 ms against 0.50 for 16 rows x 1 vector.)
    Wider tiles first while 7/8 of the padded row is real (LONG_FILL); a vector at least.
    Only where no input is masked (a conv's window, whose index wraps past the row's end
    in the padding: a loop would gather it lane by lane [D57]), where no other axis has
    whole vectors an input is contiguous along while 4 of this row make the tile's other
    side (a weight gradient's A^T along its rows of 256: lanes there, 0.71 ms, against
    0.78 padded at 256 x 784 x 300; at 3077 columns, no 4 divides them), and where, once
    padded and split into vectors, every input is a vector load or a broadcast along the
    lanes."""
    size = k.full_shape[axis]
    if size % _ROW_TILE == 0 and any(a != axis and k.full_shape[a] % wide == 0 and any(
            k.strides(key, a) == 1 for key in k.loads) for a in range(k.n_global)):
        return None  # an input's whole vectors take the lanes, 4 of this row a tile [D66]
    amount = next((w * wide for w in (4, 2) if size >= LONG_FILL * round_up(size, w * wide)),
                  wide)
    opt = Opt(OptOps.PAD_OUT, axis, amount, f"{size} is no multiple of {amount}: pad to "
              f"{round_up(size, amount)}, a loop over its vectors")
    trial = k.copy()
    if not trial.can_apply(opt):
        return None
    trial.apply(opt)
    split = Opt(OptOps.UPCAST, axis, wide)
    if not trial.can_apply(split):
        return None
    trial.apply(split)
    lane = len(trial.full_shape) - 1
    return opt if all(trial.strides(key, lane) in (0, 1) for key in trial.loads) else None


def _pad_rows(k: Kernel, budget: int, target: Target) -> Opt | None:
    """Pad an output axis that an input ignores (a matmul's rows, which B ignores) to a
    multiple of _ROW_TILE when it is odd (257 rows: 260), so the tile takes _ROW_TILE of
    them, as it does at 256 (an even axis unrolls 2 rows: as few loads per update, and
    no padding: 10 rows as 2 x 5). Only where the budget has room for that many
    vectors, where the output's own row then takes the lanes (the padded rows' stores
    are masked vectors) and no input is masked (the padding's loads read element 0).
    Not where another axis an input ignores takes _ROW_TILE rows unpadded (an unpadded
    conv's batch, beside 9 odd output rows: padding them to 12 ran 1.2-1.7x slower, D87)."""
    if budget < _ROW_TILE * target.lanes or divides_integers(k):
        return None
    rows = [axis for axis in range(k.n_global) if k.strides(k.out_key, axis) != 1 and
            any(k.strides(key, axis) == 0 for key in k.loads) and
            worth_unrolling(k, axis) is not None]
    if any(k.full_shape[axis] % _ROW_TILE == 0 for axis in rows):
        return None
    for axis in rows:
        size = k.full_shape[axis]
        if size <= WHOLE or size % 2 == 0:
            continue
        opt = Opt(OptOps.PAD_OUT, axis, _ROW_TILE, f"{size} rows: pad to a multiple of {_ROW_TILE}")
        return opt if _row_takes_lanes(k, opt, budget, target) else None
    return None


def _row_takes_lanes(k: Kernel, pad: Opt, budget: int, target: Target) -> bool:
    """Whether, once `pad` is applied, the first unroll is the output's row as lanes."""
    if not k.can_apply(pad):
        return False
    t = k.copy()
    t.apply(pad)
    first = _best_upcast(t, budget, set(), target)
    if first is None or t.strides(t.out_key, first[0].axis) != 1:
        return False
    return _first_lanes(first[1], target) is not None


def _whole_row(k: Kernel) -> Opt | None:
    """A padded row's vectors are all unrolled: in each copy the padding's lanes are
    constants, so a load through a window view (whose index wraps past the row's end,
    where the mask is off) is one masked vector load, not a gather [D57]."""
    rest = k.full_shape[k.padded_axis] if k.padded_axis >= 0 and k.lanes else 1
    if rest > ROW_VECTORS:  # a long row (_pad_long_row) is a loop
        return None
    opt = Opt(OptOps.UPCAST, k.padded_axis, rest, "a padded row unrolls whole")
    return opt if rest > 1 and k.can_apply(opt) else None


def _best_upcast(k: Kernel, budget: int, split: set[int],
                 target: Target) -> tuple[Opt, Kernel] | None:
    """The next unroll, and the kernel with it applied. The first is the vector axis: the
    output's full row, else one along which no input gathers (a stride-2 conv's row
    would load each lane alone: its output channels, contiguous in the weight, load
    whole vectors), else the widest. After it, the one that leaves the fewest loads per
    accumulator update [D57], looking one unroll ahead (a conv's row unrolled 7 times
    needs 8 loads for 7 updates, its channels 4 times then its row twice 6 for 8), then
    the most accumulators, preferring an axis not unrolled yet, then the one the
    output is most contiguous in. A tile whose reduce will take the lanes counts loads
    from its first unroll (a weight gradient's 3 taps x 2 channels: 5 loads for 6)."""
    best: tuple[tuple[float, float, bool, bool, int, bool, int], Opt, Kernel] | None = None
    unrolls = _unrolls(k, budget, target)
    vectors = _vector_accumulators(k, unrolls, target)
    for axis, opt, trial in unrolls:
        first = not k.upcasts
        loads = loads_per_update(trial, target) if vectors else 0.0
        ahead = min([loads] + [loads_per_update(then, target)
                               for _, _, then in _unrolls(trial, budget, target)]) \
            if vectors and len(k.upcasts) == (1 if k.lanes else 0) else loads
        rank = (-ahead, -loads, first and full_row(k, axis, target),
                first and not gathers(k, axis), opt.amount, axis not in split,
                -(k.strides(k.out_key, axis) or 0))  # (known: `_unrolls` checked it)
        if best is None or rank > best[0]:
            best = (rank, opt, trial)
    return (best[1], best[2]) if best is not None else None


def _vector_accumulators(k: Kernel, unrolls: list[tuple[int, Opt, Kernel]],
                         target: Target) -> bool:
    """Whether the tile's copies are vector accumulators, whose loads per update rank the
    unrolls: it has output lanes, or the reduce will take the lanes and no first unroll
    would make output lanes (a matmul's columns)."""
    return bool(k.lanes) or _reduce_takes_lanes(k, target) and (
        bool(k.upcasts) or all(_first_lanes(trial, target) is None for _, _, trial in unrolls))


def _unrolls(k: Kernel, budget: int, target: Target) -> list[tuple[int, Opt, Kernel]]:
    """(axis, decision, kernel with it applied) for each unroll worth trying next: an
    output axis worth unrolling, by as much as fits the budget (a register wide for the
    first, if it may be the lanes, else 4; an axis of 3 whole) and, once there are lanes
    (output lanes, or the reduce's to come), the registers."""
    found = []
    if k.upcasts and not k.lanes:  # (also where a lookahead tries a second unroll)
        budget = min(budget, _laneless_budget(k, target))
    for axis in range(k.n_global):
        why = worth_unrolling(k, axis)
        if why is None or k.strides(k.out_key, axis) is None:
            continue
        want = target.lanes if not k.upcasts and _lane_axis(k, axis, target) else 4
        size, room = k.full_shape[axis], budget // prod(k.upcasts)
        # an axis too short to be lanes (3 taps) may still be unrolled whole, as copies
        amount = unroll_amount(size, want, room, _whole_limit(k, axis, want, target)) or \
            (size if size < 4 and size <= room else 0)
        trial = k.tried(opt := Opt(OptOps.UPCAST, axis, amount, why)) if amount else None
        if trial is not None and (not k.lanes or fits_registers(trial, target)):
            found.append((axis, opt, trial))
    return found


def _whole_limit(k: Kernel, axis: int, want: int, target: Target) -> int:
    """How long an axis may be to be unrolled whole. The output row's vectors (the axis
    whose copies are whole vectors of the lanes) only up to `want` where the input they
    load is past the L1 and another axis an input ignores can take 8 rows instead: each
    copy is a vector load of B at every step, and 5-7 of them (a 100-wide matmul's 7
    vectors, as a 2 x 7 tile) stream B from the L2, where 16 rows x 1 vector read it
    from the L1 (D140)."""
    if not (k.lanes and k.strides(k.out_key, axis) == k.lanes):
        return WHOLE
    big = any(k.strides(key, axis) != 0 and 4 * elements_read(k, key) > target.cached_bytes
              for key in k.loads)
    rows = any(a != axis and k.full_shape[a] % (2 * _ROW_TILE) == 0 and
               any(k.strides(key, a) == 0 for key in k.loads) for a in range(k.n_global))
    return want if big and rows else WHOLE


def _lane_axis(k: Kernel, axis: int, target: Target) -> bool:
    """Whether the first unroll of this axis may become vector lanes: the output or an input
    is contiguous along it (a conv's output channels, where its weight has them innermost),
    and it is not better left to dot products (reduce_rows.py's `dot_products`)."""
    return (k.strides(k.out_key, axis) == 1 or any(k.strides(key, axis) == 1 for key in k.loads)) \
        and not (gathers(k, axis) and dot_products(k, target))


def _first_lanes(k: Kernel, target: Target) -> Opt | None:
    """The first unroll (now the last axis) becomes vector lanes when memory is
    contiguous along it for the output or an input."""
    axis = len(k.full_shape) - 1
    walks = [k.strides(key, axis) for key in k.loads]
    if k.upcasts[0] >= 4 and (k.strides(k.out_key, axis) == 1 or 1 in walks) and \
            not (gathers(k, axis) and dot_products(k, target)):
        return Opt(OptOps.LANES, axis, k.upcasts[0], "memory is contiguous along the unroll")
    return None
