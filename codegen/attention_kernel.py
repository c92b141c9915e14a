"""Emitting an attention kernel (D62): AttentionParts (codegen/attention.py) -> linear IR.

Per group of rows (the threads split the groups), one loop over blocks of keys:

    for each block of KB vectors of W keys:
        s[row][kv] = SUM over d of q[row, d] * k[key, d]     (a loop over D: W keys a vector)
        a = A(s); m_new = max(m, max over the block); corr = exp(m - m_new)
        p = exp(a - m_new); l = l * corr + p
        acc[row][e] = acc[row][e] * corr + SUM over the block's keys of p[key] * w[key, e]
    out[row][e] = f(acc[row][e] * c(SUM of l's lanes))

A group is up to 4 rows next to each other along the last row axis (q's rows: the keys
and values they read are the same, so each load serves the group); the sums over D run
in up to 8 independent chains (an add's latency over its throughput). The column sums
acc live in the output row (in the cache) when it is of their dtype, so the registers
hold the block's scores; else in registers.
"""
from __future__ import annotations

from codegen.attention import AttentionParts
from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.kernel import _pad_axis, leaves
from codegen.linearizer import LinearKernel, Linearizer, LoopShape
from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.target import Target
from codegen.uops import UOp, UOps, dtype_of

_ACC_VECTORS = 16  # column accumulators of a group of rows (of 32 vector registers)
_CHAINS = 8  # independent sums over D in a group: an add's latency times its throughput
_KEY_VECTORS = 4  # vectors of keys per block: the softmax's work per block is shared


