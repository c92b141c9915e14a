"""Schedule pass: attention as one kernel (D62). [ScheduleItem] -> [ScheduleItem].

On a loop target attention is several kernels: the scores S = q . k (a reduce over the
head dim D), the softmax over the keys J (a row kernel [D55], or for small sizes its max
and sum as kernels of their own, the exp inlined into the next), and O = P @ v (a reduce
over J). S and P are rows x J large and cross the memory bus twice each.

This pass starts from a reduce kernel O over the last axis of rows + (E, J) and takes in
the kernels whose outputs it reads, and those they read, while each is of one of two
shapes: a kernel over rows + (J,) (its reduces over J: the softmax's rows, max or sum) or
a reduce over the last axis of rows + (J, D) (the scores); every read of each must be the
read that puts its element where the reader's index space says (the broadcast a matmul
makes), and nothing outside the group may read it (nor may it be an output). It then
rewrites the group into one AST in the index space rows + (J, D, E) of codegen/attention.py
and keeps it only where that module's rule (`attention_parts`: the algebra of the online
softmax) accepts it: the kernels stay as they were otherwise. A key operand that is not
contiguous along the keys (k of q @ k^T) is copied in panels first, so each block of keys
is one vector load.
"""
from __future__ import annotations
import sys
from typing import Callable

from codegen.attention import AttentionParts, attention_parts
from codegen.helpers import debug_level, getenv, prod
from codegen.ops import BufferOps, ConstBuffer, LazyOp, LoadOps, MemBuffer, ReduceOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.scatter import is_scatter
from lazyten.lazy import LazyBuffer
from lazyten.schedule_item import ScheduleItem, loop_target
from runtimes import get_runtime

View = Callable[[ShapeTracker], ShapeTracker]


def fuse_attention(items: list[ScheduleItem], outs: set[LazyBuffer]) -> list[ScheduleItem]:
    """The schedule with each attention's kernels replaced by one where it can and where
    one head's scores do not fit a core's L2 cache (`_worth_it`); FUSE_ATTENTION=0 keeps
    them all (to compare), 2 fuses every attention it can."""
    mode = getenv("FUSE_ATTENTION", 1)
    if not mode:
        return items
    producer = {id(it.out): it for it in items if it.ast is not None}
    readers = _readers(items)
    kept = {id(o) for o in outs}
    replaced: dict[int, list[ScheduleItem]] = {}
    dropped: set[int] = set()
    for it in items:
        fusion = _Fusion.start(it) if id(it) not in dropped else None
        if fusion is None or not fusion.collect(producer, readers, kept):
            continue
        fused = fusion.build(mode >= 2)
        if fused is not None:
            replaced[id(it)] = fused
            dropped |= {id(x) for x in fusion.group.values()}
    return [new for it in items if id(it) not in dropped for new in replaced.get(id(it), [it])]


def _readers(items: list[ScheduleItem]) -> dict[int, list[ScheduleItem]]:
    """id(buffer) -> the kernels that read it."""
    readers: dict[int, list[ScheduleItem]] = {}
    for it in items:
        for b in {id(b): b for b in it.inputs}:
            readers.setdefault(b, []).append(it)
    return readers


def _reads_itself(ast: LazyOp) -> bool:
    """Does the kernel read its own output buffer (an ASSIGN reading its target in place)?"""
    return any(n.op is BufferOps.LOAD and n.arg.idx == 0 for n in ast.walk())


def _reduces(ast: LazyOp) -> list[LazyOp]:
    return [n for n in ast.walk() if isinstance(n.op, ReduceOps)]


def _full(ast: LazyOp) -> tuple[int, ...]:
    """The kernel's full shape: what its reduce reads, or what it stores."""
    reduces = _reduces(ast)
    if not reduces:
        return ast.arg.st.shape
    return next(n.arg.st.shape for n in reduces[0].walk()
                if n.op in (BufferOps.LOAD, BufferOps.CONST))


