"""The optimisers replay their update from the third step (D59): whatever happens between
steps, every step must give what the numpy reference gives. Hypothesis draws sequences of
steps and of the things a user does between them (a new learning rate, a changed
setting, a parameter without a gradient, a parameter given new memory or a pending
in-place update, a loaded state, a value taken from a parameter before the step)."""
import numpy as np
from hypothesis import example, given, settings, strategies as st

from lazyten import Tensor
from lazyten.nn.state import get_state_dict, load_state_dict
from lazyten.optim import SGD, Adam, AdamW
from lazyten.realize import Stats

from tests.unit.test_optim import lazy_loss, problem

LR = float(np.float32(0.05))  # the optimiser keeps lr in float32: use that exact value


class Ref:
    """SGD (momentum, weight decay) and Adam/AdamW, skipping parameters without a
    gradient as PyTorch does; Adam's step count is shared, as lazyten's."""

    def __init__(self, kind, n):
        self.kind, self.lr, self.t = kind, LR, 0
        self.hyper = {"momentum": 0.9, "weight_decay": 0.1} if kind == "sgd" else \
            {"b1": 0.9, "b2": 0.999, "eps": 1e-8, "weight_decay": 0.01 if kind == "adamw" else 0.0}
        self.state = [dict() for _ in range(n)]

    def step(self, params, grads):
        self.t += 1
        h = self.hyper
        for i, g in enumerate(grads):
            if g is None:
                continue
            p, s = params[i], self.state[i]
            if self.kind == "sgd":
                g = g + h["weight_decay"] * p
                s["buf"] = g.copy() if "buf" not in s else h["momentum"] * s["buf"] + g
                params[i] = p - self.lr * s["buf"]
                continue
            if self.kind == "adamw":
                p = p * (1 - self.lr * h["weight_decay"])
            else:
                g = g + h["weight_decay"] * p
            s["m"] = h["b1"] * s.get("m", 0) + (1 - h["b1"]) * g
            s["v"] = h["b2"] * s.get("v", 0) + (1 - h["b2"]) * g * g
            m_hat = s["m"] / (1 - h["b1"] ** self.t)
            v_hat = s["v"] / (1 - h["b2"] ** self.t)
            params[i] = p - self.lr * m_hat / (np.sqrt(v_hat) + h["eps"])


def make(kind, params):
    if kind == "sgd":
        return SGD(params, lr=LR, momentum=0.9, weight_decay=0.1)
    return (Adam if kind == "adam" else AdamW)(params, lr=LR)


def grads_of(x, y, params):
    w1, w2, b = params
    h = x @ w1
    r = 2 * (h @ w2 + b - y) / y.size
    return [x.T @ (r @ w2.T), h.T @ r, r.sum(0)]


EVENTS = st.sampled_from(["step", "step", "step", "lr", "setting", "no grad", "replace",
                          "pending assign", "load state", "value kept"])


@settings(max_examples=30, deadline=None)
@example(kind="adam", events=["step"] * 3 + ["setting", "lr", "replace", "no grad"], seed=0)
@example(kind="sgd", events=["step"] * 3 + ["value kept", "pending assign", "load state"], seed=1)
@given(kind=st.sampled_from(["sgd", "adam", "adamw"]), events=st.lists(EVENTS, max_size=9),
       seed=st.integers(0, 3))
def test_replayed_steps_match_the_reference(kind, events, seed):
    (x, y), init = problem(seed)
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt, ref, values = make(kind, params), Ref(kind, 3), [a.copy() for a in init]
    rng = np.random.default_rng(seed)
    skip, kept = None, []
    for event in events + ["step"] * 4:  # at least 4 steps: steps 3 and 4 are replays
        if event == "lr":
            ref.lr = float(np.float32(rng.uniform(0.01, 0.1)))
            opt.set_lr(ref.lr)
        elif event == "setting":
            name = "momentum" if kind == "sgd" else "b1"
            ref.hyper[name] = float(rng.uniform(0.5, 0.95))
            setattr(opt, name, ref.hyper[name])
        elif event == "no grad":
            skip = int(rng.integers(3))
        elif event in ("replace", "pending assign"):
            i = int(rng.integers(3))
            values[i] = rng.standard_normal(values[i].shape)
            new = Tensor(values[i].copy())
            if event == "replace":  # new memory: the replay must not write the old one
                params[i].replace(new)
            else:  # lazy until the step
                params[i].assign(new)
        elif event == "load state":
            saved = {k: Tensor(v.numpy()) for k, v in get_state_dict(opt).items()}
            fresh = [Tensor(np.zeros_like(v), requires_grad=True) for v in values]
            opt = make(kind, fresh)
            for name, value in ref.hyper.items():  # settings are not tensors: not saved
                setattr(opt, name, value)
            load_state_dict(opt, saved)
            params = fresh
        elif event == "value kept":  # read lazily before the step: keeps the old value
            kept.append((params[0] * 1, params[0].numpy().copy()))
        else:
            opt.zero_grad()
            lazy_loss(Tensor(x), Tensor(y), params).backward()
            grads = grads_of(x, y, values)
            if skip is not None:
                params[skip].grad, grads[skip] = None, None
                skip = None
            opt.step()
            ref.step(values, grads)
            for p, v in zip(params, values):
                np.testing.assert_allclose(p.numpy(), v, rtol=1e-9, atol=1e-12)
    for lazy, value in kept:
        np.testing.assert_allclose(lazy.numpy(), value, rtol=0, atol=0)


def test_replayed_steps_build_and_compile_nothing():
    (x, y), init = problem()
    params = [Tensor(a.copy(), requires_grad=True) for a in init]
    opt = Adam(params, lr=LR)
    grads = []
    for step in range(6):
        opt.zero_grad()
        lazy_loss(Tensor(x), Tensor(y), params).backward()
        Tensor.realize(*[p.grad for p in params])
        grads.append([p.grad.numpy() for p in params])
        schedules, lowered = Stats.schedules, Stats.lowered
        opt.step()
        if step >= 2:
            assert (Stats.schedules, Stats.lowered) == (schedules, lowered), \
                "a replayed step scheduled or compiled kernels"
    ref, values = Ref("adam", 3), [a.copy() for a in init]
    for g in grads:
        ref.step(values, g)
    for p, v in zip(params, values):
        np.testing.assert_allclose(p.numpy(), v, rtol=1e-9, atol=1e-12)
