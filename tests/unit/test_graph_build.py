"""Graph building without Python per step (D61): the shortcuts build the same lazy graph
the general Tensor path builds, so the scheduler sees no difference.

`graph_key` writes a LazyBuffer graph as text (ops, arguments, dtypes, trackers; buffers
numbered in the order they are met), so two graphs are compared exactly. Softmax's
forward and backward are written in LazyBuffer ops: they are checked against the Tensor
composite they replace, over drawn shapes, axes, dtypes and layouts (contiguous, permuted,
broadcast), and against numpy. Broadcasting and `expand` record no `Same` nodes.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten.graph_expand import expand_graphs
from lazyten import Tensor, dtypes, nnops
from lazyten.autograd import conv, primitives as F, views
from lazyten.autograd.conv import Conv


def graph_key(*roots) -> str:
    """The graphs below `roots` (LazyBuffers) as text; realized buffers by shape and dtype.
    Traced calls' nodes are expanded first (D79, D80), as the scheduler's first pass does."""
    expand_graphs(list(roots))
    ids: dict[int, int] = {}
    lines: list[str] = []

    def walk(lb) -> int:
        if id(lb) in ids:
            return ids[id(lb)]
        base = lb.base
        if lb._base is not None:
            line = f"view {walk(base)} {lb.st.views} {lb.dtype.name}"
        elif base.realized is not None:
            line = f"buffer {lb.shape} {lb.dtype.name}"
        else:
            srcs = [walk(s) for s in base.src]
            line = f"{base.op} {srcs} {base.arg!r} {lb.dtype.name} {lb.st.views}"
        ids[id(lb)] = len(lines)
        lines.append(line)
        return ids[id(lb)]
    for root in roots:
        walk(root)
    return "\n".join(lines)


def composite(t: Tensor, axis, log: bool) -> Tensor:
    """softmax / log_softmax in Tensor ops: what Softmax's forward built before D61."""
    shifted = t - t.amax(axis, keepdim=True)
    if log:
        return shifted - shifted.exp().sum(axis, keepdim=True).log()
    e = shifted.exp()
    return e * e.sum(axis, keepdim=True).reciprocal()


def composite_backward(y: Tensor, g: Tensor, axis, log: bool) -> Tensor:
    if log:
        return g - y.exp() * g.sum(axis, keepdim=True)
    return y * (g - (g * y).sum(axis, keepdim=True))


