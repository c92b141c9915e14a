"""An optimised Kernel -> linear IR (a `LinearKernel`).

The Kernel (codegen/kernel.py) holds the loop shape the passes chose: global axes, then
reduce axes, then upcast axes (the last may be vector lanes). The linearizer emits loops
(CPU) or work-item indices (GPU) for the global axes, the index math of every leaf from
its ShapeTracker, the ALU ops once per upcast copy (CSE shares what copies have in
common), one accumulator per copy for the reduce, and the stores. `linearize(ast,
target)` is the whole lowering: Kernel, passes, emission.
"""
from __future__ import annotations
import itertools
from dataclasses import dataclass, field
from typing import Any

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.attention import attention_parts
from codegen.kernel import REDUCE_VALID, Kernel, Opt, leaves
from codegen.lane_sums import across_lanes, alone
from codegen.lanes import along_lanes
from codegen.ops import (BinaryOps, BufferOps, LazyOp, MemBuffer, Op, ReduceOps,
                         TernaryOps, UnaryOps)
from codegen.opt import optimize
from codegen.peel import mask_plan, pad_plan, peel_plan, reduce_plan
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.scatter import is_scatter
from codegen.stage import Stager
from codegen.target import Target
from codegen.uops import UOp, UOpGraph, UOps, dtype_of
from codegen.work_items import WorkItems


@dataclass
class LinearKernel:
    """The linearizer's output: everything a renderer needs."""
    name: str
    uops: list[UOp]
    buf_dtypes: list[DType]        # argument i is a pointer to elements of buf_dtypes[i]
    global_size: list[int]         # iterations of the split/parallel axes (CPU: [outer])
    local_size: list[int]
    flops: int
    mem_bytes: int
    ast: LazyOp
    var_names: list[str] = field(default_factory=list)  # scalar args after the buffers
    opts: list[Opt] = field(default_factory=list)       # the decisions the passes applied


@dataclass
class LoopShape:
    """What Emitter and Linearizer read of a Kernel, for a kernel whose loops its own
    linearizer lays out (attention, D62; a scatter, D153)."""
    ast: LazyOp
    full_shape: tuple[int, ...]
    sts: dict[int, ShapeTracker]
    global_shape: tuple[int, ...] = ()
    pre: set[int] = field(default_factory=set)
    upcasts: list[int] = field(default_factory=list)
    lanes: int = 0
    reduce_lanes: bool = False
    applied: list[Opt] = field(default_factory=list)
    rows: bool = False
    clamped: frozenset[int] = frozenset()


def linearize(ast: LazyOp, target: Target) -> LinearKernel:
    """Lower one kernel AST for a target: optimise, then emit."""
    if is_scatter(ast):
        from codegen.scatter_kernel import ScatterLinearizer  # subclasses: they import this
        return ScatterLinearizer(ast, target).linearize()
    if not target.gpu:
        from codegen.attention_kernel import AttentionLinearizer
        parts = attention_parts(ast)
        if parts is not None:
            return AttentionLinearizer(parts, ast, target).linearize()
    k = optimize(Kernel(ast), target)
    if k.rows:
        from codegen.row_group import GroupRowLinearizer  # subclasses: they import
        from codegen.rows import RowLinearizer           # this module
        return (GroupRowLinearizer if k.group else RowLinearizer)(k, target).linearize()
    return Linearizer(k, target).linearize()


