"""A Function's forward as one graph node without gradients (lazyten/traced_graph.py, D79).

Softmax, log_softmax, layer_norm, linear (with a bias), tanh, sigmoid, relu and maximum
run without a gradient must give bit for bit what
their forward gives when it is built node by node (GRAPH_TRACE=0), over drawn shapes,
dtypes, axes, input layouts (views, broadcasts, unrealized inputs), consumers in the
same graph, and calls repeated (the cached schedule and its plan, whose buffers inside
the traced graph are made afresh each call); and numpy's values within float tolerance.
They must build one node, and the next call must schedule nothing.
"""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.dtypes import dtypes
from codegen.helpers import Context
from lazyten import Tensor
from lazyten.nn import functional as F
from lazyten.schedule_cache import CacheStats
from lazyten.traced import CompositeOps
from lazyten.graph_expand import expand_graphs, restore_graphs
from lazyten.traced_graph import _TRACES
from tests.helpers import LAYOUTS, NP, arrays, make_layout

OPS = ["softmax", "log_softmax", "layer_norm", "layer_norm_affine", "layer_norm_2d", "linear",
       "tanh", "sigmoid", "relu", "maximum"]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def _call(op: str, x: Tensor, axis: int, weight: Tensor, bias: Tensor) -> Tensor:
    if op == "softmax":
        return x.softmax(axis)
    if op == "log_softmax":
        return x.log_softmax(axis)
    if op == "layer_norm":
        return F.layer_norm(x, x.shape[-1:])
    if op == "linear":  # weight (5, width), bias (5,)
        return F.linear(x, weight.reshape(1, -1).expand(5, -1) * Tensor(
            np.linspace(1, 2, 5, dtype=np.float32)).cast(x.dtype).reshape(5, 1), bias[:5])
    if op in ("tanh", "sigmoid", "relu"):
        return getattr(x, op)()
    if op == "maximum":  # ties where x * 2 - 1 == x: at x = 1
        return x.maximum((x * 2 - 1).maximum(x.full_like(1)))
    if op == "layer_norm_2d":
        return F.layer_norm(x, x.shape[-2:], weight.reshape(1, -1).expand(x.shape[-2], -1),
                            bias[:x.shape[-1]])
    return F.layer_norm(x, x.shape[-1:], weight, bias[:x.shape[-1]])


def _expected(op: str, x: np.ndarray, axis: int, weight: np.ndarray, bias: np.ndarray):
    if op == "linear":
        w = weight.reshape(1, -1) * np.linspace(1, 2, 5).reshape(5, 1)
        return x @ w.T + bias[:5]
    if op in ("tanh", "relu", "maximum"):
        return {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
                "maximum": lambda v: np.maximum(v, np.maximum(v * 2 - 1, 1))}[op](x)
    if op == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if op in ("softmax", "log_softmax"):
        shifted = x - x.max(axis, keepdims=True)
        out = shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))
        return out if op == "log_softmax" else np.exp(out)
    axes = (-1,) if op != "layer_norm_2d" else (-2, -1)
    mean = x.mean(axes, keepdims=True)
    out = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + 1e-5)
    return out if op == "layer_norm" else out * weight + bias[:x.shape[-1]]


def _run(trace: int, op: str, arr: np.ndarray, layout: str, axis: int, consumer: str,
         weight: np.ndarray, bias: np.ndarray, calls: int = 3) -> list[np.ndarray]:
    """`calls` results of the op (and its consumer) on the same inputs, as numpy."""
    out = []
    with Context(GRAPH_TRACE=trace), Tensor.no_grad():
        x = make_layout(arr, layout)
        w, b = Tensor(weight).cast(x.dtype), Tensor(bias).cast(x.dtype)
        for _ in range(calls):
            x_in = x * 2 - 1 if consumer == "unrealized input" else x
            y = _call(op, x_in, axis, w, b)
            if consumer == "sum":
                y = y.sum(-1)
            elif consumer == "matmul":
                y = y.float() @ Tensor(np.linspace(-1, 1, y.shape[-1] * 3, dtype=np.float32)
                                       .reshape(y.shape[-1], 3))
            out.append(y.float().numpy())
    return out


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(OPS), dtype=st.sampled_from(FLOATS), layout=st.sampled_from(LAYOUTS),
       consumer=st.sampled_from(["none", "sum", "matmul", "unrealized input"]), data=st.data())
