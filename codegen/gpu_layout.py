"""GPU launch layout for the linearizer: work-item indices, merged axes and work-group
reductions. A mixin of Linearizer (see KernelOptions.gpu).
"""
from __future__ import annotations

from codegen.helpers import prod
from codegen.ops import BinaryOps, UnaryOps
from codegen.uops import UOp, UOps

_GROUP_MIN_REDUCE = 256      # a GPU reduce this long, with few outputs, uses a work-group
_GROUP_MAX_OUTPUTS = 4096


def _launch_sizes(sizes: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Work-groups and work-group size per dim. Dims past 0 take an exact divisor; dim 0 is
    padded (the renderer guards the extra work-items) when no good divisor exists."""
    groups, local = [], []
    for d, size in enumerate(sizes):
        cap = max(1, min(size, budget))
        best = max(n for n in range(1, cap + 1) if size % n == 0)
        if d == 0 and best * 2 < cap:
            best = cap
        groups.append(-(-size // best))
        local.append(best)
        budget //= best
    return groups, local


class GPULayoutMixin:
    """Linearizer methods that bind loops to GPU work-items."""

    def _gpu_indices(self, gsizes: list[int]) -> tuple[list[int], list[int]]:
        """Bind the global axes to work-item indices; return (groups, local size) per dim.

        Hardware dim 0 takes the innermost axis, so neighbouring work-items touch neighbouring
        memory. Axes beyond three are merged into the outermost dim and split back with // and
        %. A large reduce with few outputs becomes a group reduce: one work-group per output,
        each work-item a strided share of the reduce, combined by the renderer."""
        g, opts = self.g, self.opts
        n_out, rsize = prod(gsizes), prod(self.reduce_shape)
        names = [f"gidx{i}" for i in range(len(gsizes))]
        if (self.reduceop is not None and opts.local_size > 1 and rsize >= _GROUP_MIN_REDUCE
                and n_out <= _GROUP_MAX_OUTPUTS):
            size = 1 << (min(opts.local_size, rsize).bit_length() - 1)  # a power of two
            self._split(g.add(UOps.SPECIAL, self.idx_dtype, (), ("grp0", n_out)), gsizes, names)
            self.group = (g.add(UOps.SPECIAL, self.idx_dtype, (), ("lidx0", size)), size)
            return [n_out], [size]
        if not gsizes:
            return [1], [1]
        axes = list(range(len(gsizes)))
        dims = [[a] for a in reversed(axes[-2:])] + ([axes[:-2]] if len(axes) > 2 else [])
        groups, local = _launch_sizes([prod(gsizes[a] for a in d) for d in dims], opts.local_size)
        if any(n > limit for n, limit in zip(groups[1:], opts.max_global[1:])):
            dims = [axes]  # a dim beyond its launch limit: everything goes to dim 0
            groups, local = _launch_sizes([n_out], opts.local_size)
        for d, dim_axes in enumerate(dims):
            size = prod(gsizes[a] for a in dim_axes)
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
        lidx, size = self.group
        count = self.alu(BinaryOps.IDIV, self.idx_dtype, self.alu(
            BinaryOps.ADD, self.idx_dtype, self.const(prod(rsizes) + size - 1),
            self.alu(UnaryOps.NEG, self.idx_dtype, lidx)), self.const(size))
        loop = self.g.add(UOps.LOOP, self.idx_dtype, (self.const(0), count), "ridx")
        flat = self.alu(BinaryOps.ADD, self.idx_dtype,
                        self.alu(BinaryOps.MUL, self.idx_dtype, loop, self.const(size)), lidx)
        self._split(flat, list(rsizes), [f"ridx{j}" for j in range(len(rsizes))])
        return loop
