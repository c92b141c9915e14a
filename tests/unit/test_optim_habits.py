"""PyTorch training-loop habits around the optimisers: lr schedules
(lazyten.optim.lr_scheduler, against their documented formulas), gradient clipping
(nn.utils, against numpy), zero_grad(set_to_none=False), opt.state_dict()."""
import math

import numpy as np
import pytest

import lazyten
from lazyten import Tensor, nn
from lazyten.optim import SGD, Adam
from lazyten.realize import Stats

sched = lazyten.optim.lr_scheduler


def _opt(lr=0.1):
    return SGD([Tensor(np.ones(3), requires_grad=True)], lr=lr)


SCHEDULES = [
    ("step", lambda o: sched.StepLR(o, step_size=3, gamma=0.5), lambda t: 0.5 ** (t // 3)),
    ("multistep", lambda o: sched.MultiStepLR(o, [2, 5], gamma=0.1),
     lambda t: 0.1 ** ((t >= 2) + (t >= 5))),
    ("exponential", lambda o: sched.ExponentialLR(o, 0.9), lambda t: 0.9 ** t),
    ("cosine", lambda o: sched.CosineAnnealingLR(o, T_max=6, eta_min=0.01),
     lambda t: (0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * t / 6)) / 2) / 0.1),
    ("linear", lambda o: sched.LinearLR(o, start_factor=0.25, total_iters=4),
     lambda t: 0.25 + 0.75 * min(t, 4) / 4),
    ("lambda", lambda o: sched.LambdaLR(o, lambda e: 1 / (1 + e)), lambda t: 1 / (1 + t)),
]


@pytest.mark.parametrize("name,make,factor", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedules_follow_their_formulas(name, make, factor):
    opt = _opt(0.1)
    s = make(opt)
    for t in range(9):
        want = 0.1 * factor(t)
        assert s.get_last_lr()[0] == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert opt.param_groups[0]["lr"] == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert opt.lr.item() == pytest.approx(want, rel=1e-12, abs=1e-15)  # float64 params
        s.step()


def test_a_schedule_changes_no_kernel_and_the_updates_follow_it():
    w0 = np.array([1.0, -2.0, 3.0])
    w = Tensor(w0.copy(), requires_grad=True)
    opt = SGD([w], lr=0.4)
    s = sched.StepLR(opt, step_size=1, gamma=0.5)
    ref = w0.copy()
    lowered = None
    for epoch in range(6):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        ref = ref - 0.4 * 0.5 ** epoch * 2 * ref
        s.step()
        if epoch == 2:
            lowered = Stats.lowered
    assert Stats.lowered == lowered, "a new learning rate built new kernels"
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)


def test_clip_grad_norm_matches_numpy():
    rng = np.random.default_rng(0)
    gs = [rng.standard_normal((3, 4)) * 5, rng.standard_normal(7)]
    for max_norm, norm_type in [(1.0, 2.0), (100.0, 2.0), (0.5, 1.0), (0.3, float("inf"))]:
        ps = [Tensor(np.zeros(g.shape), requires_grad=True) for g in gs]
        for p, g in zip(ps, gs):
            p.grad = Tensor(g.copy())
        total = nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
        flat = np.concatenate([g.ravel() for g in gs])
        want = np.abs(flat).max() if math.isinf(norm_type) else \
            (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
        assert total.item() == pytest.approx(want, rel=1e-5)
        scale = min(1.0, max_norm / (want + 1e-6))
        for p, g in zip(ps, gs):
            np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5)
    p = Tensor(np.zeros(2), requires_grad=True)
    p.grad = Tensor(np.array([np.inf, 1.0]))
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


@pytest.mark.parametrize("count", [1, 3, 12])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, 0.0, float("inf"), -float("inf")])
def test_clip_grad_norm_is_one_kernel_and_one_node(count, norm_type):
    """The total norm of `count` gradients is one graph node and one kernel (a reduce
    over the gradients joined end to end, D163), where it was a reduce per gradient and
    ~6 Tensor ops each; its value and the scaled gradients against numpy in float64,
    gradients of float32 and float64 mixed."""
    rng = np.random.default_rng(count)
    gs = [rng.standard_normal(shape) * 3 for shape in [(3, 5), (7,), (2, 2, 9)] * 4][:count]
    gs[0][0, 0] = 0.0  # (a zero, for the count of nonzeros)
    ps = [Tensor(np.zeros(g.shape, dtype=np.float32 if i % 2 else np.float64), requires_grad=True)
          for i, g in enumerate(gs)]
    for p, g in zip(ps, gs):
        p.grad = Tensor(g.astype(p.numpy().dtype)).realize()
    kernels = Stats.kernels
    total = nn.utils.clip_grad_norm_(ps, 0.5, norm_type)
    assert len(total.lazydata.base.src) == count, "the norm is not one node over the gradients"
    total.realize()
    assert Stats.kernels - kernels == 1
    flat = np.concatenate([g.astype(p.numpy().dtype).astype(np.float32).astype(np.float64).ravel()
                           for p, g in zip(ps, gs)])
    want = {0.0: np.count_nonzero(flat), float("inf"): np.abs(flat).max(),
            -float("inf"): np.abs(flat).min()}.get(norm_type)
    if want is None:
        want = (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    assert total.item() == pytest.approx(want, rel=1e-5)
    scale = min(1.0, 0.5 / (want + 1e-6))
    for p, g in zip(ps, gs):
        assert p.grad.dtype == p.dtype
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5, atol=1e-7)


def test_clip_grad_value_and_zero_grad_keep_pytorch_semantics():
    p = Tensor(np.zeros(4), requires_grad=True)
    p.grad = Tensor(np.array([-3.0, -0.5, 0.5, 3.0]))
    nn.utils.clip_grad_value_([p], 1.0)
    np.testing.assert_array_equal(p.grad.numpy(), [-1.0, -0.5, 0.5, 1.0])
    opt = Adam([p], lr=0.1)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), np.zeros(4))
    opt.zero_grad()
    assert p.grad is None


def test_optimizer_state_dict_round_trips():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(5)

    def run(opt, w, steps):
        for _ in range(steps):
            opt.zero_grad()
            (w * w * w).sum().backward()
            opt.step()

    a = Tensor(w0.copy(), requires_grad=True)
    opt_a = Adam([a], lr=0.05, amsgrad=True)
    run(opt_a, a, 3)
    saved = {k: Tensor(v.numpy()) for k, v in opt_a.state_dict().items()}
    b = Tensor(np.zeros(5), requires_grad=True)
    opt_b = Adam([b], lr=0.5, amsgrad=True)
    opt_b.load_state_dict(saved)
    assert opt_b.param_groups[0]["lr"] == 0.05
    run(opt_a, a, 3)
    run(opt_b, b, 3)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
