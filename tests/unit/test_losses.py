"""Losses and norms with PyTorch's semantics against numpy loops: nll_loss and
cross_entropy with weight= / ignore_index= / label smoothing (the weighted mean divides
by the weights of the counted targets), l1_loss, norm, std_mean / var_mean, and the
lazyten.nn.functional forms; gradients against finite differences."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes
from lazyten import Tensor
import lazyten.nn.functional as F
from gradcheck import check_grad
from helpers import assert_tensor, fast


def log_softmax(x, axis):
    x = x.astype(np.float64)
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def nll_ref(logp, target, weight, ignore, reduction, smoothing=0.0):
    """One target at a time; logp is (N, C, ...) or (C,)."""
    moved = np.moveaxis(logp, 1, -1) if logp.ndim >= 2 else logp
    classes = moved.shape[-1]
    w = np.ones(classes) if weight is None else weight.astype(np.float64)
    loss, wsum = np.zeros(target.shape), 0.0
    for idx in np.ndindex(*target.shape):
        t = int(target[idx])
        if t == ignore:
            continue
        row = moved[idx]
        loss[idx] = -(1 - smoothing) * w[t] * row[t] - smoothing * (w * row).sum() / classes
        wsum += w[t]
    if reduction == "none":
        return loss
    return loss.sum() / wsum if reduction == "mean" else loss.sum()


@given(data=st.data(), reduction=st.sampled_from(["mean", "sum", "none"]),
       weighted=st.booleans(), smoothing=st.sampled_from([0.0, 0.2]))
@fast(30)
def test_cross_entropy_and_nll_match_numpy(data, reduction, weighted, smoothing):
    classes = data.draw(st.integers(1, 4))
    shape = data.draw(st.sampled_from([(classes,), (3, classes), (2, classes, 3),
                                       (2, classes, 2, 2)]))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    tshape = shape[:1] + shape[2:] if len(shape) >= 2 else ()
    target = rng.integers(0, classes, tshape)
    ignore = data.draw(st.sampled_from([-100, 0]))
    if target.ndim and data.draw(st.booleans()):
        target.flat[0] = ignore  # -100 is PyTorch's default ignore_index
    weight = rng.uniform(0.5, 2, classes).astype(np.float32) if weighted else None
    wt = None if weight is None else Tensor(weight)
    logp = log_softmax(x, 1 if x.ndim >= 2 else 0)
    if (target == ignore).all() and reduction == "mean":
        return  # 0 / 0: NaN, checked in test_all_ignored_is_nan
    expected = np.asarray(nll_ref(logp, target, weight, ignore, reduction, smoothing), np.float32)
    got = F.cross_entropy(Tensor(x), Tensor(target), wt, ignore_index=ignore,
                          reduction=reduction, label_smoothing=smoothing)
    assert_tensor(got, expected, rtol=1e-5, atol=1e-6)
    if smoothing == 0:
        got = F.nll_loss(Tensor(logp.astype(np.float32)), Tensor(target), wt,
                         ignore_index=ignore, reduction=reduction)
        assert_tensor(got, expected, rtol=1e-5, atol=1e-6)


def test_all_ignored_is_nan_and_legacy_flags():
    x, t = Tensor(np.zeros((2, 3), np.float32)), Tensor(np.array([-100, -100]))
    assert math.isnan(F.nll_loss(x, t).item())
    assert F.nll_loss(x, t, reduction="sum").item() == 0
    logp = log_softmax(np.arange(6.0).reshape(2, 3), 1).astype(np.float32)
    target = np.array([2, 0])
    total = -(logp[0, 2] + logp[1, 0])
    assert F.nll_loss(Tensor(logp), Tensor(target), size_average=False).item() == \
        pytest.approx(total)
    assert F.nll_loss(Tensor(logp), Tensor(target), reduce=False).shape == (2,)


def test_cross_entropy_probability_targets_with_weight():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    p = rng.dirichlet(np.ones(3), 4).astype(np.float32)
    w = np.array([0.5, 1.0, 2.0], np.float32)
    expected = -(w * p * log_softmax(x, 1)).sum(1).mean()
    assert_tensor(F.cross_entropy(Tensor(x), Tensor(p), Tensor(w)), np.float32(expected),
                  rtol=1e-5)


def test_loss_gradients():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 2))
    target = np.array([[0, 3], [-100, 1], [2, 2]])
    w = np.array([0.5, 1.0, 2.0, 1.5])
    check_grad(lambda a: a.cross_entropy(Tensor(target), weight=Tensor(w),
                                         label_smoothing=0.1), x)
    check_grad(lambda a: a.nll_loss(Tensor(target), weight=Tensor(w), reduction="sum"), x)
    check_grad(lambda a, b: a.l1_loss(b), rng.standard_normal((3, 4)) + 5,
               rng.standard_normal((3, 4)))


def test_loss_bad_input():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="target shape"):
        x.nll_loss(Tensor(np.zeros(3, np.int64)))
    with pytest.raises(TypeError, match="must be integers"):
        x.nll_loss(Tensor(np.zeros(2, np.float32)))
    with pytest.raises(ValueError, match="weight of shape"):
        x.cross_entropy(Tensor(np.zeros(2, np.int64)), weight=Tensor(np.ones(2, np.float32)))
    with pytest.raises(IndexError, match="out of range"):
        x.nll_loss(Tensor(np.array([0, 5]))).numpy()
    with pytest.raises(ValueError, match="reduction"):
        x.cross_entropy(Tensor(np.zeros(2, np.int64)), reduction="avg")


def test_l1_loss():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4))
    b = b.astype(np.float32)
    assert_tensor(F.l1_loss(Tensor(a), Tensor(b)), np.abs(a - b).mean(), rtol=1e-6)
    assert_tensor(F.l1_loss(Tensor(a), Tensor(b), reduction="none"), np.abs(a - b))


# ---- norms and statistics ----
@given(p=st.sampled_from(["fro", 1, 2, 3, 0.5, math.inf, -math.inf, 0]),
       dim=st.sampled_from([None, 0, 1, (0, 2), -1]), keepdim=st.booleans())
@fast(30)
def test_norm_matches_numpy(p, dim, keepdim):
    x = np.random.default_rng(4).standard_normal((3, 2, 4)).astype(np.float32)
    x[0, 0, 0] = 0.0
    a, q = np.abs(x.astype(np.float64)), 2 if p == "fro" else p
    if q == math.inf:
        expected = a.max(axis=dim, keepdims=keepdim)
    elif q == -math.inf:
        expected = a.min(axis=dim, keepdims=keepdim)
    elif q == 0:
        expected = (a != 0).sum(axis=dim, keepdims=keepdim)
    else:
        expected = (a ** q).sum(axis=dim, keepdims=keepdim) ** (1 / q)
    assert_tensor(Tensor(x).norm(p, dim, keepdim), np.asarray(expected, np.float32),
                  rtol=1e-5, atol=1e-6)


def test_norm_gradients_and_errors():
    x = np.random.default_rng(5).standard_normal((3, 4))
    for p in ("fro", 1, 3):
        check_grad(lambda t: t.norm(p, dim=1), x)
    zero = Tensor(np.zeros(3), requires_grad=True)
    zero.norm().backward()
    np.testing.assert_array_equal(zero.grad.numpy(), 0)  # PyTorch's subgradient at 0
    with pytest.raises(ValueError, match="nuc"):
        Tensor(x).norm("nuc")
    with pytest.raises(TypeError, match="floating point"):
        Tensor(np.arange(3)).norm()


@pytest.mark.parametrize("dim,keepdim,correction", [(None, False, 1), (1, True, 0),
                                                     ((0, 2), False, 1), (-1, False, 2)])
def test_std_mean_and_var_mean(dim, keepdim, correction):
    x = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)
    var, mean = Tensor(x).var_mean(dim, keepdim=keepdim, correction=correction)
    std, mean2 = Tensor(x).std_mean(dim=dim, keepdim=keepdim, correction=correction)
    x64 = x.astype(np.float64)
    ev = x64.var(axis=dim, ddof=correction, keepdims=keepdim).astype(np.float32)
    em = x64.mean(axis=dim, keepdims=keepdim).astype(np.float32)
    assert_tensor(var, ev, rtol=1e-5, atol=1e-6)
    assert_tensor(std, np.sqrt(ev), rtol=1e-5, atol=1e-6)
    assert_tensor(mean, em, rtol=1e-5, atol=1e-6)
    assert_tensor(mean2, em, rtol=1e-5, atol=1e-6)


# ---- the functional forms of the existing ops ----
def test_functional_forms():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    assert_tensor(F.relu(Tensor(x)), np.maximum(x, 0))
    assert_tensor(F.softmax(Tensor(x), 1), np.exp(log_softmax(x, 1)).astype(np.float32),
                  rtol=1e-5, atol=1e-6)
    assert_tensor(F.log_softmax(Tensor(x), dim=-1), log_softmax(x, -1).astype(np.float32),
                  rtol=1e-5, atol=1e-5)
    same = F.conv2d(Tensor(x), Tensor(w), padding="same")
    assert same.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(same.numpy(), Tensor(x).conv2d(Tensor(w), padding=1).numpy())
    lw = rng.standard_normal((4, 5)).astype(np.float32)
    assert_tensor(F.linear(Tensor(x), Tensor(lw)), x @ lw.T, rtol=1e-5, atol=1e-5)
    labels = np.array([0, 2, 1])
    assert_tensor(F.one_hot(Tensor(labels)), np.eye(3, dtype=np.int64)[labels])
    assert_tensor(F.one_hot(Tensor(labels), 4), np.eye(4, dtype=np.int64)[labels])
    assert F.dropout(Tensor(x), 0.5, training=False) is not None
    np.testing.assert_array_equal(F.dropout(Tensor(x), 0.5, training=False).numpy(), x)
    dropped = F.dropout(Tensor(x), 0.5).numpy()  # training=True by default, as PyTorch
    assert 0 < (dropped == 0).mean() < 1
    np.testing.assert_allclose(dropped[dropped != 0], 2 * x[dropped != 0], rtol=1e-6)
    g, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_tensor(F.layer_norm(Tensor(x), 5, Tensor(g), Tensor(b)),
                  ((x - mu) / np.sqrt(var + 1e-5) * g + b).astype(np.float32),
                  rtol=1e-4, atol=1e-5)


def test_functional_bce_weights():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = (rng.random((3, 4)) > 0.5).astype(np.float32)
    w = rng.uniform(0.5, 2, 4).astype(np.float32)
    pw = rng.uniform(0.5, 3, 4).astype(np.float32)
    sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    expected = -(w * (pw * t * np.log(sig) + (1 - t) * np.log(1 - sig))).mean()
    got = F.binary_cross_entropy_with_logits(Tensor(x), Tensor(t), Tensor(w),
                                             pos_weight=Tensor(pw))
    assert_tensor(got, np.float32(expected), rtol=1e-5)
    expected = -(w * (t * np.log(sig) + (1 - t) * np.log(1 - sig))).sum()
    got = F.binary_cross_entropy(Tensor(sig.astype(np.float32)), Tensor(t), Tensor(w),
                                 reduction="sum")
    assert_tensor(got, np.float32(expected), rtol=1e-5)


@pytest.mark.skipif("approximate" not in Tensor.gelu.__code__.co_varnames,
                    reason="Tensor.gelu(approximate=) arrives with the elementwise branch")
def test_functional_gelu():
    x = np.linspace(-4, 4, 17).astype(np.float32)
    exact = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    assert_tensor(F.gelu(Tensor(x)), exact.astype(np.float32), rtol=1e-5, atol=1e-6)
    assert_tensor(F.gelu(Tensor(x), approximate="tanh"), tanh.astype(np.float32),
                  rtol=1e-5, atol=1e-6)


def test_functional_dropout_edges_and_conv_same_stride():
    x = Tensor(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(F.dropout(x, 0.0).numpy(), x.numpy())
    with pytest.raises(ValueError, match=r"must be in \[0, 1\], got 1.5"):
        F.dropout(x, 1.5)
    w = Tensor(np.zeros((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match="'same' needs stride 1"):
        F.conv2d(Tensor(np.zeros((1, 1, 5, 5), np.float32)), w, stride=2, padding="same")


def test_bce_clamps_each_log_at_minus_100_as_pytorch():
    """Probabilities of exactly 0 and 1 give PyTorch's documented loss (each log clamped
    to >= -100), not a clamp of the probability; the gradient stays finite."""
    x = np.array([0.0, 1.0, 1e-30, 0.5, 1.0, 0.0], np.float32)
    t = np.array([1.0, 0.3, 1.0, 0.5, 1.0, 0.0], np.float32)
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    with np.errstate(divide="ignore"):
        want = -(t64 * np.maximum(np.log(x64), -100) + (1 - t64) * np.maximum(np.log1p(-x64), -100))
    leaf = Tensor(x, requires_grad=True)
    loss = leaf.binary_crossentropy(Tensor(t), "none")
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
    loss.sum().backward()
    assert np.isfinite(leaf.grad.numpy()).all()
    np.testing.assert_allclose(leaf.grad.numpy()[3], (0.5 - 0.5) / 0.25, atol=1e-6)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
@pytest.mark.parametrize("pos_weight", [None, 2.0])
def test_bce_logits_keeps_tiny_losses_relatively_exact(dtype, pos_weight):
    """A confident right answer's loss is log1p(e^-|x|), tiny: log(1 + e^-|x|) made it 0."""
    x = np.array([-80.0, -40.0, -20.0, -5.0, 0.0, 3.0, 20.0, 40.0, 80.0])
    t = (x > 0).astype(np.float64)
    pw = 1.0 if pos_weight is None else pos_weight
    def softplus(z):
        return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))
    want = pw * t * softplus(-x) + (1 - t) * softplus(x)  # no term cancels another
    np_dtype = np.float32 if dtype is dtypes.float32 else np.float64
    weight = None if pos_weight is None else Tensor(np.array([pos_weight], np_dtype))
    got = Tensor(x.astype(np_dtype)).binary_crossentropy_logits(
        Tensor(t.astype(np_dtype)), "none", pos_weight=weight).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype is dtypes.float32 else 1e-12)
