"""Parameter-free layers (nn/stateless.py) against numpy: activations, softmax, flatten,
identity, pooling, losses; GELU's gradient against finite differences; bad settings."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor, nn
from gradcheck import check_grad, spaced
from helpers import fast, pool_ref

ERF = np.vectorize(math.erf)


def _x(shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


ACTIVATIONS = [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.GELU(), lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                        (x + 0.044715 * x ** 3)))),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Tanh(), np.tanh),
    (nn.Softmax(dim=1), lambda x: _softmax(x, 1)),
    (nn.Softmax(dim=-1), lambda x: _softmax(x, -1)),
    (nn.LogSoftmax(dim=0), lambda x: np.log(_softmax(x.astype(np.float64), 0))),
    (nn.Identity(54, unused=True), lambda x: x),
]


@pytest.mark.parametrize("layer,ref", ACTIVATIONS, ids=lambda v: repr(v) if
                         isinstance(v, nn.Module) else "")
def test_activation_modules_match_numpy(layer, ref):
    x = _x((3, 4, 5))
    x[0, 0, :3] = [0.0, -0.0, 1e-3]
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref(x.astype(np.float64)),
                               rtol=2e-5, atol=1e-6)


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       start=st.integers(-4, 3), end=st.integers(-4, 3))
@fast(12)
def test_flatten_matches_numpy_reshape(shape, start, end):
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    n = len(shape)
    s, e = start % n if -n <= start < n else None, end % n if -n <= end < n else None
    if s is None or e is None:
        with pytest.raises(IndexError):
            nn.Flatten(start, end)(Tensor(x))
        return
    if s > e:
        return  # PyTorch raises; the reshape rule below does not apply
    expected = x.reshape(shape[:s] + [-1] + shape[e + 1:])
    out = nn.Flatten(start, end)(Tensor(x))
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("kernel,stride,padding,dilation", [
    (2, None, 0, 1), (3, 1, 1, 1), ((2, 3), (1, 2), (1, 0), 1), (2, 2, 0, 2)])
def test_pool_modules_match_loops(kernel, stride, padding, dilation):
    x = _x((2, 3, 7, 8), seed=1)
    out = nn.MaxPool2d(kernel, stride, padding, dilation)(Tensor(x)).numpy()
    np.testing.assert_allclose(out, pool_ref(x, kernel, stride, padding, dilation, "max"),
                               rtol=1e-6)
    if dilation == 1:
        out = nn.AvgPool2d(kernel, stride, padding)(Tensor(x)).numpy()
        np.testing.assert_allclose(out, pool_ref(x, kernel, stride, padding, 1, "avg"),
                                   rtol=1e-5, atol=1e-6)


def test_loss_modules_match_numpy():
    rng = np.random.default_rng(2)
    logits, labels = _x((6, 5), seed=3), rng.integers(0, 5, 6)
    logp = np.log(_softmax(logits.astype(np.float64), 1))
    nll = -logp[np.arange(6), labels]
    for reduction, ref in (("mean", nll.mean()), ("sum", nll.sum()), ("none", nll)):
        out = nn.CrossEntropyLoss(reduction=reduction)(Tensor(logits), Tensor(labels))
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)
    smooth = 0.9 * nll - 0.1 * logp.mean(1)
    out = nn.CrossEntropyLoss(label_smoothing=0.1)(Tensor(logits), Tensor(labels))
    np.testing.assert_allclose(out.numpy(), smooth.mean(), rtol=1e-5)
    probs = _softmax(_x((6, 5), seed=4).astype(np.float64), 1)
    out = nn.CrossEntropyLoss()(Tensor(logits), Tensor(probs.astype(np.float32)))
    np.testing.assert_allclose(out.numpy(), -(probs * logp).sum(1).mean(), rtol=1e-5)

    pred, target = _x((4, 3), seed=5), _x((4, 3), seed=6)
    diff = (pred.astype(np.float64) - target) ** 2
    for reduction, ref in (("mean", diff.mean()), ("sum", diff.sum()), ("none", diff)):
        out = nn.MSELoss(reduction)(Tensor(pred), Tensor(target))
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5)


def test_gelu_gradient_against_finite_differences():
    (x,) = spaced(np.random.default_rng(7), (4, 5), amp=6.0)
    check_grad(lambda t: nn.GELU()(t), x)
    check_grad(lambda t: nn.GELU("tanh")(t), x)


def test_bad_settings_fail_at_construction():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'fast'"):
        nn.GELU("fast")
    with pytest.raises(ValueError, match="reduction must be .* got 'avg'"):
        nn.MSELoss("avg")
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        nn.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(ValueError, match="padding 2 must be between 0 and half"):
        nn.MaxPool2d(3, padding=2)
    with pytest.raises(TypeError):
        nn.Softmax()  # dim is required


def test_reprs():
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1)"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.ReLU()) == "ReLU()"


def test_pool_modules_pass_pytorch_options_on():
    x = Tensor(np.random.default_rng(9).standard_normal((1, 2, 5, 7)).astype(np.float32))
    got = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)(x)
    np.testing.assert_array_equal(got.numpy(), x.avg_pool2d(3, 2, padding=1, ceil_mode=True,
                                                            count_include_pad=False).numpy())
    assert got.shape == (1, 2, 3, 4)
    got = nn.MaxPool2d(2, ceil_mode=True)(x)
    np.testing.assert_array_equal(got.numpy(), x.max_pool2d(2, ceil_mode=True).numpy())
    assert got.shape == (1, 2, 3, 4)
