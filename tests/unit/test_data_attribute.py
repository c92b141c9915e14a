"""`tensor.data` as PyTorch has it (D168): the same value outside autograd, whose
in-place updates change the tensor it came from. PyTorch code is full of it: WGAN's
`p.data.clamp_(-c, c)`, the manual step `p.data -= lr * p.grad.data`, re-initialising
`m.weight.data.normal_(0, 0.02)`, `p.grad.data.zero_()`, `p.data = new_value`. lazyten's
`data()` was a method returning a numpy array: every one of these raised.
"""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, nn
from tests.helpers import fast


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_data_reads_the_value_outside_autograd():
    p = Tensor(_rnd((3, 4)), requires_grad=True)
    d = p.data
    assert isinstance(d, Tensor) and not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), p.numpy())
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad.data.numpy(), np.full((3, 4), 2, np.float32))


@pytest.mark.parametrize("update, expected", [
    (lambda d: d.clamp_(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
    (lambda d: d.mul_(0.25), lambda x: x * np.float32(0.25)),
    (lambda d: d.zero_(), lambda x: np.zeros_like(x)),
    (lambda d: d.fill_(3.0), lambda x: np.full_like(x, 3)),
    (lambda d: d.copy_(Tensor(np.ones((3, 4), np.float32))), lambda x: np.ones_like(x)),
    (lambda d: d.add_(Tensor(np.ones((3, 4), np.float32)), alpha=2), lambda x: x + 2),
])
def test_an_in_place_update_of_data_changes_the_tensor(update, expected):
    x = _rnd((3, 4))
    p = Tensor(x, requires_grad=True)  # a leaf that requires grad: .data may change it
    update(p.data)
    np.testing.assert_allclose(p.numpy(), expected(x), rtol=1e-6)
    assert p.requires_grad and p.grad is None


def test_normal_re_initialisation_through_data():
    layer = nn.Linear(64, 32)
    layer.weight.data.normal_(0.0, 0.02)
    layer.bias.data.zero_()
    w = layer.weight.numpy()
    assert abs(w.std() - 0.02) < 0.004 and abs(w.mean()) < 0.003
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(32, np.float32))


@given(steps=st.integers(1, 6), lr=st.sampled_from([0.01, 0.1, 0.3]), seed=st.integers(0, 99))
@fast(15)
def test_a_manual_sgd_step_through_data_equals_numpy(steps, lr, seed):
    x, y = _rnd((8, 3), seed), _rnd((8, 1), seed + 1)
    w64 = _rnd((3, 1), seed + 2).astype(np.float64)
    w = Tensor(w64.astype(np.float32), requires_grad=True)
    for _ in range(steps):
        loss = ((Tensor(x) @ w - Tensor(y)) ** 2).mean()
        loss.backward()
        w.data -= lr * w.grad.data
        w.grad.data.zero_()
        w64 = w64 - lr * (2 * x.T.astype(np.float64) @ (x @ w64 - y) / len(x))
    np.testing.assert_allclose(w.numpy(), w64, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((3, 1), np.float32))


def test_a_clipped_critic_trains_as_numpy_says():
    """WGAN's critic: an optimiser step, then every weight clamped through .data."""
    critic = nn.Linear(4, 1)
    opt = lazyten.optim.SGD(critic.parameters(), lr=0.5)
    w, b = critic.weight.numpy().astype(np.float64), critic.bias.numpy().astype(np.float64)
    for step in range(4):
        x = _rnd((6, 4), step)
        opt.zero_grad()
        (-critic(Tensor(x)).mean()).backward()
        opt.step()
        for p in critic.parameters():
            p.data.clamp_(-0.05, 0.05)
        w = np.clip(w + 0.5 * x.mean(0, keepdims=True), -0.05, 0.05)
        b = np.clip(b + 0.5, -0.05, 0.05)
    np.testing.assert_allclose(critic.weight.numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(critic.bias.numpy(), b, rtol=1e-5, atol=1e-6)


def test_setting_data_replaces_the_value_and_training_goes_on():
    layer = nn.Linear(3, 2)
    opt = lazyten.optim.Adam(layer.parameters(), lr=0.1)
    new = _rnd((2, 3), 5)
    layer.weight.data = Tensor(new)
    np.testing.assert_array_equal(layer.weight.numpy(), new)
    assert layer.weight.requires_grad
    layer.weight.data = layer.weight.data * 2  # a lazy value
    np.testing.assert_array_equal(layer.weight.numpy(), new * 2)
    layer(Tensor(_rnd((4, 3), 6))).sum().backward()
    opt.step()
    assert np.isfinite(layer.weight.numpy()).all()
    assert not np.array_equal(layer.weight.numpy(), new * 2)


def test_setting_data_of_another_shape_or_a_non_tensor():
    p = Tensor(_rnd((2, 3)), requires_grad=True)
    p.data = Tensor(_rnd((5,), 1))
    assert p.shape == (5,)
    np.testing.assert_array_equal(p.numpy(), _rnd((5,), 1))
    with pytest.raises(TypeError, match="data"):
        p.data = np.ones(5, np.float32)


def test_updates_of_data_leave_values_computed_before_alone():
    """The rule of docs/design.md: a value computed from the tensor before an in-place
    update keeps the old value (only the tensor itself changes)."""
    x = _rnd((4,))
    p = Tensor(x, requires_grad=True)
    before = p * 1
    p.data.mul_(10)
    np.testing.assert_array_equal(before.numpy(), x)
    np.testing.assert_allclose(p.numpy(), x * 10, rtol=1e-6)


def test_random_fills_in_place_follow_their_distributions_and_the_seed():
    t = Tensor(np.zeros((200, 100), np.float32))
    Tensor.manual_seed(3)
    first = t.normal_(1.5, 0.5).numpy()
    assert abs(first.mean() - 1.5) < 0.01 and abs(first.std() - 0.5) < 0.01
    Tensor.manual_seed(3)
    np.testing.assert_array_equal(Tensor(np.zeros((200, 100), np.float32)).normal_(1.5, 0.5).numpy(),
                                  first)
    u = t.uniform_(-2, 3).numpy()
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.03
    b = t.bernoulli_(0.25).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.01
    half = Tensor(np.zeros(1000, np.float16)).normal_()
    assert half.dtype == Tensor(np.zeros(1, np.float16)).dtype


def test_a_random_fill_of_a_leaf_that_requires_grad_is_refused_outside_no_grad():
    w = Tensor(np.zeros((3, 3), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.normal_()
    with lazyten.no_grad():
        w.uniform_(0, 1)
    assert (w.numpy() > 0).any()
