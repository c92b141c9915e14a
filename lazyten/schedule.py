"""Scheduler: lazy graph -> ordered ScheduleItems (one kernel AST each).

Fusion rules, applied to the graph of bases reachable from the outputs:
  1. Elementwise ops are inlined into every kernel that reads them (a chain is 1 kernel;
     inside a kernel a shared subexpression is computed once).
  2. Elementwise ops feeding a reduce are inlined into the reduce's kernel.
  3. A reduce whose only consumer is elementwise, read in memory order (a pure reshape),
     moves into that consumer's kernel, and so on up a chain of single consumers.
  4. Materialised once: outputs, LoadOps (copy, contiguous, assign), reduces not fused
     by rule 3 (a reduce read by several consumers, or expanded), an elementwise base
     read through padding when one of its ops does not map 0 to 0 (exp, log, recip...)
     and the read would repeat much work as an expand's does (else it is inlined, gated
     to 0 where the view is padding: a `cat` of two computed values is one kernel, D117;
     a stored cat of at most `_JOIN_PIECES` pieces computes each in its place, so there
     the read counts only the positions the mask lets through, D145),
     and an elementwise base read through an expand that would repeat much work: each
     element read `_EXPAND_MIN` times or more (or twice or more, repeating `_REPEAT_OPS`
     ops per element), repeating `_RECOMPUTE_MIN` ops or more in all (the relu mask of an
     MLP's gradient, re-read for every input feature of a weight gradient, is computed
     once instead of 784 times; a gelu read by a 7-class head, once instead of 7 times).
     Never a one-hot against a range (`is_onehot`): inlined, the kernel reading it is a
     pick that lazyten/indirect.py turns into a load (D69). And an elementwise base read
     through several views whose copies would make `_VIEW_LEAVES_MAX` memory reads or
     more (each view inlines every read of the base): a reflect pad of a circular pad
     is dozens of views of a sum of dozens of pieces, one kernel of 651 reads that took
     16 s to build and compile, where two of 73 and 12 reads take 0.6 s (D93).
  5. Row kernels (D55): on a CPU, or a GPU with local memory (a work-group per row, D94),
     a reduce materialised by rule 4 whose only reader is one elementwise kernel of the
     reduce's input shape, reading it one value per row (a reduce over the trailing axes
     expanded back: softmax's max and sum, layernorm's mean and variance), moves into
     that kernel, which then computes it per row before storing the row. Rows up to
     `ROW_MAX` elements (they stay in the cache): lazyten/schedule_rows.py.
  6. A kernel inlines chains of at most `_DEPTH_MAX` ops. Where rules 1-5 would make a
     deeper kernel (a loop that adds to a tensor thousands of times, or calls backward()
     again and again, without realizing), the base at that depth is materialised and the
     rules are applied again; the kernel builder and the compiler's passes recurse once
     per level of a kernel's expression: Python's recursion limit is raised to fit
     (`allow_recursion`), and no kernel is deeper than that.
  7. An elementwise base that two kernels or more would inline, computing `_SHARED_OPS`
     ops or more per element with what it inlines, is materialised once (and the rules
     applied again): a recurrence's state (an LSTM's cell) otherwise grows every step's
     kernel by all the steps before it (D111). A base inlined through padding (rule 4)
     counts as a kernel of its own here: a `stack` of a recurrence's states inlines each
     state at its own positions (owned by the kernels that inline it, D145).
"""
from __future__ import annotations

from codegen.helpers import allow_recursion, prod
from codegen.ops import (BinaryOps, LoadOps, ReduceOps, TernaryOps, ZERO_PRESERVING)
from codegen.shape.shapetracker import ShapeTracker
from lazyten.fuse_attention import fuse_attention
from lazyten.graph_expand import expand_graphs
from lazyten.hoist import hoist_broadcasts
from lazyten.indirect import indirect_items, is_onehot
from lazyten.kernel_builder import KernelBuilder
from lazyten.lazy import LazyBuffer
from lazyten.merge import merge_duplicates, restore
from lazyten.merge_sums import merge_sums
from lazyten.pack import pack_schedule
from lazyten.rebase import rebase_items
from lazyten.schedule_cache import Found, cached_schedule
from lazyten.schedule_item import ScheduleItem, copy_ast, row_target
from lazyten.schedule_order import order_items
from lazyten.schedule_rows import ELEMENTWISE, RowGroup
from lazyten.split import split_reduces
from lazyten.traced import CompositeOps

