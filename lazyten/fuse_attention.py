"""Schedule pass: attention as one kernel (D59). [ScheduleItem] -> [ScheduleItem].

On a loop target attention is three kernels: the scores S = q . k (a reduce over the head
dim D), the softmax row kernel [D55] P = softmax(f(S)) over the keys J, and O = P @ v (a
reduce over J). S and P are as large as rows x J and cross the memory bus twice each.
This pass finds a reduce kernel O that reads, as the plain broadcast of a matmul, the
output of a row kernel P that nothing else reads; and P in turn reads, in memory order,
the output of a reduce kernel S over one trailing axis that nothing else reads (if not,
P reads its scores from memory as before). It rewrites the three ASTs into one, in the
index space rows + (J, D, E) of codegen/attention.py, and keeps it only where that module's
rule (`attention_parts`: the algebra of the online softmax rewrite) accepts it; the
kernels stay as they were otherwise. A key operand that is not contiguous along the keys
(k of q @ k^T) is copied transposed first, so each block of keys is one vector load.
"""
from __future__ import annotations
from typing import Callable

from codegen.attention import attention_parts
from codegen.helpers import debug_level, getenv, prod
from codegen.kernel import is_row_kernel
from codegen.ops import BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem
from runtimes import get_runtime

View = Callable[[ShapeTracker], ShapeTracker]


def fuse_attention(items: list[ScheduleItem], outs: set[LazyBuffer]) -> list[ScheduleItem]:
    """The schedule with each attention's three kernels replaced by one (where it can);
    FUSE_ATTENTION=0 keeps the three (to compare)."""
    if not getenv("FUSE_ATTENTION", 1):
        return items
    producer = {id(it.out): it for it in items if it.ast is not None}
    readers: dict[int, int] = {}
    for it in items:
        for b in {id(b) for b in it.inputs}:
            readers[b] = readers.get(b, 0) + 1
    private = {k for k, n in readers.items() if n == 1} - {id(o) for o in outs}
    replaced: dict[int, list[ScheduleItem]] = {}
    dropped: set[int] = set()
    for it in items:
        found = _match(it, producer, private)
        if found is None:
            continue
        fused = _Fusion(it, *found).build()
        if fused is not None:
            replaced[id(it)] = fused
            dropped |= {id(x) for x in found if x is not None}
    out: list[ScheduleItem] = []
    for it in items:
        if id(it) not in dropped:
            out.extend(replaced.get(id(it), [it]))
    return out


def _loop_target(device: str) -> bool:
    target = get_runtime(device).renderer.target
    return not target.gpu


def _one_reduce(ast: LazyOp) -> LazyOp | None:
    reduces = [n for n in ast.walk() if isinstance(n.op, ReduceOps)]
    return reduces[0] if len(reduces) == 1 else None


def _match(o: ScheduleItem, producer: dict, private: set[int]) \
        -> tuple[ScheduleItem, ScheduleItem | None] | None:
    """(P, S or None) for the output kernel O, or None."""
    if o.ast is None or not _loop_target(o.out.device):
        return None
    red = _one_reduce(o.ast)
    if red is None or red.op is not ReduceOps.SUM or is_row_kernel(o.ast):
        return None
    x3 = _full(red)
    n = len(x3) - 2
    if n < 0 or red.arg != (n + 1,):
        return None
    rows, width, keys = x3[:n], x3[n], x3[n + 1]
    for leaf in red.walk():
        if leaf.op is not BufferOps.LOAD:
            continue
        buf = o.inputs[leaf.arg.idx - 1]
        p = producer.get(id(buf))
        if p is None or id(buf) not in private or not is_row_kernel(p.ast) or \
                p.ast.arg.st.shape != rows + (keys,):
            continue
        plain = ShapeTracker.from_shape(rows + (keys,)).reshape(rows + (1, keys)).expand(x3)
        if leaf.arg.st.simplify().views != plain.simplify().views or width < 1:
            continue
        return p, _scores(p, rows + (keys,), producer, private)
    return None


