"""Emitting one point of a kernel's iteration space: AST nodes -> uops.

`Emitter` turns the AST's elementwise ops and leaves into uops for the loop variables of
the copy being emitted (global indices, reduce indices, upcast copy, vector lane): a
leaf's index and validity come from its ShapeTracker, rendered into integer uops; a load
is one vector load where memory is contiguous along the lanes, masked where validity
depends on the lane, else gathered lane by lane. The Linearizer (codegen/linearizer.py)
opens the loops, runs the reduces and stores; it sets the state declared here.
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.kernel import Kernel
from codegen.lanes import lane_window, live_along_lanes
from codegen.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, Op, ReduceOps, \
    TernaryOps, UnaryOps
from codegen.index_render import NODE_OPS, as_bool
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.view import View

if TYPE_CHECKING:
    from codegen.stage import Stager
from codegen.shape.symbolic import AndNode, Node, NumNode, Variable, and_nodes
from codegen.target import Target
from codegen.uops import UOp, UOpGraph, UOps, dtype_of


class Emitter:
    """Uops for AST nodes at the loop variables of the copy being emitted."""
    g: UOpGraph
    idx_dtype: DType
    bufs: dict[int, UOp]
    vars: dict[str, UOp]
    global_loops: list[UOp]  # the open global loops (accumulators live inside them)
    gidx: list[Node]  # a peeled loop's index is bounded to its segment (or one value)
    ridx: list[Node]
    lane: Variable | None
    cache: dict[int, UOp]
    reduced: dict[tuple[int, ...], UOp]  # the reduce's value per upcast copy
    offset: UOp | None = None  # the offset of the indirect load being emitted
    step_gate: UOp | None = None  # loads read only where it holds (a row's last share, D94)

    stager: Stager | None = None  # the Linearizer's local-memory stages, where it has them

    def __init__(self, k: Kernel, target: Target):
        self.k, self.target, self.ast = k, target, k.ast
        self.sts: dict[int, ShapeTracker] = k.sts
        self.lanes, self.reduce_lanes = k.lanes, k.reduce_lanes
        self.combo: tuple[int, ...] = ()  # the upcast copy being emitted
        self.blocks: dict[tuple[int, ...], list[UOp]] = {}  # a transposed load's rows

    def _idxs(self, pre: bool) -> list[Node]:
        """The index of every axis of the kernel's shape in the copy being emitted."""
        idxs: list[Node] = [*self.gidx]
        idxs += self.ridx if pre else [NumNode(0)] * self.k.n_reduce
        idxs += [NumNode(c) for c in self.combo]
        if self.lane is not None:
            idxs.append(NumNode(0) if self.reduce_lanes and not pre else self.lane)
        return idxs

    def _max_index(self) -> int:
        """The largest value an index expression may take: a flattened work-item index (the
        global axes, the reduce axes) or a view's position in its buffer (a multi-view
        tracker divides a position as large as its shape's product). A matmul's
        4096 x 4096 x 4096 iteration space indexes 2^24 elements: not 2^36."""
        k = self.k
        return max([prod(k.global_shape), prod(k.reduce_shape)] +
                   [_reach(v) for st in self.sts.values() for v in st.views])

    def const(self, value: Any, dtype: DType | None = None) -> UOp:
        return self.g.add(UOps.CONST, dtype or self.idx_dtype, (), value)

    def alu(self, op: Op, dtype: DType, *src: UOp) -> UOp:
        return self.g.add(UOps.ALU, dtype, src, op)

    def cast(self, x: UOp, dtype: DType) -> UOp:
        have = dtype_of(x)
        if have.count > 1:
            if (have.scalar, dtype) == (dtypes.float64, dtypes.float16):  # a scalar helper
                return self.vectorize([self.cast(self.extract(x, k), dtype)
                                       for k in range(have.count)])
            dtype = dtype.vec(have.count)
        return x if have == dtype else self.g.add(UOps.CAST, dtype, (x,), None)

    def vectorize(self, lanes: list[UOp]) -> UOp:
        return self.g.add(UOps.VECTORIZE, dtype_of(lanes[0]).vec(len(lanes)), tuple(lanes))

    def extract(self, x: UOp, lane: int) -> UOp:
        dtype = dtype_of(x)
        return x if dtype.count == 1 else self.g.add(UOps.EXTRACT, dtype.scalar, (x,), lane)

    def widen(self, x: UOp, lanes: int) -> UOp:
        """A scalar used where vectors flow: every lane gets it."""
        return x if dtype_of(x).count > 1 or lanes == 1 else self.vectorize([x] * lanes)

    def render_index(self, node: Node) -> UOp:
        out: UOp = node.render(NODE_OPS, self)
        return out

    def emit(self, node: LazyOp) -> UOp:
        if id(node) not in self.cache:
            self.cache[id(node)] = self._emit(node)
        return self.cache[id(node)]

    def _emit(self, node: LazyOp) -> UOp:
        if node.op in (BufferOps.LOAD, BufferOps.CONST):
            return self._leaf(node)
        if isinstance(node.op, ReduceOps):
            return self.reduced[self.combo]
        if node.op is TernaryOps.WHERE:
            return self._where(node)
        srcs = [self.emit(s) for s in node.src]
        if node.op is UnaryOps.CAST and node.arg[1]:  # a bitcast
            lanes = dtype_of(srcs[0]).count
            dtype = node.arg[0].vec(lanes) if lanes > 1 else node.arg[0]
            return self.g.add(UOps.BITCAST, dtype, (srcs[0],), None)
        if node.op is UnaryOps.CAST:
            return self.cast(srcs[0], node.arg[0])
        lanes = max(dtype_of(s).count for s in srcs)
        srcs = [self.widen(s, lanes) for s in srcs]
        if node.op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
            return self.alu(node.op, dtypes.bool.vec(lanes) if lanes > 1 else dtypes.bool, *srcs)
        return self.alu(node.op, dtype_of(srcs[0]), *srcs)

    def _where(self, node: LazyOp) -> UOp:
        side = self._folded(node)
        if side is not None:
            return side
        srcs = [self.emit(s) for s in node.src]
        lanes = max(dtype_of(s).count for s in srcs)
        return self.select(*[self.widen(s, lanes) for s in srcs])

    def select(self, cond: UOp, yes: UOp, no: UOp) -> UOp:
        """where(cond, yes, no); a vector whose condition is known in some lanes (a gate
        through padding at a row's edge) lane by lane: a known lane takes its side, the
        others a scalar select. As one vector select, LLVM 22's x86 backend took the lanes
        a padded division computes as 0 / 0 to be 0 and turned the select into an AND
        with the first lane's condition broadcast: an avg_pool2d gradient was NaN where
        no window reached (the dead lanes are 0 in every operand, D71)."""
        if cond.op is not UOps.VECTORIZE or not any(c.op is UOps.CONST for c in cond.src):
            return self.alu(TernaryOps.WHERE, dtype_of(yes), cond, yes, no)
        out = []
        for k, c in enumerate(cond.src):
            if c.op is UOps.CONST:
                out.append(self.extract(yes if c.arg else no, k))
            else:
                out.append(self.alu(TernaryOps.WHERE, dtype_of(yes).scalar, c,
                                    self.extract(yes, k), self.extract(no, k)))
        return self.vectorize(out)

    def _folded(self, node: LazyOp) -> UOp | None:
        """A where whose condition is a constant (a gate that folds in a segment of its
        loop, a cat's piece in its place or out of it: codegen/peel.py): the one side,
        with nothing of the other computed; else None."""
        cond = self.emit(node.src[0])
        return self.emit(node.src[1] if cond.arg else node.src[2]) \
            if cond.op is UOps.CONST else None

    def _leaf(self, node: LazyOp) -> UOp:
        """A scalar where the value is the same in every lane, one vector load where memory
        is contiguous along the lanes, else a vector gathered lane by lane; a staged
        operand from local memory (codegen/stage.py)."""
        if self.stager is not None and id(node) in self.stager.plan:
            return self.stager.read(node)
        idx, valid = self.sts[id(node)].expr_idxs(self._idxs(id(node) in self.k.pre))
        if id(node) in self.k.clamped and not node.src and in_memory(node.arg, idx):
            valid = NumNode(1)  # padded positions read real memory, for outputs not stored
        lane = self.lane
        if node.src:  # an indirect load (codegen/gather.py): its address adds an offset
            offset = self.cast(self.emit(node.src[0]), self.idx_dtype)
            if dtype_of(offset).count > 1:  # a different row per lane: lane by lane
                assert lane is not None
                return self.vectorize([self._load(node.arg, idx.substitute({lane: k}),
                                                  valid.substitute({lane: k}),
                                                  offset=self.extract(offset, k))
                                       for k in range(self.lanes)])
            self.offset = offset
            try:
                return self._placed(node, idx, valid)
            finally:
                self.offset = None
        return self._placed(node, idx, valid)

    def _placed(self, node: LazyOp, idx: Node, valid: Node) -> UOp:
        lane = self.lane
        if lane is None or (lane not in idx.vars() and lane not in valid.vars()):
            return self._load(node.arg, idx, valid, clamp=id(node) in self.k.clamped)
        found = self._lane_masked(node, idx, valid) if lane in valid.vars() else \
            self._windowed(node, idx, valid)
        if found is None:
            found = self._transposed(node, valid)
        if found is not None:
            return found
        return self.vectorize([self._load(node.arg, idx.substitute({lane: k}),
                                          valid.substitute({lane: k}))
                               for k in range(self.lanes)])

    def _lane_masked(self, node: LazyOp, idx: Node, valid: Node) -> UOp | None:
        """Lanes whose validity depends on the lane: one masked vector load where every
        lane that may be valid reads contiguous memory (and a vector may start there)."""
        assert self.lane is not None
        if not isinstance(node.arg, MemBuffer) or node.arg.dtype == dtypes.bool:
            return None
        start = live_along_lanes(idx, valid, self.lane, self.lanes)
        if start is None or not self.vector_at(start):
            return None
        return self._masked_load(node.arg, start, valid)

    def _windowed(self, node: LazyOp, idx: Node, valid: Node) -> UOp | None:
        """Lanes reading a short span at constant offsets: one vector load (contiguous
        lanes), or one load of the span and a shuffle."""
        assert self.lane is not None
        window = lane_window(idx, self.lane, self.lanes) if isinstance(node.arg, MemBuffer) \
            else None
        if window is None or not self.vector_at(window[0]):
            return None
        start, offsets = window
        if offsets == list(range(self.lanes)):  # contiguous: one vector load
            return self._load(node.arg, start, valid, self.lanes)
        wide = self._load(node.arg, start, valid, max(offsets) + 1)
        return self.vectorize([self.extract(wide, k) for k in offsets])

    def vector_at(self, start: Node) -> bool:
        """Whether a vector load or store may start at `start`: anywhere on a CPU; on a GPU
        only at a multiple of the lane count (float4 must be 16-byte aligned, and every
        buffer is its own allocation, D98), and not after an indirect load's offset."""
        if not self.target.gpu:
            return True
        rest = start % self.lanes
        return self.offset is None and isinstance(rest, NumNode) and rest.b == 0

    def _transposed(self, node: LazyOp, valid: Node) -> UOp | None:
        """A load strided along the lanes but contiguous along an upcast axis as wide as
        the lanes (a transposing copy: a matmul operand packed into panels): the block of
        lanes x copies is read as one vector per lane, along the copies, and transposed in
        registers (log2(lanes) rounds of two-vector shuffles), so each copy takes a row of
        it; None where the load is not such (or masked)."""
        lanes, copies = self.lanes, self.k.upcasts[:-1]
        if valid.min != 1 or not isinstance(node.arg, MemBuffer) or node.src or \
                lanes & (lanes - 1):
            return None
        first = len(self.k.full_shape) - len(self.k.upcasts)  # the first upcast axis
        strides = self.sts[id(node)].real_strides()
        axis = next((p for p, size in enumerate(copies)
                     if size == lanes and strides[first + p] == 1), None)
        if axis is None:
            return None
        key = (id(node),) + self.combo[:axis] + self.combo[axis + 1:]
        if key not in self.blocks:
            idxs = self._idxs(id(node) in self.k.pre)
            at = len(idxs) - 1 - len(copies) + axis  # the copy's entry (the lane's is last)
            rows = []
            for k in range(lanes):
                idxs[at], idxs[-1] = NumNode(0), NumNode(k)
                idx, _ = self.sts[id(node)].expr_idxs(idxs)
                rows.append(self._load(node.arg, idx, NumNode(1), lanes))
            self.blocks[key] = self._transpose(rows)
        return self.blocks[key][self.combo[axis]]

    def _transpose(self, rows: list[UOp]) -> list[UOp]:
        """The transpose of a square block of vectors: at each level h (half the width,
        then half that, ... 1) the top-right and bottom-left h x h blocks of every 2h x 2h
        block swap, each new vector taking lanes of two old ones (one shuffle)."""
        n, h = len(rows), len(rows) // 2
        while h:
            new = list(rows)
            for a in range(n):
                if a & h:
                    continue
                lo, hi = rows[a], rows[a + h]
                new[a] = self.vectorize([self.extract(hi, c - h) if c & h else
                                         self.extract(lo, c) for c in range(n)])
                new[a + h] = self.vectorize([self.extract(hi, c) if c & h else
                                             self.extract(lo, c + h) for c in range(n)])
            rows, h = new, h // 2
        return rows

    def _masked_load(self, arg: MemBuffer, start: Node, valid: Node) -> UOp:
        """Contiguous lanes whose validity depends on the lane (a padded row): one vector
        load that reads only the valid lanes (a vector gate; 0 in the others)."""
        gate = self._gate(valid)
        return self.g.add(UOps.LOAD, arg.dtype.vec(self.lanes),
                          (self.bufs[arg.idx], self._address(start), gate))

    def _address(self, idx: Node, offset: UOp | None = None) -> UOp:
        """The index uop of a load: `idx` plus an indirect load's offset, if any."""
        out = self.render_index(idx)
        offset = offset if offset is not None else self.offset
        return out if offset is None else self.alu(BinaryOps.ADD, self.idx_dtype, out, offset)

    def _load(self, arg: MemBuffer | ConstBuffer, idx: Node, valid: Node, lanes: int = 1,
              offset: UOp | None = None, clamp: bool = False) -> UOp:
        """A load, 0 where `valid` is false; with `clamp` (a leaf masked only by a padded
        output axis, Kernel.clamped: what it reads there reaches only outputs that are not
        stored) it reads element 0 there instead, a select of the index but not the value.
        `offset`: an indirect load's data offset (else the one `_leaf` set)."""
        zero = self.const(0, arg.dtype) if arg.dtype != dtypes.bool else self.const(False, arg.dtype)
        if valid.min == valid.max == 0:
            return zero
        gate = None if valid.min == 1 else as_bool(self.render_index(valid), self)
        if self.step_gate is not None:
            gate = self.step_gate if gate is None else \
                self.alu(BinaryOps.AND, dtypes.bool, gate, self.step_gate)
        if isinstance(arg, ConstBuffer):
            value = self.const(arg.val, arg.dtype)
            return value if gate is None else self.alu(TernaryOps.WHERE, arg.dtype, gate, value, zero)
        address = self._address(idx, offset)
        if clamp and gate is not None:
            index = self.alu(TernaryOps.WHERE, self.idx_dtype, gate, address, self.const(0))
            return self.g.add(UOps.LOAD, arg.dtype, (self.bufs[arg.idx], index))
        src = (self.bufs[arg.idx], address) + ((gate,) if gate is not None else ())
        return self.g.add(UOps.LOAD, arg.dtype.vec(lanes) if lanes > 1 else arg.dtype, src)

    def _gate(self, valid: Node) -> UOp:
        """Where `valid` holds: one bool, or one per lane when it depends on the lane."""
        lane = self.lane
        if lane is None or lane not in valid.vars():
            return as_bool(self.render_index(valid), self)
        terms = valid.nodes if isinstance(valid, AndNode) else [valid]
        per_lane = and_nodes([t for t in terms if lane in t.vars()])
        gate = self.vectorize([as_bool(self.render_index(per_lane.substitute({lane: k})), self)
                               for k in range(self.lanes)])
        rest = and_nodes([t for t in terms if lane not in t.vars()])
        if rest.min == 1:
            return gate
        # the terms every lane shares are one bool, broadcast: a padded conv's row check
        # per reduce step; the per-lane vector depends on fewer loops, so LLVM hoists it
        shared = self.widen(as_bool(self.render_index(rest), self), self.lanes)
        return self.alu(BinaryOps.AND, dtype_of(gate), gate, shared)

    def _dtype_of(self, node: LazyOp) -> DType:
        return node_dtype(node)


