"""Pointwise composites as one graph node (lazyten/traced.py, D72).

A traced special function must give bit for bit what its Tensor composition gives
(POINTWISE_TRACE=0 runs the composition): values and gradients, over drawn shapes,
dtypes, layouts (views, broadcasts) and the order in which forward and gradient are
realized. It must build one node where the composition built a hundred, and a function
that is not pointwise must still run, as written.
"""
from __future__ import annotations
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.dtypes import dtypes
from codegen.helpers import Context
from lazyten import Tensor
from lazyten.traced import CompositeOps, _TRACES, code_key, pointwise
from tests.helpers import LAYOUTS, NP, arrays, broadcastable, make_layout, shapes

UNARY = ["erf", "erfc", "expm1", "log1p", "sinh", "cosh", "asinh", "acosh", "atanh", "asin",
         "acos", "atan", "gelu", "gelu_tanh"]
BINARY = ["logaddexp", "logaddexp2"]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


def _run(trace: int, fn: str, arrays_in, layout: str, forward_first: bool):
    """(value, gradients) of `fn` on Tensors made from `arrays_in`, as numpy."""
    with Context(POINTWISE_TRACE=trace):
        ins = [make_layout(a, layout).requires_grad_() for a in arrays_in]
        dtype = ins[0].dtype
        out = _call(fn, ins)
        weight = Tensor(np.linspace(-2, 3, out.numel()).reshape(out.shape).astype(np.float32))
        (out * weight.cast(dtype)).sum().backward()
        value = out.float().numpy() if forward_first else None
        grads = [t.grad.float().numpy() for t in ins]
        if value is None:
            value = out.float().numpy()
    return value, grads


def _call(fn: str, tensors):
    if fn == "gelu_tanh":
        return tensors[0].gelu(approximate="tanh")
    return getattr(tensors[0], fn)(*tensors[1:])


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(fn=st.sampled_from(UNARY + BINARY), dtype=st.sampled_from(FLOATS),
       layout=st.sampled_from(LAYOUTS), forward_first=st.booleans(), data=st.data())
def test_traced_functions_match_their_composition_bit_for_bit(fn, dtype, layout,
                                                              forward_first, data):
    """Forward first: the gradient kernel then reads the realized value (a slope that
    ignores it once made the kernel read a buffer its AST did not name)."""
    if fn in BINARY:
        shape_a, shape_b = data.draw(broadcastable(2, min_dims=1))
        drawn = [data.draw(arrays(dtypes.float32, s, low=-6, high=6)) for s in (shape_a, shape_b)]
    else:
        drawn = [data.draw(arrays(dtypes.float32, data.draw(shapes(1, 3, max_side=7)),
                                  low=-6, high=6))]
    cast = [a.astype(NP[dtype]) if dtype != dtypes.bfloat16 else a for a in drawn]
    if dtype == dtypes.bfloat16:  # made from float32 arrays, cast by lazyten
        traced = _run_bf16(1, fn, cast, layout, forward_first)
        plain = _run_bf16(0, fn, cast, layout, forward_first)
    else:
        traced = _run(1, fn, cast, layout, forward_first)
        plain = _run(0, fn, cast, layout, forward_first)
    assert _same(traced[0], plain[0]), f"{fn} {dtype.name} values"
    for got, want in zip(traced[1], plain[1]):
        assert _same(got, want), f"{fn} {dtype.name} gradient"


def _run_bf16(trace: int, fn: str, arrays_in, layout: str, forward_first: bool):
    with Context(POINTWISE_TRACE=trace):
        leaves = [make_layout(a, layout).cast(dtypes.bfloat16).detach().requires_grad_()
                  for a in arrays_in]
        out = _call(fn, leaves)
        out.float().sum().backward()
        value = out.float().numpy() if forward_first else None
        grads = [t.grad.float().numpy() for t in leaves]
        return (out.float().numpy() if value is None else value), grads