def test_traced_forwards_match_their_graph_bit_for_bit(op, dtype, layout, consumer, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 37), min_size=2, max_size=3), "shape"))
    arr = data.draw(arrays(dtype, shape, low=-8, high=8), "x")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "axis")
    weight = np.linspace(0.5, 2, shape[-1]).astype(NP[dtype])
    bias = np.linspace(-1, 1, max(shape[-1], 5)).astype(NP[dtype])
    _TRACES.clear()
    plain = _run(0, op, arr, layout, axis, consumer, weight, bias)
    traced = _run(1, op, arr, layout, axis, consumer, weight, bias)
    for a, b in zip(plain, traced):
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), (op, shape, axis)
    if consumer == "none":
        x64 = arr.astype(np.float64) * (2 if consumer == "unrealized input" else 1)
        want = _expected(op, x64, axis, weight.astype(np.float64), bias.astype(np.float64))
        tol = 2e-2 if dtype == dtypes.float16 else 1e-4 if op == "linear" else 1e-5
        atol = tol
        if op.startswith("layer_norm"):  # x - mean keeps mean's rounding, over the row's std
            # (a sum of n values rounds by up to (n - 1) eps of their magnitude, whatever
            # the order: a constant 15 x 14 row of 6.54 came out 10 eps off in float32)
            axes = (-1,) if op != "layer_norm_2d" else (-2, -1)
            std = np.sqrt(x64.var(axes).min() + 1e-5)
            n = int(np.prod([x64.shape[a] for a in axes]))
            atol += max(8, n) * float(np.finfo(NP[dtype]).eps) * float(np.abs(x64).max()) / std
        np.testing.assert_allclose(traced[-1], want, rtol=tol, atol=atol)


def test_a_traced_forward_is_one_node_and_repeats_schedule_nothing():
    x = Tensor(np.random.default_rng(0).standard_normal((6, 50), dtype=np.float32))
    w, b = Tensor.ones(50), Tensor.zeros(50)
    with Tensor.no_grad():
        for make, ins in ((lambda: x.softmax(-1), [x]), (lambda: x.log_softmax(0), [x]),
                          (lambda: F.layer_norm(x, (50,), w, b), [x, w, b]),
                          (lambda: F.linear(x, w.reshape(1, 50), b[:1]), [x, w, b])):
            y = make()
            assert y.lazydata.op is CompositeOps.GRAPH
            assert [s.base for s in y.lazydata.src] == [t.lazydata.base for t in ins]
            first = y.numpy()
            misses = CacheStats.misses
            again = make().numpy()
            assert CacheStats.misses == misses and np.array_equal(first, again)


def test_a_recorded_call_is_one_node_forward_and_one_per_gradient():
    x = Tensor(np.ones((4, 5), dtype=np.float32)).requires_grad_()
    y = x.softmax(-1)
    assert y.lazydata.op is CompositeOps.GRAPH and y._ctx.function.__name__ == "Softmax"
    (dx,) = y.gradient(x, gradient=Tensor.ones(4, 5))
    assert dx.lazydata.op is CompositeOps.GRAPH
    assert dx.lazydata.src[-1] is y.lazydata  # it reads y, as Softmax saves it
    w = Tensor(np.ones((3, 5), dtype=np.float32)).requires_grad_()
    out = x.linear(w)  # no bias: the result is a view of the traced reduce
    assert out.lazydata.base.op is CompositeOps.GRAPH
    gx, gw = out.gradient(x, w, gradient=Tensor.ones(4, 3))
    assert gx.lazydata.base.op is CompositeOps.GRAPH and gw.lazydata.base.op is CompositeOps.GRAPH
    assert len(gx.lazydata.base.src) == 3  # x, w, the gradient: it reads no forward value


