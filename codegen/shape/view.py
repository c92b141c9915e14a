"""A View: one strided, offset, masked window onto a flat buffer.

Contract:
- Element at index tuple (i0, ..., in) lives at memory index offset + sum(ik * strides[k]); it
  is valid iff mask is None or start_k <= ik < end_k on every axis (invalid elements read as
  padding and their memory index is meaningless).
- Always build views with `View.create`, which canonicalises: size-1 dims get stride 0, masks are
  clamped to the shape, a mask covering everything becomes None, and a view with an empty mask
  range is "fully invalid" (mask all (0, 0), strides 0, offset 0).
- Movement methods return new views and never a wrong one; `reshape` returns None when the result
  is not expressible as a single view (the caller then stacks a new view on top).
- Arguments are assumed validated by the ShapeTracker (which asserts on bad input).
"""
from __future__ import annotations
import functools
import math
from dataclasses import dataclass
from typing import Optional

from codegen.helpers import getenv
from codegen.shape.symbolic import Node, NumNode, and_nodes, sum_nodes

# results kept by each memoised view function (VIEW_CACHE; a few MB at the default)
MEMO_SIZE = getenv("VIEW_CACHE", 8192)

Mask = Optional[tuple[tuple[int, int], ...]]
Dim = tuple[int, int, tuple[int, int]]  # one axis: (size, stride, valid range)