@st.composite
def softmax_inputs(draw):
    """(array, layout, axis): odd sizes, 0 to 3 dims, any axis (or a tuple of them)."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 7, 17])) for _ in range(ndim))
    layout = draw(st.sampled_from(["contiguous", "permuted", "broadcast"]))
    if ndim == 0:
        return np.float64(draw(st.floats(-3, 3))), "contiguous", draw(st.sampled_from([0, -1]))
    axis = draw(st.one_of(st.integers(-ndim, ndim - 1),
                          st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                   unique=True).map(tuple)))
    values = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape) * 3
    return values, layout, axis


def make(values: np.ndarray, layout: str, dtype, requires_grad: bool) -> tuple[Tensor, Tensor]:
    """(leaf, tensor of `values`' shape): the leaf itself, a permuted view of it (its
    values transposed), or a broadcast view (of its first row)."""
    shape = np.shape(values)
    if layout == "permuted":
        leaf = Tensor(np.ascontiguousarray(np.transpose(values)), dtype=dtype,
                      requires_grad=requires_grad)
        return leaf, leaf.permute(tuple(reversed(range(len(shape)))))
    if layout == "broadcast":
        leaf = Tensor(np.asarray(values)[:1], dtype=dtype, requires_grad=requires_grad)
        return leaf, leaf.expand(shape)
    leaf = Tensor(values, dtype=dtype, requires_grad=requires_grad)
    return leaf, leaf


@settings(max_examples=40)
@given(case=softmax_inputs(), log=st.booleans(),
       dtype=st.sampled_from([dtypes.float32, dtypes.float16, dtypes.float64]))
def test_softmax_builds_the_composites_graph(case, log, dtype):
    values, layout, axis = case
    _, x = make(values, layout, dtype, requires_grad=True)
    y = x.log_softmax(axis) if log else x.softmax(axis)
    plain = Tensor._wrap(x.lazydata)
    if dtype is dtypes.float16:  # computed in float32, rounded once (as PyTorch)
        expected = composite(plain.float(), axis, log).cast(dtype)
        assert graph_key(y.lazydata) == graph_key(expected.lazydata)
        return
    assert graph_key(y.lazydata) == graph_key(composite(plain, axis, log).lazydata)
    g = Tensor(np.random.default_rng(1).standard_normal(y.shape), dtype=dtype)
    (dx,) = y.gradient(x, gradient=g)
    # Softmax's backward is what the closed form in Tensor ops builds from y and g
    expected = composite_backward(Tensor._wrap(y.lazydata), g, axis, log)
    assert graph_key(dx.lazydata) == graph_key(expected.lazydata)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,axis", [((5, 17), -1), ((5, 17), 0), ((3, 7, 5), 1),
                                         ((3, 7, 5), (0, 2)), ((1, 9), -1), ((4, 1), 1)])
def test_softmax_values_and_gradients_match_numpy(shape, axis, log):
    """Against float64 numpy on a non-contiguous input: the value, and the gradient of
    sum(y * w)."""
    rng = np.random.default_rng(0)
    values, w = rng.standard_normal(shape) * 4, rng.standard_normal(shape)
    leaf, x = make(values, "permuted", dtypes.float32, requires_grad=True)
    y = x.log_softmax(axis) if log else x.softmax(axis)
    (y * Tensor(w.astype(np.float32))).sum().backward()
    shifted = values - values.max(axis=axis, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True)
    if log:
        ref = np.log(p)
        grad = w - p * w.sum(axis=axis, keepdims=True)
    else:
        ref = p
        grad = p * (w - (w * p).sum(axis=axis, keepdims=True))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(leaf.grad.numpy(), np.transpose(grad), rtol=1e-4, atol=1e-5)


def test_softmax_of_a_broadcast_input_sums_its_gradient():
    """An expanded input (one row, 4 copies): the gradient sums over the copies."""
    row = np.array([[0.5, -1.0, 2.0]], np.float32)
    x = Tensor(row, requires_grad=True)
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    (x.expand(4, 3).softmax(-1) * Tensor(w)).sum().backward()
    p = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
    expected = (p * (w - (w * p).sum(-1, keepdims=True))).sum(0, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_softmax_bad_axis_and_empty_axes_raise_as_before():
    x = Tensor(np.zeros((2, 0, 3), np.float32))
    with pytest.raises(IndexError):
        x.softmax(3)
    assert x.softmax(1).shape == (2, 0, 3)  # over the empty axis: empty
    with pytest.raises(ValueError, match="max of an empty tensor"):
        x.softmax((0, 1))  # another reduced axis is empty: as the composite did


# ---- no Same nodes where nothing changes ----
def _recorded(t: Tensor) -> list[str]:
    """The Functions of t's autograd graph, by name."""
    names, seen, stack = [], set(), [t]
    while stack:
        node = stack.pop()
        if id(node) in seen or node._ctx is None:
            continue
        seen.add(id(node))
        names.append(node._ctx.function.__name__)
        stack.extend(node._parents)
    return names


def test_broadcasting_records_no_same_nodes():
    x = Tensor(np.ones((3, 1), np.float32), requires_grad=True)
    b = Tensor(np.ones((4,), np.float32), requires_grad=True)
    out = x + b
    assert sorted(_recorded(out)) == ["Add", "Expand", "Expand", "Reshape"]
    assert sorted(_recorded(x.expand(3, 4))) == ["Expand"]
    assert _recorded(x.expand(2, 3, 4)) == ["Expand", "Reshape"]
    assert _recorded(x.sum(0, dtype=dtypes.float32)) == ["Sum"]
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 1), 4, np.float32))
    np.testing.assert_array_equal(b.grad.numpy(), np.full((4,), 3, np.float32))