@pytest.mark.parametrize("op", ["tanh", "sigmoid", "relu", "maximum", "conv2d", "stack"])
def test_elementwise_composites_and_convolutions_are_one_node_each_way(op):
    """tanh (41 nodes forward and backward built node by node), sigmoid (21), relu (10),
    maximum (22), a convolution and a join (stack, D110) record one GRAPH node forward and
    one per gradient (a join's gradients are views of the incoming gradient)."""
    x = Tensor(np.linspace(-2, 2, 2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5)).requires_grad_()
    w = Tensor(np.ones((4, 3, 3, 3), dtype=np.float32)).requires_grad_()
    zeros = Tensor(np.zeros((5,), dtype=np.float32))
    y = {"maximum": lambda: x.maximum(zeros), "conv2d": lambda: F.conv2d(x, w, padding=1),
         "stack": lambda: x.stack(x.detach() * 2, dim=1)}.get(op, lambda: getattr(x, op)())()
    assert y.lazydata.base.op is CompositeOps.GRAPH, y.lazydata.base.op
    grads = y.gradient(x, w, gradient=y.ones_like()) if op == "conv2d" else \
        y.gradient(x, gradient=y.ones_like())
    if op == "stack":  # its gradient is a view of the incoming one: no node at all
        seed = Tensor(np.ones(y.shape, dtype=np.float32)).realize()
        (g,) = y.gradient(x, gradient=seed)
        assert g.lazydata.base is seed.lazydata.base
        return
    assert all(g.lazydata.base.op is CompositeOps.GRAPH for g in grads)


def test_a_traced_function_inside_a_traced_composite_is_recorded_as_its_nodes():
    """gelu's erf takes |x| = relu(x) + relu(-x): relu is traced, but inside gelu's own
    trace it must build its nodes (a GRAPH node there refused the whole trace: gelu then
    built its 120 ops on every call), and inside a traced Function's graph likewise."""
    x = Tensor(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
    with Tensor.no_grad():
        assert F.gelu(x).lazydata.op is CompositeOps.POINTWISE
    _TRACES.clear()
    y = x.requires_grad_().abs().softmax(-1)  # softmax's trace reads abs's GRAPH nodes: not
    assert y.lazydata.op is CompositeOps.GRAPH  # inside it (the trace starts at its inputs)


# the Functions traced with a gradient (D80): inputs (name, shape of the drawn (rows, width))
def _grad_case(op: str, rows: int, width: int, rng):
    """(inputs as arrays, which may need a gradient, f(*tensors) -> the result)."""
    x = rng.standard_normal((rows, width))
    w = rng.standard_normal((3, width))
    b = rng.standard_normal(3)
    if op in ("softmax", "log_softmax"):
        return [x], lambda t: getattr(t, op)(-1)
    if op == "softmax_columns":
        return [x], lambda t: t.softmax(0)
    if op == "layer_norm":
        return [x, rng.standard_normal(width), rng.standard_normal(width)], \
            lambda t, g, c: F.layer_norm(t, (width,), g, c)
    if op == "linear":
        return [x, w, b], lambda t, v, c: F.linear(t, v, c)
    if op == "linear_no_bias":
        return [x, w], lambda t, v: F.linear(t, v)
    if op == "matmul_transposed":  # q @ k.T: the second input out of memory order
        return [x, w], lambda t, v: t @ v.T
    if op == "attention":
        return [x, w, rng.standard_normal((3, 4))], lambda q, k, v: (q @ k.T).softmax(-1) @ v
    if op in ("tanh", "sigmoid", "relu"):
        return [x], lambda t: getattr(t, op)()
    if op == "maximum":  # a third of the pairs tie: they share the gradient
        y = np.where(rng.random(x.shape) < 0.3, x, rng.standard_normal(x.shape))
        return [x, y], lambda t, u: t.maximum(u)
    if op == "relu_max":  # the max's backward compares relu's values with their maximum
        return [x], lambda t: t.relu().max(axis=-1)
    if op in ("cat", "stack"):  # three inputs: the join as one Function (D110)
        y, z = rng.standard_normal((rows, width)), rng.standard_normal((rows, width))
        return [x, y, z], lambda t, u, v: getattr(t, op)(u, v, dim=-1)
    if op.startswith("conv2d"):  # (2, 2, rows, width) images, 3 x 3 taps, padding 1
        images, taps = rng.standard_normal((2, 2, rows, width)), rng.standard_normal((3, 2, 3, 3))
        stride = 2 if op.endswith("stride2") else 1
        return [images, taps, b], lambda t, v, c: F.conv2d(t, v, c, stride=stride, padding=1)
    labels = rng.integers(0, width, rows)
    reduction = op.split("_")[-1]
    return [x, labels], lambda t, y: t.sparse_categorical_crossentropy(y, reduction=reduction)


GRAD_OPS = ["softmax", "log_softmax", "softmax_columns", "layer_norm", "linear",
            "linear_no_bias", "matmul_transposed", "attention", "cross_entropy_mean",
            "cross_entropy_sum", "cross_entropy_none", "tanh", "sigmoid", "relu", "maximum",
            "relu_max", "conv2d", "conv2d_stride2", "cat", "stack"]


def _grad_run(trace: int, fn, arrays_, needs, dtype, order: str, calls: int = 3):
    """`calls` x [the result, then each needed gradient], as numpy."""
    out = []
    with Context(GRAPH_TRACE=trace):
        leaves = [Tensor(a.astype(NP[dtype]) if a.dtype.kind == "f" else a, requires_grad=n)
                  for a, n in zip(arrays_, needs)]
        for _ in range(calls):
            y = fn(*leaves)
            g = Tensor(np.linspace(-1, 1, max(y.numel(), 1)).reshape(y.shape).astype(NP[dtype]))
            wanted = [t for t, n in zip(leaves, needs) if n]
            if order == "forward first":
                first = y.numpy()
                grads = y.gradient(*wanted, gradient=g)
                Tensor.realize(*grads)
            else:
                grads = y.gradient(*wanted, gradient=g)
                if order == "together":
                    y.realize(*grads)
                else:  # the gradients alone, then the forward
                    Tensor.realize(*grads)
                first = y.numpy()
            out.append([first] + [t.numpy() for t in grads])
    return out


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(GRAD_OPS), dtype=st.sampled_from(FLOATS),
       order=st.sampled_from(["together", "forward first", "gradients only"]), data=st.data())
