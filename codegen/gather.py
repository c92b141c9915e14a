"""One-hot picks -> indirect loads: a kernel AST rewrite (D69).

Integer-tensor indexing, gather, Embedding and the class labels of the losses are built
from one-hot comparisons against a range: `SUM over r of where(range(r) == e, f(r), 0)`,
or `cast(range(r) == e) * f(r)` in a one-hot matmul. Where the compiler is told which
buffers hold 0..n-1 (`ranges`: buffer index -> length; the scheduler knows it from the
lazy graph) and `e` does not depend on r, only r == e adds anything, so

    SUM_r body(r)  ==  body(r := clamp(e)) with (range(r) == e) := (0 <= e < n)

costs one evaluation instead of n. `body` must be zero wherever the comparison is false
(a WHERE on it with 0 the other way, a product with its cast, an AND with it), so an
index outside [0, n) gives 0 as before (and its index check still raises).

After the rewrite, axis r is size 1 in every leaf of the body. A leaf that read memory
along r becomes an *indirect load*: `LOAD` with one source, an int64 offset (`clamp(e) *
stride` summed over the substituted axes) added to the address its tracker gives at r = 0;
the clamp keeps the address inside the buffer, whatever the index. Only leaves whose index
is affine in r alone (`real_strides`) and whose validity does not depend on r take part;
anything else leaves the AST as it was. Reduces over several axes lose the substituted
axes and keep the others (a loss's label pick summed over its rows).
"""
from __future__ import annotations

from codegen.dtypes import DType, dtypes
from codegen.emit import node_dtype
from codegen.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, ReduceOps, \
    TernaryOps, UnaryOps
from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import NumNode


def rewrite_gathers(ast: LazyOp, ranges: dict[int, int]) -> LazyOp:
    """`ast` with its one-hot picks made indirect loads (itself where there are none)."""
    if not ranges:
        return ast
    reduces = [n for n in ast.walk() if isinstance(n.op, ReduceOps)]
    if len(reduces) != 1 or reduces[0].op is not ReduceOps.SUM:
        return ast  # a row or attention kernel: several reduces
    stored = ast.arg.st.shape
    if any(stored[a] != 1 for a in reduces[0].arg):
        # a row kernel (D55): the sum is read at every position of its row, and its
        # substitute would have the reduced shape inside a kernel of the full one
        return ast
    new = _collapse(reduces[0], ranges)
    return ast if new is None else ast.replace(reduces[0], new)


def is_indirect(node: LazyOp) -> bool:
    """A LOAD whose address adds an offset computed from data (its one source)."""
    return node.op is BufferOps.LOAD and len(node.src) == 1


def _leaves(node: LazyOp) -> list[LazyOp]:
    return [n for n in node.walk() if n.op in (BufferOps.LOAD, BufferOps.CONST)]


def depends(node: LazyOp, axis: int) -> bool:
    """Does the value of `node` depend on `axis` (its index or validity)?"""
    return any(leaf.arg.st.real_strides()[axis] != 0 for leaf in _leaves(node))


def _range_axis(node: LazyOp, ranges: dict[int, int]) -> int | None:
    """The axis r if `node` reads a range buffer so that its value is r, else None."""
    if node.op is not BufferOps.LOAD or node.src or node.arg.idx not in ranges:
        return None
    st: ShapeTracker = node.arg.st
    strides = st.real_strides()
    if None in strides or [s for s in strides if s != 0] != [1]:
        return None
    axis = strides.index(1)
    idx, valid = st.expr_idxs([NumNode(0)] * len(strides))
    if idx != NumNode(0) or valid != NumNode(1) or st.shape[axis] > ranges[node.arg.idx]:
        return None
    return axis


def equality(node: LazyOp, ranges: dict[int, int]) -> tuple[int, LazyOp] | None:
    """(r, e) when `node` is `range(r) == e` (XOR(CMPNE(a, b), True), either order)."""
    if node.op is not BinaryOps.XOR or node.src[0].op is not BinaryOps.CMPNE:
        return None
    true = node.src[1]
    if true.op is not BufferOps.CONST or true.arg.val is not True:
        return None
    a, b = node.src[0].src
    for rng, other in ((a, b), (b, a)):
        axis = _range_axis(rng, ranges)
        if axis is not None and not depends(other, axis):
            return axis, other
    return None


def _implies(cond: LazyOp, eq: LazyOp) -> bool:
    """Is `cond` false wherever `eq` is?"""
    return cond is eq or (cond.op is BinaryOps.AND and any(_implies(s, eq) for s in cond.src))


def _zero(node: LazyOp) -> bool:
    return node.op is BufferOps.CONST and node.arg.val == 0 and not node.arg.st.views[-1].mask


