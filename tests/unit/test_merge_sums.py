"""A sum of reduces over the same input shape is one reduce of a sum (lazyten/merge_sums.py):
a weight read at every step of a recurrence gets one gradient kernel, not one a step, and
every value stays what numpy computes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from codegen.helpers import prod
from codegen.ops import ReduceOps
from lazyten import Tensor, nn
from lazyten.schedule import create_schedule


def _reduces(t: Tensor) -> int:
    """The reduce kernels with t's shape in the schedule that realizes `t` (not the
    forward's it may also run)."""
    def has_reduce(ast) -> bool:
        return isinstance(ast.op, ReduceOps) or any(has_reduce(s) for s in ast.src)
    items = create_schedule([t.lazydata])
    return sum(1 for item in items if item.ast is not None and has_reduce(item.ast)
               and prod(item.out.shape) == t.numel())


def test_a_weight_read_at_every_step_has_one_gradient_kernel_per_16_steps():
    """A Linear applied to each of 20 steps: its weight's and its bias's gradients are 20
    reduces each (a matmul of K = the batch), added up. Merged: two reduces each (groups
    of 10, at most 16), where 20 were made before, and the gradients are numpy's."""
    rng = np.random.default_rng(0)
    lin = nn.Linear(12, 8)
    xs = rng.standard_normal((3, 20, 12)).astype(np.float32)
    x = Tensor(xs)
    w, b = lin.weight.numpy().astype(np.float64), lin.bias.numpy().astype(np.float64)
    dz = 1 - np.tanh(xs.astype(np.float64) @ w.T + b) ** 2  # (3, 20, 8)
    for run in range(3):  # the second and third from the schedule cache and its plan
        lin.weight.grad = lin.bias.grad = None
        total = None
        for t in range(20):
            y = lin(x[:, t]).tanh()
            total = y if total is None else total + y
        total.sum().backward()
        if run == 0:
            assert _reduces(lin.weight.grad) == 2
            assert _reduces(lin.bias.grad) == 2
        np.testing.assert_allclose(lin.weight.grad.numpy(), np.einsum("btk,bti->ki", dz, xs),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(lin.bias.grad.numpy(), dz.sum((0, 1)), rtol=1e-4,
                                   atol=1e-5)


# A term of a sum tree, each (4, 5): a matmul over K = 3 (mergeable with the others), a
# sum over a leading axis of 3 (the same input shape (3, 4, 5): mergeable), a sum over 6
# (another input shape), a max, an elementwise value, a matmul also read elsewhere.
_TERMS = ["matmul", "sum3", "sum6", "max", "plain", "shared"]


def _term(kind: str, rng, dtype) -> tuple[Tensor, np.ndarray, Tensor | None]:
    """(the term, numpy's value in float64, a tensor that also reads it or None)."""
    def data(*shape):
        values = rng.integers(-3, 4, shape) if dtype == np.int32 else rng.standard_normal(shape)
        return values.astype(dtype)
    if kind in ("matmul", "shared"):
        a, b = data(4, 3), data(3, 5)
        t = Tensor(a) @ Tensor(b)
        return t, a.astype(np.float64) @ b, (t * 2 if kind == "shared" else None)
    if kind in ("sum3", "sum6", "max"):
        x = data(3 if kind != "sum6" else 6, 4, 5)
        if kind == "max":
            return Tensor(x).amax(0), x.max(0).astype(np.float64), None
        return Tensor(x).sum(0), x.sum(0, dtype=np.float64), None
    x = data(4, 5)
    return Tensor(x) * 2, x * 2.0, None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_TERMS), st.booleans(), st.booleans()),
                min_size=2, max_size=22),
       st.sampled_from([np.float32, np.int32]), st.integers(0, 2 ** 16))
def test_sums_of_terms_are_numpys_whatever_the_tree(terms, dtype, seed):
    """Trees of adds (left, right, or a subtree kept as an output) over the terms above:
    every output equals numpy's, and a tree of mergeable reduces alone has one reduce
    kernel per 16 of them."""
    rng = np.random.default_rng(seed)
    acc, want, checks = None, None, []
    for kind, left, keep in terms:
        t, value, also = _term(kind, rng, dtype)
        if also is not None:
            checks.append((also, value * 2))
        if acc is None:
            acc, want = t, value
            continue
        acc, want = (acc + t, want + value) if left else (t + acc, value + want)
        if keep:
            checks.append((acc, want))
    checks.append((acc, want))
    if all(kind == "matmul" for kind, _, _ in terms) and not any(k for _, _, k in terms[1:]):
        assert _reduces(acc) == -(-len(terms) // 16)
    tol = 0 if dtype == np.int32 else 1e-4
    values = [t.numpy() for t, _ in checks]
    for got, (_, expected) in zip(values, checks):
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_large_reduces_keep_their_own_kernels():
    """Two 512 x 512 weight gradients of K = 64 (2^24 multiply-adds each) stay two
    kernels, tiled and packed for one product each; of K = 32 they are one."""
    def grads(k: int) -> Tensor:
        a, b, c, d = (Tensor.empty(k, 512) for _ in range(4))
        return a.T @ b + c.T @ d
    assert _reduces(grads(64)) == 2
    assert _reduces(grads(32)) == 1