__all__ = ["ScheduleItem", "copy_ast", "create_schedule"]

_EXPAND_MIN = 8            # reads per element that make an expanded elementwise base...
_RECOMPUTE_MIN = 1 << 16   # ...worth materialising, when this many ops would be repeated;
_REPEAT_OPS = 24           # fewer reads do, when each element repeats this many ops
_OPS_COUNTED = 16          # inlined ops counted per base (enough to pass the bar)
_DEPTH_MAX = 512           # rule 6: the longest chain of ops one kernel inlines
_VIEW_LEAVES_MAX = 128     # rule 4: views of a base x the reads each inlines, at most
_SHARED_OPS = 64           # rule 7: ops per element two kernels would each compute again
_JOIN_PIECES = 8           # rule 4: pieces of a split join (codegen/peel.py's runs: 2-32)
_JOINS = (BinaryOps.ADD, TernaryOps.WHERE)  # rule 4: what a cat is made of
_JOIN_WIDTH = 16           # ...each at least this wide along the innermost axis


allow_recursion(_DEPTH_MAX)


def _has_mask(st: ShapeTracker) -> bool:
    return any(v.mask is not None for v in st.views)


def _reshape_only(view: LazyBuffer, base: LazyBuffer) -> bool:
    """Does `view` read every element of `base` once, in memory order? (A contiguous
    view can still be a prefix: a shrink to the first elements.)"""
    return view.st.contiguous and prod(view.shape) == prod(base.shape)