def test_traced_gradients_match_their_graph_bit_for_bit(op, dtype, order, data):
    """Forward and gradients of a call recorded for autograd (D80), three times (the
    cached schedule, then its plan): bit for bit what the Function builds node by node
    when realized together; realized apart (forward first, or the gradients first),
    within rounding."""
    rows, width = data.draw(st.integers(1, 19), "rows"), data.draw(st.integers(1, 37), "width")
    arrays_, fn = _grad_case(op, rows, width, np.random.default_rng(data.draw(st.integers(0, 9), "seed")))
    floats = [a.dtype.kind == "f" for a in arrays_]
    needs = data.draw(st.lists(st.booleans(), min_size=len(arrays_), max_size=len(arrays_))
                      .map(lambda n: [a and b for a, b in zip(n, floats)])
                      .filter(lambda n: any(n)), "needs")
    _TRACES.clear()
    plain = _grad_run(0, fn, arrays_, needs, dtype, order)
    traced = _grad_run(1, fn, arrays_, needs, dtype, order)
    for a, b in zip(plain, traced):
        for u, v in zip(a, b):
            assert u.shape == v.shape, (op, needs, order)
            if order != "together":  # a later realize recomputes what an earlier one had
                # inside a traced graph's kernels (it reads the traced nodes' results, not
                # their intermediates): the same formulas, maybe fused otherwise
                tol = {dtypes.float16: 2e-3, dtypes.float32: 1e-5}.get(dtype, 1e-12)
                np.testing.assert_allclose(v, u, rtol=tol, atol=tol * (1 + np.abs(u).max()))
            else:
                assert np.array_equal(u, v, equal_nan=True), (op, needs, order)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("order", ["forward", "gradient", "together"])
def test_a_traced_cross_entropy_checks_its_labels(reduction, order):
    """A label out of range raises IndexError whatever is realized: the loss, its gradient
    or both; on every call (the cached schedule and its plan), and again after a call
    with good labels."""
    x = Tensor(np.zeros((4, 5), np.float32), requires_grad=True)
    for labels, bad in [([0, 1, 2, 3], False), ([0, 1, 7, 3], True), ([0, 1, 2, 3], False),
                        ([0, -1, 2, 3], True), ([4, 4, 4, 4], False), ([0, 5, 2, 3], True)] * 2:
        loss = x.sparse_categorical_crossentropy(Tensor(np.array(labels)), reduction=reduction)
        assert loss.lazydata.base.op is CompositeOps.GRAPH
        (gx,) = loss.gradient(x, gradient=Tensor.ones(*loss.shape))
        run = {"forward": lambda: loss.numpy(), "gradient": lambda: gx.numpy(),
               "together": lambda: loss.realize(gx)}[order]
        if bad:
            with pytest.raises(IndexError, match="class label"):
                run()
        else:
            run()


