"""Attention kernels (D59): softmax(scores) @ v in one kernel, the scores never in memory.

The form. Every leaf views one index space F = rows + (keys J, depth D, width E); the
STORE views rows + (1, 1, E). The kernel stores, per row and column e,

    f(SUM_j(EXP(A_j - MAX_j(A)) * c * w_je))

where A_j is the score of key j (elementwise ops of leaves that ignore D and E, and of at
most one SUM over D of leaves that ignore E: q . k), c a product of row values (leaves
that ignore J and D, and SUM_j(EXP(A_j - MAX_j(A))), the softmax's normaliser), w_je a
product of reduce-free values that ignore D (v), and f elementwise ops of leaves that
ignore J and D. `attention_parts` recognises the form by this algebra alone (what an op
is, which axes a leaf moves along), not by how the user wrote it; anything else is not
an attention kernel.

The rewrite (online softmax). SUM_j(EXP(A_j - M) * w_j) with M = MAX_j(A) is the same
value whichever row constant M is, once divided by the same SUM_j(EXP(A_j - M)); so one
pass over the keys keeps a running max m, the running sum l of EXP(A_j - m) and the
running accumulator acc_e, and rescales both by EXP(m_old - m_new) when the max grows:

    for each row (threads split the rows):
        m = -inf, l = 0, acc[e] = 0
        for each block of W keys (vector lanes along the keys):
            s = SUM_d(q_d * k_jd) for the W keys      (inner loop over d)
            a = A(s); m_new = max(m, max over the block of a)
            corr = exp(m - m_new); p = exp(a - m_new)
            l = l * corr + p; acc[e] = acc[e] * corr + SUM over the block of p_j * w_je
        store f(acc[e] * c(l))

A max that is still -inf (every key so far masked) counts as 0 there, so a masked block
adds 0 and rescales nothing. Keys past J (the last, partial block) score -inf.
"""
from __future__ import annotations
from dataclasses import dataclass, field

from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.kernel import Opt, _pad_axis, leaves
from codegen.linearizer import LinearKernel, Linearizer
from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.target import Target
from codegen.uops import UOp, UOps

_MAX_WIDTH = 256  # E: accumulators per row (vectors of W) past this would spill


@dataclass
class AttentionParts:
    """The pieces of an attention kernel's AST (see the module docstring)."""
    rows: tuple[int, ...]
    keys: int
    depth: int
    width: int
    outer: LazyOp            # SUM_j(EXP(A - M) * c * w)
    exp: LazyOp              # EXP(A - MAX_j(A))
    score: LazyOp            # A
    inner: LazyOp | None     # SUM_d inside A
    row_factors: list[LazyOp] = field(default_factory=list)    # c
    value_factors: list[LazyOp] = field(default_factory=list)  # w


def _factors(node: LazyOp) -> list[LazyOp]:
    """The factors of a product tree."""
    if node.op is BinaryOps.MUL:
        return _factors(node.src[0]) + _factors(node.src[1])
    return [node]


def _above(node: LazyOp) -> tuple[list[LazyOp], list[LazyOp]]:
    """(leaves, reduces) of `node`'s expression, not looking under a reduce."""
    found, reduces, stack, seen = [], [], [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n.op, ReduceOps):
            reduces.append(n)
        elif n.op in (BufferOps.LOAD, BufferOps.CONST):
            found.append(n)
        else:
            stack.extend(n.src)
    return found, reduces


def _ignores(leaf: LazyOp, axes: tuple[int, ...]) -> bool:
    """Does the leaf read the same element (and validity) along every axis in `axes`?"""
    strides = leaf.arg.st.real_strides()
    return all(strides[a] == 0 for a in axes)


def _exp_parts(node: LazyOp, axis: int) -> LazyOp | None:
    """A of EXP(A - MAX_axis(A)) (either order of the ADD), else None."""
    if node.op is not UnaryOps.EXP or node.src[0].op is not BinaryOps.ADD:
        return None
    for a, b in (node.src[0].src, node.src[0].src[::-1]):
        if b.op is UnaryOps.NEG and b.src[0].op is ReduceOps.MAX and \
                b.src[0].arg == (axis,) and b.src[0].src[0] == a:
            return a
    return None


