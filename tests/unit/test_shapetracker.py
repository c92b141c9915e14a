"""ShapeTracker vs a numpy shadow array: every element's index and validity after random ops."""
import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.shape.shapetracker import ShapeTracker
from codegen.shape.symbolic import (AndNode, DivNode, LtNode, ModNode, MulNode, NumNode, SumNode,
                                    Variable)
from codegen.shape.view import View, strides_for_shape

MAX_ELEMS = 600  # keeps every example cheap to check exhaustively

# evaluate index expressions on whole numpy index grids at once (numpy // and % floor too)
NP_OPS = {
    NumNode: lambda n, ops, ctx: n.b,
    Variable: lambda n, ops, ctx: ctx[n.expr],
    MulNode: lambda n, ops, ctx: n.a.render(ops, ctx) * n.b,
    DivNode: lambda n, ops, ctx: n.a.render(ops, ctx) // n.b,
    ModNode: lambda n, ops, ctx: n.a.render(ops, ctx) % n.b,
    SumNode: lambda n, ops, ctx: sum(c.render(ops, ctx) for c in n.nodes),
    LtNode: lambda n, ops, ctx: (n.a.render(ops, ctx) < n.b) * 1,
    AndNode: lambda n, ops, ctx: functools.reduce(
        lambda x, y: x & y, [np.asarray(c.render(ops, ctx)) != 0 for c in n.nodes]) * 1,
}


def factorize(n):
    """Prime factors of n."""
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def draw_reshape(data, shape):
    """A compatible shape: a merge, a split, a squeeze/unsqueeze or a random factorisation."""
    mode = data.draw(st.sampled_from(["merge", "split", "ones", "random"]))
    shape = list(shape)
    if mode == "merge" and len(shape) >= 2:
        k = data.draw(st.integers(0, len(shape) - 2))
        return tuple(shape[:k] + [shape[k] * shape[k + 1]] + shape[k + 2:])
    if mode == "split" and shape:
        k = data.draw(st.integers(0, len(shape) - 1))
        fs = factorize(shape[k])
        cut = data.draw(st.integers(0, len(fs)))
        return tuple(shape[:k] + [math.prod(fs[:cut]), math.prod(fs[cut:])] + shape[k + 1:])
    if mode == "ones":
        core = [s for s in shape if s != 1]
        for _ in range(data.draw(st.integers(0, 2))):
            core.insert(data.draw(st.integers(0, len(core))), 1)
        return tuple(core)
    fs = data.draw(st.permutations(factorize(math.prod(shape))))
    ndim = data.draw(st.integers(0, 4))
    dims = [1] * ndim if ndim else []
    if not dims and fs:
        dims = [1]
    for f in fs:
        dims[data.draw(st.integers(0, len(dims) - 1))] *= f
    return tuple(dims)


def apply_random_op(data, tracker, arr):
    """Apply one random movement op to the tracker and its numpy shadow."""
    shape = arr.shape
    op = data.draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "stride"]))
    if op == "reshape":
        new = draw_reshape(data, shape)
        return tracker.reshape(new), arr.reshape(new)
    if op == "permute":
        order = tuple(data.draw(st.permutations(range(len(shape)))))
        return tracker.permute(order), arr.transpose(order)
    if op == "expand" and 1 in shape:
        new = tuple(data.draw(st.integers(1, 4)) if s == 1 else s for s in shape)
        if math.prod(new) <= MAX_ELEMS:
            return tracker.expand(new), np.broadcast_to(arr, new)
    if op == "pad" and shape:  # np.pad rejects 0-d arrays
        arg = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
        if math.prod(s + b + a for s, (b, a) in zip(shape, arg)) <= MAX_ELEMS:
            return tracker.pad(arg), np.pad(arr, arg, constant_values=-1)
    if op == "shrink":
        arg = []
        for s in shape:
            b = data.draw(st.integers(0, s - 1))
            arg.append((b, data.draw(st.integers(b + 1, s))))
        return tracker.shrink(tuple(arg)), arr[tuple(slice(b, e) for b, e in arg)]
    if op == "stride":
        muls = tuple(data.draw(st.sampled_from([1, 1, -1, 2, -2, 3, -3])) for _ in shape)
        return tracker.stride(muls), arr[tuple(slice(None, None, m) for m in muls)]
    return tracker, arr


