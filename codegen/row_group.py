"""A GPU row kernel whose work-items hold their share of the row in registers (D94).

A row kernel on a GPU gives each row a work-group (codegen/opt/gpu.py); work-item l walks
elements l, l+L, l+2L, ... of the row once per reduce and once more to store. Where that
share is short (at most `HELD_MAX` elements), the walk is unrolled: each step is a copy of
the loop body at a fixed position, so a load of element l + jL is the same uop in every
phase and the row is read from memory once, then held in registers (a row softmax's max,
sum and store read x three times from the cache otherwise: 65536 x 1000 at 0.71 of the
copy bandwidth on an H200, held 0.92-0.96; 4096 x 16384 0.73 -> 0.90). The last step,
where L does not divide the row, is gated: its loads read nothing and its store writes
nothing past the row's end.

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
from codegen.uops import UOp, UOps

HELD_MAX = 24   # elements of a row one work-item holds in registers, at most


def held_steps(k: Kernel) -> int:
    """The steps of a GPU row kernel's walk when each work-item holds its share (0: it
    loops instead, the share being longer than `HELD_MAX`)."""
    if not k.rows or not k.group:
        return 0
    steps = -(-prod(k.reduce_shape) // k.group)
    return steps if steps <= HELD_MAX else 0


class HeldRowLinearizer(RowLinearizer):
    """A row kernel with a work-group per row whose walks are unrolled (see the module)."""

    def _steps(self) -> Iterator[int]:
        """For each step j: bind the reduce indices to element l + jL and set the gate of
        a step that passes the row's end; yields j."""
        assert self.group is not None and self.combos == [()], "one row per work-group"
        lidx, size = self.group
        rsizes, total = self.k.reduce_shape, prod(self.k.reduce_shape)
        self.ridx = [Variable(f"ridx{j}", 0, max(s - 1, 0)) for j, s in enumerate(rsizes)]
        for j in range(-(-total // size)):
            flat = self.alu(BinaryOps.ADD, self.idx_dtype, lidx, self.const(j * size))
            self._split(flat, list(rsizes), [f"ridx{i}" for i in range(len(rsizes))])
            self.step_gate = None if (j + 1) * size <= total else self.alu(
                BinaryOps.CMPLT, dtypes.bool, lidx, self.const(total - j * size))
            self.combo, self.cache = (), {}
            yield j
        self.step_gate = None

    def _reduce(self, node: LazyOp, combos: list[tuple[int, ...]]) -> dict[tuple[int, ...], UOp]:
        src_dtype = self._dtype_of(node.src[0])
        acc_dtype = src_dtype.opmath
        op = BinaryOps.ADD if node.op is ReduceOps.SUM else BinaryOps.MAX
        identity = self.const(_identity(node.op, acc_dtype), acc_dtype)
        values = []
        for _ in self._steps():
            value = self.cast(self.emit(node.src[0]), acc_dtype)
            if self.step_gate is not None:
                value = self.alu(TernaryOps.WHERE, acc_dtype, self.step_gate, value, identity)
            values.append(value)
        while len(values) > 1:  # a tree: independent ops, not one chain
            pairs = [self.alu(op, acc_dtype, a, b) for a, b in zip(values[::2], values[1::2])]
            values = pairs + values[len(values) - len(values) % 2:]
        acc = self.g.add(UOps.DEFINE_ACC, acc_dtype, (), _identity(node.op, acc_dtype))
        current = self.g.add(UOps.ACC_READ, acc_dtype, (acc,))
        self.g.add(UOps.ACC_UPDATE, None, (acc, self.alu(op, acc_dtype, current, values[0])))
        final = self.g.add(UOps.ACC_READ, acc_dtype, (acc,))  # combined across the group
        return {(): self.cast(final, src_dtype)}

    def _store_rows(self) -> None:
        for _ in self._steps():
            self._store(self.emit(self.ast.src[0]))
