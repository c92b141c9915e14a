"""CPU register tiling for the linearizer: which output axes to unroll into a tile of
accumulators, which axis becomes vector lanes (an output axis, or the reduce), the
order of the remaining loops, and how a load's index spreads across the lanes.

A mixin of Linearizer: it works on the linearizer's ShapeTrackers (`sts`), its shapes
and its `upcasts` / `lanes`, before and while code is emitted. docs/design.md explains
the rules and the measurements behind them.
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.ops import BinaryOps
from codegen.shape.symbolic import Node, NumNode, SumNode, sum_nodes
from codegen.uops import UOp

_MIN_OUTER = 8               # iterations the outermost loop needs to be worth splitting
_SCALAR_TILE = 16           # most scalar accumulators a tile without vector lanes gets
_WORK_PER_ACC = 4096         # a tile gets at most one accumulator per this many iterations
_MAX_WINDOW = 64              # widest span one vector load may read to gather its lanes
_CACHED_ELEMENTS = 8192       # inputs this small are re-read from the L1 cache
_STREAM_MIN = 256             # reduces this long stream several rows at a time
_SHORT_REDUCE = 16           # reduces this short may take vector lanes across strided outputs
_WHOLE = 8                  # an axis this short may be unrolled whole, whatever its size


class TilingMixin:
    """Linearizer methods that choose and apply the tile."""

    def _tile_budget(self) -> int:
        """Most accumulators for this kernel: the renderer's limit, less for small kernels,
        where a big tile buys little run time and costs lowering and compile time."""
        return min(self.opts.tile, max(_SCALAR_TILE, prod(self.full_shape) // _WORK_PER_ACC))

    def _tile(self, budget: int) -> None:
        """Register tiling: unroll output axes into a tile of accumulators.

        An output axis is worth unrolling when some input of the reduce does not depend on
        it (stride 0: a matmul's A does not depend on the column), so one load feeds many
        accumulators, or when an input walks it with stride 1 and the reduce walks no
        input contiguously, so the unrolled copies form vectors. The first unroll is the
        axis the output is contiguous in, 16 wide: it becomes vector lanes. Then 4 on each
        other such axis, then 4 more on the vector axis, within `budget` accumulators.
        For a matmul that is a 4 x 64 tile: 16 vector accumulators, and per step of the
        reduce 4 broadcasts and 4 vector loads feed 16 vector FMAs."""
        loads = [k for k in self.pre if k in self.mem]
        split: set[int] = set()
        for _ in range(4):
            strides = [self.sts[k].real_strides(ignore_valid=True) for k in loads]
            out_strides = self.sts[id(self.ast)].real_strides(ignore_valid=True)
            inner_red = self.n_global + self.n_reduce - 1
            red_contig = any(s[inner_red] == 1 for s in strides)
            best = None
            red_axes = range(self.n_global, self.n_global + self.n_reduce)
            # reuse that matters: an input read at every reduce step that ignores this axis
            walked = [s for s in strides if any(s[r] != 0 for r in red_axes)]
            # a short reduce (a pool window) is better vectorised across outputs, even when
            # the inputs walk them with a small stride (lanes gather from a short span)
            short = prod(self.reduce_shape) <= _SHORT_REDUCE
            for axis in range(self.n_global):
                reuse = any(s[axis] == 0 for s in walked)
                vector = not red_contig and any(s[axis] == 1 for s in strides)
                vector = vector or (short and out_strides[axis] == 1 and any(s[axis] for s in strides)
                                    and all(s[axis] is not None and 0 <= s[axis] <= 4 for s in strides))
                if not (reuse or vector) or out_strides[axis] is None:
                    continue
                want = 16 if not self.upcasts and out_strides[axis] == 1 else 4
                room = budget // prod(self.upcasts)
                size = self.full_shape[axis]
                # a power of two that divides the axis, or the whole axis when it is short
                fits = [d for d in (16, 8, 4, 2) if size % d == 0 and d <= want]
                fits += [size] if want // 2 < size <= max(want, _WHOLE) and size % want else []
                amount = max((d for d in fits if d <= room), default=0)
                rank = (amount, axis not in split, -out_strides[axis])
                if amount and (best is None or rank > best[0]):
                    best = (rank, axis, amount)
            if best is None or not self._upcast(best[1], best[2]):
                break
            split.add(best[1])
            if len(self.upcasts) == 1:
                # the first unroll (now the last axis) becomes vector lanes when memory is
                # contiguous along it for the output or an input. Without lanes, copies
                # are scalar code: keep them few (they cost lowering and compile time)
                axis = len(self.full_shape) - 1
                walks = [self.sts[k].real_strides(ignore_valid=True)[axis] for k in loads]
                out_walk = self.sts[id(self.ast)].real_strides(ignore_valid=True)[axis]
                if self.upcasts[0] >= 4 and (out_walk == 1 or 1 in walks):
                    self.lanes = self.upcasts[0]
                else:
                    budget = min(budget, _SCALAR_TILE)
        if not self.upcasts:
            self._stream_rows(loads)
        if self.upcasts and not self.lanes:
            self._reduce_lanes(loads)
        self._order_loops(loads)

    def _gather_lanes(self) -> None:
        """An elementwise kernel is left to LLVM's loop vectoriser, unless a load's index
        is not affine along the innermost axis (an upsampled gradient reads x // 2) or a
        contiguous load is masked along it (a padded copy): the vectoriser gives up
        there, so that axis becomes explicit vector lanes. Such a load reads the span its
        lanes touch once and shuffles (Linearizer._lane_window), or is one masked vector
        load (Linearizer._masked_load)."""
        if not self.full_shape:
            return
        axis = len(self.full_shape) - 1
        if self.sts[id(self.ast)].real_strides(ignore_valid=True)[axis] != 1:
            return
        for k, st in self.sts.items():
            if k not in self.mem:
                continue
            stride = st.real_strides(ignore_valid=True)[axis]
            tangled = stride is None and len(st.views) > 1
            masked = stride == 1 and st.real_strides()[axis] is None
            if tangled or masked:
                break
        else:
            return
        size = self.full_shape[axis]
        lanes = next((d for d in (16, 8) if size % d == 0), size if 8 < size <= 16 else 0)
        if lanes and self._upcast(axis, lanes):
            self.lanes = lanes

    def _stream_rows(self, loads: list[int]) -> None:
        """A long contiguous reduce with no reuse (a row sum) streams its input once; doing
        several rows at once keeps more memory requests in flight per core. The rows
        become a tile, so the reduce takes vector lanes (_reduce_lanes). On the 2-core
        machine a 4096 x 4096 row sum went from 3.2 to 3.0 ms (8 rows)."""
        inner = self.n_global + self.n_reduce - 1
        if not self.n_global or not self.n_reduce or self.full_shape[inner] % 8 or \
                prod(self.reduce_shape) < _STREAM_MIN:
            return
        if not any(self.sts[k].real_strides(ignore_valid=True)[inner] == 1 for k in loads):
            return
        axis = self.n_global - 1
        rows = next((r for r in (8, 4, 2) if self.full_shape[axis] % r == 0), 0)
        if rows:
            self._upcast(axis, rows)

    def _reduce_lanes(self, loads: list[int]) -> None:
        """Vector lanes along the innermost reduce axis, for a tile whose output rows form
        no vectors (a conv weight gradient: its output is a 5 x 5 window of taps) while an
        input walks the reduce contiguously. Each accumulator becomes a vector of partial
        reductions, summed across its lanes once, after the reduce loops."""
        axis = self.n_global + self.n_reduce - 1
        size = self.full_shape[axis]
        if not any(self.sts[k].real_strides(ignore_valid=True)[axis] == 1 for k in loads):
            return
        lanes = next((d for d in (16, 8) if size % d == 0), 0)
        if not lanes:
            return
        full, out = self.full_shape, self.out_shape
        if size > lanes:  # split; a size-1 reduce axis left behind would pass for an output
            full = full[:axis] + (size // lanes, lanes) + full[axis + 1:]
            out = out[:axis] + (1, 1) + out[axis + 1:]
            if not self._apply(lambda st: st.reshape(full), lambda st: st.reshape(out)):
                return
            axis += 1
        order = tuple(i for i in range(len(full)) if i != axis) + (axis,)
        self._apply(lambda st: st.permute(order), lambda st: st.permute(order))
        self.full_shape = tuple(full[i] for i in order)
        self.out_shape = tuple(out[i] for i in order)
        self.upcasts.append(lanes)
        self.lanes, self.reduce_lanes = lanes, True

    def _order_loops(self, loads: list[int]) -> None:
        """Put outermost the loop whose iterations re-read the fewest bytes.

        Each iteration of the outer loop streams again every input that does not depend
        on it (a matmul's B, for each block of rows). So the outer loop is the one that
        minimises iterations x bytes of the inputs it ignores, if it has enough iterations
        to split across threads. An input small enough to stay in the L1 cache (a bias)
        costs nothing to re-read."""
        def footprint(k: int) -> int:
            strides = self.sts[k].real_strides(ignore_valid=True)
            elements = prod(s for s, st in zip(self.full_shape, strides) if st != 0)
            return 0 if elements <= _CACHED_ELEMENTS else elements

        def cost(axis: int) -> int:
            ignored = [k for k in loads if self.sts[k].real_strides(ignore_valid=True)[axis] == 0]
            return self.full_shape[axis] * sum(footprint(k) for k in ignored)
        axes = [a for a in range(self.n_global) if self.full_shape[a] >= _MIN_OUTER]
        if not axes or self.n_global < 2:
            return
        best = min(axes, key=lambda a: (cost(a), a))
        if best != 0 and cost(best) < cost(0):
            order = (best,) + tuple(i for i in range(len(self.full_shape)) if i != best)
            self._apply(lambda st: st.permute(order), lambda st: st.permute(order))
            self.full_shape = tuple(self.full_shape[i] for i in order)
            self.out_shape = tuple(self.out_shape[i] for i in order)

    def _upcast(self, axis: int, amount: int) -> bool:
        """Split `axis` into (size // amount, amount) and move the new axis to the end."""
        def split(shape):
            return shape[:axis] + (shape[axis] // amount, amount) + shape[axis + 1:]
        full, out = split(self.full_shape), split(self.out_shape)
        if not self._apply(lambda st: st.reshape(full), lambda st: st.reshape(out)):
            return False
        # the new axis goes before the earlier upcasts: the first (widest) varies fastest
        rest = [i for i in range(len(full)) if i != axis + 1]
        at = len(rest) - len(self.upcasts)
        order = tuple(rest[:at] + [axis + 1] + rest[at:])
        self._apply(lambda st: st.permute(order), lambda st: st.permute(order))
        self.full_shape = tuple(full[i] for i in order)
        self.out_shape = tuple(out[i] for i in order)
        self.upcasts.insert(0, amount)
        return True

    # ---- vector lanes: how a load or an accumulator spreads across them ----
    def _along_lanes(self, idx: Node) -> Node | None:
        """idx at lane 0 if idx steps by exactly 1 per lane, else None."""
        window = self._lane_window(idx)
        return window[0] if window is not None and window[1] == list(range(self.lanes)) else None

    def _lane_window(self, idx: Node) -> tuple[Node, list[int]] | None:
        """(start, offset of each lane) when the lanes read at constant offsets within a
        short span: contiguous lanes, a stride-2 pool window, an upsampled gradient
        (k // 2), a flip. `lane + rest` is recognised without substituting."""
        terms = idx.nodes if isinstance(idx, SumNode) else [idx]
        lane_terms = [t for t in terms if t is self.lane or t == self.lane]
        rest = [t for t in terms if not (t is self.lane or t == self.lane)]
        if len(lane_terms) == 1 and all(self.lane not in t.vars() for t in rest):
            return (sum_nodes(rest) if rest else NumNode(0)), list(range(self.lanes))
        at0 = idx.substitute({self.lane: 0})
        offsets = [0]
        for k in range(1, self.lanes):
            step = idx.substitute({self.lane: k}) - at0
            if not isinstance(step, NumNode):
                return None
            offsets.append(step.b)
        low = min(offsets)
        if max(offsets) - low >= _MAX_WINDOW:
            return None
        return at0 + low, [k - low for k in offsets]

    def _across_lanes(self, op: BinaryOps, acc: UOp) -> UOp:
        """Reduce lanes end in one value: combine the lanes pairwise."""
        parts = [self.extract(acc, k) for k in range(acc.dtype.count)]
        while len(parts) > 1:
            pairs = [self.alu(op, parts[0].dtype, a, b) for a, b in zip(parts[::2], parts[1::2])]
            parts = pairs + parts[len(pairs) * 2:]
        return parts[0]