def random_tracker(data, shape, n_ops):
    """A tracker over a contiguous buffer of `shape` after random ops, plus its shadow."""
    tracker, arr = ShapeTracker.from_shape(shape), np.arange(math.prod(shape)).reshape(shape)
    for _ in range(n_ops):
        tracker, arr = apply_random_op(data, tracker, arr)
    return tracker, arr


def evaluate(tracker):
    """(index, valid) arrays over every element of the tracker's shape."""
    shape = tracker.shape
    grid = np.indices(shape, dtype=np.int64)
    env = {f"idx{i}": grid[i] for i in range(len(shape))}
    idx, valid = tracker.expr_idxs()
    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=np.int64), shape)
    return full(idx.render(NP_OPS, env)), full(valid.render(NP_OPS, env)) != 0


def check(tracker, arr):
    """Every element of the tracker agrees with the shadow (-1 marks padding)."""
    assert tracker.shape == arr.shape
    idx, valid = evaluate(tracker)
    np.testing.assert_array_equal(valid, arr != -1)
    np.testing.assert_array_equal(idx[valid], arr[valid])
    if valid.any():
        assert arr[valid].max() < tracker.size
        assert arr[valid].min() >= 0
    # the scalar eval path and the flat-index path agree too
    fidx, fvalid = tracker.expr_node()
    flat = arr.reshape(-1)
    for pos in list(range(min(4, flat.size))) + [flat.size - 1] * (flat.size > 0):
        env = {"idx": pos}
        assert bool(fvalid.eval(env)) == (flat[pos] != -1)
        if flat[pos] != -1:
            assert fidx.eval(env) == flat[pos]
    return idx, valid


def check_real_strides(tracker, idx, valid):
    """Claimed strides hold between every pair of valid neighbours."""
    for ignore in (False, True):
        for axis, stride in enumerate(tracker.real_strides(ignore)):
            if stride is None or tracker.shape[axis] < 2:
                continue
            n = tracker.shape[axis]
            pre = (slice(None),) * axis
            lo, hi = pre + (slice(0, n - 1),), pre + (slice(1, n),)
            both = valid[lo] & valid[hi]
            np.testing.assert_array_equal((idx[hi] - idx[lo])[both], stride)


@st.composite
def small_shape(draw):
    return tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))


@settings(max_examples=250, deadline=None)
@given(st.data(), small_shape())
def test_random_movement_sequences(data, shape):
    tracker, arr = random_tracker(data, shape, data.draw(st.integers(1, 8)))
    idx, valid = check(tracker, arr)
    check_real_strides(tracker, idx, valid)
    check(tracker.simplify(), arr)


@settings(max_examples=150, deadline=None)
@given(st.data(), small_shape())
def test_composition(data, shape):
    a, arr_a = random_tracker(data, shape, data.draw(st.integers(0, 5)))
    b, arr_b = random_tracker(data, a.shape, data.draw(st.integers(0, 5)))
    composed = a + b
    flat_a = arr_a.reshape(-1)
    want = np.where(arr_b == -1, -1, flat_a[np.where(arr_b == -1, 0, arr_b)])
    check(composed, want)
    assert len(composed.views) <= len(a.views) + len(b.views)


def test_contiguous_basics():
    st0 = ShapeTracker.from_shape((4, 6))
    assert st0.contiguous and st0.size == 24 and st0.shape == (4, 6)
    assert st0.real_strides() == (6, 1) and st0.unit_stride_axes() == [1]
    assert str(st0.expr_idxs()[0]) == "((idx0*6)+idx1)"
    assert st0.reshape((2, 12)).contiguous
    assert strides_for_shape((3, 1, 4)) == (4, 0, 1)
    assert ShapeTracker.from_shape((1, 5)).real_strides() == (0, 1)


