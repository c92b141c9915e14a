"""Schedule pass: one-hot picks against a range become indirect loads (D69).

`Tensor.arange(n)` of integers marks its buffer (`LazyBuffer.range_len`: it holds 0..n-1).
Each kernel that reads such a buffer goes through codegen/gather.py's rewrite, told
which of its inputs are ranges; a rewritten kernel no longer reads the ranges it
compared with, so they leave its inputs and the others are renumbered.

`picks_by_range` tells the reduce splitter (split.py) to leave such a reduce whole: its
stages would compare against a reshaped range, which the rewrite cannot see through.
"""
from __future__ import annotations

from codegen.gather import rewrite_gathers
from codegen.scatter import rewrite_scatter
from codegen.ops import BinaryOps, BufferOps, LazyOp, LoadOps, MemBuffer, TernaryOps, UnaryOps
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem, loop_target


def indirect_items(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """The items with their one-hot picks rewritten where the rewrite applies."""
    return [_rewrite(item) for item in items]


def _rewrite(item: ScheduleItem) -> ScheduleItem:
    if item.ast is None:
        return item
    ranges = {i + 1: b.range_len for i, b in enumerate(item.inputs) if b.range_len}
    if not ranges:
        return item
    ast = rewrite_gathers(item.ast, ranges)
    if ast is item.ast and loop_target(item.out.device):
        ast = rewrite_scatter(ast, ranges) or ast
    if ast is item.ast:
        return item
    used = sorted({n.arg.idx for n in ast.walk() if n.op is BufferOps.LOAD} - {0})
    number = {old: new for new, old in enumerate(used, 1)}
    return ScheduleItem(_renumber(ast, number), item.out, [item.inputs[i - 1] for i in used])


def _renumber(ast: LazyOp, number: dict[int, int]) -> LazyOp:
    """The AST with its loads' buffer indices mapped through `number` (0 stays 0)."""
    done: dict[int, LazyOp] = {}
    for node in ast.walk():
        srcs = tuple(done[id(s)] for s in node.src)
        arg = node.arg
        if node.op is BufferOps.LOAD and number.get(arg.idx, arg.idx) != arg.idx:
            arg = MemBuffer(number[arg.idx], arg.dtype, arg.st)
        same = arg is node.arg and all(a is b for a, b in zip(srcs, node.src))
        done[id(node)] = node if same else LazyOp(node.op, srcs, arg)
    return done[id(ast)]


def picks_by_range(reduce: LazyBuffer) -> bool:
    """Is the reduce's input a pick: where(onehot, x, 0), cast(onehot) * x, or a cast of
    one (the forms codegen/gather.py rewrites)?"""
    body = reduce.src[0].base
    while body.realized is None and body.op is UnaryOps.CAST:
        body = body.src[0].base
    if body.realized is not None:
        return False
    if body.op is TernaryOps.WHERE:
        return is_onehot(body.src[0].base)
    return body.op in (BinaryOps.MUL, BinaryOps.AND) and \
        any(is_onehot(s.base) for s in body.src)


def is_onehot(base: LazyBuffer) -> bool:
    """Is `base` a comparison with a range buffer, through casts, negations (XOR) and ANDs
    of such (a one-hot mask)? The scheduler inlines it wherever it is read: an expanded
    one-hot read by a matmul is then a pick the rewrite sees, and recomputing it costs a
    compare where a load would be."""
    if base.realized is not None:
        return False
    if base.op is BinaryOps.CMPNE:
        return any(s.base.range_len for s in base.src)
    if base.op is UnaryOps.CAST and not base.arg[1]:
        return is_onehot(base.src[0].base)
    if base.op is BinaryOps.XOR:
        return is_onehot(base.src[0].base) and base.src[1].base.op is LoadOps.CONST
    if base.op is BinaryOps.AND:
        return all(is_onehot(s.base) for s in base.src)
    return False
