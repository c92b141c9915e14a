"""Composite (lazyten/autograd/composite.py, D118): a function of Tensors as one traced
Function, whose backward is autograd over its own graph. Its values and gradients are
those of the function called directly; a call is one graph node."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor
from lazyten.autograd.composite import Composite
from lazyten.traced import CompositeOps


def gated(x, y, w):
    """A small cell: a matmul, a chunk, activations, a cat."""
    a, b = (x + y.linear(w)).chunk(2, -1)
    return a.sigmoid().cat((b.tanh() * y[:, : b.shape[1]]).exp(), dim=-1)


def returns_input(x, y):
    return x


def scaled(x, k: float):
    return (x * k).relu().sum(-1)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), half=st.integers(1, 6), seed=st.integers(0, 2**16),
       needs=st.lists(st.booleans(), min_size=3, max_size=3))
def test_a_composite_gives_the_values_and_gradients_of_its_function(n, half, seed, needs):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.5
              for s in [(n, 2 * half), (n, 2 * half), (2 * half, 2 * half)]]
    weight = rng.standard_normal((n, 2 * half)).astype(np.float32)
    results = []
    for fused in (False, True):
        ins = [Tensor(a, requires_grad=need) for a, need in zip(arrays, needs)]
        out = ins[0].apply(Composite, *ins[1:], body=gated) if fused else gated(*ins)
        if fused:
            assert out.lazydata.base.op is CompositeOps.GRAPH  # one node
        grads = []
        if any(needs):
            (out * Tensor(weight)).sum().backward()
            grads = [t.grad.numpy() if need else None for t, need in zip(ins, needs)]
        results.append((out.numpy(), grads))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    for got, want in zip(results[1][1], results[0][1]):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_keyword_arguments_and_an_untraceable_body():
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2, requires_grad=True)
    out = x.apply(Composite, body=scaled, k=-1.5)
    np.testing.assert_allclose(out.numpy(), np.maximum((np.arange(6).reshape(2, 3) - 2) * -1.5,
                                                       0).sum(-1))
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(x.numpy() < 0, -1.5, 0.0))
    y = Tensor(np.ones(3, np.float32), requires_grad=True)
    same = y.apply(Composite, y, body=returns_input)  # refused by the tracer: run as written
    same.sum().backward()
    np.testing.assert_allclose(same.numpy(), np.ones(3))
    np.testing.assert_allclose(y.grad.numpy(), np.ones(3))


def test_a_body_that_returns_no_tensor_says_so():
    with pytest.raises(TypeError, match="returns one Tensor"):
        Tensor(np.ones(3, np.float32)).apply(Composite, body=lambda x: (x, x))


_READ: dict = {}


def reads_constant(x):
    """Reads a realized tensor that is none of its inputs (set in `_READ` by the test)."""
    return (x * _READ["c"]).exp().sum(-1)


@pytest.mark.parametrize("frozen", [False, True])
def test_a_trace_reads_a_realized_constant_only_where_it_is_frozen(frozen):
    """A realized buffer a trace reads could be written later (the trace would keep reading
    the old one): refused, run as written. A frozen one (lazyten's own, never written:
    interpolate's weights) becomes a constant of the trace, read by every call."""
    n = 3 + frozen  # (one trace key per case: a refusal is remembered for its key)
    c = Tensor(np.linspace(-1, 1, n, dtype=np.float32))
    c.lazydata.base.frozen = frozen
    _READ["c"] = c
    for seed in range(2):
        a = np.random.default_rng(seed).standard_normal((2, n)).astype(np.float32)
        x = Tensor(a, requires_grad=True)
        out = x.apply(Composite, body=reads_constant)
        assert (out.lazydata.base.op is CompositeOps.GRAPH) == frozen
        out.sum().backward()
        np.testing.assert_allclose(out.numpy(), np.exp(a * c.numpy()).sum(-1), rtol=1e-6)
        np.testing.assert_allclose(x.grad.numpy(), c.numpy() * np.exp(a * c.numpy()), rtol=1e-6)
