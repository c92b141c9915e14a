"""Scatters in place (`scatter_`, `scatter_add_`, `scatter_reduce_`, `index_add_`,
`index_fill_`) and `index_fill`, as PyTorch: `torch.zeros(n, c).scatter_(1, labels, 1)`
is how PyTorch code makes one-hot targets, and it raised AttributeError. Values against
numpy; the in-place rule (values computed before keep the old value); index checks."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from tests.helpers import fast


def test_one_hot_by_scatter_in_place():
    labels = np.array([2, 0, 3, 3])
    t = Tensor.zeros(4, 5)
    before = t * 1
    out = t.scatter_(1, Tensor(labels.reshape(-1, 1)), 1.0)
    assert out is t
    np.testing.assert_array_equal(t.numpy(), np.eye(5, dtype=np.float32)[labels])
    np.testing.assert_array_equal(before.numpy(), np.zeros((4, 5), np.float32))


@given(rows=st.integers(1, 6), cols=st.integers(1, 7), seed=st.integers(0, 999))
@fast(20)
def test_scatter_add_and_index_add_in_place_equal_numpy(rows, cols, seed):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((rows, cols)).astype(np.float32)
    index = rng.integers(0, cols, (rows, cols))
    src = rng.standard_normal((rows, cols)).astype(np.float32)
    want = base.astype(np.float64).copy()
    for i in range(rows):
        for j in range(cols):
            want[i, index[i, j]] += src[i, j]
    t = Tensor(base)
    t.scatter_add_(1, Tensor(index), Tensor(src))
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)
    picks = rng.integers(0, rows, 3)
    added = rng.standard_normal((3, cols)).astype(np.float32)
    want2 = base.astype(np.float64).copy()
    np.add.at(want2, picks, 2 * added)
    u = Tensor(base)
    u.index_add_(0, Tensor(picks), Tensor(added), alpha=2)
    np.testing.assert_allclose(u.numpy(), want2, rtol=1e-5, atol=1e-5)


def test_scatter_reduce_in_place():
    t = Tensor(np.ones((2, 3), np.float32))
    t.scatter_reduce_(1, Tensor(np.array([[0, 0, 2], [1, 1, 1]])), Tensor(np.full((2, 3), 4.0, np.float32)),
                      "amax", include_self=True)
    np.testing.assert_array_equal(t.numpy(), [[4, 1, 4], [1, 4, 1]])


@given(shape=st.sampled_from([(5,), (3, 4), (2, 3, 4)]), seed=st.integers(0, 999),
       dim=st.integers(-1, 2))
@fast(20)
def test_index_fill_equals_numpy(shape, seed, dim):
    dim = dim % len(shape)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(0, shape[dim], 2)
    want = x.copy()
    np.moveaxis(want, dim, 0)[index] = -7.0
    np.testing.assert_array_equal(Tensor(x).index_fill(dim, Tensor(index), -7.0).numpy(), want)
    t = Tensor(x)
    t.index_fill_(dim, index.tolist(), Tensor(np.float32(-7.0)))
    np.testing.assert_array_equal(t.numpy(), want)


def test_index_fill_checks_its_indices():
    with pytest.raises(IndexError):
        Tensor.zeros(3, 4).index_fill(1, Tensor(np.array([4])), 1.0).numpy()
    with pytest.raises(TypeError):
        Tensor.zeros(3, 4).index_fill(1, Tensor(np.array([0.5], np.float32)), 1.0)


def test_a_leaf_that_requires_grad_refuses_a_scatter_in_place():
    w = Tensor(np.zeros((2, 2), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.scatter_(1, Tensor(np.array([[0], [1]])), 1.0)