@settings(max_examples=25, deadline=None)
@given(st.data(), st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_views_that_drop_an_axis_record_one_node(data, shape):
    """An int index (`x[:, t]`, `x[..., t]`) and each piece of unbind are one Shrink that
    drops the axis, not a Shrink and a Reshape (a recurrence makes one a step, forward
    and backward); values and gradients as numpy's."""
    arr = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x = Tensor(arr, requires_grad=True)
    dim = data.draw(st.integers(0, len(shape) - 1))
    i = data.draw(st.integers(-shape[dim], shape[dim] - 1))
    index = (slice(None),) * dim + (i,)
    dots = (Ellipsis,) + (i,) + (slice(None),) * (len(shape) - 1 - dim)
    pieces = x.unbind(dim)
    for view in (x[index], x[dots], pieces[i]):  # (a whole axis of 1: a Reshape alone)
        assert len(_recorded(view)) == 1
        np.testing.assert_array_equal(view.numpy(), np.take(arr, i, axis=dim))
    weights = np.arange(1, shape[dim] + 1, dtype=np.float32)
    total = sum(p * float(w) for p, w in zip(pieces, weights)) + x[dots] * 10.0
    total.sum().backward()
    want = np.ones(shape, np.float32) * weights.reshape([-1 if d == dim else 1
                                                           for d in range(len(shape))])
    want = np.moveaxis(want, dim, 0)
    want[i] += 10.0
    np.testing.assert_array_equal(x.grad.numpy(), np.moveaxis(want, 0, dim))


def test_cat_and_stack_of_one_dtype_record_no_same_nodes():
    """A join's inputs of its dtype go into Cat as they are (one Cat node, no `Same` per
    input); the same tensor twice gets both gradients."""
    a = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    assert _recorded(Tensor.stack([a, b, a], 0)) == ["Cat"]
    assert _recorded(a.cat(b, dim=1)) == ["Cat"]
    assert sorted(_recorded(a.cat(b.double(), dim=0))) == ["Cast", "Cast", "Cat"]  # (a cast too)
    (Tensor.cat([a, a, b], 1) * Tensor(np.arange(9, dtype=np.float32))).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.tile(np.arange(3) + np.arange(3, 6), (2, 1)))
    np.testing.assert_array_equal(b.grad.numpy(), np.tile(np.arange(6, 9), (2, 1)))


def test_an_expand_that_changes_nothing_is_still_a_new_tensor():
    """As every op: an in-place update of the result never shows through the input."""
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = x.expand(2, 3)
    assert y is not x and _recorded(y) == ["Same"]
    z = Tensor(np.ones((2, 3), np.float32))
    w = z.expand(-1, 3)
    w += 1
    np.testing.assert_array_equal(z.numpy(), np.ones((2, 3), np.float32))


def test_apply_with_one_two_and_three_inputs_records_what_needs_a_gradient():
    a = Tensor(np.ones(3, np.float32), requires_grad=True)
    b, c = Tensor(np.ones(3, np.float32)), Tensor(np.ones(3, bool))
    assert a.apply(F.Neg)._ctx.needs_input_grad == [True]
    assert b.apply(F.Add, a)._ctx.needs_input_grad == [False, True]
    assert c.apply(F.Where, a, b)._ctx.needs_input_grad == [False, True, False]
    assert b.apply(F.Neg)._ctx is None and not b.apply(F.Add, b).requires_grad
    with Tensor.no_grad():
        assert a.apply(F.Add, a)._ctx is None


# ---- matmul as one Function ----
def chain_matmul(x: Tensor, w: Tensor) -> Tensor:
    """x @ w in Tensor ops, each a Function: what matmul built before D61."""
    k = x.shape[-1]
    xr = x.reshape(x.shape[:-1] + (1, k))
    wr = w.transpose(-1, -2)
    wr = wr.reshape(wr.shape[:-2] + (1,) + wr.shape[-2:])
    return (xr * wr).sum(-1, dtype=x.dtype)


