"""ShapeTracker: a stack of Views mapping a logical shape onto a flat buffer.

Contract:
- `views[-1]` is the outermost view; its shape is the tracker's shape. Each view's memory index
  is a flat (row-major) index into the shape of the view below it; `views[0]` indexes the buffer.
- Movement methods (reshape, permute, expand, pad, shrink, stride) return new trackers and assert
  on invalid arguments. reshape merges into the last view when that is exact and otherwise
  pushes `View.create(new_shape)`; after any op, the top two views are folded into one when the
  composition is provably a single view. Indexes are never wrong; a view is pushed when in doubt.
- Invariant: every valid element of a view maps into [0, prod(shape below)), so the unravel of
  a flat index skips the `%` on the outermost axis.
- `expr_idxs` gives (memory index, validity) as symbolic nodes; an element is padding (reads 0)
  when validity is 0, and its memory index must then not be used.
"""
from __future__ import annotations
import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, cast

from codegen.shape.symbolic import (AndNode, LtNode, MulNode, Node, NumNode, SumNode, Variable,
                                    and_nodes)
from codegen.shape.view import MEMO_SIZE, View


def _idx_vars(shape: tuple[int, ...], prefix: str) -> list[Node]:
    """One Variable per axis (a constant 0 for axes of size <= 1)."""
    return [Variable(f"{prefix}{i}", 0, s - 1) if s > 1 else NumNode(0)
            for i, s in enumerate(shape)]


def _unravel(shape: tuple[int, ...], idx: Node) -> list[Node]:
    """Split a flat row-major index into per-axis indexes for `shape`."""
    out: list[Node] = []
    acc = 1
    for k in reversed(range(len(shape))):
        s = shape[k]
        if s == 1:
            out.append(NumNode(0))
            continue
        q = idx // acc
        # by the module invariant valid indexes are < prod(shape): no wrap on the outermost axis
        out.append(q if all(x == 1 for x in shape[:k]) else q % s)
        acc *= s
    return out[::-1]


def _affine(idx: Node, vs: list[Node]) -> tuple[int, list[int]] | None:
    """(offset, strides) when idx is offset + sum(stride_k * vs[k]), else None."""
    pos = {v.key: k for k, v in enumerate(vs) if isinstance(v, Variable)}
    offset, strides = 0, [0] * len(vs)
    for t in idx.nodes if isinstance(idx, SumNode) else [idx]:
        if isinstance(t, NumNode):
            offset += t.b
        elif isinstance(t, Variable) and t.key in pos:
            strides[pos[t.key]] += 1
        elif isinstance(t, MulNode) and isinstance(t.a, Variable) and t.a.key in pos:
            strides[pos[t.a.key]] += t.b
        else:
            return None
    return offset, strides


