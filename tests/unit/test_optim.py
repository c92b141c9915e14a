"""Optimisers against numpy references of PyTorch's update formulas; updates in place,
in one realize, under no_grad; the learning rate changes without recompiling."""
import numpy as np
import pytest

from lazyten import Tensor
from lazyten.nn.state import get_state_dict, load_state_dict
from lazyten.optim import SGD, Adam, AdamW
from lazyten.realize import Stats

LR = float(np.float32(0.05))  # exact in float32 too (float32 parameters' lr is float32)


# ---- numpy references (PyTorch's torch.optim formulas) ----
class RefSGD:
    def __init__(self, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
        self.lr, self.mu, self.wd, self.nesterov = lr, momentum, weight_decay, nesterov
        self.bufs = {}

    def step(self, params, grads):
        for i, (p, g) in enumerate(zip(params, grads)):
            g = g + self.wd * p
            if self.mu:
                self.bufs[i] = g.copy() if i not in self.bufs else self.mu * self.bufs[i] + g
                g = g + self.mu * self.bufs[i] if self.nesterov else self.bufs[i]
            params[i] = p - self.lr * g


class RefAdam:
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.wd, self.decoupled, self.t, self.m, self.v = weight_decay, decoupled, 0, {}, {}

    def step(self, params, grads):
        self.t += 1
        for i, (p, g) in enumerate(zip(params, grads)):
            if self.decoupled:
                p = p * (1 - self.lr * self.wd)
            else:
                g = g + self.wd * p
            self.m[i] = self.b1 * self.m.get(i, 0) + (1 - self.b1) * g
            self.v[i] = self.b2 * self.v.get(i, 0) + (1 - self.b2) * g * g
            m_hat = self.m[i] / (1 - self.b1 ** self.t)
            v_hat = self.v[i] / (1 - self.b2 ** self.t)
            params[i] = p - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


# ---- a two-layer least-squares problem: W1's gradient reads W2 and vice versa ----
def problem(seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    w1, w2, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3)), rng.standard_normal(3)
    return [a.astype(dtype) for a in (x, y)], [a.astype(dtype) for a in (w1, w2, b)]


def numpy_grads(x, y, params):
    w1, w2, b = params
    h = x @ w1
    r = 2 * (h @ w2 + b - y) / y.size
    return [x.T @ (r @ w2.T), h.T @ r, r.sum(0)]


def lazy_loss(x, y, params):
    w1, w2, b = params
    return (x @ w1 @ w2 + b).mse(y)


CASES = [
    ("sgd", lambda p: SGD(p, lr=LR), lambda: RefSGD(LR)),
    ("sgd momentum", lambda p: SGD(p, lr=LR, momentum=0.9), lambda: RefSGD(LR, 0.9)),
    ("sgd nesterov wd", lambda p: SGD(p, lr=LR, momentum=0.8, weight_decay=0.1, nesterov=True),
     lambda: RefSGD(LR, 0.8, 0.1, True)),
    ("adam", lambda p: Adam(p, lr=LR), lambda: RefAdam(LR)),
    ("adam l2", lambda p: Adam(p, lr=LR, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1),
     lambda: RefAdam(LR, 0.8, 0.99, 1e-6, 0.1)),
    ("adamw", lambda p: AdamW(p, lr=LR), lambda: RefAdam(LR, weight_decay=0.01, decoupled=True)),
    ("adamw wd", lambda p: AdamW(p, lr=LR, weight_decay=0.3),
     lambda: RefAdam(LR, weight_decay=0.3, decoupled=True)),
]


@pytest.mark.parametrize("name,make,make_ref", CASES, ids=[c[0] for c in CASES])
def test_matches_numpy_reference(name, make, make_ref):
    (x, y), init = problem()
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref, ref_params = make(params), make_ref(), [a.copy() for a in init]
    buffers = [p.lazydata.base.realized for p in params]
    for _ in range(5):
        opt.zero_grad()
        lazy_loss(Tensor(x), Tensor(y), params).backward()
        opt.step()
        ref.step(ref_params, numpy_grads(x, y, ref_params))
        for p, r in zip(params, ref_params):
            np.testing.assert_allclose(p.numpy(), r, rtol=1e-9, atol=1e-12)
    assert [p.lazydata.base.realized for p in params] == buffers
    assert all(a is b for a, b in zip([p.lazydata.base.realized for p in params], buffers))