class AttentionLinearizer(Linearizer):
    """Emits an attention kernel: per group of rows, one loop over blocks of keys."""

    def __init__(self, parts: AttentionParts, ast: LazyOp, target: Target):
        self.parts = parts
        self.width = w = max(target.lanes, 1)
        self.kvecs = max(1, min(_KEY_VECTORS, -(-parts.keys // w)))  # vectors of keys per block
        self.block = bw = w * self.kvecs
        n, jp, ep = len(parts.rows), -(-parts.keys // bw) * bw, -(-parts.width // w) * w
        # a last row axis that is no multiple of the group is padded: the group's rows past
        # it read clamped addresses and store nothing (197 queries, 4 a group: 2x faster),
        # where the stores are vectors along the columns, which the CPU can gate
        store = ast.arg.st
        gated = w > 1 and parts.width > 1 and store.real_strides()[n + 2] == 1
        self.copies = c = _rows_at_once(parts.rows, ep // w, self.kvecs, target.vector_registers,
                                        gated)
        rows = parts.rows[:-1] + (-(-parts.rows[-1] // c) * c,) if parts.rows else ()
        full = rows + (jp, parts.depth, ep)
        sts, clamped = {}, set()
        for leaf in leaves(ast):
            if leaf.op is BufferOps.STORE:  # masked past E (one column: one scalar store)
                st = leaf.arg.st if parts.width == 1 else leaf.arg.st.pad(
                    tuple((0, ep - parts.width if i == n + 2 else 0) for i in range(n + 3)))
            else:
                st = _pad_axis(_pad_axis(leaf.arg.st, n, jp), n + 2, ep)
                if rows != parts.rows and all(v.mask is None for v in st.views):
                    clamped.add(id(leaf))  # what it reads past the rows reaches no store
            sts[id(leaf)] = _pad_axis(st, n - 1, rows[-1]) if rows != parts.rows else st
        self.key_valid = _pad_axis(ShapeTracker.from_shape(rows + (parts.keys, 1, 1)), n, jp)
        super().__init__(LoopShape(ast, full, sts, clamped=frozenset(clamped)),  # type: ignore[arg-type]
                         target)
        self.rows = rows
        self.point: list[Node] = []
        self.values: dict[int, UOp] = {}  # reduce node -> its value for the copy emitted
        self.dt = dtypes.float64 if self._dtype_of(parts.score) == dtypes.float64 else dtypes.float32

    def _idxs(self, pre: bool) -> list[Node]:
        return self.point

    def _emit(self, node: LazyOp) -> UOp:
        if id(node) in self.values:
            return self.values[id(node)]
        return super()._emit(node)

    def _name(self) -> str:
        p = self.parts
        return f"A_{prod(p.rows)}_{p.keys}_{p.depth}_{p.width}"

    def _set_lanes(self, name: str) -> Node:
        """Vector lanes (a variable of the index math) along the keys or the columns."""
        self.lanes = self.width if self.width > 1 else 0
        self.lane = Variable(name, 0, self.width - 1) if self.width > 1 else None
        return self.lane if self.lane is not None else NumNode(0)

    def _vec(self, x: UOp) -> UOp:
        return self.widen(x, self.width) if self.width > 1 else x

    def _at(self, copy: int, key: Node, depth: Node, col: Node) -> None:
        """Emit at row `copy` of the group, key, depth and column (a fresh cache)."""
        self.point, self.cache = [*self.row_idx[copy], key, depth, col], {}

    def linearize(self) -> LinearKernel:
        p, w = self.parts, self.width
        launch = self._begin_rows()
        g, dt = self.g, self.dt
        vec = dt.vec(w) if w > 1 else dt
        glob = frozenset(self.global_loops)
        copies = range(self.copies)
        self.m = [g.add(UOps.DEFINE_ACC, dt, (), float("-inf"), extra_loops=glob) for _ in copies]
        self.l = [g.add(UOps.DEFINE_ACC, vec, (), 0.0, extra_loops=glob) for _ in copies]
        ew = -(-p.width // w)
        out = self.ast.arg
        self.out_leaf = LazyOp(BufferOps.LOAD, (), MemBuffer(out.idx, out.dtype, out.st))
        self.sts[id(self.out_leaf)] = self.sts[id(self.ast)]
        if self.rows != p.rows:  # a padded row's sums reach only its store, which is masked
            self.k.clamped |= {id(self.out_leaf)}
        # the column sums live in the output row (in the cache) when it holds them exactly:
        # registers are left for the scores' block
        self.in_memory = out.dtype == dt
        if self.in_memory:
            col = self._set_lanes("elane")
            for c in copies:
                for eb in range(ew):
                    self._at(c, NumNode(0), NumNode(0), col + eb * w)
                    self._store(self._vec(self.const(0.0, dt)))
            self.accs: list[list[UOp]] = []
        else:
            self.accs = [[g.add(UOps.DEFINE_ACC, vec, (), 0.0, extra_loops=glob)
                          for _ in range(ew)] for _ in copies]
        self.columns = ew
        # the whole blocks, then the last, padded one: in a loop over whole blocks the
        # keys' validity folds to true, so its loads are plain vectors (D70's peel, for
        # the keys: 200 keys took 8.3 ms in one masked loop, against 1.3 unfused)
        nblocks, whole = -(-p.keys // self.block), p.keys // self.block
        for first, end in ((0, whole), (whole, nblocks)):
            if end <= first:
                continue
            block = g.add(UOps.LOOP, self.idx_dtype, (self.const(first), self.const(end)), "jb")
            self.vars["jb"] = block
            self.jb = Variable("jb", first, end - 1)
            probs = self._scores(block)
            self._values(probs, block)
            g.end_loop(block)
        self._finish_rows()
        return self._finish(launch)

    def _begin_rows(self) -> tuple[list[int], list[int]]:
        """Buffers and one loop over every group of rows (the threads split it). A group
        is `copies` consecutive rows along the last row axis: the keys and values they
        read are the same, so each is loaded once for the group."""
        launch = self._begin()  # the Kernel-like shape has no global axes: no loops yet
        rows, c = self.rows, self.copies
        groups = rows[:-1] + ((rows[-1] // c,) if rows else ())
        self._loops([prod(groups)])
        names = [f"row{i}" for i in range(len(groups))]
        self._split(self.global_loops[0], list(groups), names)
        outer = [Variable(nm, 0, s - 1) for nm, s in zip(names, groups)]
        self.row_idx = [outer[:-1] + [outer[-1] * c + k] if rows else [] for k in range(c)]
        return [prod(groups)], launch[1]

    def _scores(self, block: UOp) -> list[tuple[list[UOp], UOp]]:
        """Per row of the group: A for the block's keys (vectors of lanes), the running
        max, l; returns (p = exp(A - m) per vector, corr = exp(m_old - m)) per row."""
        p, g, w, dt = self.parts, self.g, self.width, self.dt
        lane = self._set_lanes("lane")
        keys = [self.jb * self.block + kv * w + lane for kv in range(self.kvecs)]
        inner = self._inner(keys, block) if p.inner is not None else []
        out = []
        for c in range(self.copies):
            scores = []
            for kv, key in enumerate(keys):
                if p.inner is not None:
                    self.values[id(p.inner)] = inner[c][kv]
                self._at(c, key, NumNode(0), NumNode(0))
                scores.append(self._masked(self._vec(self.cast(self.emit(p.score), dt))))
            most = scores[0]
            for a in scores[1:]:
                most = self.alu(BinaryOps.MAX, dtype_of(a), most, a)
            most = self._across_lanes(BinaryOps.MAX, most) if w > 1 else most
            old = g.add(UOps.ACC_READ, dt, (self.m[c],), None, extra_loops=frozenset([block]))
            new = self.alu(BinaryOps.MAX, dt, old, most)
            g.add(UOps.ACC_UPDATE, None, (self.m[c], new), False)
            finite = self.alu(BinaryOps.CMPNE, dtypes.bool, new, self.const(float("-inf"), dt))
            safe = self._vec(self.alu(TernaryOps.WHERE, dt, finite, new, self.const(0.0, dt)))
            corr = self._exp_diff(old, self.alu(TernaryOps.WHERE, dt, finite, new,
                                                self.const(0.0, dt)))
            probs = [self._exp_diff(a, safe) for a in scores]
            lsum = self.l[c]
            total = self.alu(BinaryOps.MUL, dtype_of(lsum), g.add(
                UOps.ACC_READ, lsum.dtype, (lsum,), None, extra_loops=frozenset([block])),
                self._vec(corr))
            for prob in probs:
                total = self.alu(BinaryOps.ADD, dtype_of(lsum), total, prob)
            g.add(UOps.ACC_UPDATE, None, (lsum, total), False)
            out.append((probs, corr))
        return out

    def _masked(self, a: UOp) -> UOp:
        """-inf at keys past the last (the padded end of the last block)."""
        if self.parts.keys % self.block == 0:
            return a
        _, valid = self.key_valid.expr_idxs(self.point)
        if valid.min == 1:
            return a
        return self.alu(TernaryOps.WHERE, dtype_of(a), self._vec(self._gate(valid)), a,
                        self._vec(self.const(float("-inf"), self.dt)))

    def _exp_diff(self, a: UOp, b: UOp) -> UOp:
        dt = dtype_of(a)
        return self.alu(UnaryOps.EXP, dt, self.alu(BinaryOps.ADD, dt, a,
                                                   self.alu(UnaryOps.NEG, dt, b)))

    def _inner(self, keys: list[Node], block: UOp) -> list[list[UOp]]:
        """Per row of the group and vector of keys, SUM over D of the inner reduce's
        input, in one loop over D unrolled `split` times, each step into its own
        accumulator (independent chains of adds, summed after the loop)."""
        p, g = self.parts, self.g
        inner = p.inner
        assert inner is not None
        dt: DType = self._dtype_of(inner.src[0]).opmath
        chains = max(1, _CHAINS // (self.copies * self.kvecs))
        split = next(u for u in (chains, 4, 2, 1) if p.depth % u == 0)
        steps = p.depth // split
        loop = g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(steps)), "d")
        self.vars["d"] = loop
        step = Variable("d", 0, steps - 1)
        accs: dict[tuple[int, int], list[UOp]] = {}
        for u in range(split):
            for c in range(self.copies):
                for kv, key in enumerate(keys):
                    self._at(c, key, step * split + u, NumNode(0))
                    value = self._vec(self.cast(self.emit(inner.src[0]), dt))
                    acc = g.add(UOps.DEFINE_ACC, value.dtype, (), 0.0,
                                extra_loops=frozenset(self.global_loops + [block]))
                    cur = g.add(UOps.ACC_READ, value.dtype, (acc,), None,
                                extra_loops=frozenset([loop]))
                    g.add(UOps.ACC_UPDATE, None, (acc, self.alu(
                        BinaryOps.ADD, dtype_of(value), cur, value)), True)
                    accs.setdefault((c, kv), []).append(acc)
        g.end_loop(loop)
        out: list[list[UOp]] = [[] for _ in range(self.copies)]
        for (c, _), chain in accs.items():
            total = g.add(UOps.ACC_READ, chain[0].dtype, (chain[0],))
            for acc in chain[1:]:
                total = self.alu(BinaryOps.ADD, dtype_of(total), total,
                                 g.add(UOps.ACC_READ, acc.dtype, (acc,)))
            out[c].append(self.cast(total, self._dtype_of(inner)))
        return out

    def _values(self, probs: list[tuple[list[UOp], UOp]], block: UOp) -> None:
        """acc[e] = acc[e] * corr + SUM over the block's keys of p_j * w_je, per row: key
        by key, each row's p_j broadcast once for every column vector (so few are live)."""
        w = self.width
        col = self._set_lanes("elane")
        blocks = range(self.columns)
        totals = [[self.alu(BinaryOps.MUL, self._vtype(), self._acc_get(c, eb, block),
                             self._vec(corr)) for eb in blocks]
                  for c, (_, corr) in enumerate(probs)]
        for jj in range(self.block):
            for eb in blocks:
                for c, (prob, _) in enumerate(probs):
                    self._at(c, self.jb * self.block + jj, NumNode(0), col + eb * w)
                    term = self._vec(self.extract(prob[jj // w], jj % w) if w > 1 else
                                     prob[jj])
                    for f in self.parts.value_factors:
                        term = self.alu(BinaryOps.MUL, dtype_of(term), term,
                                        self._vec(self.cast(self.emit(f), self.dt)))
                    totals[c][eb] = self.alu(BinaryOps.ADD, dtype_of(term), totals[c][eb], term)
        for c, row in enumerate(totals):
            for eb, total in enumerate(row):
                self._acc_put(c, eb, total)

    def _store(self, value: UOp) -> None:
        if self.parts.width == 1 and dtype_of(value).count > 1:
            value = self.extract(value, 0)  # the lanes past the one column are not stored
        super()._store(value)

    def _vtype(self) -> DType:
        return self.dt.vec(self.width) if self.width > 1 else self.dt

    def _acc_get(self, c: int, eb: int, block: UOp | None) -> UOp:
        """Row c's sums for column vector eb: from its accumulator or the output row."""
        if self.in_memory:
            col = self.lane if self.lane is not None else NumNode(0)
            self._at(c, NumNode(0), NumNode(0), col + eb * self.width)
            return self._vec(self._leaf(self.out_leaf))
        acc = self.accs[c][eb]
        extra = frozenset([block]) if block is not None else frozenset()
        return self.g.add(UOps.ACC_READ, acc.dtype, (acc,), None, extra_loops=extra)

    def _acc_put(self, c: int, eb: int, value: UOp) -> None:
        if self.in_memory:
            col = self.lane if self.lane is not None else NumNode(0)
            self._at(c, NumNode(0), NumNode(0), col + eb * self.width)
            self._store(value)
        else:
            self.g.add(UOps.ACC_UPDATE, None, (self.accs[c][eb], value), False)

    def _finish_rows(self) -> None:
        """Per row and column block: acc * c(l), the ops after the outer sum, the store."""
        p, g, w = self.parts, self.g, self.width
        col = self.lane if self.lane is not None else NumNode(0)
        norms = [n for n in p.outer.src[0].walk() if n.op is ReduceOps.SUM and n.src[0] == p.exp]
        for c in range(self.copies):
            total = g.add(UOps.ACC_READ, self.l[c].dtype, (self.l[c],))
            norm = self._across_lanes(BinaryOps.ADD, total) if w > 1 else total
            for node in norms:
                self.values[id(node)] = self.cast(norm, self._dtype_of(node))
            for eb in range(self.columns):
                value = self._acc_get(c, eb, None)
                self._at(c, NumNode(0), NumNode(0), col + eb * w)
                for f in p.row_factors:
                    value = self.alu(BinaryOps.MUL, dtype_of(value), value,
                                     self._vec(self.cast(self.emit(f), self.dt)))
                self.values[id(p.outer)] = self.cast(value, self._dtype_of(p.outer))
                self.cache = {}
                self._store(self.emit(self.ast.src[0]))

    def _estimate(self) -> tuple[int, int]:
        """FLOPs: the two matmuls and the softmax; bytes: every buffer once."""
        p = self.parts
        flops = prod(p.rows) * p.keys * (2 * p.depth + 2 * p.width + 6)
        mem, seen = 0, set()
        for n in leaves(self.ast):
            if isinstance(n.arg, MemBuffer) and n.arg.idx not in seen:
                seen.add(n.arg.idx)
                mem += n.arg.st.size * n.arg.dtype.itemsize
        return flops, mem


def _rows_at_once(rows: tuple[int, ...], vectors: int, key_vectors: int, registers: int,
                  pad: bool) -> int:
    """Rows of a group: 4, 2 or 1, dividing the last row axis (or, with `pad`, no more
    than it), while the group's column accumulators fit in about half the vector
    registers (16) and its scores, a block of `key_vectors` per row, in half of the
    target's: AVX-512's 32 registers hold 4 rows' scores, AVX2's 16 hold 2 (4 spilled:
    4x4x128x32 0.71-0.74 -> 0.44-0.59 ms a kernel; depth 64 is 2 rows on both). A
    target that names no registers (CLANG's C) is not bounded by them."""
    for c in (4, 2):
        fits = rows[-1] % c == 0 or pad and rows[-1] >= c if rows else False
        if fits and c * vectors <= _ACC_VECTORS and \
                (not registers or c * key_vectors <= registers // 2):
            return c
    return 1