@st.composite
def matmul_shapes(draw):
    """Two shapes that matmul, batch dims broadcasting (sizes 1 and odd ones)."""
    n, k, m = (draw(st.sampled_from([1, 2, 3, 5])) for _ in range(3))
    batch = tuple(draw(st.sampled_from([1, 2, 3])) for _ in range(draw(st.integers(0, 2))))
    xb = tuple(1 if draw(st.booleans()) else b for b in batch)[draw(st.integers(0, len(batch))):]
    wb = tuple(1 if draw(st.booleans()) else b for b in batch)[draw(st.integers(0, len(batch))):]
    return xb + (n, k), wb + (k, m)


@settings(max_examples=40)
@given(shapes=matmul_shapes(), grads=st.sampled_from([(True, True), (False, True), (True, False)]),
       transposed=st.booleans(), dtype=st.sampled_from([dtypes.float32, dtypes.float64]))
def test_matmul_builds_the_chains_graph(shapes, grads, transposed, dtype):
    """Forward and x's gradient: the graph of the chain of Tensor ops, exactly; w's too
    for a transposed (non-contiguous) w. A w in memory order gets its gradient reduced in
    its own layout (D67): a view in order, not the chain's transposed one (values:
    test_matmul_values_and_gradients_match_numpy)."""
    rng = np.random.default_rng(0)
    xs, ws = shapes
    x_np, w_np = rng.standard_normal(xs), rng.standard_normal(ws)
    g_np = rng.standard_normal(np.broadcast_shapes(xs[:-2], ws[:-2]) + (xs[-2], ws[-1]))
    keys = []
    for build in (Tensor.matmul, chain_matmul):
        x = Tensor(x_np, dtype=dtype, requires_grad=grads[0])
        leaf = Tensor(np.swapaxes(w_np, -1, -2).copy() if transposed else w_np, dtype=dtype,
                      requires_grad=grads[1])
        w = leaf.transpose(-1, -2) if transposed else leaf
        out = build(x, w)
        out.backward(Tensor(g_np, dtype=dtype))
        in_order = w.lazydata._base is None or w.lazydata.st.contiguous  # (k, 1).T is too
        compared = (x,) if in_order else (x, leaf)
        keys.append([graph_key(out.lazydata)] +
                    [graph_key(t.grad.lazydata) for t in compared if t.requires_grad])
        if build is Tensor.matmul and grads[1] and in_order:
            gw = leaf.grad.lazydata
            assert gw._base is None or gw.st.contiguous, "w's gradient is a transposed view"
    assert keys[0] == keys[1]


@pytest.mark.parametrize("xs,ws", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((0, 4), (4, 3)), ((3, 0), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16, np.bool_])
def test_matmul_values_and_gradients_match_numpy(xs, ws, dtype):
    rng = np.random.default_rng(1)
    x_np = (rng.standard_normal(xs) * 3).astype(dtype)
    w_np = (rng.standard_normal(ws) * 3).astype(dtype)
    is_float = np.issubdtype(dtype, np.floating)
    x, w = Tensor(x_np, requires_grad=is_float), Tensor(w_np, requires_grad=is_float)
    out = x @ w
    ref = np.matmul(x_np.astype(np.float64), w_np.astype(np.float64))
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref.astype(out.numpy().dtype),
                               rtol=tol, atol=tol)
    if not is_float or dtype == np.float16:
        return
    out.sum().backward()
    x2 = x_np.reshape((1,) + xs) if len(xs) == 1 else x_np  # as numpy: 1-d operands
    w2 = w_np.reshape(ws + (1,)) if len(ws) == 1 else w_np  # become matrices
    g = np.ones(np.matmul(x2, w2).shape)
    gx = _sum_to(np.matmul(g, np.swapaxes(w2, -1, -2)), x2.shape)
    gw = _sum_to(np.matmul(np.swapaxes(x2, -1, -2), g), w2.shape)
    np.testing.assert_allclose(x.grad.numpy(), gx.reshape(xs), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), gw.reshape(ws), rtol=1e-5, atol=1e-5)


