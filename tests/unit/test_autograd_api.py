"""PyTorch's autograd entry points as PyTorch code calls them (D170):
`loss.backward(retain_graph=True)` (two losses over one graph: GANs, multi-task heads),
`backward(inputs=[...])`, and `torch.autograd.grad(outputs, inputs, grad_outputs,
allow_unused=...)` — all raised TypeError or AttributeError. Higher-order gradients
(`create_graph=True`) are not built: asking for them raises NotImplementedError, never a
gradient silently left out. Values against numpy, float64.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor
from tests.helpers import fast


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_retain_graph_lets_a_second_backward_accumulate():
    x64 = _rnd((3, 4))
    x = Tensor(x64, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * x64, rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_two_losses_over_one_graph_as_a_gan_step_does():
    w64, v64, x64 = _rnd((4, 3)), _rnd((3, 2), 1), _rnd((5, 4), 2)
    w, v = Tensor(w64, requires_grad=True), Tensor(v64, requires_grad=True)
    hidden = (Tensor(x64) @ w).tanh()
    first = (hidden @ v).sum()
    second = (hidden ** 2).mean()
    first.backward(retain_graph=True)
    second.backward()
    h = np.tanh(x64 @ w64)
    dh = np.ones((5, 2)) @ v64.T + 2 * h / h.size
    np.testing.assert_allclose(w.grad.numpy(), x64.T @ (dh * (1 - h ** 2)), rtol=1e-10)
    np.testing.assert_allclose(v.grad.numpy(), h.T @ np.ones((5, 2)), rtol=1e-10)


def test_backward_into_chosen_inputs_only():
    a, b = Tensor(_rnd((3,)), requires_grad=True), Tensor(_rnd((3,), 1), requires_grad=True)
    (a * b).sum().backward(inputs=[a])
    np.testing.assert_allclose(a.grad.numpy(), _rnd((3,), 1))
    assert b.grad is None
    with pytest.raises(RuntimeError, match="inputs"):
        (a * b).sum().backward(inputs=[Tensor(np.ones(3))])


def test_create_graph_is_refused_not_ignored():
    x = Tensor(_rnd((3,)), requires_grad=True)
    with pytest.raises(NotImplementedError, match="create_graph"):
        (x ** 3).sum().backward(create_graph=True)
    with pytest.raises(NotImplementedError, match="create_graph"):
        lazyten.autograd.grad((x ** 3).sum(), x, create_graph=True)


@given(n=st.integers(1, 5), seed=st.integers(0, 99))
@fast(15)
def test_autograd_grad_of_several_outputs_with_their_gradients(n, seed):
    x64, w64 = _rnd((n,), seed), _rnd((n,), seed + 1)
    g1, g2 = _rnd((n,), seed + 2), _rnd((), seed + 3)
    x, w = Tensor(x64, requires_grad=True), Tensor(w64, requires_grad=True)
    out1, out2 = x * w, (x.exp() * w).sum()
    dx, dw = lazyten.autograd.grad([out1, out2], [x, w], grad_outputs=[Tensor(g1), Tensor(g2)])
    np.testing.assert_allclose(dx.numpy(), g1 * w64 + g2 * np.exp(x64) * w64, rtol=1e-10)
    np.testing.assert_allclose(dw.numpy(), g1 * x64 + g2 * np.exp(x64), rtol=1e-10)
    assert x.grad is None and w.grad is None
    (only,) = lazyten.autograd.grad(out2, x)  # (a tensor, not a list: one gradient)
    np.testing.assert_allclose(only.numpy(), np.exp(x64) * w64, rtol=1e-10)


def test_autograd_grad_of_an_unused_input():
    x, unused = Tensor(_rnd((2,)), requires_grad=True), Tensor(_rnd((2,)), requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="not used"):
        lazyten.autograd.grad(y, [x, unused])
    dx, du = lazyten.autograd.grad(y, [x, unused], allow_unused=True)
    np.testing.assert_array_equal(dx.numpy(), [2, 2])
    assert du is None
    _, zeros = lazyten.autograd.grad(y, [x, unused], allow_unused=True, materialize_grads=True)
    np.testing.assert_array_equal(zeros.numpy(), [0, 0])