def test_float32_training_matches_reference():
    (x, y), init = problem(seed=1, dtype=np.float32)
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref = Adam(params, lr=LR), RefAdam(LR)
    ref_params = [a.astype(np.float64) for a in init]
    for _ in range(4):
        opt.zero_grad()
        lazy_loss(Tensor(x), Tensor(y), params).backward()
        opt.step()
        ref.step(ref_params, numpy_grads(x.astype(np.float64), y.astype(np.float64), ref_params))
    for p, r in zip(params, ref_params):
        assert p.dtype == Tensor(init[0]).dtype
        np.testing.assert_allclose(p.numpy(), r, rtol=1e-4, atol=1e-5)


def _one_step(opt, params, x, y):
    opt.zero_grad()
    lazy_loss(Tensor(x), Tensor(y), params).backward()
    opt.step()


@pytest.mark.parametrize("make", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: AdamW(p)],
                         ids=["sgd momentum", "adamw"])
def test_update_in_place_in_one_realize(make, monkeypatch):
    (x, y), init = problem()
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt = make(params)
    state = [t for name in ("buffers", "m", "v") for t in getattr(opt, name, [])]
    state += [opt.t] if hasattr(opt, "t") else []
    storage = {id(t): t.lazydata.base.realized for t in params + state}
    assert all(b is not None for b in storage.values()), "state must start realized"
    calls = []
    real = Tensor.realize
    monkeypatch.setattr(Tensor, "realize", lambda self, *o: calls.append((self,) + o) or
                        real(self, *o))
    for step in range(5):
        calls.clear()
        _one_step(opt, params, x, y)
        if step < 2:  # built and realized in one call (the second call is captured)
            update = {id(t) for t in calls[-1]}
            assert {id(t) for t in params + state} <= update, "update split over several realizes"
        else:  # replayed: the update's kernels run without building or realizing anything
            assert calls == [], "a replayed step realized tensors"
    for t in params + state:
        assert t.lazydata.base.realized is storage[id(t)], "a buffer was replaced, not updated"
        assert t.lazydata.is_realized
        assert t._ctx is None


def test_step_records_no_graph_and_zero_grad():
    (x, y), init = problem()
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt = Adam(params)
    lazy_loss(Tensor(x), Tensor(y), params).backward()
    assert all(p.grad is not None for p in params)
    opt.step()
    assert not Tensor.no_grad
    assert all(p._ctx is None and p.requires_grad for p in params)
    opt.zero_grad()
    assert all(p.grad is None for p in params)
    before = [p.numpy() for p in params]
    opt.step()  # no gradients: nothing changes
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p.numpy(), b)


def test_params_selection_and_lazy_params_become_buffers():
    w = Tensor.zeros(3, 2)  # a broadcast constant: no buffer of its own yet
    frozen = Tensor.ones(2, requires_grad=False)
    v = Tensor(np.arange(6.0).reshape(2, 3)).reshape(3, 2)  # a view of another buffer
    opt = SGD([w, w, frozen, v], lr=0.5)
    assert [id(p) for p in opt.params] == [id(w), id(v)]
    assert w.requires_grad and frozen.requires_grad is False
    for p in (w, v):
        assert p.lazydata._base is None and p.lazydata.realized is not None
    (w * 2 + v).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), -np.ones((3, 2)))
    np.testing.assert_allclose(v.numpy(), np.arange(6.0).reshape(3, 2) - 0.5)


def test_changing_lr_compiles_nothing():
    (x, y), init = problem()
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt = SGD(params, lr=0.1)
    opt.set_lr(0.2)
    _one_step(opt, params, x, y)
    lowered = Stats.lowered
    before = [p.numpy() for p in params]
    opt.set_lr(0.01)
    _one_step(opt, params, x, y)
    assert Stats.lowered == lowered, "a new learning rate built new kernels"
    assert abs(opt.lr.item() - 0.01) < 1e-9
    grads = numpy_grads(x, y, before)
    for p, b, g in zip(params, before, grads):
        np.testing.assert_allclose(p.numpy(), b - 0.01 * g, rtol=1e-9)  # float64 params: lr exact


