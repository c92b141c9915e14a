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

The last step, where L does not divide the row, is gated: its loads read nothing and its
store writes nothing past the row's end.

    acc = identity; partial = op(x[l], x[l + L], ..., gated x[l + (n-1)L])
    acc = op(acc, partial)  -> combined across the work-group in local memory
"""
from __future__ import annotations
from typing import Iterator

from codegen.dtypes import dtypes
from codegen.helpers import prod
from codegen.kernel import Kernel
from codegen.linearizer import _identity
from codegen.ops import BinaryOps, LazyOp, ReduceOps, TernaryOps
from codegen.rows import RowLinearizer
from codegen.shape.symbolic import Variable
from codegen.target import Target
from codegen.uops import UOp, UOps


def held_steps(k: Kernel, target: Target) -> int:
    """The steps of a GPU row kernel's walk when each work-item holds its share in
    registers (0: it is longer than `target.row_held` and walks in a loop of chunks)."""
    if not k.rows or not k.group:
        return 0
    steps = -(-prod(k.reduce_shape) // k.group)
    return steps if steps <= target.row_held else 0


class HeldRowLinearizer(RowLinearizer):
    """A row kernel with a work-group per row whose walks are unrolled (see the module)."""

    def _walk(self) -> Iterator[tuple[UOp | None, list[int]]]:
        """The walk in segments: (None, steps) unrolled, or (loop, steps) for the body of
        a loop over chunks of `row_chunk` steps, the loop open while the caller emits it
        and closed when it asks for the next segment. The unrolled steps left over by the
        chunks come first: a group combine follows the last update of an accumulator
        outside its loop (codegen/renderer/cstyle.py)."""
        assert self.group is not None and self.combos == [()], "one row per work-group"
        size, total = self.group[1], prod(self.k.reduce_shape)
        steps, chunk = -(-total // size), max(self.target.row_chunk, 1)
        chunks = 0 if steps <= self.target.row_held else total // size // chunk
        if steps > chunks * chunk:
            yield None, list(range(chunks * chunk, steps))
        if chunks:
            loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), self.const(chunks)),
                              "chunk")
            yield loop, list(range(chunk))
            self.g.end_loop(loop)

    def _at(self, loop: UOp | None, j: int) -> None:
        """Bind the reduce indices to step j (of chunk `loop`, if any): element
        l + jL (+ loop * chunk * L); set the gate of a step that may pass the row's end."""
        assert self.group is not None
        lidx, size = self.group
        rsizes, total = self.k.reduce_shape, prod(self.k.reduce_shape)
        self.ridx = [Variable(f"ridx{i}", 0, max(s - 1, 0)) for i, s in enumerate(rsizes)]
        flat = self.alu(BinaryOps.ADD, self.idx_dtype, lidx, self.const(j * size))
        if loop is not None:
            base = self.alu(BinaryOps.MUL, self.idx_dtype, loop,
                            self.const(self.target.row_chunk * size))
            flat = self.alu(BinaryOps.ADD, self.idx_dtype, flat, base)
        self._split(flat, list(rsizes), [f"ridx{i}" for i in range(len(rsizes))])
        self.step_gate = None if loop is not None or (j + 1) * size <= total else self.alu(
            BinaryOps.CMPLT, dtypes.bool, lidx, self.const(total - j * size))
        self.combo, self.cache = (), {}

    def _reduce(self, node: LazyOp, combos: list[tuple[int, ...]]) -> dict[tuple[int, ...], UOp]:
        src_dtype = self._dtype_of(node.src[0])
        acc_dtype = src_dtype.opmath
        op = BinaryOps.ADD if node.op is ReduceOps.SUM else BinaryOps.MAX
        identity = self.const(_identity(node.op, acc_dtype), acc_dtype)
        acc = self.g.add(UOps.DEFINE_ACC, acc_dtype, (), _identity(node.op, acc_dtype))
        for loop, steps in self._walk():
            values = []
            for j in steps:
                self._at(loop, j)
                value = self.cast(self.emit(node.src[0]), acc_dtype)
                if self.step_gate is not None:
                    value = self.alu(TernaryOps.WHERE, acc_dtype, self.step_gate, value, identity)
                values.append(value)
            while len(values) > 1:  # a tree: independent ops, not one chain
                pairs = [self.alu(op, acc_dtype, a, b) for a, b in zip(values[::2], values[1::2])]
                values = pairs + values[len(values) - len(values) % 2:]
            inside = frozenset() if loop is None else frozenset([loop])
            current = self.g.add(UOps.ACC_READ, acc_dtype, (acc,), None, extra_loops=inside)
            self.g.add(UOps.ACC_UPDATE, None, (acc, self.alu(op, acc_dtype, current, values[0])))
        self.step_gate = None
        final = self.g.add(UOps.ACC_READ, acc_dtype, (acc,))  # combined across the group
        return {(): self.cast(final, src_dtype)}

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
