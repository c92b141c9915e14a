"""Local-memory stages of a GPU reduce (OptOps.STAGE, D92).

A staged kernel's work-group is L0 x L1 work-items on hardware dims 0 and 1, each with a
register tile, and its reduce runs in stages of S steps. An operand of the reduce that
ignores the axis of dim 0 or of dim 1 (a matmul's A ignores the columns, B the rows) is
read by every work-item along that dim: per stage, the work-group copies the block of it
the stage reads into local memory once (each work-item copying its share, contiguous
work-items contiguous elements), waits at a barrier, and every work-item then reads the
operand from there; a second barrier ends the stage before the next overwrites it.

A staged operand's block is indexed by the axes it depends on: the global axes of dims
0 and 1 (extent: the work-group size there), the upcast axes (their amount) and the
steps of the stage (S), ordered by the operand's stride along them, largest first, so
the block is laid out as the operand is in memory. Other global axes are one value per work-group
(dims past 1 have one work-item per group), the stage is the outer reduce loop.
"""
from __future__ import annotations
from typing import TYPE_CHECKING

from codegen.dtypes import dtypes
from codegen.helpers import prod
from codegen.kernel import Kernel
from codegen.ops import BinaryOps, LazyOp, MemBuffer
from codegen.shape.symbolic import Node, NumNode, Variable
from codegen.uops import UOp, UOps

if TYPE_CHECKING:
    from codegen.linearizer import Linearizer


def dim_axes(k: Kernel) -> dict[int, int]:
    """Global axis -> the hardware dim (0 or 1) it alone occupies, for dims with more
    than one work-item per group."""
    n = k.n_global
    axes = {n - 1: 0, n - 2: 1} if n >= 2 and not k.flat else {}
    return {a: d for a, d in axes.items() if k.local.get(d, 1) > 1}


def staged_axes(k: Kernel, key: int) -> list[tuple[int, int]] | None:
    """(axis, extent) of the block a staged operand reads per stage, or None where the
    leaf is not staged: it must read the stage's steps and ignore a dim 0 or dim 1 axis
    (else no other work-item reads what it reads), with an affine index."""
    strides = k.sts[key].real_strides(ignore_valid=True)
    on_dim, inner = dim_axes(k), k.n_global + 1
    upcast = range(k.n_global + k.n_reduce, len(k.full_shape))
    if any(strides[a] is None for a in [*on_dim, *upcast, inner]) or not strides[inner] or \
            all(strides[a] != 0 for a in on_dim):
        return None
    axes = [(a, k.local[d]) for a, d in on_dim.items() if strides[a] != 0] + \
        [(a, k.full_shape[a]) for a in upcast if strides[a] != 0] + [(inner, k.full_shape[inner])]
    # the axis the operand is contiguous along varies fastest: neighbouring work-items
    # copy neighbouring elements (and, for B, read neighbouring banks)
    return sorted(axes, key=lambda ax: -abs(strides[ax[0]] or 0))


def stage_plan(k: Kernel, leaves: list[LazyOp]) -> dict[int, list[tuple[int, int]]]:
    """The leaves a staged kernel copies into local memory: key -> the block's axes."""
    plan = {}
    for node in leaves:
        key = id(node)
        if key not in k.loads or node.src or key in k.clamped or \
                not isinstance(node.arg, MemBuffer) or node.arg.dtype != dtypes.float32:
            continue
        axes = staged_axes(k, key)
        if axes is not None:
            plan[key] = axes
    return plan


def _strides(axes: list[tuple[int, int]]) -> list[int]:
    """Row-major strides of a block with these extents."""
    out, step = [], 1
    for _, extent in reversed(axes):
        out.append(step)
        step *= extent
    return out[::-1]


class Stager:
    """The staging of one kernel being linearized (made by Linearizer for a STAGE)."""

    def __init__(self, lin: Linearizer, leaves: list[LazyOp]):
        self.lin, k = lin, lin.k
        self.nodes = {id(n): n for n in leaves}
        self.plan = stage_plan(k, leaves)
        self.threads = k.local.get(0, 1) * k.local.get(1, 1)
        self.bufs: dict[int, UOp] = {}
        g = lin.g
        for d in (0, 1):  # the work-group's index and the work-item's within it
            lin.vars[f"grp{d}"] = g.add(UOps.SPECIAL, lin.idx_dtype, (), (f"grp{d}", 0))
            lin.vars[f"tid{d}"] = g.add(UOps.SPECIAL, lin.idx_dtype, (), (f"tid{d}", 0))
        lin.vars["tid"] = lin.alu(
            BinaryOps.ADD, lin.idx_dtype, lin.vars["tid0"],
            lin.alu(BinaryOps.MUL, lin.idx_dtype, lin.vars["tid1"], lin.const(k.local.get(0, 1))))
        for n, (key, axes) in enumerate(self.plan.items()):
            size = prod(e for _, e in axes)
            self.bufs[key] = g.add(UOps.DEFINE_LOCAL, None, (),
                                   (f"stage{n}", dtypes.float32, size))

    def fill(self) -> None:
        """Copy every staged operand's block for the current stage, then a barrier."""
        lin, k = self.lin, self.lin.k
        tid = Variable("tid", 0, self.threads - 1)
        dims = dim_axes(k)
        for key, axes in self.plan.items():
            size, strides = prod(e for _, e in axes), _strides(axes)
            assert size % self.threads == 0, (size, self.threads)
            for part in range(size // self.threads):
                at = tid + part * self.threads
                idxs: list[Node] = [*lin.gidx, lin.ridx[0], NumNode(0)] + \
                    [NumNode(0)] * len(k.upcasts)
                for (axis, extent), stride in zip(axes, strides):
                    coord = (at // stride) % extent
                    if axis in dims:
                        d = dims[axis]
                        span = k.local[d]
                        idxs[axis] = Variable(f"grp{d}", 0, k.full_shape[axis] // span - 1) * \
                            span + coord
                    else:
                        idxs[axis] = coord
                idx, valid = k.sts[key].expr_idxs(idxs)
                value = lin._load(self.nodes[key].arg, idx, valid)
                lin.g.add(UOps.STORE, None, (self.bufs[key], lin.render_index(at), value))
        lin.g.add(UOps.BARRIER, None)

    def read(self, node: LazyOp) -> UOp:
        """A staged operand's value in the copy being emitted, from local memory."""
        lin, k = self.lin, self.lin.k
        axes = self.plan[id(node)]
        dims, first_upcast = dim_axes(k), k.n_global + k.n_reduce
        index: Node = NumNode(0)
        for (axis, extent), stride in zip(axes, _strides(axes)):
            if axis in dims:
                coord: Node = Variable(f"tid{dims[axis]}", 0, extent - 1)
            elif axis == k.n_global + 1:
                coord = lin.ridx[1]
            else:
                coord = NumNode(lin.combo[axis - first_upcast])
            index = index + coord * stride
        return lin.g.add(UOps.LOAD, dtypes.float32, (self.bufs[id(node)],
                                                     lin.render_index(index)))

