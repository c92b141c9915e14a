"""Fixes found by running tinygrad's operator suite against lazyten: Tensor.gradient,
PyTorch edge cases (clip gradient, indexing placement, pads...), exception classes that
are also RuntimeError as in PyTorch, and missing keywords. Expected values are numpy's or
written out by hand from PyTorch's documented rules."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor
from gradcheck import H, spaced


def _fd_grad(fn, arrays, i):
    """Central finite-difference gradient of the scalar fn(*arrays) w.r.t. arrays[i]."""
    out = np.zeros_like(arrays[i])
    for idx in np.ndindex(arrays[i].shape):
        plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
        plus[i][idx] += H
        minus[i][idx] -= H
        out[idx] = (fn(*[Tensor(a) for a in plus]).item()
                    - fn(*[Tensor(a) for a in minus]).item()) / (2 * H)
    return out


# ---- Tensor.gradient ----
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**16))
def test_gradient_matches_finite_differences_and_backward(n, m, seed):
    rng = np.random.default_rng(seed)
    a, b = spaced(rng, (n, m), (m,))

    def fn(x, y):
        return ((x * y).exp() + x.relu() * y).sum()

    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = fn(x, y)
    gx, gy = out.gradient(x, y)
    np.testing.assert_allclose(gx.numpy(), _fd_grad(fn, [a, b], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gy.numpy(), _fd_grad(fn, [a, b], 1), rtol=1e-6, atol=1e-7)
    assert x.grad is None and y.grad is None  # .grad untouched
    gx2, = out.gradient(x)  # the graph is kept: a second call works
    np.testing.assert_array_equal(gx2.numpy(), gx.numpy())
    out.backward()  # ... and so does backward() afterwards, with the same values
    np.testing.assert_array_equal(x.grad.numpy(), gx.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), gy.numpy())


def test_gradient_of_an_intermediate_and_with_an_explicit_gradient():
    x = Tensor(np.array([1., 2., 3.]), requires_grad=True)
    h = x * x
    out = h * 3
    gh, gx = out.gradient(h, x, gradient=Tensor(np.array([1., 10., 100.])))
    np.testing.assert_allclose(gh.numpy(), [3., 30., 300.])
    np.testing.assert_allclose(gx.numpy(), [6., 120., 1800.])  # 3 * 2x * gradient


def test_gradient_of_a_non_scalar_needs_a_gradient():
    x = Tensor([1., 2.], requires_grad=True)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        (x * 2).gradient(x)


def test_gradient_rejects_unused_targets_and_targets_without_requires_grad():
    x, unused = Tensor([1., 2.], requires_grad=True), Tensor([3.], requires_grad=True)
    out = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"target 1 .*shape \(1,\).*not used"):
        out.gradient(x, unused)
    with pytest.raises(RuntimeError, match="requires_grad=True"):
        out.gradient(Tensor([1., 2.]))
    np.testing.assert_allclose(out.gradient(x)[0].numpy(), [2., 4.])  # graph still intact