def in_memory(arg: MemBuffer | ConstBuffer, idx: Node) -> bool:
    """Whether every index `idx` can take (its bounds, over the padded loops too) lies in
    the memory under `arg`'s view: its first view, the buffer's own layout, reaches
    `st.size` elements (a packed panel's zero columns, D68, lie there)."""
    return isinstance(arg, MemBuffer) and idx.min >= 0 and idx.max < arg.st.size


def node_dtype(node: LazyOp) -> DType:
    """The dtype an AST node computes."""
    if node.op in BufferOps:
        dtype: DType = node.arg.dtype
        return dtype
    if node.op is UnaryOps.CAST:
        cast_to: DType = node.arg[0]
        return cast_to
    if node.op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
        return dtypes.bool
    return node_dtype(node.src[1] if node.op is TernaryOps.WHERE else node.src[0])


def _reach(view: View) -> int:
    """The largest magnitude a view's position (or any partial sum of it) takes over its
    whole shape, masked positions too (their loads are guarded, their indexes computed).
    In a multi-view tracker each view's position is the flat index the view below it
    divides, so the largest over all views bounds every intermediate value."""
    up = down = 0
    for stride, size in zip(view.strides, view.shape):
        term = stride * (size - 1)
        up, down = (up + term, down) if term > 0 else (up, down - term)
    return abs(view.offset) + max(up, down) + 1