def test_optimizer_state_round_trips_through_a_state_dict():
    """get_state_dict(opt) holds everything a resumed run needs (moments, step, lr)."""
    (x, y), init = problem()
    a = [Tensor(v.copy(), requires_grad=True) for v in init]
    opt_a = Adam(a, lr=LR)
    for _ in range(2):
        _one_step(opt_a, a, x, y)
    saved = {k: Tensor(v.numpy()) for k, v in get_state_dict(opt_a).items()}
    assert {"lr", "t", "m.0", "v.2", "params.1"} <= set(saved)
    b = [Tensor(np.zeros_like(v), requires_grad=True) for v in init]
    opt_b = Adam(b, lr=0.5)
    load_state_dict(opt_b, saved)
    for _ in range(2):
        _one_step(opt_a, a, x, y)
        _one_step(opt_b, b, x, y)
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_bad_arguments():
    w = Tensor(np.ones(2), requires_grad=True)
    with pytest.raises(ValueError, match="nesterov"):
        SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        Adam([w], b1=1.0)
    with pytest.raises(ValueError, match="no parameters"):
        SGD([Tensor(np.ones(2), requires_grad=False)], lr=0.1)


def test_scheduler_orders_reads_before_assign():
    """Updates realized together: each gradient reads the other parameter's old value."""
    (x, y), init = problem()
    w1, w2 = (Tensor(a.copy(), requires_grad=True) for a in init[:2])
    (Tensor(x) @ w1 @ w2).sum().backward()
    w2.assign(w2.detach() - 0.1 * w2.grad)
    w1.assign(w1.detach() - 0.1 * w1.grad)
    Tensor.realize(w2, w1)  # w2.grad reads w1, w1.grad reads w2: both must see old values
    g1 = x.T @ (np.ones((6, 3)) @ init[1].T)
    g2 = (x @ init[0]).T @ np.ones((6, 3))
    np.testing.assert_allclose(w1.numpy(), init[0] - 0.1 * g1, rtol=1e-9)
    np.testing.assert_allclose(w2.numpy(), init[1] - 0.1 * g2, rtol=1e-9)


@pytest.mark.parametrize("fused", [True, False])
def test_assigns_that_read_each_other_see_old_values(fused):
    """w1 -= lr * w2 and w2 -= lr * w1 in one realize: each update kernel reads the other
    parameter, so neither can run first; the scheduler copies the old values first.
    Unfused (the gradients realized), the updates are ordered without copies."""
    a, b = np.arange(1.0, 6.0), np.arange(10.0, 15.0)
    w1, w2 = Tensor(a.copy(), requires_grad=True), Tensor(b.copy(), requires_grad=True)
    (w1 * w2).sum().backward()
    if not fused:
        Tensor.realize(w1.grad, w2.grad)
    w1.assign(w1.detach() - 0.1 * w1.grad)
    w2.assign(w2.detach() - 0.1 * w2.grad)
    Tensor.realize(w1, w2)
    np.testing.assert_allclose(w1.numpy(), a - 0.1 * b, rtol=1e-12)
    np.testing.assert_allclose(w2.numpy(), b - 0.1 * a, rtol=1e-12)
    for _ in range(3):  # a mixing update of both, again and again (the schedule cache)
        old1, old2 = w1.numpy().copy(), w2.numpy().copy()
        d1, d2 = w1.detach(), w2.detach()
        w1.assign(d1 * 2 + d2)
        w2.assign(d2 * 2 - d1)
        Tensor.realize(w1, w2)
        np.testing.assert_allclose(w1.numpy(), 2 * old1 + old2, rtol=1e-12)
        np.testing.assert_allclose(w2.numpy(), 2 * old2 - old1, rtol=1e-12)


