"""Whatever follows a reduce (views that shrink, pad, flip, permute or expand it, and
elementwise ops between them, with several consumers), the scheduler fuses or
materialises correctly: random chains against numpy. Found: a shrink to a prefix of a
reduce's result is a contiguous view, and the scheduler took it for a pure reshape."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from tests.helpers import fast


def _step(draw, t, a):
    """One random op on a (Tensor, ndarray) pair of the same shape."""
    kind = draw(st.sampled_from(["shrink", "pad", "flip", "permute", "expand", "exp", "affine",
                                 "neg", "reshape", "gather_row", "by_element", "by_flip"]))
    if kind == "shrink":
        d = draw(st.integers(0, a.ndim - 1))
        n = a.shape[d]
        lo = draw(st.integers(0, n - 1))
        hi = draw(st.integers(lo + 1, n))
        arg = tuple((lo, hi) if i == d else (0, s) for i, s in enumerate(a.shape))
        return t.shrink(arg), a[tuple(slice(lo, hi) if i == d else slice(None) for i in range(a.ndim))]
    if kind == "pad":
        d = draw(st.integers(0, a.ndim - 1))
        p = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        arg = tuple(p if i == d else (0, 0) for i in range(a.ndim))
        return t.pad(arg), np.pad(a, arg)
    if kind == "flip":
        d = draw(st.integers(0, a.ndim - 1))
        return t.flip(d), np.flip(a, d)
    if kind == "permute":
        order = draw(st.permutations(range(a.ndim)))
        return t.permute(*order), a.transpose(order)
    if kind == "expand":
        return t.unsqueeze(0).expand(2, *a.shape), np.broadcast_to(a[None], (2,) + a.shape)
    if kind == "reshape":
        return t.reshape(-1), a.reshape(-1)
    if kind == "gather_row":
        d = draw(st.integers(0, a.ndim - 1))
        i = draw(st.integers(0, a.shape[d] - 1))
        idx = np.full(tuple(1 if k == d else s for k, s in enumerate(a.shape)), i)
        return t.gather(d, Tensor(idx.astype(np.int32))), np.take_along_axis(a, idx, d)
    if kind == "by_element":  # the value and one of its elements, broadcast: r / r[-1]
        i = draw(st.integers(0, a.size - 1))
        return t * t.reshape(-1)[i], a * a.reshape(-1)[i]
    if kind == "by_flip":  # the value and a flipped view of itself
        d = draw(st.integers(0, a.ndim - 1))
        return t + t.flip(d), a + np.flip(a, d)
    if kind == "exp":
        return (t * 0.1).exp(), np.exp(a * np.float32(0.1))
    if kind == "neg":
        return -t, -a
    return t * 2 + 1, a * 2 + 1


@pytest.mark.parametrize("reduce", ["sum", "max"])
@fast(25)
@given(data=st.data())
def test_ops_after_a_reduce_match_numpy(reduce, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=3)))
    a = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    axis = data.draw(st.integers(0, len(shape) - 1))
    t = getattr(Tensor(a), reduce)(axis=axis)
    ref = getattr(a, reduce)(axis)
    if ref.ndim == 0:
        t, ref = t.reshape(1), ref.reshape(1)
    outs = []
    for _ in range(data.draw(st.integers(1, 4))):
        t, ref = _step(data.draw, t, ref)
        if data.draw(st.booleans()):
            outs.append((t, ref))  # a second consumer of this point of the chain
    outs.append((t, ref))
    Tensor.realize(*[o for o, _ in outs])
    for got, want in outs:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_reduce_divided_by_its_last_element():
    x = np.random.default_rng(0).random((5, 3)).astype(np.float32)
    r = Tensor(x).sum(1)
    np.testing.assert_allclose((r / r[-1]).numpy(), x.sum(1) / x.sum(1)[-1], rtol=1e-6)


def test_shrink_of_a_reduce_then_exp_then_pad():
    a = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    got = Tensor(a).sum(0)[:1].exp().pad((0, 2)).numpy()
    np.testing.assert_allclose(got, np.pad(np.exp(a.sum(0)[:1]), (0, 2)), rtol=1e-6)


def test_gather_from_a_matmul_result():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    got = (Tensor(a) @ Tensor(b)).gather(0, Tensor([[0]])).numpy()
    np.testing.assert_allclose(got, (a @ b)[:1, :1], rtol=1e-5)
