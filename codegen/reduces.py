"""A Linearizer's reduce: its accumulators (one per upcast copy), its loops, and what
each step adds. A padded reduce (OptOps.PAD) takes its last, partial step after the
loop; a reduce over a join runs a loop per run of its pieces (codegen/peel.py
`reduce_plan`, D163); a tiled sum of `where(c, x, 0)` runs under `if c` (D69); a group
reduce walks its steps across a work-group (codegen/work_items.py). Mixed into Linearizer
(codegen/linearizer.py), which opens the global loops and stores the values."""
from __future__ import annotations
from typing import Any

from codegen.dtypes import DType, dtypes
from codegen.kernel import REDUCE_VALID
from codegen.lane_sums import across_lanes, alone
from codegen.ops import BinaryOps, BufferOps, LazyOp, Op, ReduceOps, TernaryOps, UnaryOps
from codegen.peel import reduce_plan
from codegen.shape.symbolic import NumNode, Variable
from codegen.uops import UOp, UOps, dtype_of
from codegen.work_items import WorkItems


class Reduces(WorkItems):
    """The reduce loops and accumulators of a Linearizer."""

    def _reduce(self, node: LazyOp, combos: list[tuple[int, ...]]) -> dict[tuple[int, ...], UOp]:
        """One accumulator per upcast combination, all updated in the same reduce loops. A
        padded reduce (OptOps.PAD) runs its innermost loop one step short and takes the
        last, partial step after it: the loop body has no masks."""
        src_dtype = self._dtype_of(node.src[0])
        acc_dtype = src_dtype.opmath  # 16-bit floats accumulate in float32
        op = BinaryOps.ADD if node.op is ReduceOps.SUM else BinaryOps.MAX
        rsizes = self.k.reduce_shape
        peel = self.k.padded and self.group is None and bool(rsizes)
        plan = None if self.target.gpu else reduce_plan(self.k, self.gidx, self.lane, combos)
        if plan is not None:  # a reduce over a cat: a loop per piece (codegen/peel.py)
            return self._finals(node, combos, op, self._segmented(node, combos, op, acc_dtype, *plan))
        loops = self._reduce_loops(rsizes, peel)
        guarded = None if peel or not loops else self._guards(node, combos)
        if guarded is not None:
            accs = self._guarded(node, combos, op, acc_dtype, loops, guarded)
        else:
            accs = [self._accumulate(node, combo, op, acc_dtype, loops) for combo in combos]
        if peel:  # the last step of the innermost loop, after it
            self.g.end_loop(loops.pop())
            self.ridx[-1] = NumNode(rsizes[-1] - 1)
            for combo, acc in zip(combos, accs):
                self._accumulate(node, combo, op, acc_dtype, loops, acc)
        self._end_loops(loops)
        return self._finals(node, combos, op, accs)

    def _finals(self, node: LazyOp, combos: list[tuple[int, ...]], op: BinaryOps,
                accs: list[UOp]) -> dict[tuple[int, ...], UOp]:
        """Each copy's reduced value, after the reduce loops, in the reduce's dtype."""
        finals = [self.g.add(UOps.ACC_READ, acc.dtype, (acc,)) for acc in accs]
        if self.reduce_lanes:  # a tile's accumulators together (codegen/lane_sums.py)
            finals = across_lanes(self, op, finals)
        src_dtype = self._dtype_of(node.src[0])
        return {c: self.cast(acc, src_dtype) for c, acc in zip(combos, finals)}

    def _segmented(self, node: LazyOp, combos: list[tuple[int, ...]], op: BinaryOps,
                   acc_dtype: DType, axis: int, segments: list[tuple[int, int]]) -> list[UOp]:
        """The accumulators of a reduce whose loop `axis` runs in `segments`, one after
        another: in each, that index is bounded to the segment, so the gates that switch
        only between segments fold (reduce_plan)."""
        rsizes = self.k.reduce_shape
        outer = self._reduce_loops(rsizes[:axis], False)
        accs: list[UOp | None] = [None] * len(combos)
        for lo, hi in segments:
            inner = self._reduce_loops(rsizes, False, axis, (lo, hi))
            # (every segment's value as wide as the lanes: one whose reads along the lanes are
            # all gated off is a scalar, and the accumulators are typed by the first)
            accs = [self._accumulate(node, combo, op, acc_dtype, outer + inner, acc,
                                     lanes=self.lanes or 1) for combo, acc in zip(combos, accs)]
            self._end_loops(inner)
        self._end_loops(outer)
        return [acc for acc in accs if acc is not None]

    def _end_loops(self, loops: list[UOp]) -> None:
        """Close the reduce loops; a stage's steps end at a barrier (the next stage
        overwrites its local memory)."""
        for loop in reversed(loops):
            self.g.end_loop(loop)
            if self.stager is not None and loop is loops[-1]:
                self.g.add(UOps.BARRIER, None)

    def _reduce_loops(self, rsizes: tuple[int, ...], peel: bool, first: int = 0,
                      segment: tuple[int, int] | None = None) -> list[UOp]:
        """The reduce loops from `first` on (a peeled innermost loop stops one step short;
        with a `segment`, loop `first` runs over [start, end) only) and their index
        variables (those of the loops before `first` stay as they are)."""
        ends = list(rsizes[:-1]) + [rsizes[-1] - peel] if rsizes else []
        self.ridx = self.ridx[:first] + [Variable(f"ridx{j}", 0, max(s - 1, 0))
                                         for j, s in enumerate(ends) if j >= first]
        if self.group is not None:
            return [self._group_loop(rsizes)]
        loops = []
        for j, s in enumerate(ends):
            if j < first:
                continue
            if j == 1 and self.stager is not None:  # a stage's operands, before its steps
                self.stager.fill()
            lo, hi = segment if segment is not None and j == first else (0, s)
            if lo or hi != s:
                self.ridx[j] = Variable(f"ridx{j}", lo, hi - 1)
            loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(lo), self.const(hi)), f"ridx{j}")
            loops.append(loop)
            self.vars[f"ridx{j}"] = loop
        return loops

    def _guards(self, node: LazyOp, combos: list[tuple[int, ...]]) \
            -> tuple[LazyOp, list[tuple[UOp, list[tuple[int, ...]]]]] | None:
        """A tiled SUM of `where(c, x, 0)` or `cast(c) * x` whose c is one scalar for
        several upcast copies (an Embedding's weight gradient: c = (idx[t] == v), the
        same along the row of v): (x, [(c, its copies)]), each group to run under
        `if c` (D69). None where c varies along the lanes or every copy has its own."""
        if node.op is not ReduceOps.SUM or self.k.padded or self.group is not None or \
                self.reduce_lanes or not self.k.upcasts:
            return None
        picked = _picked(node.src[0])
        if picked is None or self._dtype_of(picked[0]) != dtypes.bool:
            return None
        cond, body = picked
        groups: dict[int, tuple[UOp, list[tuple[int, ...]]]] = {}
        for self.combo in combos:
            self.cache = {}
            c = self.emit(cond)
            if dtype_of(c).count > 1:
                return None
            groups.setdefault(id(c), (c, []))[1].append(self.combo)
        if len(groups) == len(combos) and not self.lanes:
            return None  # a branch per scalar: no work skipped
        return body, list(groups.values())

    def _guarded(self, node: LazyOp, combos: list[tuple[int, ...]], op: BinaryOps,
                 acc_dtype: DType, loops: list[UOp],
                 guarded: tuple[LazyOp, list[tuple[UOp, list[tuple[int, ...]]]]]) -> list[UOp]:
        """acc += x only where c holds, per group of copies: their loads are skipped
        elsewhere."""
        body, groups = guarded
        by_combo = {}
        for cond, group in groups:
            block = self.g.open_if(cond)
            by_combo.update({c: self._accumulate(node, c, op, acc_dtype, loops, body=body)
                             for c in group})
            self.g.end_loop(block)
        return [by_combo[c] for c in combos]

    def _accumulate(self, node: LazyOp, combo: tuple[int, ...], op: BinaryOps, acc_dtype: DType,
                    loops: list[UOp], acc: UOp | None = None, body: LazyOp | None = None,
                    lanes: int = 1) -> UOp:
        """acc = op(acc, value) for one upcast copy, in the open reduce loops; the value is
        the reduce's identity where a padded reduce reads padding. Defines acc if None.
        `body` replaces the reduce's input (the x of a guarded `where(c, x, 0)`); the value is
        widened to `lanes`."""
        self.combo, self.cache = combo, {}
        init = _identity(node.op, acc_dtype)
        value = self.cast(self.emit(node.src[0] if body is None else body), acc_dtype)
        if self.reduce_lanes:
            value = self.widen(value, self.lanes)
        value = self.widen(value, lanes)
        if self.k.padded and not (node.op is ReduceOps.SUM and _zero_where_unread(node.src[0])):
            value = self._mask_padding(value, init)
        if acc is None:  # defined once the value's lanes are known; it lands before the loops
            acc = self.g.add(UOps.DEFINE_ACC, value.dtype, (), init,
                             extra_loops=frozenset(self.global_loops))
        else:  # the peeled step: a load that reads nothing there is one scalar zero
            value = self.widen(value, dtype_of(acc).count)
        current = self.g.add(UOps.ACC_READ, acc.dtype, (acc,), None, extra_loops=frozenset(loops))
        # an untiled reduce may be reassociated: split into vector lanes and partial sums.
        # A tiled one already has independent accumulators; its vectors run across the tile
        self.g.add(UOps.ACC_UPDATE, None, (acc, self.alu(op, acc_dtype, current, value)),
                   not self.k.upcasts)
        return acc

    def _mask_padding(self, value: UOp, init: Any) -> UOp:
        """The reduce's identity where the reduce input is padding (after OptOps.PAD)."""
        _, valid = self.sts[REDUCE_VALID].expr_idxs(self._idxs(True))
        if valid.min == 1:
            return value
        lanes = dtype_of(value).count
        identity = self.widen(self.const(init, dtype_of(value).scalar), lanes)
        if valid.max == 0:
            return identity
        gate = self.widen(self._gate(valid), lanes)
        return self.select(gate, value, identity)  # (known lanes: an LLVM 22 miscompile)

    def _across_lanes(self, op: BinaryOps, acc: UOp) -> UOp:
        """One accumulator's lanes in one value (codegen/lane_sums.py)."""
        return alone(self, op, acc)