# ---- PyTorch's arguments: betas, amsgrad, maximize, dampening, param_groups ----
class RefTorchSGD(RefSGD):
    """RefSGD plus dampening (not on the first step, as PyTorch) and maximize."""

    def __init__(self, lr, momentum=0.0, dampening=0.0, maximize=False):
        super().__init__(lr, momentum)
        self.dampening, self.maximize = dampening, maximize

    def step(self, params, grads):
        for i, (p, g) in enumerate(zip(params, grads)):
            g = -g if self.maximize else g
            if self.mu:
                self.bufs[i] = g.copy() if i not in self.bufs else \
                    self.mu * self.bufs[i] + (1 - self.dampening) * g
                g = self.bufs[i]
            params[i] = p - self.lr * g


class RefAmsgrad(RefAdam):
    def __init__(self, lr, b1, b2, maximize=False):
        super().__init__(lr, b1, b2)
        self.v_max, self.maximize = {}, maximize

    def step(self, params, grads):
        self.t += 1
        for i, (p, g) in enumerate(zip(params, grads)):
            g = -g if self.maximize else g
            self.m[i] = self.b1 * self.m.get(i, 0) + (1 - self.b1) * g
            self.v[i] = self.b2 * self.v.get(i, 0) + (1 - self.b2) * g * g
            self.v_max[i] = np.maximum(self.v_max.get(i, 0), self.v[i])
            m_hat = self.m[i] / (1 - self.b1 ** self.t)
            v_hat = self.v_max[i] / (1 - self.b2 ** self.t)
            params[i] = p - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


TORCH_CASES = [
    ("sgd dampening", lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.5),
     lambda: RefTorchSGD(0.1, 0.9, 0.5)),
    ("sgd maximize", lambda p: SGD(p, lr=0.1, momentum=0.5, maximize=True),
     lambda: RefTorchSGD(0.1, 0.5, maximize=True)),
    ("adam betas amsgrad", lambda p: Adam(p, lr=0.1, betas=(0.5, 0.9), amsgrad=True),
     lambda: RefAmsgrad(0.1, 0.5, 0.9)),
    ("adam positional betas", lambda p: Adam(p, 0.1, (0.5, 0.9), maximize=True, amsgrad=True),
     lambda: RefAmsgrad(0.1, 0.5, 0.9, maximize=True)),
]


@pytest.mark.parametrize("name,make,make_ref", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_pytorch_arguments_match_numpy_reference(name, make, make_ref):
    """lr 0.1 is not a float32 value: float64 parameters get it exactly (a float32 lr made
    float64 SGD 5e-9 off PyTorch after five steps)."""
    (x, y), init = problem(seed=2)
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref, ref_params = make(params), make_ref(), [a.copy() for a in init]
    for _ in range(6):
        opt.zero_grad()
        lazy_loss(Tensor(x), Tensor(y), params).backward()
        opt.step()
        ref.step(ref_params, numpy_grads(x, y, ref_params))
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p.numpy(), r, rtol=1e-12, atol=1e-14)


def test_param_groups_set_the_learning_rate_and_settings():
    (x, y), init = problem(seed=3)
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref, ref_params = SGD(params, lr=0.3, momentum=0.5), RefSGD(0.3, 0.5), [a.copy() for a in init]
    group = opt.param_groups[0]
    assert group["lr"] == 0.3 and group["momentum"] == 0.5 and group["params"] == opt.params
    for step in range(5):
        for g in opt.param_groups:  # a scheduler's loop
            g["lr"] = 0.3 * 0.5 ** step
        ref.lr = 0.3 * 0.5 ** step
        opt.zero_grad()
        lazy_loss(Tensor(x), Tensor(y), params).backward()
        opt.step()
        ref.step(ref_params, numpy_grads(x, y, ref_params))
    for p, r in zip(params, ref_params):
        np.testing.assert_allclose(p.numpy(), r, rtol=1e-12, atol=1e-14)
    adam = Adam(params, lr=0.01)
    adam.param_groups[0]["betas"] = (0.5, 0.6)
    assert (adam.b1, adam.b2) == (0.5, 0.6) and adam.param_groups[0]["betas"] == (0.5, 0.6)
    with pytest.raises(KeyError, match="momentum"):
        adam.param_groups[0]["momentum"] = 0.9