def test_a_traced_graph_with_several_kernels_runs_again_on_fresh_buffers():
    """A column softmax over a tall input is several kernels: their outputs are buffers
    inside the traced graph, made afresh by each run of the cached schedule (its plan)."""
    rng = np.random.default_rng(1)
    with Tensor.no_grad():
        for _ in range(4):
            arr = rng.standard_normal((3000, 7)).astype(np.float32)
            got = Tensor(arr).softmax(0).numpy()
            want = np.exp(arr - arr.max(0)) / np.exp(arr - arr.max(0)).sum(0)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_empty_inputs_are_not_traced_and_still_run():
    with Tensor.no_grad():
        y = Tensor.zeros(0, 4).softmax(-1)
        assert y.lazydata.base.op is not CompositeOps.GRAPH and y.numpy().shape == (0, 4)


def test_saved_values_are_read_and_live_no_longer_than_their_node():
    """Gradients realized first: the loss's traced node keeps the values its graph
    computed (D80), the loss reads them, and once it is realized they are dropped (freed
    when nothing else holds them); the value is the one computed without tracing."""
    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal((8, 5)).astype(np.float32))
    labels = Tensor(rng.integers(0, 3, 8))
    w = Tensor(rng.standard_normal((3, 5)).astype(np.float32), requires_grad=True)
    with Context(GRAPH_TRACE=0):
        want = x.linear(w).sparse_categorical_crossentropy(labels).numpy()
    for _ in range(3):  # a fresh schedule, the cached one, its plan
        loss = x.linear(w).sparse_categorical_crossentropy(labels)
        loss.backward()
        w.grad.realize()
        node = loss.lazydata.base
        assert node.op is CompositeOps.GRAPH and node.saved
        refs = [weakref.ref(v) for v in node.saved.values() if v.realized is not None]
        assert refs, "the gradient's schedule computed the loss's log-probabilities"
        misses = CacheStats.misses
        assert np.allclose(loss.numpy(), want, rtol=1e-6, atol=1e-6)
        assert node.saved is None
        w.grad = None
        del loss, node
        gc.collect()
        assert all(r() is None for r in refs)
    assert CacheStats.misses == misses  # (the last loss found its schedule)


def test_two_threads_train_traced_functions_at_once():
    """Each thread's expansion pass keeps its own rebuilt nodes and its own list of nodes
    to restore (D80): two threads training traced Functions on different shapes at the
    same time get what one thread alone gets."""
    def train(rows: int, out: list) -> None:
        rng = np.random.default_rng(rows)
        x = Tensor(rng.standard_normal((rows, 6)).astype(np.float32))
        labels = Tensor(rng.integers(0, 4, rows))
        w = Tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
        g = Tensor(np.ones(6, np.float32), requires_grad=True)
        for _ in range(6):
            h = F.layer_norm(x, (6,), g)
            loss = h.linear(w).softmax(-1).log().sum(-1).mean() + \
                h.linear(w).sparse_categorical_crossentropy(labels)
            loss.backward()
            out.append((loss.numpy(), w.grad.numpy(), g.grad.numpy()))
            w.grad = g.grad = None

    alone: dict[int, list] = {5: [], 9: []}
    for rows in alone:
        train(rows, alone[rows])
    together: dict[int, list] = {5: [], 9: []}
    threads = [threading.Thread(target=train, args=(rows, together[rows])) for rows in together]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for rows in alone:
        assert len(together[rows]) == len(alone[rows])
        for a, b in zip(alone[rows], together[rows]):
            for u, v in zip(a, b):
                assert np.array_equal(u, v), rows


def test_a_threads_restore_leaves_another_threads_expansion_alone():
    """Thread A's schedule has expanded a traced node and not yet run when thread B's
    realize ends (and restores what *its* pass expanded): A's node stays expanded. With one
    list for the process, B turned A's node back into a GRAPH node under A's schedule."""
    x = Tensor(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
    with Tensor.no_grad():
        y = x.softmax(-1)
    node = y.lazydata.base
    expanded = threading.Event()
    restored = threading.Event()

    def a():
        expand_graphs([y.lazydata])
        expanded.set()
        restored.wait(30)

    def b():
        expanded.wait(30)
        restore_graphs()
        restored.set()
    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert node.op is not CompositeOps.GRAPH, "thread B restored thread A's expanded node"
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()) / np.exp(x.numpy()).sum(-1, keepdims=True),
                               rtol=1e-6)