def _zero_where_unread(node: LazyOp) -> bool:
    """Whether `node` is 0 wherever all its leaves read nothing (a load or constant reads 0
    outside its view's mask): sums and products of leaves, through casts. After a PAD
    every leaf under the reduce reads nothing in the padding, so a sum of such a value
    needs no mask there [D57]: a padded conv weight gradient multiplies and adds (one
    FMA) instead of multiplying, selecting and adding."""
    if node.op in (BufferOps.LOAD, BufferOps.CONST):
        return True
    cast = node.op is UnaryOps.CAST and not node.arg[1]
    if node.op not in (BinaryOps.ADD, BinaryOps.MUL) and not cast:
        return False
    return all(_zero_where_unread(s) for s in node.src)


def _picked(body: LazyOp) -> tuple[LazyOp, LazyOp] | None:
    """(c, x) when `body` is where(c, x, 0) or cast(c) * x (either order), else None."""
    if body.op is TernaryOps.WHERE:
        zero = body.src[2]
        if zero.op is BufferOps.CONST and zero.arg.val == 0 and not zero.arg.st.views[-1].mask:
            return body.src[0], body.src[1]
        return None
    if body.op is BinaryOps.MUL:
        for a, b in (body.src, body.src[::-1]):
            if a.op is UnaryOps.CAST and not a.arg[1]:
                return a.src[0], b
    return None


def _identity(op: Op, dtype: DType) -> Any:
    """The value a reduce starts from: 0 for a sum, the lowest value for a max."""
    init = 0 if op is ReduceOps.SUM else dtypes.min(dtype)
    if dtype == dtypes.bool:
        return bool(init)
    return float(init) if dtype.is_float else init
