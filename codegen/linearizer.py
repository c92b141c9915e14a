"""Kernel AST -> linear IR (a `LinearKernel`).

The AST is one STORE of elementwise ops over LOAD/CONST leaves with at most one REDUCE.
Every leaf carries a ShapeTracker over the kernel's full shape (before the reduce) or
its output shape (after it, reduced axes of size 1). The linearizer puts reduced axes
last, merges axes that every view walks contiguously, then emits loops (CPU) or
work-item indices (GPU), index math from the ShapeTrackers, the ALU ops, one accumulator
for the reduce, and the store.
"""
from __future__ import annotations
import itertools
from dataclasses import dataclass, field
from typing import Any

from codegen.dtypes import DType, dtypes
from codegen.helpers import getenv, prod
from codegen.ops import (BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, ReduceOps,
                         TernaryOps, UnaryOps)
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import (AndNode, DivNode, LtNode, ModNode, MulNode, Node,
                                    NumNode, SumNode, Variable)
from codegen.tiling import TilingMixin
from codegen.gpu_layout import GPULayoutMixin
from codegen.uops import UOp, UOpGraph, UOps


@dataclass
class KernelOptions:
    """What the target supports: CPU loops with a thread split, or GPU work-items."""
    gpu: bool = False
    max_global: tuple[int, ...] = (2**31 - 1, 65535, 65535)
    local_size: int = 1  # work-group size the GPU renderer asks for (1 = none)
    tile: int = 0        # CPU register tiling: most accumulators a reduce may unroll (0 = off)
    pack: int = 0        # CPU: pack a matmul's strided operand into panels this wide (0 = off)
    split_reduce: int = 0  # CPU: cut a long reduce with few outputs into at most this many chunks


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


def _leaves(ast: LazyOp) -> list[LazyOp]:
    return [n for n in ast.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.STORE)]