def _full(reduce: LazyOp) -> tuple[int, ...]:
    return next(n.arg.st.shape for n in reduce.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST))


def _scores(p: ScheduleItem, x2: tuple[int, ...], producer: dict, private: set[int]) \
        -> ScheduleItem | None:
    """The reduce kernel S whose output P reads in memory order, nothing else reading it."""
    for leaf in p.ast.walk():
        if leaf.op is not BufferOps.LOAD:
            continue
        buf = p.inputs[leaf.arg.idx - 1]
        s = producer.get(id(buf))
        if s is None or id(buf) not in private or is_row_kernel(s.ast):
            continue
        red = _one_reduce(s.ast)
        if red is None or red.op is not ReduceOps.SUM or _full(red)[:-1] != x2 or \
                red.arg != (len(x2),) or not s.ast.arg.st.contiguous:
            continue
        if leaf.arg.st.contiguous and leaf.arg.st.shape == x2:
            return s
    return None


class _Fusion:
    """Rebuilds O's AST with P's and S's expressions in place of their loads."""

    def __init__(self, o: ScheduleItem, p: ScheduleItem, s: ScheduleItem | None):
        self.o, self.p, self.s = o, p, s
        red = _one_reduce(o.ast)  # type: ignore[arg-type]
        assert red is not None
        x3 = _full(red)
        n = len(x3) - 2
        self.n, self.rows, self.width, self.keys = n, x3[:n], x3[n], x3[n + 1]
        self.depth = _full(_one_reduce(s.ast))[-1] if s is not None else 1  # type: ignore
        self.full = self.rows + (self.keys, self.depth, self.width)
        self.inputs: list[LazyBuffer] = []
        self.memo: dict[tuple[int, int], LazyOp] = {}

    def build(self) -> list[ScheduleItem] | None:
        o, n = self.o, self.n
        assert o.ast is not None
        swap = tuple(range(n)) + (n + 1, n)
        to_o: View = lambda st: st.permute(swap).reshape(  # noqa: E731
            self.rows + (st.shape[n + 1], 1, st.shape[n]))
        store_st = to_o(o.ast.arg.st)
        body = self._rebuild(o.ast.src[0], o, lambda st: to_o(st).expand(self.full),
                             {n + 1: n})
        ast = LazyOp(BufferOps.STORE, (body,), MemBuffer(0, o.out.dtype, store_st))
        parts = attention_parts(ast)
        if parts is None:
            return None
        items = self._pack_keys(ast, parts)
        if debug_level() >= 2:
            saved = 2 * prod(self.rows) * self.keys * (4 + (4 if self.s is not None else 0))
            print(f"attention: {prod(self.rows)} rows x {self.keys} keys in one kernel: "
                  f"the scores and weights ({saved / 1e6:.1f} MB of traffic) stay in registers")
        return items

    def _source(self, buf: LazyBuffer) -> tuple[ScheduleItem, View, dict[int, int]] | None:
        n, full = self.n, self.full
        if buf is self.p.out:
            return self.p, lambda st: st.reshape(self.rows + (st.shape[n], 1, 1)).expand(full), \
                {n: n}
        if self.s is not None and buf is self.s.out:
            return self.s, lambda st: st.reshape(self.rows + (st.shape[n], st.shape[n + 1], 1)) \
                .expand(full), {n + 1: n + 1}
        return None

    def _rebuild(self, node: LazyOp, item: ScheduleItem, view: View,
                 axes: dict[int, int]) -> LazyOp:
        key = (id(node), id(item))
        if key in self.memo:
            return self.memo[key]
        if node.op is BufferOps.LOAD:
            buf = item.inputs[node.arg.idx - 1]
            source = self._source(buf)
            if source is not None:
                src_item, src_view, src_axes = source
                assert src_item.ast is not None
                out = self._rebuild(src_item.ast.src[0], src_item, src_view, src_axes)
            else:
                out = LazyOp(BufferOps.LOAD, (), MemBuffer(self._index(buf), node.arg.dtype,
                                                           view(node.arg.st)))
        elif node.op is BufferOps.CONST:
            out = LazyOp(BufferOps.CONST, (), ConstBuffer(node.arg.val, node.arg.dtype,
                                                          view(node.arg.st)))
        else:
            srcs = tuple(self._rebuild(s, item, view, axes) for s in node.src)
            arg = tuple(axes[a] for a in node.arg) if isinstance(node.op, ReduceOps) else node.arg
            out = LazyOp(node.op, srcs, arg)
        self.memo[key] = out
        return out

    def _index(self, buf: LazyBuffer) -> int:
        for i, b in enumerate(self.inputs):
            if b is buf:
                return i + 1
        self.inputs.append(buf)
        return len(self.inputs)

    def _pack_keys(self, ast: LazyOp, parts) -> list[ScheduleItem]:
        """[copy of k transposed, the attention kernel] where a key operand under the inner
        sum moves along the keys with a stride other than 1, else [the attention kernel]."""
        target = get_runtime(self.o.out.device).renderer.target
        n, copies, inputs = self.n, [], list(self.inputs)
        if parts.inner is None or target.lanes <= 1:
            return [ScheduleItem(ast, self.o.out, inputs)]
        for leaf in parts.inner.walk():
            if leaf.op is not BufferOps.LOAD:
                continue
            strides = leaf.arg.st.real_strides()
            if strides[n] in (0, 1) or strides[n + 1] == 0:
                continue
            src = inputs[leaf.arg.idx - 1]
            kept = tuple(s if strides[i] != 0 else 1 for i, s in enumerate(self.rows))
            read, back = _panels(leaf.arg.st, kept, self.keys, self.depth, _panel(target, self.keys))
            packed = LazyBuffer(src.device, ShapeTracker.from_shape(read.shape), src.dtype,
                                LoadOps.CONTIGUOUS, (src,))
            copy = LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(
                1, src.dtype, read)),), MemBuffer(0, src.dtype, ShapeTracker.from_shape(read.shape)))
            back = back.expand(self.full)
            others = [x for x in ast.walk() if x.op is BufferOps.LOAD and x is not leaf and
                      x.arg.idx == leaf.arg.idx]
            if others:  # q reads the same buffer (q @ q^T): the copy is a new input
                inputs.append(packed)
            else:
                inputs[leaf.arg.idx - 1] = packed
            idx = len(inputs) if others else leaf.arg.idx
            ast = ast.replace(leaf, LazyOp(BufferOps.LOAD, (), MemBuffer(idx, leaf.arg.dtype, back)))
            copies.append(ScheduleItem(copy, packed, [src]))
        return copies + [ScheduleItem(ast, self.o.out, inputs)]


def _panel(target, keys: int) -> int:
    """Keys per panel of the copy: the pack width, else a vector, dividing the keys (a
    whole transpose walks 4 bytes of a line per key and misses the cache)."""
    for width in (target.pack, target.lanes):
        if width and keys % width == 0:
            return width
    return keys


def _panels(st: ShapeTracker, kept: tuple[int, ...], keys: int, depth: int, width: int) \
        -> tuple[ShapeTracker, ShapeTracker]:
    """(the copy's read of k, of shape kept + (keys // width, depth, width); the kernel's
    read of the copy, of shape kept + (keys, depth, 1))."""
    n = len(kept)
    panels = kept + (keys // width, depth, width)
    order = tuple(range(n)) + (n, n + 2, n + 1)  # (panel, depth, key) <-> (panel, key, depth)
    read = st.shrink(tuple((0, s) for s in kept + (keys, depth, 1))).reshape(
        kept + (keys // width, width, depth)).permute(order)
    back = ShapeTracker.from_shape(panels).permute(order).reshape(kept + (keys, depth, 1))
    return read, back
