"""Index expressions (codegen/shape/symbolic.py nodes) -> index uops.

The linearizer renders every load's and store's index and validity through this table;
C-style (truncating) division and remainder are shifted so they act as floor on the
ranges the symbolic engine proves.
"""
from __future__ import annotations
from typing import Any, Protocol

from codegen.dtypes import DType, dtypes
from codegen.ops import BinaryOps, Op
from codegen.shape.symbolic import (AndNode, DivNode, LtNode, ModNode, MulNode, Node,
                                    NumNode, RenderOps, SumNode, Variable)
from codegen.uops import UOp


class IndexContext(Protocol):
    """What rendering an index needs from the linearizer."""
    idx_dtype: DType
    vars: dict[str, UOp]

    def alu(self, op: Op, dtype: DType, *src: UOp) -> UOp: ...

    def const(self, value: Any, dtype: DType | None = None) -> UOp: ...

    def render_index(self, node: Node) -> UOp: ...


def _floor_shift(node: DivNode | ModNode, ctx: IndexContext) -> tuple[UOp, int]:
    """Render `node.a` shifted by k*b >= 0 so C-style (truncating) div/mod act as floor."""
    k = -(node.a.min // node.b) if node.a.min < 0 else 0
    return ctx.render_index(node.a + k * node.b), k


def _div(node: DivNode, ops: RenderOps, ctx: IndexContext) -> UOp:
    a, k = _floor_shift(node, ctx)
    q = ctx.alu(BinaryOps.IDIV, ctx.idx_dtype, a, ctx.const(node.b))
    return q if k == 0 else ctx.alu(BinaryOps.ADD, ctx.idx_dtype, q, ctx.const(-k))


def _mod(node: ModNode, ops: RenderOps, ctx: IndexContext) -> UOp:
    a, _ = _floor_shift(node, ctx)
    return ctx.alu(BinaryOps.MOD, ctx.idx_dtype, a, ctx.const(node.b))


def _sum(node: SumNode, ops: RenderOps, ctx: IndexContext) -> UOp:
    parts: list[UOp] = [n.render(ops, ctx) for n in node.nodes]
    out = parts[0]
    for p in parts[1:]:
        out = ctx.alu(BinaryOps.ADD, ctx.idx_dtype, out, p)
    return out


def _and(node: AndNode, ops: RenderOps, ctx: IndexContext) -> UOp:
    parts = [as_bool(n.render(ops, ctx), ctx) for n in node.nodes]
    out = parts[0]
    for p in parts[1:]:
        out = ctx.alu(BinaryOps.AND, dtypes.bool, out, p)
    return out


def as_bool(x: UOp, ctx: IndexContext) -> UOp:
    """x as a bool: itself, or x != 0."""
    if x.dtype == dtypes.bool:
        return x
    return ctx.alu(BinaryOps.CMPNE, dtypes.bool, x, ctx.const(0))


NODE_OPS: RenderOps = {
    NumNode: lambda n, ops, ctx: ctx.const(n.b),
    Variable: lambda n, ops, ctx: ctx.vars[n.expr],
    MulNode: lambda n, ops, ctx: ctx.alu(BinaryOps.MUL, ctx.idx_dtype, n.a.render(ops, ctx),
                                         ctx.const(n.b)),
    DivNode: _div,
    ModNode: _mod,
    SumNode: _sum,
    LtNode: lambda n, ops, ctx: ctx.alu(BinaryOps.CMPLT, dtypes.bool, n.a.render(ops, ctx),
                                        ctx.const(n.b)),
    AndNode: _and,
}
