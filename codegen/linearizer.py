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

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.attention import attention_parts
from codegen.kernel import Kernel, Opt, leaves
from codegen.lanes import along_lanes
from codegen.ops import BinaryOps, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from codegen.opt import optimize
from codegen.peel import mask_plan, pad_plan, peel_plan
from codegen.reduces import Reduces
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import Node, Variable
from codegen.scatter import is_scatter
from codegen.stage import Stager
from codegen.target import Target
from codegen.uops import UOp, UOpGraph, UOps


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


class Linearizer(Reduces):
    """Emits the uops of one optimised Kernel: its loops, reduces (codegen/reduces.py) and
    stores (the values inside come from Emitter, codegen/emit.py)."""

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