class _Graph:
    """The unrealized part of the graph and the decision of what to materialise."""

    def __init__(self, outs: list[LazyBuffer]):
        self.consumers: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]] = {}
        self.order: list[LazyBuffer] = []
        seen: set[int] = set()
        checks: list[LazyBuffer] = []
        stack = [(o.base, False) for o in outs]
        while stack:  # iterative DFS: graphs from long training loops get deep
            base, done = stack.pop()
            if done:
                self.order.append(base)
                continue
            if id(base) in seen or base.realized is not None:
                continue
            seen.add(id(base))
            self.consumers.setdefault(base, [])
            stack.append((base, True))
            for src in base.src:
                if src.base.realized is None:
                    self.consumers.setdefault(src.base, []).append((base, src))
                    stack.append((src.base, False))
            for flag in base.checks:  # index checks run before anything reads the base
                if flag.realized is None:
                    checks.append(flag)
                    stack.append((flag, False))
        required = {o.base for o in outs if o.base.realized is None
                    and o.base.op is not LoadOps.CONST}
        required.update(checks)
        self.outs = {o.base for o in outs}
        cuts: set[LazyBuffer] = set()  # rule 6's materialised bases
        while True:
            self.realize: set[LazyBuffer] = required | cuts
            self.fused_reduce: dict[LazyBuffer, LazyBuffer] = {}  # chain top -> its reduce
            # inlined through padding, gated (rule 4): each computed at its own positions
            self.gated: set[LazyBuffer] = set()
            self._joins: dict[LazyBuffer, bool] = {}  # rule 4: `_split_join`'s answers
            self._decide()
            for base in self.order:
                if base in self.realize and isinstance(base.op, ELEMENTWISE) and \
                        base not in self.fused_reduce and row_target(base.device):
                    self.realize -= RowGroup(self, base).reduces() - cuts
            deeper = (self._too_deep() | self._recomputed()) - cuts  # (never a cut again:
            if not deeper:                                            # the loop ends)
                break
            cuts |= deeper

    def _decide(self) -> None:
        reads: dict[LazyBuffer, frozenset] = {}  # the distinct reads of an inlined base
        self._paths: dict[tuple, int] = {}
        for base in self.order:
            if isinstance(base.op, LoadOps) and base.op is not LoadOps.CONST:
                self.realize.add(base)
            if base.op is LoadOps.COPY and base.src[0].base.realized is None:
                self.realize.add(base.src[0].base)
            for user, view in self.consumers[base]:
                if _has_mask(view.st) and base.op not in (LoadOps.CONST,) and \
                        not self._zero_preserving(base):
                    if isinstance(base.op, ELEMENTWISE) and \
                            not self._repeats_work(base, view, self._split_join(user)):
                        self.gated.add(base)  # inlined, 0 where the view pads (kernel_builder.py)
                    else:
                        self.realize.add(base)
                elif isinstance(base.op, ELEMENTWISE) and self._repeats_work(base, view):
                    self.realize.add(base)
            if isinstance(base.op, ELEMENTWISE):
                reads[base] = self._reads(base, reads)
                views = len({view.st for _, view in self.consumers[base]})
                if views > 1 and views * len(reads[base]) >= _VIEW_LEAVES_MAX:
                    self.realize.add(base)
        for base in self.order:
            if isinstance(base.op, ReduceOps):
                top = self._chain_top(base)
                if top is base:
                    self.realize.add(base)
                else:
                    self.realize.add(top)
                    self.fused_reduce[top] = base

    def _too_deep(self) -> set[LazyBuffer]:
        """Rule 6: the inlined bases at which a kernel's expression, as decided, would be
        more than _DEPTH_MAX ops deep (each one cuts the chains through it)."""
        depth: dict[LazyBuffer, int] = {}  # ops from `base` down to memory, in its kernel
        cuts = set()
        for base in self.order:  # sources first
            below = [depth.get(s.base, 0) for s in base.src if s.base not in self.realize]
            own = base.arg.depth if base.op is CompositeOps.POINTWISE else 1
            depth[base] = own + max(below, default=0)
            if depth[base] > _DEPTH_MAX and base not in self.realize:
                cuts.add(base)
                depth[base] = 0
        return cuts

    def _recomputed(self) -> set[LazyBuffer]:
        """Rule 7: the elementwise bases two kernels or more would each compute, where one
        is `_SHARED_OPS` ops or more per element with what it inlines in turn: where a
        value branches (no one reader of it is in every kernel that computes it), taken
        sources first, each counted with the ones taken before it materialised. A
        recurrence (an LSTM's cell state: c_t = sigmoid(f) * c_t-1 + ..., read by h_t's
        kernel and by c_t+1) otherwise grows every kernel by all the steps before it:
        the 16th step's kernel computed 80 exps per element (D111)."""
        owners: dict[LazyBuffer, set[int]] = {}
        # a base inlined through padding counts as a kernel of its own: each one read
        # through a view of its own is computed at its own positions, so what two of them
        # inline is computed twice (a `stack` of an LSTM's states inlines every step's h).
        # Its owners are the kernels that inline it, and what it inlines is its own: a
        # cat's piece read by one join is computed once, however many ops it has (D145)
        for root in self.realize | self.gated:
            if root.realized is not None:
                continue
            if root in self.realize or root not in self.gated:
                owners.setdefault(root, set()).add(id(root))
            stack, seen = [s.base for s in root.src], set()
            while stack:
                b = stack.pop()
                if id(b) in seen or b.realized is not None or b in self.realize or \
                        isinstance(b.op, LoadOps):
                    continue
                seen.add(id(b))
                if b in self.gated:  # (computed here at its positions: a root of its own)
                    owners.setdefault(b, set()).add(id(root))
                    continue
                owners.setdefault(b, set()).add(id(root))
                stack.extend(s.base for s in b.src)
        chosen: set[LazyBuffer] = set()
        for b in self.order:  # sources first
            mine = owners.get(b)
            if b in self.realize or mine is None or len(mine) < 2 or \
                    not isinstance(b.op, ELEMENTWISE) or is_onehot(b) or \
                    any(mine <= owners.get(u, set()) for u, _ in self.consumers[b]):
                continue
            # (what it inlines counted as if those taken before were stored)
            if self._inlined_ops(b, _SHARED_OPS, chosen) >= _SHARED_OPS:
                chosen.add(b)
        return chosen

    def _chain_top(self, reduce: LazyBuffer) -> LazyBuffer:
        """Rule 3: grow the elementwise descendants of `reduce` that read it (or each
        other) in memory order; if they all flow into one exit, that exit's kernel holds
        the reduce. Otherwise the reduce is materialised on its own."""
        if reduce in self.realize:
            return reduce
        group, stack = {reduce}, [reduce]
        while stack:
            node = stack.pop()
            if node in self.realize:
                continue  # an output: its consumers read it from memory
            for user, view in self.consumers[node]:
                if user in group:
                    continue
                if user.op is None or isinstance(user.op, (LoadOps, ReduceOps)) or \
                        not _reshape_only(view, node) or self._reads_reduce(user, group):
                    return reduce
                group.add(user)
                stack.append(user)
        # (a value a Function keeps for its backward is read later, from memory: D146)
        exits = [n for n in group if n in self.realize or n.held or
                 any(u not in group for u, _ in self.consumers[n]) or not self.consumers[n]]
        if len(exits) != 1 or exits[0] is reduce:
            return reduce
        for n in group:  # every read inside the group is in memory order, the reduce's too
            if not all(_reshape_only(v, n) for u, v in self.consumers[n] if u in group):
                return reduce
        return exits[0]

    def _reads_reduce(self, user: LazyBuffer, group: set) -> bool:
        """Does `user` inline another unrealized reduce (a kernel holds only one)?"""
        stack, seen = [s.base for s in user.src if s.base not in group], set()
        while stack:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or b in self.realize or b in group:
                continue
            seen.add(id(b))
            if isinstance(b.op, ReduceOps):
                return True
            if not isinstance(b.op, LoadOps):
                stack.extend(s.base for s in b.src)
        return False

    def _repeats_work(self, base: LazyBuffer, view: LazyBuffer, split: bool = False) -> bool:
        """Would inlining `base` where `view` reads it repeat much work (rule 4)? `split`:
        the reader is a join whose kernel computes each piece only where its view is not
        padding (`_split_join`), so a padded view reads what its outer mask lets through."""
        size, reads = prod(base.shape), prod(view.shape)
        if split and view.st.views[-1].mask is not None:
            reads = prod(hi - lo for lo, hi in view.st.views[-1].mask)
        if reads < 2 * size or is_onehot(base):  # a one-hot: a pick once inlined (D69)
            return False
        repeated = (reads - size) * self._inlined_ops(base)
        return repeated >= _RECOMPUTE_MIN and \
            (reads >= _EXPAND_MIN * size or repeated >= _REPEAT_OPS * size)

    def _split_join(self, user: LazyBuffer) -> bool:
        """Is `user` a join of padded pieces (a `cat`: ADDs or WHEREs of views with masks) that is
        materialised as an elementwise kernel of its own, because an output or a reader
        that would repeat its work reads it, with at most `_JOIN_PIECES` pieces? Such a
        kernel's loop is split where the pieces' gates switch (codegen/peel.py
        `mask_plan`, D122): each piece is computed at its own positions only, so a piece
        read through padding there repeats no work, however many ops it has (an LSTM
        step's four gate gradients: stored one by one and copied again, D145)."""
        if user.op not in _JOINS:
            return False
        while len(self.consumers[user]) == 1:  # (a cat of n pieces: a chain of n - 1 joins)
            top, view = self.consumers[user][0]
            if top.op not in _JOINS or _has_mask(view.st):
                break
            user = top
        found = self._joins.get(user)
        if found is None:  # (once a pass per join: each of its pieces asks)
            found = self._joins[user] = 2 <= self._pieces(user) <= _JOIN_PIECES and (
                user in self.outs or any(not _has_mask(v.st) and self._repeats_work(user, v)
                                         for _, v in self.consumers[user]))
        return found

    def _pieces(self, join: LazyBuffer) -> int:
        """The padded views a chain of joins (ADD, or WHERE on a padded True: Tensor.cat)
        puts together, a constant's aside; more than _JOIN_PIECES where a piece is
        narrower than _JOIN_WIDTH along the innermost axis (a `stack(..., -1)`): a vector
        there straddles pieces, and the split leaves it computing every one (D122)."""
        count, stack = 0, [join]
        while stack and count <= _JOIN_PIECES:
            b = stack.pop()
            for s in b.src:
                if _has_mask(s.st) and s.base.op is not LoadOps.CONST:
                    view = s.st.views[-1]
                    inner = max((i for i, n in enumerate(view.shape) if n > 1), default=0)
                    lo, hi = view.mask[inner] if view.mask is not None else (0, 0)
                    # (a 0-d piece, padded only in a view below the last: one element)
                    narrow = bool(view.shape) and hi - lo < min(_JOIN_WIDTH, view.shape[inner])
                    count += _JOIN_PIECES + 1 if narrow else 1
                elif not _has_mask(s.st) and s.base.op in _JOINS and \
                        s.base.realized is None and s.base not in self.realize:
                    stack.append(s.base)
        return count

    def _inlined_ops(self, base: LazyBuffer, most: int = _OPS_COUNTED,
                     stored: set[LazyBuffer] | frozenset = frozenset()) -> int:
        """Elementwise ops a kernel reading `base` computes for each element (up to
        `most`): base's own and those of the unmaterialised bases it inlines (`stored`:
        more bases to count as materialised)."""
        count, stack, seen = 0, [base], set()
        while stack and count < most:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or \
                    (b is not base and (b in self.realize or b in stored)):
                continue
            seen.add(id(b))
            if isinstance(b.op, ELEMENTWISE):
                count += b.arg.ops if b.op is CompositeOps.POINTWISE else 1
                stack.extend(s.base for s in b.src)
        return count

    def _reads(self, base: LazyBuffer, reads: dict[LazyBuffer, frozenset]) -> frozenset:
        """The distinct memory reads of a kernel inlining `base`, each named by the base it
        reads and the views on its way there (a subexpression read twice through one view
        is computed once: `(y * 3).round()` reads y once, however often round's ops do),
        counted up to _VIEW_LEAVES_MAX."""
        out: set = set()
        paths = self._paths  # (a view, the path below it) -> a number: flat, hashed once
        for src in base.src:
            view = src.st if src._base is not None else None
            below = reads.get(src.base) if src.base not in self.realize else None
            if below is None:  # materialised, loaded or a reduce: one read
                out.add((id(src.base), paths.setdefault((view, -1), len(paths))))
            elif view is None:
                out |= below
            else:
                out.update((leaf, paths.setdefault((view, path), len(paths)))
                           for leaf, path in below)
            if len(out) >= _VIEW_LEAVES_MAX:
                break
        return frozenset(out)

    def _zero_preserving(self, base: LazyBuffer) -> bool:
        stack, seen = [base], set()
        while stack:
            b = stack.pop()
            if id(b) in seen or b.realized is not None or (b in self.realize and b is not base):
                continue
            seen.add(id(b))
            if isinstance(b.op, (LoadOps, ReduceOps)):
                continue
            if b.op not in ZERO_PRESERVING:
                return False
            stack.extend(s.base for s in b.src)
        return True


