"""GPU work-items for a Linearizer: the global axes bound to work-item indices as the
gpu_layout pass (codegen/opt/gpu.py) decided, and a group reduce's strided walk of the
reduce by the work-items of one work-group."""
from __future__ import annotations

from codegen.emit import Emitter
from codegen.helpers import prod
from codegen.ops import BinaryOps, UnaryOps
from codegen.opt.gpu import hardware_dims
from codegen.uops import UOp, UOps


class WorkItems(Emitter):
    """Binds global axes (and a group reduce's walk) to GPU work-item indices."""
    group: tuple[UOp, int] | None  # (local index, size) of a group reduce

    def _gpu_indices(self, gsizes: list[int]) -> tuple[list[int], list[int]]:
        """GPU: bind the global axes to work-item indices as the gpu_layout pass (codegen/opt/gpu.py) decided;
        return (work-groups, work-group size) per hardware dim."""
        g, k = self.g, self.k
        names = [f"gidx{i}" for i in range(len(gsizes))]
        if k.group:
            self._split(g.add(UOps.SPECIAL, self.idx_dtype, (), ("grp0", prod(gsizes))),
                        gsizes, names)
            self.group = (g.add(UOps.SPECIAL, self.idx_dtype, (), ("lidx0", k.group)), k.group)
            return [prod(gsizes)], [k.group]
        if not gsizes:
            return [1], [1]
        groups, local = [], []
        for d, dim_axes in enumerate(hardware_dims(len(gsizes), k.flat)):
            size = prod(gsizes[a] for a in dim_axes)
            local.append(k.local.get(d, 1))
            groups.append(-(-size // local[-1]))
            special = g.add(UOps.SPECIAL, self.idx_dtype, (), (f"gidx{d}", size))
            self._split(special, [gsizes[a] for a in dim_axes], [names[a] for a in dim_axes])
        return groups, local

    def _split(self, index: UOp, sizes: list[int], names: list[str]) -> None:
        """Bind axes (outer to inner) merged into one index: axis = index // inner % size."""
        inner = 1
        for j in reversed(range(len(names))):
            q = index if inner == 1 else self.alu(BinaryOps.IDIV, self.idx_dtype, index,
                                                  self.const(inner))
            self.vars[names[j]] = q if j == 0 else self.alu(BinaryOps.MOD, self.idx_dtype, q,
                                                            self.const(sizes[j]))
            inner *= sizes[j]

    def _group_loop(self, rsizes: tuple[int, ...]) -> UOp:
        """Work-item l of a group reduce walks reduce elements l, l+L, l+2L, ... < R."""
        assert self.group is not None
        lidx, size = self.group
        count = self.alu(BinaryOps.IDIV, self.idx_dtype, self.alu(
            BinaryOps.ADD, self.idx_dtype, self.const(prod(rsizes) + size - 1),
            self.alu(UnaryOps.NEG, self.idx_dtype, lidx)), self.const(size))
        loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), count), "ridx")
        flat = self.alu(BinaryOps.ADD, self.idx_dtype,
                        self.alu(BinaryOps.MUL, self.idx_dtype, loop, self.const(size)), lidx)
        self._split(flat, list(rsizes), [f"ridx{j}" for j in range(len(rsizes))])
        return loop