class _Fusion:
    """One candidate group: O and the kernels it would take in, and the rewrite."""

    def __init__(self, o: ScheduleItem, rows: tuple[int, ...], width: int, keys: int):
        self.o, self.rows, self.width, self.keys = o, rows, width, keys
        self.n = len(rows)
        self.depth = 1
        self.group: dict[int, ScheduleItem] = {}  # id(buffer) -> the kernel taken in
        self.inputs: list[LazyBuffer] = []
        self.memo: dict[tuple[int, int], LazyOp] = {}

    @staticmethod
    def start(o: ScheduleItem) -> _Fusion | None:
        """A fusion that starts from O: one SUM over the last axis of rows + (E, J), on a
        loop target (a GPU keeps its kernels)."""
        if o.ast is None or not loop_target(o.out.device):
            return None
        reduces = _reduces(o.ast)
        if len(reduces) != 1 or reduces[0].op is not ReduceOps.SUM or _reads_itself(o.ast):
            return None
        full = _full(o.ast)
        n = len(full) - 2
        if n < 0 or reduces[0].arg != (n + 1,) or o.ast.arg.st.shape != full[:n + 1] + (1,):
            return None
        return _Fusion(o, full[:n], full[n], full[n + 1])

    @property
    def full(self) -> tuple[int, ...]:
        return self.rows + (self.keys, self.depth, self.width)

    # ---- the index space of each kernel, mapped into rows + (J, D, E) ----
    def _space(self, item: ScheduleItem) -> tuple[View, dict[int, int]] | None:
        """How a kernel's trackers (of its full or output shape) map into rows + (J, D, E),
        and its reduce axes; None if it is not one of the group's shapes."""
        assert item.ast is not None
        n, rows, full = self.n, self.rows, _full(item.ast)
        if item is self.o:
            swap = tuple(range(n)) + (n + 1, n)
            return (lambda st: st.permute(swap).reshape(rows + (st.shape[n + 1], 1, st.shape[n])),
                    {n + 1: n})
        axes = {a for r in _reduces(item.ast) for a in r.arg}
        if full == rows + (self.keys,) and axes <= {n}:
            return lambda st: st.reshape(rows + (st.shape[n], 1, 1)), {n: n}
        if len(full) == n + 2 and full[:n + 1] == rows + (self.keys,) and axes == {n + 1} and \
                len(_reduces(item.ast)) == 1 and self.depth in (1, full[-1]):
            return lambda st: st.reshape(rows + (st.shape[n], st.shape[n + 1], 1)), {n + 1: n + 1}
        return None

    def _in_full(self, item: ScheduleItem, st: ShapeTracker) -> ShapeTracker:
        space = self._space(item)
        assert space is not None
        return space[0](st)

    def collect(self, producer: dict, readers: dict, kept: set[int]) -> bool:
        """Take in every kernel that qualifies; False if none does."""
        stack = [self.o]
        while stack:
            item = stack.pop()
            assert item.ast is not None
            for leaf in item.ast.walk():
                if leaf.op is not BufferOps.LOAD:
                    continue
                buf = item.inputs[leaf.arg.idx - 1]
                src = producer.get(id(buf))
                if src is None or id(buf) in kept or id(buf) in self.group or \
                        src is self.o or not self._joins(src, item, leaf):
                    continue
                self.group[id(buf)] = src
                stack.append(src)
        self._prune(readers)
        return bool(self.group)

    def _joins(self, src: ScheduleItem, reader: ScheduleItem, leaf: LazyOp) -> bool:
        """Does `reader` read `src`'s output exactly where the shared index space puts it?"""
        # (a scatter's value is no expression of its output's positions: it stays a kernel)
        if src.ast is None or is_scatter(src.ast):
            return False
        space = self._space(src)
        if space is None or _reads_itself(src.ast):
            return False
        if len(_full(src.ast)) == self.n + 2:
            self.depth = _full(src.ast)[-1]
        here = self._in_full(reader, leaf.arg.st).expand(self.full)
        there = space[0](src.ast.arg.st).expand(self.full)
        return here.simplify().views == there.simplify().views

    def _prune(self, readers: dict) -> None:
        """Drop the kernels something outside the group reads, until none is left."""
        inside = {id(self.o)} | {id(x) for x in self.group.values()}
        changed = True
        while changed:
            changed = False
            for buf, item in list(self.group.items()):
                if any(id(r) not in inside for r in readers.get(buf, [])):
                    del self.group[buf]
                    inside.discard(id(item))
                    changed = True

    # ---- the rewrite ----
    def build(self, always: bool = False) -> list[ScheduleItem] | None:
        """The fused kernel (after copies of k), or None where the rule refuses the
        rewrite or, unless `always`, the kernels apart are expected to be faster."""
        o = self.o
        assert o.ast is not None
        to_f, axes = self._space(o)  # type: ignore[misc]
        body = self._rebuild(o.ast.src[0], o, lambda st: to_f(st).expand(self.full), axes)
        ast = LazyOp(BufferOps.STORE, (body,), MemBuffer(0, o.out.dtype, to_f(o.ast.arg.st)))
        parts = attention_parts(ast)
        if parts is None:
            return None
        if not always and not self._worth_it():
            return None
        items = self._pack_keys(ast, parts)
        if debug_level() >= 2:
            print(self._saved(items), file=sys.stderr)
        return items

    def _worth_it(self) -> bool:
        """Whether one head's scores (a row of queries by the keys, float32) are more than
        a core's L2 cache holds: what fusing saves is their traffic to memory, and the
        fused kernel's inner loops are slower than a matmul's (a broadcast of each weight,
        an online max), so where the scores stay in the cache the kernels apart are as
        fast or faster (2-core Zen 4, D101: 1x12x197x64 0.81 ms apart / 0.96 fused,
        16x4x32x32 0.12 / 0.15, 1x4x512x32 0.93 / 1.06; 1x4x768x64 4.2 / 3.7, 1x2x1024x32
        3.0 / 2.2). DEBUG=2 says which it chose."""
        head = (self.rows[-1] if self.rows else 1) * self.keys * 4
        l2 = get_runtime(self.o.out.device).renderer.target.l2_bytes
        if head > l2:
            return True
        if debug_level() >= 2:
            print(f"{self._named()} kept as {len(self.group) + 1} kernels: one head's scores "
                  f"({head / 1024:.0f} KB) fit the L2 cache ({l2 >> 10} KB), so fusing "
                  "would save little traffic (FUSE_ATTENTION=2 fuses it)", file=sys.stderr)
        return False

    def _rebuild(self, node: LazyOp, item: ScheduleItem, view: View,
                 axes: dict[int, int]) -> LazyOp:
        key = (id(node), id(item))
        if key in self.memo:
            return self.memo[key]
        if node.op is BufferOps.LOAD:
            buf = item.inputs[node.arg.idx - 1]
            src = self.group.get(id(buf))
            if src is not None:
                assert src.ast is not None
                to_f, src_axes = self._space(src)  # type: ignore[misc]
                out = self._rebuild(src.ast.src[0], src, lambda st: to_f(st).expand(self.full),
                                    src_axes)
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

    def _pack_keys(self, ast: LazyOp, parts: AttentionParts) -> list[ScheduleItem]:
        """[copies of k in panels, the attention kernel]: a load under the inner sum that
        moves along the keys with a stride other than 1 (and along D) reads a copy whose
        keys are contiguous, so a block of keys is one vector load."""
        target = get_runtime(self.o.out.device).renderer.target
        n, copies, inputs = self.n, [], list(self.inputs)
        if parts.inner is None or target.lanes <= 1:
            return [ScheduleItem(ast, self.o.out, inputs)]
        for leaf in parts.inner.walk():
            strides = leaf.arg.st.real_strides() if leaf.op is BufferOps.LOAD else None
            if strides is None or strides[n] in (0, 1) or strides[n + 1] == 0:
                continue
            src = inputs[leaf.arg.idx - 1]
            kept = tuple(s if strides[i] != 0 else 1 for i, s in enumerate(self.rows))
            read, back = _panels(leaf.arg.st, kept, self.keys, self.depth,
                                 _panel(target.pack, target.lanes, self.keys))
            packed = LazyBuffer(src.device, ShapeTracker.from_shape(read.shape), src.dtype,
                                LoadOps.CONTIGUOUS, (src,))
            copy = LazyOp(BufferOps.STORE, (LazyOp(BufferOps.LOAD, (), MemBuffer(
                1, src.dtype, read)),), MemBuffer(0, src.dtype, ShapeTracker.from_shape(read.shape)))
            shared = any(x.op is BufferOps.LOAD and x is not leaf and x.arg.idx == leaf.arg.idx
                         for x in ast.walk())
            if shared:  # q reads the same buffer (q @ q^T): the copy is a new input
                inputs.append(packed)
            else:
                inputs[leaf.arg.idx - 1] = packed
            idx = len(inputs) if shared else leaf.arg.idx
            ast = ast.replace(leaf, LazyOp(BufferOps.LOAD, (), MemBuffer(
                idx, leaf.arg.dtype, back.expand(self.full))))
            copies.append(ScheduleItem(copy, packed, [src]))
        return copies + [ScheduleItem(ast, self.o.out, inputs)]

    def _named(self) -> str:
        """How DEBUG=2's lines name the attention."""
        return f"attention: {prod(self.rows)} rows x {self.keys} keys x {self.width} columns"

    def _saved(self, items: list[ScheduleItem]) -> str:
        """DEBUG=2's line: the bytes the kernels taken in wrote and their readers read
        (each output written once and read once at least) that the fused kernel does not."""
        moved = sum(2 * prod(x.out.shape) * x.out.dtype.itemsize for x in self.group.values())
        return (f"{self._named()} in one kernel for {len(self.group) + 1} "
                f"(+{len(items) - 1} copy of k): scores and weights never in memory, "
                f"{moved / 1e6:.2f} MB less traffic")


def _panel(pack: int, lanes: int, keys: int) -> int:
    """Keys per panel of the copy: the pack width, else a vector, dividing the keys (a
    whole transpose walks 4 bytes of a line per key and misses the cache)."""
    for width in (pack, lanes):
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