def test_a_traced_function_is_one_node_and_computes_the_same():
    x = np.linspace(-5, 5, 31, dtype=np.float32)
    t = Tensor(x)
    for fn in UNARY:
        out = _call(fn, [t]).lazydata.base
        assert out.op is CompositeOps.POINTWISE and out.src[0].base is t.lazydata.base, fn
    out = Tensor(x).gelu()
    want = x.astype(np.float64) * 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=1e-30)


def _graph_size(lb) -> int:
    seen, stack = set(), [lb]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(node.base.src if node._base is None else (node.base,))
    return len(seen)


def test_gelu_and_its_gradient_build_a_handful_of_nodes():
    """The composition built 90 LazyBuffers for gelu's value (150 before D137) and as many
    for its slope."""
    x = Tensor(np.ones((4, 5), np.float32), requires_grad=True)
    y = x.gelu()
    assert _graph_size(y.lazydata) <= 3
    y.sum().backward()
    assert _graph_size(x.grad.lazydata) <= 12
    with Context(POINTWISE_TRACE=0):
        assert _graph_size(Tensor(np.ones(3, np.float32)).gelu().lazydata) > 60


def _centred(x):  # a reduce (at shape () it would be x - x: traced at the input's shape)
    return x - x.max()


def _flipped(x):  # a movement of an input
    return x * x.flip(1)


def _padded(x):  # a constant through a padded view
    return x + Tensor.ones(1, 2, dtype=x.dtype).pad(((0, 0), (1, 0)))


def _row_count(x):  # reads the shape: right for the shape it was traced at
    return x * float(x.shape[-1])


@pytest.mark.parametrize("fn, refused", [(_centred, True), (_flipped, True), (_padded, True),
                                         (_row_count, False)])
def test_a_function_that_is_not_pointwise_runs_as_written(fn, refused):
    for x in (np.array([[1.0, 5.0, 2.0]], np.float32), np.array([[4.0, -1.0]], np.float32)):
        if fn is _padded and x.shape[1] != 3:
            continue
        t = Tensor(x)
        out = pointwise(fn, fn, Tensor._wrap, t.lazydata)
        with Context(POINTWISE_TRACE=0):
            want = fn(Tensor(x)).numpy()
        np.testing.assert_array_equal(Tensor._wrap(out).numpy(), want)
        assert (_TRACES[(fn, (dtypes.float32,), t.device, x.shape)] is None) == refused
        assert (out.base.op is CompositeOps.POINTWISE) != refused


def test_a_closure_has_no_key_and_is_run_as_written():
    scale = 3.0

    def closure(x):
        return x * scale
    assert code_key(closure) is None
    assert code_key(lambda x: x * 2.0) is not None
    out = pointwise(closure, code_key(closure), Tensor._wrap, Tensor(np.ones(2, np.float32)).lazydata)
    np.testing.assert_array_equal(Tensor._wrap(out).numpy(), [3.0, 3.0])


def test_unread_inputs_are_not_sources():
    """A slope that ignores the value (erf's) gets a node without it."""
    x, y, g = (Tensor(np.full(4, v, np.float32)).lazydata for v in (0.5, 7.0, 2.0))
    out = pointwise(lambda g, x, y: g * (x * x), ("test", "unread"), Tensor._wrap, g, x, y)
    assert [s.base for s in out.base.src] == [g.base, x.base]
    np.testing.assert_array_equal(Tensor._wrap(out).numpy(), np.full(4, 0.5, np.float32))


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_gelu_gradient_matches_finite_differences(dtype):
    x = np.linspace(-6, 6, 41)
    t = Tensor(x.astype(NP[dtype]), requires_grad=True)
    t.gelu().sum().backward()
    h = 1e-6
    gelu = np.vectorize(lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2)))
    numeric = (gelu(x + h) - gelu(x - h)) / (2 * h)
    tol = 1e-5 if dtype == dtypes.float32 else 1e-8
    np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=tol, atol=tol)
