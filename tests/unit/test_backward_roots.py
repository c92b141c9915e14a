"""The value backward() was called on (the loss) is computed with the gradients (D167).
`loss.item()` after `opt.step()` is the usual order, and `running += loss.detach()` a
common way to average a loss over an epoch. The optimiser's step realized the gradients
and updated the parameters in place; the loss, still lazy, read the parameters' old
values, so every step copied them before the update (copy on write) and kept the copies
for as long as the loss was alive: in a running sum, forever (6 more buffers a step for
a 2-layer MLP), and reading it recomputed every step's forward. And a realized value kept
its index checks' flags (a buffer each) though they had run.
"""
import numpy as np
import pytest

import lazyten
from lazyten import Tensor, nn
from lazyten.realize import Stats
from runtimes import get_runtime


def _mlp(seed: int = 0) -> nn.Module:
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.assign(Tensor((rng.standard_normal(p.shape) * 0.3).astype(np.float32))).realize()
    return model


def _numpy_loss(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    logits = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def _batches(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 5, 8))
            for _ in range(n)]


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_a_running_sum_of_detached_losses_holds_no_more_memory_step_after_step(optimizer):
    model = _mlp()
    opt = getattr(lazyten.optim, optimizer)(model.parameters(), lr=0.05)
    running, live, want = 0.0, [], 0.0
    for x, y in _batches(30):
        want += _numpy_loss([p.numpy() for p in model.parameters()], x, y)
        opt.zero_grad()
        out = model(Tensor(x))
        loss = nn.functional.cross_entropy(out, Tensor(y))
        loss.backward()
        opt.step()
        running = running + loss.detach()
        live.append(get_runtime("CPU").allocator.live)
    # the running sum is lazy: it reads each step's loss, one 1-element buffer a step
    # (before: 6 more buffers each step with SGD, 12 with Adam, copies of the weights
    # the losses read, and each step's flags of its label checks)
    assert live[-1] - live[4] <= len(live) - 5, f"buffers held after steps 5..30: {live[4:]}"
    np.testing.assert_allclose(running.item(), want, rtol=1e-4)


def test_the_loss_read_after_the_step_is_the_loss_before_it_and_runs_nothing():
    model = _mlp()
    opt = lazyten.optim.Adam(model.parameters(), lr=0.05)
    for x, y in _batches(6):
        want = _numpy_loss([p.numpy() for p in model.parameters()], x, y)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(Tensor(x)), Tensor(y))
        loss.backward()
        opt.step()
        before = Stats.kernels
        got = loss.item()
        assert Stats.kernels == before, "reading the loss after the step computed it again"
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_losses_of_accumulated_micro_batches_are_each_their_own():
    """Two backwards, then one step: both losses are computed, with the old weights."""
    model = _mlp(3)
    opt = lazyten.optim.SGD(model.parameters(), lr=0.1)
    (x1, y1), (x2, y2) = _batches(2, seed=4)
    params = [p.numpy() for p in model.parameters()]
    opt.zero_grad()
    first = nn.functional.cross_entropy(model(Tensor(x1)), Tensor(y1))
    first.backward()
    second = nn.functional.cross_entropy(model(Tensor(x2)), Tensor(y2))
    second.backward()
    opt.step()
    np.testing.assert_allclose(first.item(), _numpy_loss(params, x1, y1), rtol=1e-5)
    np.testing.assert_allclose(second.item(), _numpy_loss(params, x2, y2), rtol=1e-5)


def test_a_loss_dropped_before_the_step_is_not_computed():
    model = _mlp()
    opt = lazyten.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batches(1)[0]
    opt.zero_grad()
    nn.functional.cross_entropy(model(Tensor(x)), Tensor(y)).backward()  # (not kept)
    opt.step()  # (nothing to compute but the update: must not fail on a dead root)
    params = [p.numpy() for p in model.parameters()]
    assert all(np.isfinite(p).all() for p in params)