def test_single_view_merges():
    st0 = ShapeTracker.from_shape((4, 6))
    assert len(st0.permute((1, 0)).reshape((24,)).views) == 2  # transpose then flatten: no
    assert len(st0.permute((1, 0)).reshape((24,)).reshape((6, 4)).views) == 1  # folds back
    assert len(st0.permute((1, 0)).reshape((3, 2, 4)).views) == 1  # split of a permuted dim
    assert len(st0.stride((-1, -1)).reshape((24,)).views) == 1  # full flip merges
    assert len(st0.pad(((1, 1), (0, 0))).reshape((36,)).views) == 1  # row padding merges
    assert len(st0.reshape((4, 1, 6, 1)).permute((2, 1, 3, 0)).reshape((6, 4)).views) == 1
    assert len(ShapeTracker.from_shape((1, 6)).pad(((1, 1), (0, 0))).reshape((18,)).views) == 1
    assert len(st0.shrink(((1, 3), (0, 6))).reshape((12,)).views) == 1
    assert len(st0.shrink(((0, 4), (1, 5))).reshape((16,)).views) == 2  # row gaps
    # a split axis keeps a merged mask only when it lines up with rows
    padded = ShapeTracker.from_shape((6,)).pad(((0, 6),))
    assert len(padded.reshape((2, 6)).views) == 1 and len(padded.reshape((3, 4)).views) == 2


def test_composition_shortcuts():
    a = ShapeTracker.from_shape((4, 6)).permute((1, 0))
    b = ShapeTracker.from_shape((6, 4))
    assert a + b == a and b + a == a
    c = ShapeTracker.from_shape((6, 4)).stride((2, -1)).pad(((1, 0), (0, 0)))
    merged = a + c  # affine index with box validity folds into one view
    assert merged.views == (View.create((4, 4), (2, -6), 16, ((1, 4), (0, 4))),)
    assert len((a + ShapeTracker.from_shape((6, 4)).reshape((24,)).stride((2,))).views) == 2


def test_expand_and_size():
    st0 = ShapeTracker.from_shape((1, 4)).expand((3, 4))
    assert st0.size == 4 and st0.real_strides() == (0, 1)
    assert ShapeTracker.from_shape((4,)).pad(((2, 2),)).real_strides() == (None,)
    assert ShapeTracker.from_shape((4,)).pad(((2, 2),)).real_strides(True) == (1,)
    empty = ShapeTracker.from_shape((4,)).pad(((0, 3),)).shrink(((4, 7),))
    assert empty.expr_idxs()[1] == NumNode(0) and empty.size == 0  # touches nothing


def test_invalid_view_is_representable():
    v = View.create((3, 4), mask=((1, 1), (0, 4)))
    assert v.invalid and v.expr_idxs([Variable("i", 0, 2), Variable("j", 0, 3)])[1] == NumNode(0)
    assert View.create((3, 4), mask=((0, 3), (0, 4))).mask is None


def test_invalid_arguments_assert():
    st0 = ShapeTracker.from_shape((4, 6))
    bad = [lambda: st0.reshape((5, 5)), lambda: st0.permute((0, 0)), lambda: st0.permute((0,)),
           lambda: st0.expand((4, 7)), lambda: st0.expand((4, 6, 1)),
           lambda: st0.pad(((0, -1), (0, 0))), lambda: st0.pad(((0, 0),)),
           lambda: st0.shrink(((0, 5), (0, 6))), lambda: st0.shrink(((3, 2), (0, 6))),
           lambda: st0.stride((0, 1)), lambda: st0.stride((1,))]
    for fn in bad:
        with pytest.raises(AssertionError, match=r"\(4, 6\)"):
            fn()


def test_memoised_movement_equals_a_fresh_derivation():
    """Movement ops keep recent results: each equals the one derived afresh, list
    arguments work, and a bad argument raises on every call (exceptions are not kept)."""
    st0 = ShapeTracker.from_shape((4, 6)).permute((1, 0))
    ops = [("reshape", (2, 12)), ("reshape", [3, 8]), ("permute", (1, 0)),
           ("expand", (6, 4)), ("pad", ((1, 0), (0, 2))), ("pad", [[1, 0], [0, 2]]),
           ("shrink", ((1, 5), (0, 3))), ("stride", (2, -1))]
    for name, arg in ops:
        method = getattr(ShapeTracker, name)
        fresh = method.__wrapped__(st0, arg)
        assert method(st0, arg) == fresh and method(st0, arg) == fresh, (name, arg)
        assert method(st0, arg).expr_idxs() == fresh.expr_idxs()
    assert ShapeTracker.from_shape([4, 6]) is ShapeTracker.from_shape((4, 6))
    assert st0.pad(iter([[1, 0], [0, 2]])) == st0.pad(((1, 0), (0, 2)))  # read once
    for _ in range(2):
        with pytest.raises(AssertionError, match=r"\(6, 4\)"):
            st0.reshape((5, 5))
