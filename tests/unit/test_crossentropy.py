"""The cross entropy against class labels as one Function (autograd/crossentropy.py) and
the cached ranges it compares labels with (creation.py `arange`): values and gradients
against numpy in float64 and finite differences, ignored labels, label smoothing, every
reduction, labels out of range, and in-place updates of a cached range."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from lazyten.autograd.crossentropy import SparseCrossEntropy
from gradcheck import check_grad
from helpers import fast


def reference(x, target, ignore, reduction, smoothing):
    """PyTorch's cross entropy of class-last logits x (..., C), its gradient for an
    upstream gradient of ones, in float64, one row at a time."""
    x = x.astype(np.float64)
    shifted = x - x.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    classes = x.shape[-1]
    loss, grad = np.zeros(target.shape), np.zeros(x.shape)
    keep = target != ignore
    count = keep.sum()
    for idx in np.ndindex(*target.shape):
        if not keep[idx]:
            continue
        t = int(target[idx])
        loss[idx] = -(1 - smoothing) * logp[idx][t] - smoothing * logp[idx].mean()
        aimed = np.full(classes, smoothing / classes)
        aimed[t] += 1 - smoothing
        grad[idx] = np.exp(logp[idx]) - aimed
    if reduction == "none":
        return loss, grad
    if reduction == "sum":
        return loss.sum(), grad
    return loss.sum() / count, grad / count


@given(data=st.data(), reduction=st.sampled_from(["mean", "sum", "none"]),
       smoothing=st.sampled_from([0.0, 0.1]), dtype=st.sampled_from([np.float32, np.float64]),
       label_dtype=st.sampled_from([np.int64, np.int32, np.int8, np.uint8]))
@fast(40)
def test_values_and_gradients_match_numpy(data, reduction, smoothing, dtype, label_dtype):
    classes = data.draw(st.integers(1, 9), "classes")
    rows = data.draw(st.sampled_from([(), (1,), (5,), (3, 2), (2, 1, 3)]), "rows")
    rng = np.random.default_rng(data.draw(st.integers(0, 99), "seed"))
    x = (rng.standard_normal(rows + (classes,)) * 3).astype(dtype)
    target = rng.integers(0, classes, rows).astype(label_dtype)
    ignore = data.draw(st.sampled_from([-100, 0, 2]), "ignore")  # -100: never a uint8 label
    if target.size and (ignore >= 0 or label_dtype != np.uint8) and data.draw(st.booleans(), "one"):
        target.flat[rng.integers(0, target.size)] = ignore
    if reduction == "mean" and not (target != ignore).any():
        target = np.zeros_like(target) + (1 if ignore == 0 and classes > 1 else 0)
        if (target == ignore).all():
            ignore = -100
    expected, expected_grad = reference(x, target, ignore, reduction, smoothing)
    xt = Tensor(x, requires_grad=True)
    loss = xt.sparse_categorical_crossentropy(Tensor(target), label_smoothing=smoothing,
                                              reduction=reduction, ignore_index=ignore)
    assert loss._ctx.function is SparseCrossEntropy, "the loss should be one Function"
    assert loss.dtype == xt.dtype and loss.shape == np.shape(expected)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(loss.numpy(), expected, rtol=tol, atol=tol)
    loss.backward(Tensor(np.ones(loss.shape, dtype)))
    np.testing.assert_allclose(xt.grad.numpy(), expected_grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_gradient_matches_finite_differences(reduction, smoothing):
    rng = np.random.default_rng(3)
    target = np.array([[0, 4], [-100, 1], [3, 3]])
    check_grad(lambda a: a.sparse_categorical_crossentropy(
        Tensor(target), label_smoothing=smoothing, reduction=reduction),
        rng.standard_normal((3, 2, 5)) * 2)
    check_grad(lambda a: a.cross_entropy(Tensor(target), label_smoothing=smoothing,
                                         reduction=reduction),
               rng.standard_normal((3, 5, 2)) * 2)


def test_cross_entropy_with_a_class_dim_one_is_the_same_function():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    target = rng.integers(0, 4, (2, 3))
    got = Tensor(x).cross_entropy(Tensor(target), reduction="none")
    assert got._ctx is None or got._ctx.function is SparseCrossEntropy
    expected, _ = reference(np.moveaxis(x, 1, -1), target, -100, "none", 0.0)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_all_labels_ignored_give_nan_and_a_zero_gradient():
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    loss = x.sparse_categorical_crossentropy(Tensor(np.array([-100, -100])))
    assert np.isnan(loss.item())
    loss.sum().backward()  # ignored rows get no gradient, even from a NaN mean (PyTorch)
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3), np.float32))
    y = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y.sparse_categorical_crossentropy(Tensor(np.array([-100, -100])), reduction="sum").backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("label", [3, -1, 7])
def test_a_label_out_of_range_raises_from_the_loss_and_from_the_gradient(label):
    target = Tensor(np.array([0, label, 1]))
    x = Tensor(np.zeros((3, 3), np.float32), requires_grad=True)
    with pytest.raises(IndexError, match="cross entropy class label"):
        x.sparse_categorical_crossentropy(target).numpy()
    x.sparse_categorical_crossentropy(target).backward()
    with pytest.raises(IndexError, match="out of range"):
        x.grad.numpy()  # the gradient reads the one-hot labels too
    with pytest.raises(IndexError, match="cross_entropy class label"):
        x.cross_entropy(target).numpy()


def test_other_dtypes_and_weights_build_the_composite():
    x = Tensor(np.zeros((2, 3), np.float16), requires_grad=True)
    assert x.sparse_categorical_crossentropy(Tensor(np.array([0, 1])))._ctx.function \
        is not SparseCrossEntropy
    y = Tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    with pytest.raises(TypeError, match="uint64"):  # int64 cannot hold its labels: as before
        y.sparse_categorical_crossentropy(Tensor(np.array([0, 2**63 + 1], np.uint64)))
    target32 = Tensor(np.array([0, 1], np.int32))
    assert y.sparse_categorical_crossentropy(target32)._ctx.function is SparseCrossEntropy
    weighted = y.cross_entropy(Tensor(np.array([0, 1])), weight=Tensor(np.ones(3, np.float32)))
    np.testing.assert_allclose(weighted.item(), np.log(3), rtol=1e-6)


def test_a_cached_range_is_shared_and_survives_in_place_updates():
    a, b = Tensor.arange(6), Tensor.arange(6)
    assert a.lazydata is b.lazydata, "integer ranges are uploaded once"
    a += 10
    a[0] = -1
    c = Tensor.arange(6)
    np.testing.assert_array_equal(a.numpy(), [-1, 11, 12, 13, 14, 15])
    np.testing.assert_array_equal(b.numpy(), np.arange(6))
    np.testing.assert_array_equal(c.numpy(), np.arange(6))
    d = Tensor.arange(1, 7, 2, dtype="float32", requires_grad=True)
    assert d.dtype.name == "float32" and d.requires_grad and not b.requires_grad
    np.testing.assert_array_equal(d.numpy(), [1.0, 3.0, 5.0])
    with Tensor.no_grad():
        d.assign(d * 2).realize()
    np.testing.assert_array_equal(Tensor.arange(1, 7, 2, dtype="float32").numpy(), [1, 3, 5])
    np.testing.assert_array_equal(Tensor.arange(-0.0, 2.5, 0.5).numpy(), np.arange(-0.0, 2.5, 0.5))


def test_a_cached_range_survives_a_jit_that_updates_it_in_place():
    from lazyten import jit

    @jit
    def step(x):
        t = Tensor.arange(4, dtype="float32")
        t += x
        return t * 1
    for i in range(4):  # plain, captured, replayed twice
        step(Tensor(np.full(4, float(i), np.float32)))
    np.testing.assert_array_equal(Tensor.arange(4, dtype="float32").numpy(), np.arange(4))


def test_ranges_kept_are_bounded():
    from lazyten import creation
    for n in range(1, creation._RANGES_KEPT + 10):
        Tensor.arange(n, 2 * n)
    assert len(creation._RANGES) <= creation._RANGES_KEPT
    np.testing.assert_array_equal(Tensor.arange(3, 6).numpy(), [3, 4, 5])
    big = creation._RANGE_CACHED_SIZE + 1
    assert Tensor.arange(big).lazydata is not Tensor.arange(big).lazydata
