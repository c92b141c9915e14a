"""One-hot sums into rows -> accumulating stores: a kernel AST rewrite (D153).

The transpose of a pick (codegen/gather.py) is a sum *into* the row an index names: an
Embedding's weight gradient, `index_add`, a one-hot matrix's transpose times a matrix,

    out[v, d] = SUM over t of where(range(v) == e(t), x(t, d), 0),

with v an axis of the output, not of the sum. As a reduce it compares every row with
every token (V x T x D steps for T x D of work: 5000 rows x 3072 tokens x 64 columns took
13 ms). Where the body is zero wherever the comparison is false (`vanishes`), only
v == e adds anything, so

    out = 0;  for every (t, d):  out[clamp(e(t)), d] += x(t, d) at v := clamp(e(t))

with the comparison replaced by `0 <= e < n` (an index out of range adds 0 to row 0;
its index check, D12, still raises). A sum added to a value without reduces
(`scatter_add`'s self) starts the output from that value instead of 0.

The rewritten AST is a *scatter*: a STORE with two or three sources. The value: its
leaves at the sum's full shape with v shrunk to 1, those that read along v made indirect
loads, as a pick's. The store's offset: `clamp(e) * stride`, int64, summed over the
substituted axes. What the output starts from, if not 0: at the output's shape. The
STORE keeps the output's own tracker. Its kernel (codegen/scatter_kernel.py) fills the
output and accumulates.

Only a loop target takes it: the threads split the output's other axes, so no two write
one element, where a GPU's work-items would need atomic adds (it keeps the one-hot sum).
Only sums stored as they are (or added to a value), of a dtype that accumulates exactly
as the reduce would (not 16-bit floats, which a reduce sums in float32).
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from codegen.emit import node_dtype
from codegen.gather import Substitution, depends, equality, vanishes
from codegen.helpers import prod
from codegen.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps, UnaryOps

_ACCUMULATES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint32,
                dtypes.uint64)
_MIN_ROWS = 4  # rows picked among, at least: below, the one-hot sum costs about as much


def is_scatter(ast: LazyOp | None) -> bool:
    """Is `ast` a scatter: a STORE whose second source is its data offset (and whose third,
    if any, the value the output starts from)?"""
    return ast is not None and ast.op is BufferOps.STORE and len(ast.src) > 1


def rewrite_scatter(ast: LazyOp, ranges: dict[int, int]) -> LazyOp | None:
    """`ast` as a scatter where it is a one-hot sum into the output's rows, else None.
    `ranges`: buffer index -> length of the buffers that hold 0..n-1."""
    found = _sum_and_start(ast.src[0]) if ranges and ast.op is BufferOps.STORE else None
    if found is None:
        return None
    reduce, start = found
    out, body = ast.arg, reduce.src[0]
    if not _accumulates(out, body):
        return None
    picks = _picks(body, reduce.arg, out.st.shape, ranges)
    if prod(out.st.shape[r] for r in picks) < _MIN_ROWS:
        return None
    sub = Substitution(picks)
    value = sub.node(body)
    if value is None:
        return None
    offset = _offset(sub, sorted(picks), out.st.real_strides())
    srcs = (value, offset) if start is None else (value, offset, start)
    return LazyOp(BufferOps.STORE, srcs, MemBuffer(out.idx, out.dtype, out.st))


def _accumulates(out: MemBuffer, body: LazyOp) -> bool:
    """Can the output hold the sum as it accumulates: its dtype the body's, one of those
    that add as the reduce would; one unmasked view; the body reads no reduce and not the
    output (an in-place update reads its target only element for element, D24)?"""
    return out.dtype in _ACCUMULATES and node_dtype(body) == out.dtype and \
        len(out.st.views) == 1 and out.st.views[0].mask is None and \
        not any(isinstance(n.op, ReduceOps) or (n.op is BufferOps.LOAD and n.arg.idx == 0)
                for n in body.walk())


def _picks(body: LazyOp, summed: tuple[int, ...], shape: tuple[int, ...],
           ranges: dict[int, int]) -> dict[int, tuple[LazyOp, LazyOp]]:
    """Output axis -> (its equality with a range, the index e) for every output axis the
    body picks by an equality that zeroes it where false."""
    picks: dict[int, tuple[LazyOp, LazyOp]] = {}
    for node in body.walk():
        found = equality(node, ranges)
        if found is not None and found[0] not in summed and found[0] not in picks and \
                shape[found[0]] > 1 and vanishes(body, node):
            picks[found[0]] = (node, found[1])
    # an index that depends on another substituted axis would need that axis's value
    return {r: p for r, p in picks.items() if not any(depends(p[1], s) for s in picks)}


def _offset(sub: Substitution, axes: list[int], strides: tuple[int | None, ...]) -> LazyOp:
    """The store's offset: SUM over the picked axes of clamp(e) * the output's stride."""
    offset: LazyOp | None = None
    for r in axes:
        term = LazyOp(UnaryOps.CAST, (sub.clamped[r],), (dtypes.int64, False))
        stride = strides[r]
        assert stride is not None  # one unmasked view
        if stride != 1:
            term = LazyOp(BinaryOps.MUL, (term, sub.const(stride, dtypes.int64)))
        offset = term if offset is None else LazyOp(BinaryOps.ADD, (offset, term))
    assert offset is not None
    return offset


def _sum_and_start(stored: LazyOp) -> tuple[LazyOp, LazyOp | None] | None:
    """(the SUM, what it is added to or None) where the stored value is a SUM, or a SUM
    plus a value without reduces (`scatter_add`'s self: the output starts from it)."""
    if stored.op is ReduceOps.SUM:
        return stored, None
    if stored.op is not BinaryOps.ADD:
        return None
    for a, b in (stored.src, stored.src[::-1]):
        if a.op is ReduceOps.SUM and not any(isinstance(n.op, ReduceOps) for n in b.walk()):
            return a, b
    return None


def scatter_axes(ast: LazyOp) -> tuple[list[int], list[int], list[int]]:
    """A scatter's axes by kind: (rows: the output's, substituted; columns: the output's
    others; summed: the value's, the output has one position there). A value axis of size
    1 that the output shares is a column of size 1."""
    value_shape = next(n for n in ast.src[0].walk()
                       if n.op in (BufferOps.LOAD, BufferOps.CONST)).arg.st.shape
    rows: list[int] = []
    columns: list[int] = []
    summed: list[int] = []
    for a, (o, v) in enumerate(zip(ast.arg.st.shape, value_shape)):
        (columns if o == v else rows if v == 1 else summed).append(a)
    return rows, columns, summed