def attention_parts(ast: LazyOp) -> AttentionParts | None:
    """The parts of an attention kernel, or None if `ast` is not one (the rule, D59)."""
    if ast.op is not BufferOps.STORE or not isinstance(ast.arg, MemBuffer):
        return None
    shapes = {n.arg.st.shape for n in leaves(ast) if n.op is not BufferOps.STORE}
    if len(shapes) != 1:
        return None
    full = shapes.pop()
    n = len(full) - 3
    if n < 0 or ast.arg.st.shape != full[:n] + (1, 1, full[-1]) or \
            full[-1] > _MAX_WIDTH or not ast.arg.dtype.is_float:
        return None
    aj, ad, ae = n, n + 1, n + 2
    top_leaves, tops = _above(ast.src[0])
    if len(tops) != 1 or tops[0].op is not ReduceOps.SUM or tops[0].arg != (aj,) or \
            not all(_ignores(x, (aj, ad)) for x in top_leaves):
        return None
    outer = tops[0]
    exps = [f for f in _factors(outer.src[0]) if _exp_parts(f, aj) is not None]
    if len(exps) != 1:
        return None
    parts = AttentionParts(full[:n], full[aj], full[ad], full[ae], outer, exps[0],
                           _exp_parts(exps[0], aj), None)  # type: ignore[arg-type]
    for f in _factors(outer.src[0]):
        if f is not parts.exp and not _sort_factor(parts, f, aj, ad):
            return None
    return parts if _score_ok(parts, aj, ad, ae) else None


def _sort_factor(parts: AttentionParts, f: LazyOp, aj: int, ad: int) -> bool:
    """File a factor of the outer sum as a value (w) or a row value (c); False if neither."""
    found, reduces = _above(f)
    if not reduces:
        if all(_ignores(x, (ad,)) for x in found):
            parts.value_factors.append(f)
            return True
        return False
    if all(r.op is ReduceOps.SUM and r.arg == (aj,) and r.src[0] == parts.exp
           for r in reduces) and all(_ignores(x, (aj, ad)) for x in found):
        parts.row_factors.append(f)
        return True
    return False


def _score_ok(parts: AttentionParts, aj: int, ad: int, ae: int) -> bool:
    """A ignores E; it holds at most one reduce, a SUM over D of reduce-free values that
    ignore E; outside that sum it ignores D. Scores are floats."""
    found, reduces = _above(parts.score)
    if len(reduces) > 1 or not all(_ignores(x, (ad, ae)) for x in found):
        return False
    if reduces:
        inner = reduces[0]
        under, deeper = _above(inner.src[0])
        if inner.op is not ReduceOps.SUM or inner.arg != (ad,) or deeper or \
                not all(_ignores(x, (ae,)) for x in under):
            return False
        parts.inner = inner
    elif parts.depth != 1:
        return False
    return True


def is_attention_kernel(ast: LazyOp) -> bool:
    return attention_parts(ast) is not None


@dataclass
class _Shape:
    """What Emitter and Linearizer read of a Kernel, for a kernel that is not one."""
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