class Linearizer(TilingMixin, GPULayoutMixin):
    """Builds a LinearKernel from one kernel AST."""

    def __init__(self, ast: LazyOp, opts: KernelOptions | None = None):
        self.ast, self.opts = ast, opts or KernelOptions()
        reduces = [n for n in ast.walk() if isinstance(n.op, ReduceOps)]
        assert len(reduces) <= 1, "a kernel holds at most one reduce"
        self.reduceop = reduces[0] if reduces else None
        pre = set(map(id, _leaves(self.reduceop))) if self.reduceop else set()
        self.sts: dict[int, ShapeTracker] = {id(n): n.arg.st for n in _leaves(ast)}
        self.pre = pre  # ids of leaves under the reduce (they live in the full shape)
        self.mem = {id(n) for n in _leaves(ast) if n.op is BufferOps.LOAD}
        self.out_shape = ast.arg.st.shape
        first_pre = next((n for n in _leaves(ast) if id(n) in pre), None)
        self.full_shape = first_pre.arg.st.shape if first_pre else self.out_shape
        self.upcasts: list[int] = []  # sizes of the trailing axes unrolled into registers
        self.combo: tuple[int, ...] = ()  # the upcast copy being emitted
        self.lanes = 0  # > 1: the last upcast axis is emitted as vectors of this many lanes
        self.reduce_lanes = False  # the lane axis is a reduce axis, summed across after the loops
        self._reorder_and_merge()
        self.name_shape = (self.full_shape[:self.n_global], self.full_shape[self.n_global:])
        if self.opts.tile and not getenv("NOOPT", 0):
            if self.reduceop is not None:
                self._tile(self._tile_budget())
            else:
                self._gather_lanes()

    # ---- shape optimisation ----
    @property
    def n_reduce(self) -> int:
        """Reduce axes that are loops (reduce lanes are an upcast axis)."""
        loops = len(self.full_shape) - len(self.upcasts)
        return sum(f != o for f, o in zip(self.full_shape[:loops], self.out_shape[:loops]))

    @property
    def n_global(self) -> int:
        """Axes that are loops (CPU) or work-items (GPU): all but reduce and upcast axes."""
        return len(self.full_shape) - self.n_reduce - len(self.upcasts)

    @property
    def reduce_shape(self) -> tuple[int, ...]:
        return self.full_shape[self.n_global:self.n_global + self.n_reduce]

    def _apply(self, fn_full, fn_out, merged: int | None = None) -> bool:
        """Apply a movement to every tracker; keep it only if no tracker grows a view and,
        for a merge, the merged axis reads every multi-view tracker affinely: merging the
        rows of an upsampled view (y // 2, x // 2) would turn its index into a div/mod
        tangle that no vector lane can follow."""
        new = {}
        for key, st in self.sts.items():
            moved = fn_full(st) if key in self.pre else fn_out(st)
            if len(moved.views) > len(st.views):
                return False
            if merged is not None and len(moved.views) > 1 and \
                    moved.real_strides(ignore_valid=True)[merged] is None:
                return False
            new[key] = moved
        self.sts = new
        return True

    def _reorder_and_merge(self) -> None:
        full, out = self.full_shape, self.out_shape
        order = ([i for i in range(len(full)) if full[i] == out[i]] +
                 [i for i in range(len(full)) if full[i] != out[i]])
        self._apply(lambda st: st.permute(tuple(order)), lambda st: st.permute(tuple(order)))
        full, out = tuple(full[i] for i in order), tuple(out[i] for i in order)
        # drop size-1 axes, then merge neighbours of the same kind walked contiguously
        keep = [i for i in range(len(full)) if full[i] != 1]
        sq_full, sq_out = tuple(full[i] for i in keep), tuple(out[i] for i in keep)
        if self._apply(lambda st: st.reshape(sq_full), lambda st: st.reshape(sq_out)):
            full, out = sq_full, sq_out
        i = len(full) - 2
        while i >= 0:
            same_kind = (full[i] == out[i]) == (full[i + 1] == out[i + 1])
            if same_kind:
                m_full = full[:i] + (full[i] * full[i + 1],) + full[i + 2:]
                m_out = out[:i] + (out[i] * out[i + 1],) + out[i + 2:]
                if self._apply(lambda st: st.reshape(m_full), lambda st: st.reshape(m_out), i):
                    full, out = m_full, m_out
            i -= 1
        self.full_shape, self.out_shape = full, out

    # ---- code generation ----
    def linearize(self) -> LinearKernel:
        g = self.g = UOpGraph()
        # CPU indexes are 64-bit (free on x86-64, no sign extensions); GPUs prefer 32 bits
        small = self.opts.gpu and self._max_index() < 2**31 - 1
        self.idx_dtype = dtypes.int32 if small else dtypes.int64
        bufs = sorted({n.arg.idx: n.arg.dtype for n in _leaves(self.ast)
                       if isinstance(n.arg, MemBuffer)}.items())
        self.buf_dtypes = [dt for _, dt in bufs]
        self.bufs = {i: g.add(UOps.DEFINE_GLOBAL, None, (), (f"data{i}", dt)) for i, dt in bufs}
        n_global = self.n_global
        gsizes = list(self.full_shape[:n_global])
        self.global_loops: list[UOp] = []
        self.vars: dict[str, UOp] = {}
        var_names: list[str] = []
        self.group: tuple[UOp, int] | None = None  # (local index, size) of a group reduce
        launch = (gsizes or [1], [1] * max(1, n_global))
        if self.opts.gpu:
            launch = self._gpu_indices(gsizes)
        else:
            for i, s in enumerate(gsizes):
                if i == 0:  # the outer loop is split across threads by the runtime
                    var_names = ["core_start", "core_end"]
                    start = g.add(UOps.DEFINE_VAR, self.idx_dtype, (), "core_start")
                    end = g.add(UOps.DEFINE_VAR, self.idx_dtype, (), "core_end")
                else:
                    start, end = self.const(0), self.const(s)
                loop = g.add(UOps.LOOP, self.idx_dtype, (start, end), f"gidx{i}")
                self.global_loops.append(loop)
                self.vars[f"gidx{i}"] = loop
        self.gidx = [Variable(f"gidx{i}", 0, s - 1) for i, s in enumerate(gsizes)]
        # one copy of the kernel body per upcast combination; CSE shares what they have in common
        copies = self.upcasts[:-1] if self.lanes else self.upcasts
        combos = list(itertools.product(*(range(u) for u in copies)))
        self.lane = Variable("lane", 0, self.lanes - 1) if self.lanes else None
        self.reduced = self._reduce(self.reduceop, combos) if self.reduceop else {}
        for self.combo in combos:
            self.cache: dict[int, UOp] = {}
            self._store(self.emit(self.ast.src[0]))
        for loop in reversed(self.global_loops):
            g.end_loop(loop)
        shape_str = "_".join(map(str, self.name_shape[0] or (1,)))
        red_str = "_".join(map(str, self.name_shape[1]))
        name = f"r_{shape_str}_{red_str}" if self.reduceop else f"E_{shape_str}"
        flops, mem = self._estimate()
        return LinearKernel(name, g.uops, self.buf_dtypes, launch[0], launch[1],
                            flops, mem, self.ast, var_names)

    def _idxs(self, pre: bool) -> list[Node]:
        ridx = getattr(self, "ridx", [])
        n_red = self.n_reduce
        lane = [NumNode(0) if self.reduce_lanes and not pre else self.lane] if self.lanes else []
        return (self.gidx + (ridx if pre else [NumNode(0)] * n_red) +
                [NumNode(c) for c in self.combo] + lane)

    def _max_index(self) -> int:
        return max([prod(self.full_shape)] + [st.size for st in self.sts.values()])

    def const(self, value: Any, dtype: DType | None = None) -> UOp:
        return self.g.add(UOps.CONST, dtype or self.idx_dtype, (), value)

    def alu(self, op, dtype: DType, *vin: UOp) -> UOp:
        return self.g.add(UOps.ALU, dtype, vin, op)

    def cast(self, x: UOp, dtype: DType) -> UOp:
        if x.dtype.count > 1:
            if (x.dtype.scalar, dtype) == (dtypes.float64, dtypes.float16):  # a scalar helper
                return self.vectorize([self.cast(self.extract(x, k), dtype)
                                       for k in range(x.dtype.count)])
            dtype = dtype.vec(x.dtype.count)
        return x if x.dtype == dtype else self.g.add(UOps.CAST, dtype, (x,), None)

    def vectorize(self, lanes: list[UOp]) -> UOp:
        return self.g.add(UOps.VECTORIZE, lanes[0].dtype.vec(len(lanes)), tuple(lanes))

    def extract(self, x: UOp, lane: int) -> UOp:
        return x if x.dtype.count == 1 else self.g.add(UOps.EXTRACT, x.dtype.scalar, (x,), lane)

    def widen(self, x: UOp, lanes: int) -> UOp:
        """A scalar used where vectors flow: every lane gets it."""
        return x if x.dtype.count > 1 or lanes == 1 else self.vectorize([x] * lanes)

    def _store(self, value: UOp) -> None:
        out = self.ast.arg
        idx, _ = self.sts[id(self.ast)].expr_idxs(self._idxs(False))
        value, buf = self.cast(value, out.dtype), self.bufs[out.idx]
        if self.lane is None or self.reduce_lanes:
            self.g.add(UOps.STORE, None, (buf, self.render_index(idx), value))
            return
        at0 = self._along_lanes(idx)
        if at0 is not None:
            self.g.add(UOps.STORE, None, (buf, self.render_index(at0), self.widen(value, self.lanes)))
            return
        for k in range(self.lanes):
            self.g.add(UOps.STORE, None, (buf, self.render_index(idx.substitute({self.lane: k})),
                                          self.extract(value, k)))

    def render_index(self, node: Node) -> UOp:
        return node.render(_NODE_OPS, self)

    def emit(self, node: LazyOp) -> UOp:
        if id(node) not in self.cache:
            self.cache[id(node)] = self._emit(node)
        return self.cache[id(node)]

    def _emit(self, node: LazyOp) -> UOp:
        if node.op in (BufferOps.LOAD, BufferOps.CONST):
            return self._leaf(node)
        if isinstance(node.op, ReduceOps):
            return self.reduced[self.combo]
        srcs = [self.emit(s) for s in node.src]
        if node.op is UnaryOps.CAST and node.arg[1]:  # a bitcast
            lanes = srcs[0].dtype.count
            dtype = node.arg[0].vec(lanes) if lanes > 1 else node.arg[0]
            return self.g.add(UOps.BITCAST, dtype, (srcs[0],), None)
        if node.op is UnaryOps.CAST:
            return self.cast(srcs[0], node.arg[0])
        lanes = max(s.dtype.count for s in srcs)
        srcs = [self.widen(s, lanes) for s in srcs]
        if node.op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
            return self.alu(node.op, dtypes.bool.vec(lanes) if lanes > 1 else dtypes.bool, *srcs)
        dtype = srcs[1].dtype if node.op is TernaryOps.WHERE else srcs[0].dtype
        return self.alu(node.op, dtype, *srcs)

    def _leaf(self, node: LazyOp) -> UOp:
        """A scalar where the value is the same in every lane, one vector load where memory
        is contiguous along the lanes, else a vector gathered lane by lane."""
        idx, valid = self.sts[id(node)].expr_idxs(self._idxs(id(node) in self.pre))
        lane = self.lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            return self._load(node.arg, idx, valid)
        window = self._lane_window(idx) if isinstance(node.arg, MemBuffer) else None
        if window is not None and lane in valid.vars():
            if window[1] == list(range(self.lanes)) and node.arg.dtype != dtypes.bool:
                return self._masked_load(node.arg, window[0], valid)
            window = None
        if window is not None:
            start, offsets = window
            if offsets == list(range(self.lanes)):  # contiguous: one vector load
                return self._load(node.arg, start, valid, self.lanes)
            # one load of the span the lanes touch, then a shuffle
            wide = self._load(node.arg, start, valid, max(offsets) + 1)
            return self.vectorize([self.extract(wide, k) for k in offsets])
        return self.vectorize([self._load(node.arg, idx.substitute({lane: k}),
                                          valid.substitute({lane: k}))
                               for k in range(self.lanes)])

    def _masked_load(self, arg: MemBuffer, start: Node, valid: Node) -> UOp:
        """Contiguous lanes whose validity depends on the lane (a padded row): one vector
        load that reads only the valid lanes (a vector gate; 0 in the others)."""
        gate = self.vectorize([_as_bool(self.render_index(valid.substitute({self.lane: k})), self)
                               for k in range(self.lanes)])
        return self.g.add(UOps.LOAD, arg.dtype.vec(self.lanes),
                          (self.bufs[arg.idx], self.render_index(start), gate))

    def _load(self, arg: MemBuffer | ConstBuffer, idx: Node, valid: Node, lanes: int = 1) -> UOp:
        zero = self.const(0, arg.dtype) if arg.dtype != dtypes.bool else self.const(False, arg.dtype)
        if valid.min == valid.max == 0:
            return zero
        gate = None if valid.min == 1 else _as_bool(self.render_index(valid), self)
        if isinstance(arg, ConstBuffer):
            value = self.const(arg.val, arg.dtype)
            return value if gate is None else self.alu(TernaryOps.WHERE, arg.dtype, gate, value, zero)
        vin = (self.bufs[arg.idx], self.render_index(idx)) + ((gate,) if gate is not None else ())
        return self.g.add(UOps.LOAD, arg.dtype.vec(lanes) if lanes > 1 else arg.dtype, vin)

    def _reduce(self, node: LazyOp, combos: list[tuple[int, ...]]) -> dict[tuple, UOp]:
        """One accumulator per upcast combination, all updated in the same reduce loops."""
        g = self.g
        src_dtype = self._dtype_of(node.src[0])
        acc_dtype = src_dtype.opmath  # 16-bit floats accumulate in float32
        init = 0 if node.op is ReduceOps.SUM else dtypes.min(acc_dtype)
        if acc_dtype == dtypes.bool:
            init = bool(init)
        elif acc_dtype.is_float:
            init = float(init)
        rsizes = self.reduce_shape
        self.ridx = [Variable(f"ridx{j}", 0, s - 1) for j, s in enumerate(rsizes)]
        if self.group is not None:
            loops = [self._group_loop(rsizes)]
        else:
            loops = []
            for j, s in enumerate(rsizes):
                loop = g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(s)), f"ridx{j}")
                loops.append(loop)
                self.vars[f"ridx{j}"] = loop
        op = BinaryOps.ADD if node.op is ReduceOps.SUM else BinaryOps.MAX
        # an untiled reduce may be reassociated: split into vector lanes and partial sums.
        # A tiled one already has independent accumulators; its vectors run across the tile
        reassoc = not self.upcasts
        accs = []
        for self.combo in combos:
            self.cache = {}
            value = self.cast(self.emit(node.src[0]), acc_dtype)
            if self.reduce_lanes:
                value = self.widen(value, self.lanes)
            # defined once the value's lanes are known; it still lands before the reduce loops
            acc = g.add(UOps.DEFINE_ACC, value.dtype, (), init,
                        extra_loops=frozenset(self.global_loops))
            accs.append(acc)
            current = g.add(UOps.ACC_READ, acc.dtype, (acc,), None, extra_loops=frozenset(loops))
            g.add(UOps.ACC_UPDATE, None, (acc, self.alu(op, acc_dtype, current, value)),
                  reassoc)
        for loop in reversed(loops):
            g.end_loop(loop)
        finals = [g.add(UOps.ACC_READ, acc.dtype, (acc,)) for acc in accs]
        if self.reduce_lanes:
            finals = [self._across_lanes(op, acc) for acc in finals]
        return {c: self.cast(acc, src_dtype) for c, acc in zip(combos, finals)}

    def _dtype_of(self, node: LazyOp) -> DType:
        if node.op in BufferOps:
            return node.arg.dtype
        if node.op is UnaryOps.CAST:
            return node.arg[0]
        if node.op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
            return dtypes.bool
        return self._dtype_of(node.src[1] if node.op is TernaryOps.WHERE else node.src[0])

    def _estimate(self) -> tuple[int, int]:
        """FLOPs (ALU ops times the iterations they run) and bytes of every buffer touched."""
        full, out = prod(self.full_shape), prod(self.out_shape)
        pre_ops = set(map(id, self.reduceop.walk())) if self.reduceop else set()
        flops = 0
        for n in self.ast.walk():
            if isinstance(n.op, (UnaryOps, BinaryOps, TernaryOps, ReduceOps)) and \
                    n.op is not UnaryOps.CAST:
                flops += full if id(n) in pre_ops else out
        mem = 0
        seen = set()
        for n in _leaves(self.ast):
            if isinstance(n.arg, MemBuffer) and n.arg.idx not in seen:
                seen.add(n.arg.idx)
                mem += min(self.sts[id(n)].size, full) * n.arg.dtype.itemsize
        return flops, mem


