"""Values a recorded Function keeps for its backward are stored when the forward is
realized first (D146), against numpy and the step realized whole.

`loss.item()` (or an accuracy from the logits) before `loss.backward()` realizes the
forward alone; the scheduler fused a Linear's matmul into the gelu after it and never
stored the pre-activation, which gelu's backward then computed again, matmul and all.
A recorded Function's kept values are counted (`LazyBuffer.held`) until its backward is
built, and a reduce's chain stops at a held value, so it is stored; once the backward
is built the count is taken back and the step realized whole schedules as before.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten as lt
from lazyten import Tensor
from lazyten.realize import Stats

F = lt.nn.functional


def mlp(width, act):
    rng = np.random.default_rng(0)
    model = lt.nn.Sequential(lt.nn.Linear(24, width), act(), lt.nn.Linear(width, width), act(),
                             lt.nn.Linear(width, 5))
    x = Tensor(rng.standard_normal((16, 24)).astype(np.float32))
    y = Tensor(rng.integers(0, 5, 16))
    return model, x, y


def step(model, x, y, item_first: bool):
    """(FLOPs of the step's kernels, kernels, the loss, the gradients)."""
    for p in model.parameters():
        p.grad = None
    flops, kernels = Stats.flops, Stats.kernels
    loss = F.cross_entropy(model(x), y)
    if item_first:
        loss.item()
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    Tensor.realize(*grads)
    return Stats.flops - flops, Stats.kernels - kernels, loss.item(), [g.numpy() for g in grads]


@pytest.mark.parametrize("act", [lt.nn.GELU, lt.nn.Tanh, lt.nn.SiLU, lt.nn.ReLU])
def test_a_forward_realized_first_is_not_computed_again(act):
    model, x, y = mlp(40, act)
    step(model, x, y, False)  # (compiles)
    whole, kernels, loss, grads = step(model, x, y, False)
    first, _, loss1, grads1 = step(model, x, y, True)
    # before: gelu's backward computed its input's matmul again (+28% here)
    assert first <= whole * 1.01, (first, whole)
    assert loss1 == pytest.approx(loss, rel=1e-6)
    for a, b in zip(grads, grads1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the whole step schedules as it did: the counts were taken back by backward()
    assert step(model, x, y, False)[:2] == (whole, kernels)


def test_counts_are_taken_back_once_the_backward_is_built():
    model, x, y = mlp(32, lt.nn.GELU)
    loss = F.cross_entropy(model(x), y)
    held = [b for b in _bases(loss.lazydata) if b.held]
    assert held, "a recorded forward keeps values"
    loss.backward()
    assert all(b.held == 0 for b in _bases(loss.lazydata))
    with lt.no_grad():
        out = model(x)
    assert not [b for b in _bases(out.lazydata) if b.held]  # nothing recorded, nothing kept


def _bases(lazy):
    seen, stack, out = set(), [lazy.base], []
    while stack:
        b = stack.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        out.append(b)
        stack.extend(s.base for s in getattr(b, "src", ()) or ())
    return out


@settings(max_examples=15, deadline=None)
@given(st.integers(3, 37), st.sampled_from(["gelu", "tanh", "sigmoid", "relu", "exp"]),
       st.booleans())
def test_gradients_match_numpy_with_the_forward_realized_first(width, act, bias):
    """One Linear and an activation, the loss realized before backward, against numpy."""
    rng = np.random.default_rng(width)
    xn = rng.standard_normal((7, width)).astype(np.float32)
    wn = (rng.standard_normal((width, 11)) * 0.6 / np.sqrt(width)).astype(np.float32)
    bn = rng.standard_normal(11).astype(np.float32)
    x, w = Tensor(xn), Tensor(wn, requires_grad=True)
    b = Tensor(bn, requires_grad=True)
    pre = x @ w + b if bias else x @ w
    out = getattr(pre, act)()
    loss = (out * out).sum()
    loss.item()
    loss.backward()
    p = xn.astype(np.float64) @ wn + (bn if bias else 0)
    from math import erf
    derivs = {"gelu": lambda v: 0.5 * (1 + np.vectorize(erf)(v / np.sqrt(2))) +
              v * np.exp(-v * v / 2) / np.sqrt(2 * np.pi),
              "tanh": lambda v: 1 - np.tanh(v) ** 2,
              "sigmoid": lambda v: (1 / (1 + np.exp(-v))) * (1 - 1 / (1 + np.exp(-v))),
              "relu": lambda v: (v > 0).astype(np.float64), "exp": np.exp}
    values = {"gelu": lambda v: 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2))),
              "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
              "relu": lambda v: np.maximum(v, 0), "exp": np.exp}
    g = 2 * values[act](p) * derivs[act](p)
    want = xn.T.astype(np.float64) @ g
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    if bias:
        np.testing.assert_allclose(b.grad.numpy(), g.sum(0), rtol=1e-4,
                                   atol=1e-5 * np.abs(g.sum(0)).max())


def test_functions_that_say_they_keep_nothing_keep_no_values():
    """A Function with `held_values = keeps_nothing` (the views, D158) is skipped by `hold`:
    each one's recorded ctx, walked the general way, must hold no LazyBuffer, else a value
    its backward reads would go uncounted (D146)."""
    from lazyten.autograd import primitives
    from lazyten.autograd.function import Function, keeps_nothing
    from lazyten.lazy import LazyBuffer
    calls = {"Reshape": lambda t: t.reshape(6, 5), "Permute": lambda t: t.permute(1, 0),
             "Expand": lambda t: t.reshape(1, 5, 6).expand(3, 5, 6),
             "Pad": lambda t: t.pad(((1, 2), (0, 3))), "Shrink": lambda t: t[1:4, 2:],
             "Flip": lambda t: t.flip(0)}
    declared = {name for name, cls in vars(primitives).items() if isinstance(cls, type)
                and issubclass(cls, Function) and cls.held_values is keeps_nothing}
    assert declared == set(calls)  # (a new one needs a call here)
    x = Tensor(np.random.default_rng(0).standard_normal((5, 6)), requires_grad=True)
    for name, call in calls.items():
        ctx = call(x)._ctx
        assert type(ctx).__name__ == name
        found = [v for v in vars(ctx).values() if isinstance(v, LazyBuffer) or
                 (isinstance(v, (tuple, list)) and any(isinstance(i, LazyBuffer) for i in v))]
        assert found == [], f"{name} keeps {found}"
