"""A GPU row kernel whose work-items walk their share of the row in unrolled steps (D94, D96).

A row kernel on a GPU gives each row a work-group (codegen/opt/gpu.py); work-item l walks
elements l, l+L, l+2L, ... of the row once per reduce and once more to store. Each walk is
unrolled into steps, a step being a copy of the loop body at a fixed position:

- a short share (at most `Target.row_held` steps) is all steps: a load of element l + jL
  is the same uop in every phase, so the row is read from memory once, then held in
  registers (a row softmax's max, sum and store read x three times from the cache
  otherwise: 65536 x 1000 at 0.71 of the copy bandwidth on an H200, held 0.92-0.96;
  4096 x 16384 0.73 -> 0.90);
- a longer share is a loop whose body is `Target.row_chunk` ungated steps, their loads
  issued together (a loop of one load at a time kept one in flight per work-item:
  log_softmax over 1024 x 50257 at 0.39 of the copy bandwidth), with the steps the
  chunks leave over unrolled before the loop (see `_walk`).

A looping walk of a softmax's row (the SUM of EXP(a - MAX(a)) over the row whose MAX it
reads) takes the max and the sum in one walk (an online softmax, D96): each work-item keeps
its running max m and its sum s of EXP(a - m), rescaled by EXP(m_old - m_new) when m
grows; the work-group then combines the maxes (M) and the rescaled sums s * EXP(m - M).
A new max that is still -inf counts as 0 in EXP(a - m) (a row -inf so far adds 0, never
-inf - -inf), and an old max of -inf rescales its sum, 0, by EXP(-inf) = 0; so -inf, +inf
and NaN rows give what the separate walks give.

The last step, where L does not divide the row, is gated: its loads read nothing and its
store writes nothing past the row's end.

    acc = identity; partial = op(x[l], x[l + L], ..., gated x[l + (n-1)L])
    acc = op(acc, partial)  -> combined across the work-group in local memory
"""
from __future__ import annotations
from typing import Iterator

from codegen.attention import exp_minus_max
from codegen.dtypes import DType, dtypes
from codegen.helpers import prod
from codegen.kernel import Kernel
from codegen.linearizer import LinearKernel
from codegen.reduces import _identity
from codegen.ops import BinaryOps, LazyOp, Op, ReduceOps, TernaryOps, UnaryOps
from codegen.rows import RowLinearizer
from codegen.shape.symbolic import Variable
from codegen.target import Target
from codegen.uops import UOp, UOps, dtype_of