def _floor_shift(node, ctx: Linearizer) -> tuple[UOp, int]:
    """Render `node.a` shifted by k*b >= 0 so C-style (truncating) div/mod act as floor."""
    k = -(node.a.min // node.b) if node.a.min < 0 else 0
    return ctx.render_index(node.a + k * node.b), k


def _div(node: DivNode, ops, ctx: Linearizer) -> UOp:
    a, k = _floor_shift(node, ctx)
    q = ctx.alu(BinaryOps.IDIV, ctx.idx_dtype, a, ctx.const(node.b))
    return q if k == 0 else ctx.alu(BinaryOps.ADD, ctx.idx_dtype, q, ctx.const(-k))


def _mod(node: ModNode, ops, ctx: Linearizer) -> UOp:
    a, _ = _floor_shift(node, ctx)
    return ctx.alu(BinaryOps.MOD, ctx.idx_dtype, a, ctx.const(node.b))


def _sum(node: SumNode, ops, ctx: Linearizer) -> UOp:
    parts = [n.render(ops, ctx) for n in node.nodes]
    out = parts[0]
    for p in parts[1:]:
        out = ctx.alu(BinaryOps.ADD, ctx.idx_dtype, out, p)
    return out


def _and(node: AndNode, ops, ctx: Linearizer) -> UOp:
    parts = [_as_bool(n.render(ops, ctx), ctx) for n in node.nodes]
    out = parts[0]
    for p in parts[1:]:
        out = ctx.alu(BinaryOps.AND, dtypes.bool, out, p)
    return out


def _as_bool(x: UOp, ctx: Linearizer) -> UOp:
    if x.dtype == dtypes.bool:
        return x
    return ctx.alu(BinaryOps.CMPNE, dtypes.bool, x, ctx.const(0))


_NODE_OPS = {
    NumNode: lambda n, ops, ctx: ctx.const(n.b),
    Variable: lambda n, ops, ctx: ctx.vars[n.expr],
    MulNode: lambda n, ops, ctx: ctx.alu(BinaryOps.MUL, ctx.idx_dtype, n.a.render(ops, ctx),
                                         ctx.const(n.b)),
    DivNode: _div,
    ModNode: _mod,
    SumNode: _sum,
    LtNode: lambda n, ops, ctx: ctx.alu(BinaryOps.CMPLT, dtypes.bool, n.a.render(ops, ctx),
                                        ctx.const(n.b)),
    AndNode: _and,
}