def vanishes(node: LazyOp, eq: LazyOp) -> bool:
    """Is `node` zero (or False) wherever `eq` is false?"""
    if _implies(node, eq):
        return True
    if node.op is TernaryOps.WHERE:
        cond, a, b = node.src
        return (_implies(cond, eq) and _zero(b)) or (vanishes(a, eq) and vanishes(b, eq))
    if node.op in (BinaryOps.MUL, BinaryOps.AND):
        return any(vanishes(s, eq) for s in node.src)
    if node.op is UnaryOps.CAST and not node.arg[1]:
        return vanishes(node.src[0], eq)
    return False


def _collapse(reduce: LazyOp, ranges: dict[int, int]) -> LazyOp | None:
    """The reduce with every axis it picks by an equality substituted, or None."""
    body, axes = reduce.src[0], reduce.arg
    picks: dict[int, tuple[LazyOp, LazyOp]] = {}  # axis -> (equality node, e)
    for node in body.walk():
        found = equality(node, ranges)
        if found is not None and found[0] in axes and found[0] not in picks and \
                vanishes(body, node):
            picks[found[0]] = (node, found[1])
    # an index that depends on another substituted axis would need that axis's value
    picks = {r: p for r, p in picks.items() if not any(depends(p[1], s) for s in picks)}
    if not picks:
        return None
    new = Substitution(picks).node(body)
    if new is None:
        return None
    rest = tuple(a for a in axes if a not in picks)
    return LazyOp(ReduceOps.SUM, (new,), rest) if rest else new


class Substitution:
    """Rebuilds a reduce's body at r := clamp(e) for each picked axis r."""

    def __init__(self, picks: dict[int, tuple[LazyOp, LazyOp]]):
        self.picks = picks
        self.done: dict[int, LazyOp | None] = {}
        self.shape: tuple[int, ...] = ()
        self.checks: dict[int, LazyOp] = {}  # axis -> (0 <= e < n), at the new shape
        self.clamped: dict[int, LazyOp] = {}  # axis -> e clamped into [0, n)

    def node(self, body: LazyOp) -> LazyOp | None:
        full = _leaves(body)[0].arg.st.shape
        self.shape = tuple(1 if i in self.picks else s for i, s in enumerate(full))
        for r, (_, e) in self.picks.items():
            index = self.build(e)
            if index is None:
                return None
            dtype = node_dtype(e)
            n = full[r]
            below = self.const(n, dtype)
            ok = LazyOp(BinaryOps.CMPLT, (index, below))
            if not dtype.is_unsigned:  # -1 < e, i.e. e >= 0
                ok = LazyOp(BinaryOps.AND, (ok, LazyOp(BinaryOps.CMPLT,
                                                       (self.const(-1, dtype), index))))
            self.checks[r] = ok
            self.clamped[r] = LazyOp(TernaryOps.WHERE, (ok, index, self.const(0, dtype)))
        return self.build(body)

    def build(self, node: LazyOp) -> LazyOp | None:
        if id(node) not in self.done:
            self.done[id(node)] = self._build(node)
        return self.done[id(node)]

    def _build(self, node: LazyOp) -> LazyOp | None:
        for r, (eq, _) in self.picks.items():
            if node is eq:
                return self.checks[r]
        if node.op in (BufferOps.LOAD, BufferOps.CONST):
            return self._leaf(node)
        srcs = [self.build(s) for s in node.src]
        if any(s is None for s in srcs):
            return None
        return LazyOp(node.op, tuple(s for s in srcs if s is not None), node.arg)

    def _leaf(self, node: LazyOp) -> LazyOp | None:
        st: ShapeTracker = node.arg.st
        strides = st.real_strides()
        on = [r for r in self.picks if strides[r] != 0]
        shrunk = st.shrink(tuple((0, 1) if i in self.picks else (0, s)
                                 for i, s in enumerate(st.shape)))
        if not on:
            return LazyOp(node.op, (), _with_st(node.arg, shrunk))
        if node.op is not BufferOps.LOAD or node.src or any(strides[r] is None for r in on):
            return None  # masked or not affine along r: keep the one-hot form
        offset: LazyOp | None = None
        for r in on:
            stride = strides[r]
            assert stride is not None
            term = LazyOp(UnaryOps.CAST, (self.clamped[r],), (dtypes.int64, False))
            if stride != 1:
                term = LazyOp(BinaryOps.MUL, (term, self.const(stride, dtypes.int64)))
            offset = term if offset is None else LazyOp(BinaryOps.ADD, (offset, term))
        assert offset is not None
        return LazyOp(BufferOps.LOAD, (offset,), _with_st(node.arg, shrunk))

    def const(self, value: int, dtype: DType) -> LazyOp:
        st = ShapeTracker.from_shape((1,) * len(self.shape)).expand(self.shape)
        return LazyOp(BufferOps.CONST, (), ConstBuffer(value, dtype, st))


def _with_st(arg: MemBuffer | ConstBuffer, st: ShapeTracker) -> MemBuffer | ConstBuffer:
    if isinstance(arg, MemBuffer):
        return MemBuffer(arg.idx, arg.dtype, st)
    return ConstBuffer(arg.val, arg.dtype, st)