def _axis_bound(cond: Node, pos: dict[str, int],
                shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(axis, start, end): the range of one axis's index variable v that `cond` allows when it
    is v < c or -v < c; None for any other condition."""
    if not isinstance(cond, LtNode):
        return None
    x = cond.a
    if isinstance(x, Variable) and x.key in pos:
        return pos[x.key], 0, cond.b
    if isinstance(x, MulNode) and x.b == -1 and isinstance(x.a, Variable) and x.a.key in pos:
        axis = pos[x.a.key]
        return axis, 1 - cond.b, shape[axis]  # -v < c  <=>  v >= 1 - c
    return None


def _box(valid: Node, vs: list[Node], shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """Per-axis [start, end) ranges when valid is an AND of v<c / -v<c bounds, else None."""
    pos = {v.key: k for k, v in enumerate(vs) if isinstance(v, Variable)}
    ranges = [(0, s) for s in shape]
    for c in valid.nodes if isinstance(valid, AndNode) else [valid]:
        if isinstance(c, NumNode):
            if c.b == 0:  # a 0-d view cannot be fully invalid
                return [(0, 0)] * len(shape) if shape else None
            continue
        bound = _axis_bound(c, pos, shape)
        if bound is None:
            return None
        axis, start, end = bound
        ranges[axis] = (max(ranges[axis][0], start), min(ranges[axis][1], end))
    return ranges


@functools.lru_cache(maxsize=MEMO_SIZE)
def _merge_views(inner: View, outer: View) -> View | None:
    """One view equal to `outer` applied on top of `inner`, or None if not provably exact.

    Memoized: a model builds the same views every step, and the symbolic proof is slow."""
    if inner.contiguous:  # flat index == memory index
        return outer
    if outer.contiguous and outer.size() == inner.size():  # a reshape, not a prefix of inner
        merged = inner.reshape(outer.shape)
        if merged is not None:
            return merged
    if math.prod(outer.shape) == 0:
        return View.create(outer.shape)
    # compose symbolically; the rewrites are exact, so an affine index with box-shaped
    # validity is exactly one view
    vs = _idx_vars(outer.shape, "_mv")
    idx, valid = ShapeTracker((inner, outer)).expr_idxs(vs)
    aff, box = _affine(idx, vs), _box(valid, vs, outer.shape)
    if aff is None or box is None:
        return None
    return View.create(outer.shape, tuple(aff[1]), aff[0], tuple(box))




Arg = TypeVar("Arg", bound=tuple[Any, ...])
Move = Callable[["ShapeTracker", Arg], "ShapeTracker"]


def _memo(method: Move[Arg]) -> Move[Arg]:
    """Trackers are immutable values: a movement op applied to an equal tracker with an
    equal argument gives an equal result, so recent results are kept (eager code builds
    the same views on every call, and each costs a few microseconds to derive). Bad
    arguments still raise on every call: exceptions are not cached."""
    cached = functools.lru_cache(maxsize=MEMO_SIZE)(method)

    @functools.wraps(method)
    def wrapper(self: ShapeTracker, arg: Arg) -> ShapeTracker:
        arg = arg if type(arg) is tuple else cast(Arg, tuple(arg))  # callers may pass lists
        try:
            return cached(self, arg)
        except TypeError:  # an unhashable argument (lists inside): derive it afresh
            return method(self, arg)
    return wrapper


@dataclass(frozen=True)
class ShapeTracker:
    """Stack of views; views[0] indexes memory, views[-1] gives the shape."""
    views: tuple[View, ...]

    def __hash__(self) -> int:
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(self.views)
        return h

    @staticmethod
    def from_shape(shape: tuple[int, ...]) -> ShapeTracker:
        """Contiguous tracker over a fresh buffer of this shape."""
        return _from_shape(shape if type(shape) is tuple else tuple(shape))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.views[-1].shape

    @property
    def ndim(self) -> int:
        return len(self.views[-1].shape)

    @property
    def contiguous(self) -> bool:
        """A single contiguous view: element k is memory index k."""
        return len(self.views) == 1 and self.views[0].contiguous

    @functools.cached_property
    def size(self) -> int:
        """Upper bound of the buffer elements touched: max valid memory index + 1 of views[0]."""
        v = self.views[0]
        if v.invalid or v.size() == 0:
            return 0
        return v.offset + sum(max(st * a, st * (b - 1))
                              for st, (a, b) in zip(v.strides, v.ranges())) + 1

    def _with_last(self, view: View) -> ShapeTracker:
        """Replace the outermost view; a changed top view may now fold into the one below."""
        views = self.views[:-1] + (view,)
        while len(views) > 1:
            merged = _merge_views(views[-2], views[-1])
            if merged is None:
                break
            views = views[:-2] + (merged,)
        return ShapeTracker(views)

    def _check_ndim(self, arg: tuple[Any, ...], what: str) -> None:
        assert len(arg) == self.ndim, f"{what}: {arg} has {len(arg)} axes, shape {self.shape} " \
                                      f"has {self.ndim}"

    # ---- movement ----
    @_memo
    def reshape(self, new_shape: tuple[int, ...]) -> ShapeTracker:
        """Same elements in a new shape (row-major order)."""
        new_shape = tuple(int(s) for s in new_shape)
        assert all(s >= 0 for s in new_shape), f"reshape: negative size in {new_shape}"
        assert math.prod(new_shape) == math.prod(self.shape), \
            f"reshape: cannot reshape {self.shape} to {new_shape} (element counts differ)"
        if new_shape == self.shape:
            return self
        view = self.views[-1].reshape(new_shape)
        if view is None:
            return ShapeTracker(self.views + (View.create(new_shape),))
        return self._with_last(view)

    @_memo
    def permute(self, order: tuple[int, ...]) -> ShapeTracker:
        """New axis k is old axis order[k]."""
        order = tuple(int(o) for o in order)
        assert sorted(order) == list(range(self.ndim)), \
            f"permute: {order} is not a permutation of the axes of {self.shape}"
        return self._with_last(self.views[-1].permute(order))

    @_memo
    def expand(self, new_shape: tuple[int, ...]) -> ShapeTracker:
        """Broadcast size-1 axes to new sizes."""
        new_shape = tuple(int(s) for s in new_shape)
        self._check_ndim(new_shape, "expand")
        assert all(s == ns or (s == 1 and ns >= 0) for s, ns in zip(self.shape, new_shape)), \
            f"expand: cannot expand {self.shape} to {new_shape} (only size-1 axes grow)"
        return self._with_last(self.views[-1].expand(new_shape))

    @_memo
    def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        """Add (before, after) padding elements (validity 0) on each axis."""
        arg = tuple((int(b), int(a)) for b, a in arg)
        self._check_ndim(arg, "pad")
        assert all(b >= 0 and a >= 0 for b, a in arg), \
            f"pad: negative padding {arg} for shape {self.shape}"
        return self._with_last(self.views[-1].pad(arg))

    @_memo
    def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
        """Keep [start, end) on each axis."""
        arg = tuple((int(b), int(e)) for b, e in arg)
        self._check_ndim(arg, "shrink")
        assert all(0 <= b <= e <= s for (b, e), s in zip(arg, self.shape)), \
            f"shrink: {arg} is out of range for shape {self.shape}"
        return self._with_last(self.views[-1].shrink(arg))

    @_memo
    def stride(self, muls: tuple[int, ...]) -> ShapeTracker:
        """Every m-th element per axis like a[::m]; -1 flips an axis."""
        muls = tuple(int(m) for m in muls)
        self._check_ndim(muls, "stride")
        assert all(m != 0 for m in muls), f"stride: zero step in {muls} for shape {self.shape}"
        return self._with_last(self.views[-1].stride(muls))

    # ---- indexing ----
    def expr_idxs(self, idxs: list[Node] | None = None) -> tuple[Node, Node]:
        """(memory index, validity) for per-axis indexes (default Variables idx0, idx1, ...)."""
        return _expr_idxs(self, tuple(_idx_vars(self.shape, "idx") if idxs is None else idxs))

    def _expr_idxs(self, idxs: tuple[Node, ...]) -> tuple[Node, Node]:
        idx, valid = self.views[-1].expr_idxs(list(idxs))
        for view in reversed(self.views[:-1]):
            if valid.max == 0:
                break
            vidx, vvalid = view.expr_idxs(_unravel(view.shape, idx))
            idx, valid = vidx, and_nodes([valid, vvalid])
        if valid.max == 0:  # nothing is valid: the index is irrelevant
            return NumNode(0), NumNode(0)
        return idx, valid

    def expr_node(self, idx: Node | None = None) -> tuple[Node, Node]:
        """(memory index, validity) for a flat row-major index into the shape."""
        if idx is None:
            n = math.prod(self.shape)
            idx = Variable("idx", 0, n - 1) if n > 1 else NumNode(0)
        return self.expr_idxs(_unravel(self.shape, idx))

    def real_strides(self, ignore_valid: bool = False) -> tuple[int | None, ...]:
        """Memory stride per axis when the index is affine in that axis alone, else None.

        Axes that the validity depends on are None unless ignore_valid is set. Memoized:
        the optimiser asks for the same trackers' strides many times per kernel, and each
        answer costs a symbolic expansion of the index."""
        return _real_strides(self, ignore_valid)

    def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
        """Axes whose memory stride is exactly 1."""
        return [i for i, st in enumerate(self.real_strides(ignore_valid)) if st == 1]

    # ---- composition ----
    def simplify(self) -> ShapeTracker:
        """Merge adjacent views wherever that is provably exact."""
        views = list(self.views)
        k = len(views) - 2
        while k >= 0:
            merged = _merge_views(views[k], views[k + 1])
            if merged is not None:
                views[k:k + 2] = [merged]
                k = min(k, len(views) - 2)
            else:
                k -= 1
        return ShapeTracker(tuple(views))

    def __add__(self, other: ShapeTracker) -> ShapeTracker:
        """`other` applied on top of self: other's base (contiguous) shape is self.shape."""
        assert other.size <= max(1, math.prod(self.shape)), \
            f"compose: tracker with shape {other.shape} reaches index {other.size - 1}, " \
            f"past the {math.prod(self.shape)} elements of shape {self.shape}"
        if self.contiguous:
            return other
        if other.contiguous and other.shape == self.shape:
            return self
        return ShapeTracker(self.views + other.views).simplify()


@functools.lru_cache(maxsize=MEMO_SIZE)
def _from_shape(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker((View.create(shape),))


@functools.lru_cache(maxsize=MEMO_SIZE // 8)
def _expr_idxs(st: ShapeTracker, idxs: tuple[Node, ...]) -> tuple[Node, Node]:
    """ShapeTracker.expr_idxs, memoized: a kernel's upcast copies and a model's kernels
    derive the same tracker's index at the same per-axis indexes again (nodes are
    immutable values, equal when they render alike). The repeats are near each other
    and an entry holds an expression tree (~3 KB), so the memo is kept small."""
    return st._expr_idxs(idxs)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _real_strides(st: ShapeTracker, ignore_valid: bool) -> tuple[int | None, ...]:
    vs = _idx_vars(st.shape, "idx")
    idx, valid = st.expr_idxs(vs)
    terms = idx.nodes if isinstance(idx, SumNode) else [idx]
    valid_vars = valid.vars()
    out: list[int | None] = []
    for v in vs:
        if not isinstance(v, Variable):
            out.append(0)
            continue
        hits = [t for t in terms if v in t.vars()]
        stride: int | None = None
        if not hits:
            stride = 0
        elif len(hits) == 1 and hits[0] == v:
            stride = 1
        elif len(hits) == 1 and isinstance(hits[0], MulNode) and hits[0].a == v:
            stride = hits[0].b
        out.append(None if (not ignore_valid and v in valid_vars) else stride)
    return tuple(out)