def _sum_to(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """a summed over the dims broadcasting added to `shape`."""
    a = a.sum(axis=tuple(range(a.ndim - len(shape))))
    return a.sum(axis=tuple(i for i, s in enumerate(shape) if s == 1), keepdims=True)


# ---- comparisons and where ----
@pytest.mark.parametrize("a_dtype,b", [(np.float32, np.float32), (np.int32, np.int64),
                                       (np.float32, 2), (np.int8, 2.5), (np.bool_, True)])
def test_equal_is_not_of_not_equal(a_dtype, b):
    """`==` is one node building what `!=` then `logical_not` built, broadcasting and
    promoting alike (nan compares unequal)."""
    a_np = np.array([[0, 1, 2]], dtype=a_dtype) if a_dtype != np.float32 else \
        np.array([[0, np.nan, 2]], np.float32)
    a = Tensor(a_np, requires_grad=a_dtype == np.float32)
    other = Tensor(np.array([[1], [2]], dtype=b)) if isinstance(b, type) else b
    eq = a == other
    assert graph_key(eq.lazydata) == graph_key((a != other).logical_not().lazydata)
    assert eq.dtype == dtypes.bool and not eq.requires_grad
    expected = a_np == (other.numpy() if isinstance(other, Tensor) else other)
    np.testing.assert_array_equal(eq.numpy(), expected)


def test_where_takes_a_bool_condition_as_it_is():
    cond = Tensor(np.array([True, False, True]))
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    out = cond.where(x, 0.0)
    assert out._parents[0] is cond
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1])
    # a float condition is cast; a broadcast one is expanded
    wide = Tensor(np.array([[1.0], [0.0]], np.float32)).where(x, -x)
    np.testing.assert_array_equal(wide.numpy(), [[1, 2, 3], [-1, -2, -3]])


def test_promotion_is_kept_per_pair_and_a_refused_one_raises_every_time():
    u, i = Tensor(np.zeros(2, np.uint8)), Tensor(np.zeros(2, np.int8))
    assert (u + i).dtype == dtypes.int16 and (u + i).dtype == dtypes.int16
    big, signed = Tensor(np.zeros(2, np.uint64)), Tensor(np.zeros(2, np.int64))
    for _ in range(2):
        with pytest.raises(TypeError, match="no integer dtype holds both"):
            big + signed


# ---- Conv in LazyBuffer ops ----
@st.composite
def conv_specs(draw):
    """(x shape, w shape, Conv.Spec): 1 to 3 spatial dims, groups, strides, dilations and
    paddings, negative ones (crops) too."""
    nd = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2]))
    cin_g, cout_g = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    padding = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nd)]
    size = tuple(d * (k - 1) + 3 + draw(st.integers(0, 3)) for k, d in zip(kernel, dilation))
    xs = (draw(st.integers(1, 2)), groups * cin_g) + size
    ws = (groups * cout_g, cin_g) + kernel
    return xs, ws, Conv.Spec(groups, stride, dilation, padding)


@settings(max_examples=40)
@given(case=conv_specs(), dtype=st.sampled_from([dtypes.float32, dtypes.float16]))
def test_conv_helpers_build_the_tensor_functions_graphs(case, dtype):
    """Conv's forward and backward use LazyBuffer mirrors of forward_tensors and
    transposed_weight: each builds the graph its Tensor function builds."""
    xs, ws, spec = case
    rng = np.random.default_rng(0)
    x, w = (Tensor(rng.standard_normal(s), dtype=dtype) for s in (xs, ws))
    assert graph_key(conv._conv(x.lazydata, w.lazydata, spec, Tensor)) == \
        graph_key(Conv.forward_tensors(x, w, spec).lazydata)
    assert graph_key(conv._transposed_weight(w.lazydata, spec.groups)) == \
        graph_key(conv.transposed_weight(w, spec.groups).lazydata)