def held_steps(k: Kernel, target: Target) -> int:
    """The steps of a GPU row kernel's walk when each work-item holds its share in
    registers (0: it is longer than `target.row_held` and walks in a loop of chunks)."""
    if not k.rows or not k.group:
        return 0
    steps = -(-prod(k.reduce_shape) // k.group)
    return steps if steps <= target.row_held else 0


class GroupRowLinearizer(RowLinearizer):
    """A row kernel with a work-group per row whose walks are unrolled steps, held or in
    a loop of chunks (see the module)."""

    def linearize(self) -> LinearKernel:
        self.done: dict[int, UOp] = {}  # id(SUM) -> its value, taken with its MAX (online)
        return super().linearize()

    def _walk(self) -> Iterator[tuple[UOp | None, list[int]]]:
        """The walk in segments: (None, steps) unrolled, or (loop, steps) for the body of
        a loop over chunks of `row_chunk` steps, the loop open while the caller emits it
        and closed when it asks for the next segment. The unrolled steps left over by the
        chunks come first: a group combine follows the last update of an accumulator
        outside its loop (codegen/renderer/cstyle.py)."""
        assert self.group is not None and self.combos == [()], "one row per work-group"
        size, total = self.group[1], prod(self.k.reduce_shape)
        steps, chunk = -(-total // size), self._chunk
        chunks = 0 if steps <= self.target.row_held else total // size // chunk
        if steps > chunks * chunk:
            yield None, list(range(chunks * chunk, steps))
        if chunks:
            loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(chunks)),
                              "chunk")
            yield loop, list(range(chunk))
            self.g.end_loop(loop)

    @property
    def _chunk(self) -> int:
        """Steps per iteration of a walk's loop."""
        return max(self.target.row_chunk, 1)

    def _at(self, loop: UOp | None, j: int) -> None:
        """Bind the reduce indices to step j (of chunk `loop`, if any): element
        l + jL (+ loop * chunk * L); set the gate of a step that may pass the row's end."""
        assert self.group is not None
        lidx, size = self.group
        rsizes, total = self.k.reduce_shape, prod(self.k.reduce_shape)
        self.ridx = [Variable(f"ridx{i}", 0, max(s - 1, 0)) for i, s in enumerate(rsizes)]
        flat = self.alu(BinaryOps.ADD, self.idx_dtype, lidx, self.const(j * size))
        if loop is not None:
            base = self.alu(BinaryOps.MUL, self.idx_dtype, loop, self.const(self._chunk * size))
            flat = self.alu(BinaryOps.ADD, self.idx_dtype, flat, base)
        self._split(flat, list(rsizes), [f"ridx{i}" for i in range(len(rsizes))])
        self.step_gate = None if loop is not None or (j + 1) * size <= total else self.alu(
            BinaryOps.CMPLT, dtypes.bool, lidx, self.const(total - j * size))
        self.combo, self.cache = (), {}

    def _reduce(self, node: LazyOp, combos: list[tuple[int, ...]]) -> dict[tuple[int, ...], UOp]:
        src_dtype = self._dtype_of(node.src[0])
        acc_dtype = src_dtype.opmath
        if id(node) in self.done:  # the sum of an online softmax, with its max
            return {(): self.cast(self.done[id(node)], src_dtype)}
        paired = self._online_sum(node)
        if paired is not None:
            return {(): self.cast(self._online(node, paired, acc_dtype), src_dtype)}
        op = BinaryOps.ADD if node.op is ReduceOps.SUM else BinaryOps.MAX
        acc = self.g.add(UOps.DEFINE_ACC, acc_dtype, (), _identity(node.op, acc_dtype))
        for loop, steps in self._walk():
            value = self._fold(op, self._values(node.src[0], loop, steps, node.op, acc_dtype))
            self._update(acc, op, value, loop)
        final = self.g.add(UOps.ACC_READ, acc_dtype, (acc,))  # combined across the group
        return {(): self.cast(final, src_dtype)}

    def _values(self, value: LazyOp, loop: UOp | None, steps: list[int], reduce: Op,
                dtype: DType) -> list[UOp]:
        """`value` at each step, the reduce's identity where a step is past the row."""
        identity = self.const(_identity(reduce, dtype), dtype)
        out = []
        for j in steps:
            self._at(loop, j)
            v = self.cast(self.emit(value), dtype)
            out.append(v if self.step_gate is None else
                       self.alu(TernaryOps.WHERE, dtype, self.step_gate, v, identity))
        self.step_gate = None
        return out

    def _fold(self, op: BinaryOps, values: list[UOp]) -> UOp:
        """op over the values as a tree: independent ops, not one chain."""
        while len(values) > 1:
            pairs = [self.alu(op, dtype_of(a), a, b) for a, b in zip(values[::2], values[1::2])]
            values = pairs + values[len(values) - len(values) % 2:]
        return values[0]

    def _update(self, acc: UOp, op: BinaryOps, value: UOp, loop: UOp | None,
                arg: str | None = None) -> UOp:
        """acc = op(acc, value), in `loop` if any; returns the value read before the update.
        `arg` "own": the accumulator is this work-item's own, not combined across the group."""
        inside = frozenset() if loop is None else frozenset([loop])
        current = self.g.add(UOps.ACC_READ, dtype_of(acc), (acc,), None, extra_loops=inside)
        new = self.alu(op, dtype_of(acc), current, value)
        self.g.add(UOps.ACC_UPDATE, None, (acc, new), arg)
        return current

    def _online_sum(self, node: LazyOp) -> LazyOp | None:
        """The SUM over the row of EXP(a - node), when `node` is MAX(a) over it, the walk
        loops (a held row is read once anyway) and the target takes online softmaxes."""
        if node.op is not ReduceOps.MAX or not self.target.row_online or \
                held_steps(self.k, self.target):
            return None
        return next((s for s in self.k.reduceops if s.op is ReduceOps.SUM and s.arg == node.arg
                     and exp_minus_max(s.src[0], node.arg) is node), None)

    def _online(self, node: LazyOp, total: LazyOp, dt: DType) -> UOp:
        """MAX(a) and SUM(EXP(a - MAX(a))) in one walk (the module's online softmax): the
        max is returned, the sum kept for its own `_reduce`."""
        zero, low = self.const(0.0, dt), self.const(_identity(ReduceOps.MAX, dt), dt)
        m = self.g.add(UOps.DEFINE_ACC, dt, (), _identity(ReduceOps.MAX, dt))
        s = self.g.add(UOps.DEFINE_ACC, dt, (), 0.0)
        for loop, steps in self._walk():
            chunk_max = self._fold(BinaryOps.MAX, self._values(node.src[0], loop, steps,
                                                               ReduceOps.MAX, dt))
            old = self._update(m, BinaryOps.MAX, chunk_max, loop, "own")
            new = self.alu(BinaryOps.MAX, dt, old, chunk_max)
            self.row_values[(id(node), ())] = self._finite(new, zero, low)  # exp(a - m_new)
            terms = self._fold(BinaryOps.ADD, self._values(total.src[0], loop, steps,
                                                           ReduceOps.SUM, dt))
            inside = frozenset() if loop is None else frozenset([loop])
            s_old = self.g.add(UOps.ACC_READ, dt, (s,), None, extra_loops=inside)
            scaled = self.alu(BinaryOps.MUL, dt, s_old, self._exp_diff(old, new, zero, low))
            self.g.add(UOps.ACC_UPDATE, None, (s, self.alu(BinaryOps.ADD, dt, scaled, terms)),
                       "own")
        m_own = self.g.add(UOps.ACC_READ, dt, (m,))
        s_own = self.g.add(UOps.ACC_READ, dt, (s,))
        group_max = self.g.add(UOps.DEFINE_ACC, dt, (), _identity(ReduceOps.MAX, dt))
        self._update(group_max, BinaryOps.MAX, m_own, None)
        top = self.g.add(UOps.ACC_READ, dt, (group_max,))  # combined across the group
        group_sum = self.g.add(UOps.DEFINE_ACC, dt, (), 0.0)
        mine = self.alu(BinaryOps.MUL, dt, s_own, self._exp_diff(m_own, top, zero, low))
        self._update(group_sum, BinaryOps.ADD, mine, None)
        self.done[id(total)] = self.g.add(UOps.ACC_READ, dt, (group_sum,))
        return top

    def _finite(self, m: UOp, zero: UOp, low: UOp) -> UOp:
        """m, or 0 where m is -inf (nothing but -inf seen)."""
        return self.alu(TernaryOps.WHERE, dtype_of(m),
                        self.alu(BinaryOps.CMPNE, dtypes.bool, m, low), m, zero)

    def _exp_diff(self, old: UOp, new: UOp, zero: UOp, low: UOp) -> UOp:
        """EXP(old - new), the factor that rescales a sum of EXP(a - old) to one of
        EXP(a - new), with a new max of -inf counting as 0 (an old one of -inf gives 0:
        its sum is 0, and 0 * EXP(0 - new) could be 0 * inf)."""
        dt = dtype_of(old)
        diff = self.alu(BinaryOps.ADD, dt, old,
                        self.alu(UnaryOps.NEG, dt, self._finite(new, zero, low)))
        return self.alu(UnaryOps.EXP, dt, diff)

    def _store_rows(self) -> None:
        for loop, steps in self._walk():
            values = []  # every step's loads before any store (C pointers may alias)
            for j in steps:
                self._at(loop, j)
                values.append(self.emit(self.ast.src[0]))
            for j, value in zip(steps, values):
                self._at(loop, j)  # the store's index and gate
                self._store(value)
        self.step_gate = None