def strides_for_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-contiguous strides; size-1 dims get stride 0."""
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc if s != 1 else 0)
        acc *= s
    return tuple(reversed(strides))


def _split_range(start: int, end: int, sizes: list[int]) -> list[tuple[int, int]] | None:
    """Per-dim ranges whose product (row-major) is exactly the flat range [start, end), or None."""
    if len(sizes) == 1:
        return [(start, end)]
    inner = math.prod(sizes[1:])
    if start % inner == 0 and end % inner == 0:  # whole rows of the inner block
        return [(start // inner, end // inner)] + [(0, s) for s in sizes[1:]]
    q = start // inner
    if q == (end - 1) // inner:  # inside one row: recurse into it
        sub = _split_range(start - q * inner, end - q * inner, sizes[1:])
        return None if sub is None else [(q, q + 1)] + sub
    return None  # a partial row followed by more rows is not a product of ranges


def _merge_dims(dims: list[Dim]) -> tuple[int, int, tuple[int, int]] | None:
    """Merge (size, stride, range) dims into one: (stride, offset delta, range) or None."""
    sizes = [s for s, _, _ in dims]
    inner = [math.prod(sizes[k + 1:]) for k in range(len(dims))]
    stride = 0
    for (_, st, (a, b)), p in reversed(list(zip(dims, inner))):
        if b - a > 1:  # the innermost dim with >1 valid element fixes the merged stride
            if st % p:
                return None
            stride = st // p
            break
    delta = 0
    for (_, st, (a, b)), p in zip(dims, inner):
        if b - a > 1:
            if st != stride * p:
                return None
        else:  # one valid index a: any stride works once the offset absorbs the difference
            delta += a * (st - stride * p)
    start = sum(a * p for (_, _, (a, _)), p in zip(dims, inner))
    end = sum((b - 1) * p for (_, _, (_, b)), p in zip(dims, inner)) + 1
    if _split_range(start, end, sizes) != [r for _, _, r in dims]:
        return None  # the valid set is not one flat range
    return stride, delta, (start, end)


def _equal_product_groups(old: list[int], new: list[int]) -> list[tuple[slice, slice]]:
    """Cut two lists of sizes > 1 with equal products into consecutive groups of equal
    product: (old dims, new dims) per group. Each old group reshapes to its new group alone."""
    groups: list[tuple[slice, slice]] = []
    i, j = 0, 0
    while i < len(old):
        gi, gj, po, pn = i, j, old[i], new[j]
        i, j = i + 1, j + 1
        while po != pn:
            if po < pn:
                po, i = po * old[i], i + 1
            else:
                pn, j = pn * new[j], j + 1
        groups.append((slice(gi, i), slice(gj, j)))
    return groups


def _regroup(old: list[Dim],
             new: list[int]) -> tuple[int, list[tuple[int, tuple[int, int]]]] | None:
    """Old (size, stride, range) dims merged into one and split into the `new` sizes of equal
    product: (offset delta, (stride, range) per new dim), or None when that is not exact."""
    merged = _merge_dims(old)
    if merged is None:
        return None
    stride, delta, (start, end) = merged
    ranges = _split_range(start, end, new)
    if ranges is None:
        return None
    return delta, [(stride * math.prod(new[k + 1:]), r) for k, r in enumerate(ranges)]


def _canonical_mask(shape: tuple[int, ...], mask: Mask) -> Mask:
    """The mask clamped to the shape; None when it lets every element through."""
    if mask is None:
        return None
    assert len(mask) == len(shape), f"mask {mask} does not match shape {shape}"
    mask = tuple((max(0, int(a)), min(s, int(b))) for (a, b), s in zip(mask, shape))
    if math.prod(shape) == 0 or all(m == (0, s) for m, s in zip(mask, shape)):
        return None
    return mask


@dataclass(frozen=True)
class View:
    """Strided, offset, masked view; build with View.create."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    mask: Mask
    contiguous: bool

    def __hash__(self) -> int:  # views key the schedulers' memos: hash each once
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.shape, self.strides, self.offset, self.mask))
        return h

    @staticmethod
    @functools.lru_cache(maxsize=2 * MEMO_SIZE)  # models build the same views every step
    def create(shape: tuple[int, ...], strides: tuple[int, ...] | None = None, offset: int = 0,
               mask: Mask = None) -> View:
        """Canonical view (see the module contract)."""
        shape = tuple(int(s) for s in shape)
        strides = strides_for_shape(shape) if strides is None else tuple(int(s) for s in strides)
        assert len(strides) == len(shape), f"strides {strides} do not match shape {shape}"
        strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
        mask = _canonical_mask(shape, mask)
        if mask is not None and any(a >= b for a, b in mask):  # nothing valid: fully invalid
            return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
        contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
        return View(shape, strides, int(offset), mask, contiguous)

    def size(self) -> int:
        """Number of elements in the view's shape."""
        return math.prod(self.shape)

    @property
    def invalid(self) -> bool:
        """True when no element is valid."""
        return self.mask is not None and any(a >= b for a, b in self.mask)

    def ranges(self) -> list[tuple[int, int]]:
        """Valid range per axis (the whole axis when unmasked)."""
        return list(self.mask) if self.mask is not None else [(0, s) for s in self.shape]

    def expr_idxs(self, idxs: list[Node]) -> tuple[Node, Node]:
        """(memory index, validity) of the element at `idxs`."""
        assert len(idxs) == len(self.shape), f"{len(idxs)} indexes for shape {self.shape}"
        idxs = [i if isinstance(i, Node) else NumNode(i) for i in idxs]
        idx = sum_nodes([self.offset] + [i * st for i, st in zip(idxs, self.strides) if st])
        if self.mask is None:
            return idx, NumNode(1)
        conds = []
        for i, (a, b), s in zip(idxs, self.mask, self.shape):
            if (a, b) != (0, s):
                conds += [i.ge(a), i.lt(b)]
        return idx, and_nodes(conds)

    # ---- movement ----
    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def permute(self, order: tuple[int, ...]) -> View:
        """Reorder axes: new axis k is old axis order[k]."""
        mask = tuple(self.mask[o] for o in order) if self.mask is not None else None
        return View.create(tuple(self.shape[o] for o in order),
                           tuple(self.strides[o] for o in order), self.offset, mask)

    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def expand(self, new_shape: tuple[int, ...]) -> View:
        """Broadcast size-1 dims (stride 0) to new sizes."""
        mask = None
        if self.mask is not None:  # a size-1 dim's range is (0,1) or empty; empty stays empty
            mask = tuple((0, ns) if (s == 1 and b > a) else (a, b)
                         for (a, b), s, ns in zip(self.mask, self.shape, new_shape))
        strides = tuple(0 if s != ns else st
                        for s, ns, st in zip(self.shape, new_shape, self.strides))
        return View.create(tuple(new_shape), strides, self.offset, mask)

    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def pad(self, arg: tuple[tuple[int, int], ...]) -> View:
        """Add (before, after) invalid elements on each axis."""
        if all(b == 0 and a == 0 for b, a in arg):
            return self
        shape = tuple(s + b + a for s, (b, a) in zip(self.shape, arg))
        offset = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
        mask = tuple((ms + b, me + b) for (ms, me), (b, _) in zip(self.ranges(), arg))
        return View.create(shape, self.strides, offset, mask)

    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def shrink(self, arg: tuple[tuple[int, int], ...]) -> View:
        """Keep [start, end) on each axis."""
        shape = tuple(e - b for b, e in arg)
        offset = self.offset + sum(b * st for (b, _), st in zip(arg, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple((max(ms, b) - b, min(me, e) - b)
                         for (ms, me), (b, e) in zip(self.mask, arg))
            if any(a >= b for a, b in mask):  # nothing valid survives
                mask = ((0, 0),) * len(shape)
        return View.create(shape, self.strides, offset, mask)

    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def stride(self, muls: tuple[int, ...]) -> View:
        """Take every m-th element per axis like a[::m]; negative m walks from the end."""
        shape, strides, mask, offset = [], [], [], self.offset
        for s, st, (ms, me), m in zip(self.shape, self.strides, self.ranges(), muls):
            k = abs(m)
            shape.append((s + k - 1) // k)
            if m > 0:  # new j -> old j*m
                strides.append(st * m)
                mask.append((-(-ms // k), -(-me // k)))
            else:  # new j -> old (s-1) - j*k
                offset += (s - 1) * st
                strides.append(-st * k)
                mask.append((-(-(s - me) // k), (s - 1 - ms) // k + 1))
        keep_mask = self.mask is not None
        return View.create(tuple(shape), tuple(strides), offset, tuple(mask) if keep_mask else None)

    @functools.lru_cache(maxsize=MEMO_SIZE)  # pure: models repeat the same moves every step
    def reshape(self, new_shape: tuple[int, ...]) -> View | None:
        """Same elements in a new shape as one view, or None when that is not expressible."""
        new_shape = tuple(new_shape)
        if new_shape == self.shape:
            return self
        if self.contiguous or math.prod(self.shape) == 0:
            return View.create(new_shape)
        if self.invalid:
            return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None
        return _reshape_by_groups(self, new_shape)


def _reshape_by_groups(view: View, new_shape: tuple[int, ...]) -> View | None:
    """View.reshape of a strided view with valid elements and a nonzero size.

    Size-1 dims carry nothing (stride 0, full mask): match the other dims in groups of equal
    product, merge each old group into one dim, then split it into the new dims."""
    old = [(s, st, r) for s, st, r in zip(view.shape, view.strides, view.ranges()) if s != 1]
    new = [s for s in new_shape if s != 1]
    parts: list[tuple[int, tuple[int, int]]] = []  # (stride, range) per non-1 new dim
    offset = view.offset
    for old_dims, new_dims in _equal_product_groups([s for s, _, _ in old], new):
        group = _regroup(old[old_dims], new[new_dims])
        if group is None:
            return None
        offset += group[0]
        parts += group[1]
    strides, mask, it = [], [], iter(parts)
    for s in new_shape:
        st, r = (0, (0, 1)) if s == 1 else next(it)
        strides.append(st)
        mask.append(r)
    return View.create(new_shape, tuple(strides), offset,
                       tuple(mask) if view.mask is not None else None)