class Linearizer(WorkItems):
    """Emits the uops of one optimised Kernel: its loops, reduces and stores (the values
    inside come from Emitter, codegen/emit.py)."""

    def linearize(self) -> LinearKernel:
        launch = self._begin(open_loops=False)
        combos, shape = self._combos(), list(self.k.global_shape)
        peel = None if self.target.gpu else \
            peel_plan(self.k, self.gidx, self.lane, combos) or \
            pad_plan(self.k, self.gidx, self.lane, combos) or \
            mask_plan(self.k, self.gidx, self.lane, combos)
        if peel is None:
            self._loops(shape)
            self._body(combos)
            return self._finish(launch)
        # a loop at a window's border (border and interior loops), or where an elementwise
        # kernel's gates switch: each segment with its own bounds, so its checks fold
        axis, segments = peel
        self._loops(shape[:axis])
        outer = list(self.global_loops)
        for segment in segments:
            self._loops(shape, axis, segment)
            self._body(combos)
            for loop in reversed(self.global_loops[len(outer):]):
                self.g.end_loop(loop)
            self.global_loops = list(outer)
        return self._finish(launch)

    def _body(self, combos: list[tuple[int, ...]]) -> None:
        """The reduce and the stores, inside the open global loops."""
        self.reduced = self._reduce(self.k.reduceop, combos) if self.k.reduceop else {}
        self.blocks = {}  # transposed blocks (emit.py) belong to the loops they were read in
        if not self.target.gpu:  # LLVM's noalias buffers: it orders loads and stores itself
            for self.combo in combos:
                self.cache: dict[int, UOp] = {}
                self._store(self.emit(self.ast.src[0]))
            return
        # a GPU's C source: a store may alias any later load, so the compiler keeps them in
        # order; every copy's loads come first, in flight together (D94: an elementwise
        # chain with 4 outputs per work-item read one value at a time)
        values = []
        for self.combo in combos:
            self.cache = {}
            values.append((self.combo, self.emit(self.ast.src[0])))
        for self.combo, value in values:
            self._store(value)

    def _combos(self) -> list[tuple[int, ...]]:
        """The upcast copies (not the lanes): one copy of the body each; CSE shares what
        they have in common."""
        copies = self.k.upcasts[:-1] if self.lanes else self.k.upcasts
        return list(itertools.product(*(range(u) for u in copies)))

    def _begin(self, open_loops: bool = True) -> tuple[list[int], list[int]]:
        """The buffers and the global loops (or work-item indices); returns the launch
        sizes (work-groups, work-group size)."""
        k, g = self.k, UOpGraph()
        self.g = g
        # CPU indexes are 64-bit (free on x86-64, no sign extensions); GPUs prefer 32 bits
        # (an indirect load's offset reaches past what its tracker says: 64 bits)
        # (half the range: work-items past a padded dim 0 compute indexes beyond the end)
        small = self.target.gpu and 2 * self._max_index() < 2**31 - 1 and not k.indirect
        self.idx_dtype = dtypes.int32 if small else dtypes.int64
        bufs = sorted({n.arg.idx: n.arg.dtype for n in leaves(self.ast)
                       if isinstance(n.arg, MemBuffer)}.items())
        self.buf_dtypes = [dt for _, dt in bufs]
        self.bufs = {i: g.add(UOps.DEFINE_GLOBAL, None, (), (f"data{i}", dt)) for i, dt in bufs}
        gsizes = list(k.global_shape)
        self.global_loops = []
        self.vars: dict[str, UOp] = {}
        self.var_names: list[str] = []
        self.group: tuple[UOp, int] | None = None  # (local index, size) of a group reduce
        self.each_item = False  # stores are each work-item's own (a GPU row kernel's row, D94)
        self.stager = None  # a STAGE's local memory (codegen/stage.py)
        launch = self._gpu_indices(gsizes) if self.target.gpu else \
            (gsizes or [1], [1] * max(1, len(gsizes)))
        if self.target.gpu and k.stage:
            self.stager = Stager(self, leaves(self.ast))
        self.gidx = [Variable(f"gidx{i}", 0, s - 1) for i, s in enumerate(gsizes)]
        if open_loops:  # else the caller opens them (a peeled loop: in segments)
            self._loops(gsizes)
        self.lane = Variable("lane", 0, self.lanes - 1) if self.lanes else None
        self.ridx: list[Node] = []
        return launch

    def _finish(self, launch: tuple[list[int], list[int]]) -> LinearKernel:
        """Close the global loops; the kernel with its launch sizes and estimates."""
        for loop in reversed(self.global_loops):
            self.g.end_loop(loop)
        flops, mem = self._estimate()
        return LinearKernel(self._name(), self.g.uops, self.buf_dtypes, launch[0], launch[1],
                            flops, mem, self.ast, self.var_names, list(self.k.applied))

    def _name(self) -> str:
        """r_<global>_<reduce> or E_<global>: the loop shape before tiling."""
        glob, red = self.k.name_shape
        shape_str = "_".join(map(str, glob or (1,)))
        return f"r_{shape_str}_{'_'.join(map(str, red))}" if self.k.reduceop else f"E_{shape_str}"

    def _loops(self, gsizes: list[int], first: int = 0,
               segment: tuple[int, int] | None = None) -> None:
        """CPU: a loop per global axis from `first`; the runtime splits the outer one
        across threads, so its bounds are the arguments core_start and core_end. With a
        `segment`, axis `first` runs over [start, end) only (a peeled loop, codegen/peel.py),
        and its index is bounded so."""
        if self.target.gpu:
            return
        g = self.g
        for i, s in enumerate(gsizes):
            if i < first:
                continue
            if i == 0:
                if not self.var_names:
                    self.var_names = ["core_start", "core_end"]
                    self.core = tuple(g.add(UOps.DEFINE_VAR, self.idx_dtype, (), name)
                                      for name in self.var_names)
                start, end = self.core
            else:
                start, end = self.const(0), self.const(s)
            if segment is not None and i == first:
                start, end = self._clip(start, segment[0]), self._clip(end, segment[1])
                self.gidx[i] = Variable(f"gidx{i}", segment[0], segment[1] - 1)
            loop = g.add(UOps.LOOP, self.idx_dtype, (start, end), f"gidx{i}")
            self.global_loops.append(loop)
            self.vars[f"gidx{i}"] = loop

    def _clip(self, bound: UOp, at: int) -> UOp:
        """A loop bound moved into a peeled segment: the constant, or for the threads'
        outer loop max(core bound, at) as start and min(core bound, at) as end (an empty
        piece runs no iteration: the loop checks before its first)."""
        if bound.op is UOps.CONST:
            return self.const(at)
        dt = self.idx_dtype
        if bound.arg == "core_start":
            return self.alu(BinaryOps.MAX, dt, bound, self.const(at))
        neg = self.alu(UnaryOps.NEG, dt, bound)
        return self.alu(UnaryOps.NEG, dt, self.alu(BinaryOps.MAX, dt, neg, self.const(-at)))

    def _store(self, value: UOp) -> None:
        """One store per copy: a vector store where the lanes are contiguous (masked where
        a padded row's lanes lie outside the output, OptOps.PAD_OUT), else lane by lane."""
        out = self.ast.arg
        idx, valid = self.sts[id(self.ast)].expr_idxs(self._idxs(False))
        value, buf = self.cast(value, out.dtype), self.bufs[out.idx]
        if valid.max == 0:
            return
        if self.lane is None or self.lane not in idx.vars():  # reduce lanes: one value
            assert valid.min == 1, f"a padded output axis without vector lanes: {self.k.applied}"
            gate = () if self.step_gate is None else (self.step_gate,)
            self.g.add(UOps.STORE, None, (buf, self.render_index(idx), value) + gate,
                       "each" if self.each_item else None)
            return
        at0 = along_lanes(idx, self.lane, self.lanes)
        if at0 is not None and self.vector_at(at0):
            gate = () if valid.min == 1 else (self.widen(self._gate(valid), self.lanes),)
            self.g.add(UOps.STORE, None, (buf, self.render_index(at0),
                                          self.widen(value, self.lanes)) + gate)
            return
        for k in range(self.lanes):
            lane_valid = valid.substitute({self.lane: k})
            assert self.target.gpu or lane_valid.min == 1 or lane_valid.max == 0, \
                "a gated scalar store on a CPU"  # (LLVM gates vector stores only)
            if lane_valid.max:
                gate = () if lane_valid.min == 1 else (self._gate(lane_valid),)
                self.g.add(UOps.STORE, None, (buf, self.render_index(
                    idx.substitute({self.lane: k})), self.extract(value, k)) + gate)

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

    def _estimate(self) -> tuple[int, int]:
        """FLOPs (ALU ops times the iterations they run) and bytes of every buffer touched."""
        k = self.k
        glob, red = k.name_shape  # before padding (PAD, PAD_OUT): the work asked for
        full, out = prod(glob) * prod(red), prod(glob)
        under = k.ast if k.rows else k.reduceop  # a row kernel runs every op per element
        pre_ops = set(map(id, under.walk())) if under is not None else set()
        flops = 0
        for n in self.ast.walk():
            if isinstance(n.op, (UnaryOps, BinaryOps, TernaryOps, ReduceOps)) and \
                    n.op is not UnaryOps.CAST:
                flops += full if id(n) in pre_ops else out
        mem = 0
        seen = set()
        for n in leaves(self.ast):
            if isinstance(n.arg, MemBuffer) and n.arg.idx not in seen:
                seen.add(n.arg.idx)
                mem += min(self.sts[id(n)].size, full) * n.arg.dtype.itemsize
        return flops, mem


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