def create_schedule(outs: list[LazyBuffer], found: Found | None = None) -> list[ScheduleItem]:
    """Every step needed to realize `outs`, in an order that respects dependencies.
    A graph with the same structure as one scheduled before (eager code run again)
    reuses that schedule, rebound to this graph's buffers (`found`: the cache's answer,
    if the caller looked already)."""
    return cached_schedule(outs, _schedule, found)


def _schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    expand_graphs(outs)  # traced forwards become the graphs they stand for (D79)
    merged = merge_duplicates(outs)  # equal bases (a gradient rebuilt twice) read as one
    merged += merge_sums(outs)  # a sum of reduces (a weight's gradients) as one reduce
    try:  # (rebased here: the cache keeps the rebased kernels, D120)
        return rebase_items(_items(outs))
    finally:  # (while the schedule is made: unrealized bases keep the graph they had)
        restore(merged[::-1])


def _items(outs: list[LazyBuffer]) -> list[ScheduleItem]:
    split_reduces(outs)  # a schedule pass: rewrites long reduces before fusion is decided
    graph = _Graph(outs)
    items = []
    for base in graph.order:  # sources before consumers
        if base not in graph.realize:
            continue
        if base.op in (LoadOps.EMPTY, LoadOps.CUSTOM):
            items.append(ScheduleItem(None, base))
        elif base.op is LoadOps.COPY:
            items.append(ScheduleItem(None, base, [base.src[0].base]))
        elif base.op is LoadOps.CONST:
            raise AssertionError("constants are never materialised on their own")
        else:
            builder = KernelBuilder(graph, base)
            ast = builder.build()
            old = builder.old_target
            if old is not None:
                items.append(ScheduleItem(copy_ast(old.shape, old.dtype), old, [old.src[0]]))
            items.append(ScheduleItem(ast, base, builder.inputs))
    # (reduces repeated along broadcast axes are split off before packing: D136)
    return pack_schedule(hoist_broadcasts(order_items(fuse_attention(indirect_items(items),
                                                                     graph.outs))))
