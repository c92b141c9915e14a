"""Activations of several ops and BatchNorm's statistics as traced calls (D156): each call is
one graph node, and its values and gradients are the op chain's, on odd shapes,
non-contiguous and broadcast inputs, with and without a gradient, in every float dtype.
The references are numpy float64 formulas written here (values) and float64 finite
differences (gradients)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gradcheck import check_grad, spaced
from lazyten import Tensor, nn
from lazyten.traced import CompositeOps


def _softplus(x, beta=1.0):
    return np.logaddexp(0.0, beta * x) / beta


def _sigmoid(x):
    return 0.5 * (1 + np.tanh(x / 2))


# name: (call, float64 reference)
ACTIVATIONS = {
    "leakyrelu": (lambda t: t.leakyrelu(0.03), lambda x: np.where(x > 0, x, 0.03 * x)),
    "elu": (lambda t: t.elu(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(np.minimum(x, 0)))),
    "celu": (lambda t: t.celu(1.3),
             lambda x: np.where(x > 0, x, 1.3 * np.expm1(np.minimum(x, 0) / 1.3))),
    "softplus": (lambda t: t.softplus(2.0), lambda x: _softplus(x, 2.0)),
    "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x))),
    "quick_gelu": (lambda t: t.quick_gelu(), lambda x: x * _sigmoid(1.702 * x)),
    "mish": (lambda t: t.mish(), lambda x: x * np.tanh(_softplus(x))),
    "silu": (lambda t: t.silu(), lambda x: x * _sigmoid(x)),
    "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x + 3, 0, 6) / 6),
    "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6),
}


def _layout(x: np.ndarray, how: str) -> Tensor:
    """`x` as a Tensor laid out as `how` says: contiguous, transposed (a permuted view of
    the transposed array) or broadcast (a row expanded over the rows)."""
    if how == "transposed":
        return Tensor(np.ascontiguousarray(x.T)).T
    if how == "broadcast":
        return Tensor(x[:1]).expand(*x.shape)
    return Tensor(x)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 9), cols=st.integers(1, 37), seed=st.integers(0, 2**16),
       how=st.sampled_from(["contiguous", "transposed", "broadcast"]),
       dtype=st.sampled_from([np.float32, np.float64]), grad=st.booleans())
def test_an_activation_is_one_node_with_the_chains_values(name, rows, cols, seed, how, dtype,
                                                          grad):
    call, reference = ACTIVATIONS[name]
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * 4).astype(dtype)
    if how == "broadcast":
        x[:] = x[:1]
    t = _layout(x, how)
    t.requires_grad = grad
    out = call(t)
    assert out.lazydata.base.op is CompositeOps.GRAPH  # one traced node, not the chain's
    assert out.dtype == t.dtype and out.shape == t.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out.numpy(), reference(x.astype(np.float64)), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_an_activations_gradient_matches_finite_differences(name):
    call, _ = ACTIVATIONS[name]
    x, = spaced(np.random.default_rng(len(name)), (5, 7), amp=8.0)
    check_grad(lambda t: call(t.T.contiguous().T), x)  # a non-contiguous input
    check_grad(call, x[:1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16bit_activation_is_computed_in_float32_and_rounded_once(dtype):
    x = np.linspace(-6, 6, 97)
    low = Tensor(x.astype(np.float32)).cast(dtype)
    got = low.elu(0.7).float().numpy()
    want = Tensor(low.float().numpy()).elu(0.7).cast(dtype).float().numpy()
    np.testing.assert_array_equal(got, want)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(2, 9), c=st.integers(1, 6), length=st.sampled_from([None, 1, 5]),
       seed=st.integers(0, 2**16), momentum=st.sampled_from([0.1, 0.37, None]))
def test_batchnorm_statistics_are_traced_and_right(n, c, length, seed, momentum):
    # the batch mean and variance, and each running statistic's update, are traced calls
    bn = nn.BatchNorm1d(c, momentum=momentum).train()
    rng = np.random.default_rng(seed)
    run_mean, run_var = np.zeros(c), np.ones(c)
    for step in range(1, 4):
        shape = (n, c) if length is None else (n, c, length)
        x = (rng.standard_normal(shape) * step + step).astype(np.float32)
        t = Tensor(x, requires_grad=True)
        out = bn(t)
        update = bn.running_mean.lazydata  # (an ASSIGN of (value, target))
        assert update.src[0].base.op is CompositeOps.GRAPH
        axes = (0,) if length is None else (0, 2)
        x64 = x.astype(np.float64)
        mean, var = x64.mean(axes), x64.var(axes)
        shaped = (1, c) + (() if length is None else (1,))
        expected = (x64 - mean.reshape(shaped)) / np.sqrt(var.reshape(shaped) + 1e-5)
        np.testing.assert_allclose(out.numpy(), expected, rtol=2e-4, atol=2e-4)
        m = 1 / step if momentum is None else momentum
        count = math.prod(x.shape) // c
        run_mean = (1 - m) * run_mean + m * mean
        run_var = (1 - m) * run_var + m * var * count / (count - 1)
        np.testing.assert_allclose(bn.running_mean.numpy(), run_mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(bn.running_var.numpy(), run_var, rtol=1e-5, atol=1e-5)
        # the gradient of a sum through batch norm is 0 up to rounding: mean(x_hat), 0 to
        # about eps |x| / std, comes back divided by std once more
        out.sum().backward()
        rounding = 10 * 2.0 ** -23 * np.abs(x).max() / (var.min() + 1e-5)
        assert np.abs(t.grad.numpy()).max() < 1e-5 + rounding
