"""A leaf's `.grad` that a later backward adds to holds one backward's graph, not all of
them (D165). Gradients are lazy; `x.grad + new` over an unrealized `x.grad` chained every
earlier backward's graph, and with it every buffer those graphs read, until someone read
the gradient. Two habits never do: a model whose optimiser holds only some of its
parameters (a frozen backbone left with requires_grad, a head trained alone) and a leaf
made with requires_grad by mistake (an upstream gradient seed). The device memory held
grew by a backward's worth every step, forever. And gradient accumulation over
micro-batches, whose whole point is the memory of one micro-batch, held them all until
`opt.step()`. PyTorch's `.grad` is always a computed value: its memory stays put.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten
from lazyten import Tensor, nn
from lazyten.realize import Stats
from runtimes import get_runtime


def _live() -> int:
    return get_runtime("CPU").allocator.live


def test_a_parameter_outside_the_optimiser_holds_no_more_memory_step_after_step():
    rng = np.random.default_rng(0)
    body, head = nn.Linear(6, 8), nn.Linear(8, 3)
    opt = lazyten.optim.SGD(head.parameters(), lr=0.1)  # the body still requires grad
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(40)]
    ys = [rng.integers(0, 3, 5) for _ in range(40)]
    w_body = body.weight.numpy().copy()
    live = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(body(Tensor(x)).relu()), Tensor(y))
        loss.backward()
        opt.step()
        loss.item()
        live.append(_live())
    # (before: 5 more buffers held each step, 200 after 40 steps)
    assert live[-1] == live[9], f"buffers held after steps 10..40: {live[9:]}"
    np.testing.assert_array_equal(body.weight.numpy(), w_body)  # never updated
    assert np.isfinite(body.weight.grad.numpy()).all()


def _numpy_grads(w: np.ndarray, xs: list[np.ndarray]) -> np.ndarray:
    """d/dw of sum over batches of sum(tanh(x @ w)), float64."""
    total = np.zeros(w.shape)
    for x in xs:
        x64 = x.astype(np.float64)
        total += x64.T @ (1 - np.tanh(x64 @ w) ** 2)
    return total


@settings(max_examples=12, deadline=None)
@given(steps=st.integers(1, 7), rows=st.integers(1, 9), cols=st.integers(1, 5),
       seed=st.integers(0, 2 ** 16))
def test_gradients_accumulated_over_backwards_are_their_sum(steps, rows, cols, seed):
    rng = np.random.default_rng(seed)
    w64 = rng.standard_normal((4, cols)) * 0.5
    w = Tensor(w64.astype(np.float32), requires_grad=True)
    xs = [rng.standard_normal((rows, 4)).astype(np.float32) for _ in range(steps)]
    for x in xs:
        (Tensor(x) @ w).tanh().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _numpy_grads(w.numpy().astype(np.float64), xs),
                               rtol=1e-4, atol=1e-4)


def test_gradient_accumulation_holds_one_micro_batch_at_a_time():
    """k micro-batches, then the step: what is held does not grow with k."""
    rng = np.random.default_rng(1)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = lazyten.optim.Adam(model.parameters(), lr=1e-3)

    def held_before_step(k: int) -> int:
        opt.zero_grad()
        for _ in range(k):
            x = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
            y = Tensor(rng.integers(0, 4, 8))
            (nn.functional.cross_entropy(model(x), y) / 4).backward()  # (a fixed scale:
            # a number that changed with k would become a kernel input, a buffer, D104)
        held = _live()
        opt.step()
        return held
    for k in (2, 3):  # (warm-up: the optimiser's state, made over its first steps)
        held_before_step(k)
    few = held_before_step(3)
    many = held_before_step(12)  # (before: 44 against 26)
    assert many <= few, f"buffers held before the step: {few} after 3 micro-batches, " \
                        f"{many} after 12"



def test_a_zeroed_gradient_is_not_computed_before_it_is_added_to():
    """zero_grad(set_to_none=False) leaves constant zeros: nothing to run before adding."""
    w = Tensor(np.ones((3, 3), np.float32), requires_grad=True)
    opt = lazyten.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    before = Stats.kernels
    (w * 3).sum().backward()
    assert Stats.kernels == before, "backward ran kernels for a gradient of zeros"
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 3), 3, np.float32))


def test_a_gradient_seed_made_with_requires_grad_holds_nothing_across_calls():
    rng = np.random.default_rng(2)
    q = Tensor(rng.standard_normal((2, 16, 8)).astype(np.float32), requires_grad=True)
    g = Tensor(rng.standard_normal((2, 16, 8)).astype(np.float32), requires_grad=True)
    live = []
    for _ in range(8):
        q.grad = None
        ((q @ q.transpose(-2, -1)).softmax(-1) @ q * g).sum().backward()
        q.grad.realize()
        live.append(_live())
    assert live[-1] == live[2], f"buffers held after each call: {live}"


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_then_backward_gives_this_backward_alone(set_to_none):
    w = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    (w * w).sum().backward()
    w.grad = None if set_to_none else w.grad.zeros_like()
    (w * 5).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full(4, 5, np.float32))
