"""Row kernels (D55): several reduces over the same axes and the elementwise ops that read
them, in one kernel that walks each row while it is in the cache.

softmax(x) is max over a row, a sum of exp(x - max) over it, and exp(x - max) / sum at
every element. As three kernels it reads x from memory three times; as a row kernel each
row of x is read from memory once and then from the cache:

    for each row (the global loops; threads split the outer one):
        max = reduce over the row          (inner reduces first)
        sum = reduce over the row, reading max
        for each element of the row: out = exp(x - max) / sum

The Kernel (codegen/kernel.py) has the usual global and reduce axes; the reduce loops and
the store loop all walk the reduce axes, with the same vector lanes and padding. Where the
store needs the last reduce's input again and it is costly (softmax's exp(x - max)), the
reduce loop also stores it into the output row and the store loop reads it back from the
cache instead of computing it twice.
"""
from __future__ import annotations

from codegen.dtypes import DType
from codegen.linearizer import LinearKernel, Linearizer
from codegen.ops import TRANSCENDENTAL, BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps
from codegen.shape.symbolic import Node, NumNode
from codegen.uops import UOp


class RowLinearizer(Linearizer):
    """Emits a row kernel: per row, each reduce in loops of its own (inner reduces first),
    then the store, in loops over the same axes."""

    def linearize(self) -> LinearKernel:
        launch = self._begin()
        self.combos = self._combos()  # several rows at once: one copy of each loop's body per row
        self.row_values: dict[tuple[int, tuple[int, ...]], UOp] = {}
        self.sts = dict(self.sts)  # plus the output row, read back (the Kernel's stay)
        out = self.ast.arg
        self.row_leaf = LazyOp(BufferOps.LOAD, (), MemBuffer(out.idx, out.dtype, out.st))
        self.sts[id(self.row_leaf)] = self.sts[id(self.ast)]
        # a GPU's work-group per row (D94): each work-item stores its share of the row; its
        # reduce loops store nothing (exp is cheap there, and a row read back costs bandwidth)
        self.each_item = self.group is not None
        self.forward = None if self.group is not None else self._forwarded()
        self.storing = False
        for node in self.k.reduceops:
            for combo, value in self._reduce(node, self.combos).items():
                self.row_values[(id(node), combo)] = value
        self.storing = True
        self._store_rows()
        return self._finish(launch)

    def _forwarded(self) -> LazyOp | None:
        """The last reduce's input, if the store reads it too (not only through the reduce),
        it has a costly op, and the output's dtype holds it exactly."""
        value = self.k.reduceops[-1].src[0]
        if self._dtype_of(value) != self.ast.arg.dtype or \
                not any(n.op in TRANSCENDENTAL for n in value.walk()):
            return None
        stack, seen = [self.ast.src[0]], set()
        while stack:  # the store's own ops: reduces are values computed before
            node = stack.pop()
            if node is value:
                return value
            if id(node) not in seen and not isinstance(node.op, ReduceOps):
                seen.add(id(node))
                stack.extend(node.src)
        return None

    def _idxs(self, pre: bool) -> list[Node]:
        return super()._idxs(True)  # every leaf of a row kernel views the full shape

    def _accumulate(self, node: LazyOp, combo: tuple[int, ...], op: BinaryOps, acc_dtype: DType,
                    loops: list[UOp], acc: UOp | None = None, body: LazyOp | None = None,
                    lanes: int = 1) -> UOp:
        out = super()._accumulate(node, combo, op, acc_dtype, loops, acc, body, lanes)
        if self.forward is not None and node is self.k.reduceops[-1]:
            self._store(self.cache[id(self.forward)])  # emitted by the accumulation
        return out

    def _name(self) -> str:
        """R_<rows>_<row>: a row kernel."""
        glob, red = self.k.name_shape
        return f"R_{'_'.join(map(str, glob or (1,)))}_{'_'.join(map(str, red))}"

    def _emit(self, node: LazyOp) -> UOp:
        if isinstance(node.op, ReduceOps):  # one value per row, computed before this loop
            return self.row_values[(id(node), self.combo)]
        if self.storing and node is self.forward:  # stored by the last reduce's loop
            return self._leaf(self.row_leaf)
        return super()._emit(node)

    def _store_rows(self) -> None:
        """The store loops; a padded row stores its last, partial vector after them."""
        rsizes = self.k.reduce_shape
        peel = self.k.padded and bool(rsizes)
        loops = self._reduce_loops(rsizes, peel)
        self._store_steps()
        if peel:
            self.g.end_loop(loops.pop())
            self.ridx[-1] = NumNode(rsizes[-1] - 1)
            self._store_steps()
        for loop in reversed(loops):
            self.g.end_loop(loop)

    def _store_steps(self) -> None:
        """One step of the store loop for each row taken at once."""
        for combo in self.combos:
            self.combo, self.cache = combo, {}
            self._store(self.emit(self.ast.src[0]))