# ---- window views with autograd: one Function for the chain ----
@settings(max_examples=40)
@given(data=st.data(), nd=st.integers(1, 2))
def test_windows_with_autograd_build_the_chains_graph(data, nd):
    """Tensor._pool with autograd runs nnops._windows on a ViewChain (one Moves node): the
    view and the gradient are what the chain of movement Functions built, for
    non-overlapping windows (pad, crop, split) and overlapping ones (expand, sum back)."""
    kernel = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
    dilation = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
    size = tuple(d * (k - 1) + 1 + data.draw(st.integers(0, 4)) for k, d in zip(kernel, dilation))
    shape = (2,) + size
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(shape)
    keys = []
    for build in (lambda t: t._pool(kernel, stride, dilation),
                  lambda t: nnops._windows(t, kernel, stride, dilation)):
        x = Tensor(x_np, dtype=dtypes.float32, requires_grad=True)
        out = build(x)
        out.backward(Tensor(rng.standard_normal(out.shape), dtype=dtypes.float32))
        keys.append((graph_key(out.lazydata), graph_key(x.grad.lazydata)))
    assert keys[0] == keys[1]
    assert _recorded(Tensor(x_np, requires_grad=True)._pool(kernel, stride, dilation)) == ["Moves"]


@pytest.mark.parametrize("pads,box", [(((1, -1), (-2, 2)), ((1, 4), (0, 3))),
                                      (((0, 0), (2, 0)), ((0, 5), (2, 6))),
                                      (((-1, -2), (0, 1)), ((1, 2), (1, 6)))])
def test_a_view_chain_undoes_each_op_as_its_function_would(pads, box):
    """Any chain (crops, pads and shrinks off the origin, permute, reshape, expand) in one
    Moves node: the same view and gradient as the Tensor ops, one Function each."""
    def chain(v):
        v = v.pad(pads).shrink(box).permute((1, 0))
        v = v.reshape((1,) + tuple(v.shape))
        return v.expand((3,) + tuple(v.shape[1:]))
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((5, 6)).astype(np.float32)
    keys, grads = [], []
    for moves in (True, False):
        x = Tensor(x_np, requires_grad=True)
        out = x.apply(views.Moves, moves=chain) if moves else chain(x)
        out.backward(Tensor(np.arange(np.prod(out.shape), dtype=np.float32).reshape(out.shape)))
        keys.append((graph_key(out.lazydata), graph_key(x.grad.lazydata)))
        grads.append(x.grad.numpy())
    assert keys[0] == keys[1]
    np.testing.assert_array_equal(grads[0], grads[1])


# ---- linear as one Function ----
@settings(max_examples=40)
@given(shapes=matmul_shapes(), grads=st.sampled_from([(True, True, True), (False, True, False),
                                                      (True, False, True), (False, False, True)]),
       bias=st.booleans(), transposed=st.booleans(),
       dtype=st.sampled_from([dtypes.float32, dtypes.float64]))