class AttentionLinearizer(Linearizer):
    """Emits an attention kernel: per row, one loop over blocks of keys (online softmax)."""

    def __init__(self, parts: AttentionParts, ast: LazyOp, target: Target):
        self.parts = parts
        self.width = max(target.lanes, 1) if not target.gpu else 1
        w = self.width
        n, (jp, ep) = len(parts.rows), (-(-parts.keys // w) * w, -(-parts.width // w) * w)
        full = parts.rows + (jp, parts.depth, ep)
        sts = {}
        for leaf in leaves(ast):
            st = _pad_axis(leaf.arg.st, n, jp) if leaf.op is not BufferOps.STORE else leaf.arg.st
            sts[id(leaf)] = _pad_axis(st, n + 2, ep)
        self.key_valid = _pad_axis(ShapeTracker.from_shape(parts.rows + (parts.keys, 1, 1)), n, jp)
        super().__init__(_Shape(ast, full, sts), target)  # type: ignore[arg-type]
        self.ast = ast
        self.point: list[Node] = []
        self.values: dict[int, UOp] = {}  # reduce node -> its value at this point

    def _idxs(self, pre: bool) -> list[Node]:
        return self.point

    def _emit(self, node: LazyOp) -> UOp:
        if id(node) in self.values:
            return self.values[id(node)]
        return super()._emit(node)

    def _name(self) -> str:
        p = self.parts
        return f"A_{prod(p.rows)}_{p.keys}_{p.depth}_{p.width}"

    def _set_lanes(self, name: str) -> Variable | None:
        self.lanes = self.width if self.width > 1 else 0
        self.lane = Variable(name, 0, self.width - 1) if self.width > 1 else None
        return self.lane

    def linearize(self) -> LinearKernel:
        p = self.parts
        launch = self._begin_rows()
        self._set_lanes("lane")
        g = self.g
        f32 = dtypes.float32 if self._dtype_of(p.score) != dtypes.float64 else dtypes.float64
        self.acc_dtype = f32
        w, ew = self.width, -(-p.width // self.width)
        vec = f32.vec(w) if w > 1 else f32
        glob = frozenset(self.global_loops)
        self.m = g.add(UOps.DEFINE_ACC, f32, (), float("-inf"), extra_loops=glob)
        self.l = g.add(UOps.DEFINE_ACC, vec, (), 0.0, extra_loops=glob)
        self.accs = [g.add(UOps.DEFINE_ACC, vec, (), 0.0, extra_loops=glob) for _ in range(ew)]
        nblocks = -(-p.keys // w)
        block = g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(nblocks)), "jb")
        self.vars["jb"] = block
        self.jb = Variable("jb", 0, nblocks - 1)
        prob, corr = self._scores(block)
        self._values(prob, corr, block)
        g.end_loop(block)
        self._finish_rows()
        return self._finish(launch)

    def _begin_rows(self) -> tuple[list[int], list[int]]:
        """Buffers and one loop over every row (the threads split it)."""
        launch = self._begin()  # the Kernel-like shape has no global axes: no loops yet
        rows = self.parts.rows
        self._loops([prod(rows)])
        names = [f"row{i}" for i in range(len(rows))]
        self._split(self.global_loops[0], list(rows), names)
        self.gidx = [Variable(nm, 0, s - 1) for nm, s in zip(names, rows)]
        return [prod(rows)], launch[1]

    def _scores(self, block: UOp) -> tuple[UOp, UOp]:
        """A for the block's keys (lanes), the running max, p = exp(A - m), l; returns
        (p, corr)."""
        p, g, w = self.parts, self.g, self.width
        lane = self.lane if self.lane is not None else NumNode(0)
        key = self.jb * w + lane
        f32 = self.acc_dtype
        if p.inner is not None:
            self.values[id(p.inner)] = self._inner(key, block)
        self.point, self.cache = [*self.gidx, key, NumNode(0), NumNode(0)], {}
        a = self.cast(self.emit(p.score), f32)
        a = self.widen(a, w) if w > 1 else a
        if p.keys % w:
            _, valid = self.key_valid.expr_idxs(self.point)
            a = self.alu(TernaryOps.WHERE, a.dtype, self.widen(self._gate(valid), w) if w > 1
                         else self._gate(valid), a, self.widen(self.const(float("-inf"), f32), w))
        most = self._across_lanes(BinaryOps.MAX, a) if w > 1 else a
        old = g.add(UOps.ACC_READ, f32, (self.m,), None, extra_loops=frozenset([block]))
        new = self.alu(BinaryOps.MAX, f32, old, most)
        g.add(UOps.ACC_UPDATE, None, (self.m, new), False)
        finite = self.alu(BinaryOps.CMPNE, dtypes.bool, new, self.const(float("-inf"), f32))
        safe = self.alu(TernaryOps.WHERE, f32, finite, new, self.const(0.0, f32))
        corr = self._exp_diff(old, safe)
        prob = self._exp_diff(a, self.widen(safe, w) if w > 1 else safe)
        l_old = g.add(UOps.ACC_READ, self.l.dtype, (self.l,), None, extra_loops=frozenset([block]))
        scaled = self.alu(BinaryOps.MUL, self.l.dtype, l_old, self.widen(corr, w) if w > 1 else corr)
        g.add(UOps.ACC_UPDATE, None, (self.l, self.alu(BinaryOps.ADD, self.l.dtype, scaled, prob)),
              False)
        return prob, corr

    def _exp_diff(self, a: UOp, b: UOp) -> UOp:
        dt = a.dtype
        assert dt is not None
        return self.alu(UnaryOps.EXP, dt, self.alu(BinaryOps.ADD, dt, a,
                                                   self.alu(UnaryOps.NEG, dt, b)))

    def _inner(self, key: Node, block: UOp) -> UOp:
        """SUM over D of the inner reduce's input for the block's keys."""
        p, g = self.parts, self.g
        inner = p.inner
        assert inner is not None
        dt: DType = self._dtype_of(inner.src[0]).opmath
        loop = g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(p.depth)), "d")
        self.vars["d"] = loop
        self.point = [*self.gidx, key, Variable("d", 0, p.depth - 1), NumNode(0)]
        self.cache = {}
        value = self.cast(self.emit(inner.src[0]), dt)
        value = self.widen(value, self.width) if self.width > 1 else value
        acc = g.add(UOps.DEFINE_ACC, value.dtype, (), 0.0,
                    extra_loops=frozenset(self.global_loops + [block]))
        cur = g.add(UOps.ACC_READ, value.dtype, (acc,), None, extra_loops=frozenset([loop]))
        g.add(UOps.ACC_UPDATE, None, (acc, self.alu(BinaryOps.ADD, value.dtype, cur, value)), True)
        g.end_loop(loop)
        out = g.add(UOps.ACC_READ, value.dtype, (acc,))
        return self.cast(out, self._dtype_of(inner))

    def _values(self, prob: UOp, corr: UOp, block: UOp) -> None:
        """acc[e] = acc[e] * corr + SUM over the block's keys of p_j * w_je."""
        p, g, w = self.parts, self.g, self.width
        lane = self._set_lanes("elane")
        col = lane if lane is not None else NumNode(0)
        for eb, acc in enumerate(self.accs):
            dt = acc.dtype
            assert dt is not None
            cur = g.add(UOps.ACC_READ, dt, (acc,), None, extra_loops=frozenset([block]))
            total = self.alu(BinaryOps.MUL, dt, cur, self.widen(corr, w) if w > 1 else corr)
            for jj in range(w):
                self.point = [*self.gidx, self.jb * w + jj, NumNode(0), col + eb * w]
                self.cache = {}
                term = self.extract(prob, jj) if w > 1 else prob
                for f in p.value_factors:
                    term = self.alu(BinaryOps.MUL, dt, self.widen(term, w) if w > 1 else term,
                                    self.cast(self.emit(f), self.acc_dtype))
                term = self.widen(term, w) if w > 1 else term
                total = self.alu(BinaryOps.ADD, dt, total, term)
            g.add(UOps.ACC_UPDATE, None, (acc, total), False)

    def _finish_rows(self) -> None:
        """Per column block: acc * c(l), the ops after the outer sum, the store."""
        p, g, w = self.parts, self.g, self.width
        total = g.add(UOps.ACC_READ, self.l.dtype, (self.l,))
        norm = self._across_lanes(BinaryOps.ADD, total) if w > 1 else total
        for node in p.outer.src[0].walk():
            if node.op is ReduceOps.SUM and node is not p.inner and node.src[0] == p.exp:
                self.values[id(node)] = self.cast(norm, self._dtype_of(node))
        lane = self.lane if self.lane is not None else NumNode(0)
        for eb, acc in enumerate(self.accs):
            self.point, self.cache = [*self.gidx, NumNode(0), NumNode(0), lane + eb * w], {}
            value = g.add(UOps.ACC_READ, acc.dtype, (acc,))
            for f in p.row_factors:
                value = self.alu(BinaryOps.MUL, value.dtype, value, self.widen(
                    self.cast(self.emit(f), self.acc_dtype), w) if w > 1 else
                    self.cast(self.emit(f), self.acc_dtype))
            self.values[id(p.outer)] = self.cast(value, self._dtype_of(p.outer))
            self.cache = {}
            self._store(self.emit(self.ast.src[0]))

    def _estimate(self) -> tuple[int, int]:
        """FLOPs: the two matmuls and the softmax; bytes: every buffer once."""
        p = self.parts
        pairs = prod(p.rows) * p.keys
        flops = pairs * (2 * p.depth + 2 * p.width + 6)
        mem, seen = 0, set()
        for n in leaves(self.ast):
            if isinstance(n.arg, MemBuffer) and n.arg.idx not in seen:
                seen.add(n.arg.idx)
                mem += n.arg.st.size * n.arg.dtype.itemsize
        return flops, mem
