"""@jit replays captured kernels: same results, no scheduling, clear errors on new shapes;
parameters updated in place keep their storage, and memory stays flat over many steps."""
import numpy as np
import pytest

import lazyten
from lazyten import Tensor
from lazyten.jit import JitError
from lazyten.realize import Stats
from runtimes import get_runtime


def make_model(seed=0):
    rng = np.random.default_rng(seed)
    w1 = Tensor(rng.standard_normal((6, 8)).astype(np.float32) * 0.3, requires_grad=True)
    w2 = Tensor(rng.standard_normal((8, 3)).astype(np.float32) * 0.3, requires_grad=True)
    return [w1.realize(), w2.realize()]


def train_step_fn(params, lr=0.1):
    def step(x, y):
        w1, w2 = params
        for p in params:
            p.grad = None
        loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
        loss.backward()
        with lazyten.no_grad():
            for p in params:
                p.assign(p.detach() - p.grad * lr)
        return loss.realize(*params)
    return step


def batches(n, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (rng.standard_normal((4, 6)).astype(np.float32),
               rng.integers(0, 3, 4).astype(np.int32))


def test_jitted_training_matches_unjitted_and_does_no_scheduling():
    plain_params, jit_params = make_model(), make_model()
    plain = train_step_fn(plain_params)
    jitted = lazyten.jit(train_step_fn(jit_params))
    storage = [p.lazydata.base.realized for p in jit_params]
    for i, (x, y) in enumerate(batches(6)):
        expected = plain(Tensor(x), Tensor(y)).item()
        xt, yt = Tensor(x), Tensor(y)
        before = Stats.schedules
        got = jitted(xt, yt).item()
        if i >= 2:
            assert Stats.schedules == before, "replay scheduled work"
        assert got == pytest.approx(expected, rel=1e-5)
    for p, q in zip(plain_params, jit_params):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)
    assert [p.lazydata.base.realized for p in jit_params] == storage, "assign changed storage"


def test_jit_rejects_new_shapes_and_dtypes():
    f = lazyten.jit(lambda x: (x * 2).realize())
    for _ in range(3):
        f(Tensor(np.ones((2, 3), np.float32)))
    with pytest.raises(JitError, match=r"\(2, 3\)"):
        f(Tensor(np.ones((3, 3), np.float32)))
    with pytest.raises(JitError, match="float64"):
        f(Tensor(np.ones((2, 3), np.float64)))


def test_memory_stays_flat_over_300_steps():
    params = make_model()
    step = train_step_fn(params, lr=0.01)
    allocator = get_runtime("CPU").allocator
    live = []
    for i, (x, y) in enumerate(batches(300)):
        step(Tensor(x), Tensor(y))
        if i in (50, 299):
            live.append(allocator.live)
    assert live[1] <= live[0], f"live device buffers grew from {live[0]} to {live[1]}"