def test_linear_builds_the_chains_graph(shapes, grads, bias, transposed, dtype):
    """x @ w.T + b as one Linear: the graph of matmul, the transpose and the broadcast add,
    forward and every gradient, exactly; a transposed (non-contiguous) weight too."""
    rng = np.random.default_rng(0)
    xs, ws = shapes
    xs = xs if len(xs) >= 2 else (1,) + xs
    m, k = ws[-1], xs[-1]
    x_np, w_np, b_np = rng.standard_normal(xs), rng.standard_normal((m, k)), rng.standard_normal(m)
    g_np = rng.standard_normal(xs[:-1] + (m,))
    keys, ctxs = [], []
    for build in (Tensor.linear, lambda x, w, b: x.matmul(w.T) + b if b is not None else x @ w.T):
        x = Tensor(x_np, dtype=dtype, requires_grad=grads[0])
        leaf = Tensor(w_np.T.copy() if transposed else w_np, dtype=dtype, requires_grad=grads[1])
        w = leaf.T if transposed else leaf
        b = Tensor(b_np, dtype=dtype, requires_grad=grads[2]) if bias else None
        out = build(x, w, b)
        ctxs.append(type(None).__name__ if out._ctx is None else out._ctx.function.__name__)
        if out.requires_grad:
            out.backward(Tensor(g_np, dtype=dtype))
        keys.append([graph_key(out.lazydata)] +
                    [graph_key(t.grad.lazydata) for t in (x, leaf, b) if t is not None and
                     t.requires_grad])
    assert ctxs[0] == ("Linear" if any(grads[:2]) or (bias and grads[2]) else "NoneType")
    assert keys[0] == keys[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_values_and_gradients_match_numpy(dtype):
    rng = np.random.default_rng(5)
    x_np, w_np, b_np = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 5), (4, 5), (4,)))
    x, w, b = (Tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    out = x.linear(w, b)
    assert out._ctx.function.__name__ == "Linear"
    g = rng.standard_normal((2, 3, 4)).astype(dtype)
    np.testing.assert_allclose(out.numpy(), x_np @ w_np.T + b_np, rtol=1e-5, atol=1e-5)
    out.backward(Tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), g @ w_np, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), np.einsum("bnm,bnk->mk", g, x_np), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), g.sum((0, 1)), rtol=1e-5, atol=1e-5)


def test_linear_gradients_match_finite_differences():
    from gradcheck import check_grad
    rng = np.random.default_rng(6)
    check_grad(lambda x, w, b: x.linear(w, b), rng.standard_normal((3, 5)),
               rng.standard_normal((4, 5)), rng.standard_normal(4))
    check_grad(lambda x, w: x.linear(w), rng.standard_normal((2, 2, 5)), rng.standard_normal((3, 5)))


@settings(max_examples=40, deadline=None)
@given(st.data(), st.lists(st.integers(1, 5), min_size=0, max_size=4), st.booleans(),
       st.sampled_from([np.float32, np.float64, np.int32]))
def test_mean_builds_the_graph_of_sum_over_count_in_one_node(data, shape, keepdim, dtype):
    """`mean` is one Mean Function, whose forward graph is that of `sum(axis) / count`
    (it was a Sum, a constant and a Div: three Functions, two nodes of the backward's
    walk), over drawn shapes, axes (None, one, several), keepdim and dtypes (ints are made
    float first); values and gradients against numpy in float64. (A 0-d tensor's mean
    is the tensor, as before: x / 1.)"""
    ndim = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1),
                               st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                        unique=True).map(tuple)) if ndim else st.none())
    axes = tuple(range(ndim)) if axis is None else \
        tuple(sorted(a % ndim for a in ((axis,) if isinstance(axis, int) else axis)))
    count = int(np.prod([shape[i] for i in axes]))
    rng = np.random.default_rng(len(shape))
    a = (rng.standard_normal(shape) * 4).astype(dtype)
    grad_ok = dtype != np.int32
    x = Tensor(a, requires_grad=grad_ok)
    got = x.mean(axis, keepdim=keepdim)
    if ndim:
        if grad_ok:
            assert type(got._ctx) is F.Mean and got._parents == (x,)
        want = (x if grad_ok else x.float()).sum(axis, keepdim=keepdim) / count
        assert graph_key(got.lazydata) == graph_key(want.lazydata)
    np.testing.assert_allclose(got.numpy(), a.astype(np.float64).mean(
        axis=axes, keepdims=keepdim), rtol=1e-5, atol=1e-6)
    if grad_ok:
        g = rng.standard_normal(got.shape).astype(dtype)
        (got * Tensor(g)).sum().backward()
        kept = g if keepdim else np.expand_dims(g, axes)
        np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(kept, shape) / count,
                                   rtol=1e-6, atol=1e-7)
