"""Gradient oracle shared by the gradient tests: float64 central finite differences.

`check_grad(fn, *arrays)` reduces fn's output with a random weight, L(x) = sum(f(x) * W),
and compares <dL/dx, d> from Tensor.backward with (L(x + h d) - L(x - h d)) / 2h for random
directions d: a wrong gradient component shows up with probability 1. `spaced` makes
inputs whose values are apart from each other and from the kinks of relu/abs/clip, so the
function is smooth around them.
"""
from __future__ import annotations
import math

import numpy as np

from lazyten import Tensor

H = 1e-6


def spaced(rng, *shapes, amp: float = 1.0):
    """Arrays whose values (pooled over all of them) are at least 0.6 * spacing apart and
    0.3 * spacing away from every multiple of `spacing` (1/4, 1/8... so integers, where
    relu6/hardswish/clip have kinks, are avoided too)."""
    sizes = [math.prod(s) for s in shapes]
    n = sum(sizes)
    spacing = 1 / (4 * -(-n // 16))
    values = (rng.permutation(n) - n // 2 + 0.5 + rng.uniform(-0.2, 0.2, n)) * spacing * amp
    out, start = [], 0
    for shape, size in zip(shapes, sizes):
        out.append(values[start:start + size].reshape(shape))
        start += size
    return out


def check_grad(fn, *arrays, seed: int = 0, directions: int = 2, wrt=None):
    """Assert Tensor.backward's gradient of sum(fn(*inputs) * W) matches finite differences.

    `wrt`: indices of the inputs to differentiate (default: the float ones)."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype == np.float64] if wrt is None else wrt
    inputs = [Tensor(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
    out = fn(*inputs)
    weight = rng.standard_normal(out.shape)

    def loss(values):
        return (fn(*[Tensor(v) for v in values]) * Tensor(weight)).sum()

    total = (out * Tensor(weight)).sum()
    assert total.requires_grad, "the output does not track gradients"
    total.backward()
    base = abs(loss(arrays).item())
    for i in wrt:
        t = inputs[i]
        assert t.grad is not None, f"input {i} got no gradient"
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
        grad = t.grad.numpy()
        for _ in range(directions):
            d = rng.standard_normal(arrays[i].shape)
            plus, minus = list(arrays), list(arrays)
            plus[i], minus[i] = arrays[i] + H * d, arrays[i] - H * d
            numeric = (loss(plus).item() - loss(minus).item()) / (2 * H)
            analytic = float((grad * d).sum())
            tol = 1e-6 * np.linalg.norm(grad) * np.linalg.norm(d) + 1e-7 * max(1.0, base)
            assert abs(numeric - analytic) <= tol, \
                f"input {i}: finite difference {numeric!r} != backward {analytic!r}"
