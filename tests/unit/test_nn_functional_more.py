"""torch.nn.functional names added for PyTorch models (nn/functional_act.py,
functional_layers.py, functional_losses.py) against float64 numpy references written from
PyTorch's documented formulas, gradients against finite differences (tests/gradcheck.py).
"""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten.nn.functional as F
from gradcheck import check_grad, spaced
from lazyten import Tensor

erf = np.vectorize(math.erf)


def softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def elu_ref(x, a=1.0):
    return np.where(x > 0, x, a * np.expm1(x))


SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805
ACTIVATIONS = {  # name: (kwargs, numpy reference)
    "relu6": ({}, lambda x: np.clip(x, 0, 6)),
    "elu": ({"alpha": 0.7}, lambda x: elu_ref(x, 0.7)),
    "selu": ({}, lambda x: SELU_S * elu_ref(x, SELU_A)),
    "celu": ({"alpha": 1.3}, lambda x: np.maximum(x, 0) + np.minimum(0, 1.3 * np.expm1(x / 1.3))),
    "leaky_relu": ({"negative_slope": 0.2}, lambda x: np.where(x >= 0, x, 0.2 * x)),
    "silu": ({}, lambda x: x / (1 + np.exp(-x))),
    "mish": ({}, lambda x: x * np.tanh(softplus_ref(x))),
    "softplus": ({"beta": 2.0, "threshold": 5.0}, lambda x: softplus_ref(x, 2.0, 5.0)),
    "softsign": ({}, lambda x: x / (1 + np.abs(x))),
    "sigmoid": ({}, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": ({}, np.tanh),
    "hardtanh": ({"min_val": -0.5, "max_val": 2.0}, lambda x: np.clip(x, -0.5, 2.0)),
    "hardswish": ({}, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": ({}, lambda x: np.clip(x + 3, 0, 6) / 6),
    "logsigmoid": ({}, lambda x: -np.logaddexp(0, -x)),
    "tanhshrink": ({}, lambda x: x - np.tanh(x)),
    "threshold": ({"threshold": 0.3, "value": -2.0}, lambda x: np.where(x > 0.3, x, -2.0)),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       scale=st.sampled_from([0.5, 4.0, 30.0]), seed=st.integers(0, 2 ** 16))
def test_activation_values(name, shape, scale, seed):
    kwargs, ref = ACTIVATIONS[name]
    x = np.random.default_rng(seed).standard_normal(shape) * scale
    out = getattr(F, name)(Tensor(x), **kwargs)
    np.testing.assert_allclose(out.numpy(), ref(x), rtol=1e-7, atol=1e-10,
                               err_msg=f"F.{name}{kwargs} vs numpy")


@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS) - {"threshold", "relu6", "hardtanh"}))
def test_activation_gradients(name):
    kwargs, _ = ACTIVATIONS[name]
    x, = spaced(np.random.default_rng(1), (3, 4), amp=6)
    check_grad(lambda t: getattr(F, name)(t, **kwargs), x)


def test_softplus_threshold_passes_x_through():
    x = np.array([10.0, 30.0, -40.0, 0.0])
    np.testing.assert_allclose(F.softplus(Tensor(x)).numpy(), softplus_ref(x), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_allclose(F.softplus(Tensor(x), beta=0.5, threshold=4).numpy(),
                               softplus_ref(x, 0.5, 4), rtol=1e-12, atol=1e-15)
    assert F.softplus(Tensor(x)).numpy()[1] == 30.0, "above the threshold x passes through"


def test_softmin_glu_prelu_normalize():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 3))
    e = np.exp(-x - (-x).max(1, keepdims=True))
    np.testing.assert_allclose(F.softmin(Tensor(x), 1).numpy(), e / e.sum(1, keepdims=True),
                               rtol=1e-12)
    np.testing.assert_allclose(F.glu(Tensor(x), 1).numpy(),
                               x[:, :3] / (1 + np.exp(-x[:, 3:])), rtol=1e-12)
    with pytest.raises(ValueError, match="odd"):
        F.glu(Tensor(x), -1)
    w = rng.standard_normal(6)
    np.testing.assert_allclose(F.prelu(Tensor(x), Tensor(w)).numpy(),
                               np.where(x >= 0, x, w[None, :, None] * x), rtol=1e-12)
    np.testing.assert_allclose(F.prelu(Tensor(x), Tensor(w[:1])).numpy(),
                               np.where(x >= 0, x, w[0] * x), rtol=1e-12)
    norm = np.maximum(np.sqrt((x ** 2).sum(1, keepdims=True)), 1e-12)
    np.testing.assert_allclose(F.normalize(Tensor(x)).numpy(), x / norm, rtol=1e-12)
    check_grad(lambda t, v: F.prelu(t, v), *spaced(rng, (2, 6, 3), (6,)))
    check_grad(lambda t: F.glu(t, 1), x)
    check_grad(lambda t: F.normalize(t, p=3.0, dim=-1), x)


def test_distances():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((1, 5))  # b broadcasts
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(F.cosine_similarity(Tensor(a), Tensor(b)).numpy(),
                               (a * b).sum(1) / (na * nb), rtol=1e-12)
    zero = np.zeros((1, 5))  # the eps clamp keeps a zero vector finite
    assert np.all(F.cosine_similarity(Tensor(a), Tensor(zero)).numpy() == 0)
    d = np.abs(a - b + 1e-6)
    np.testing.assert_allclose(F.pairwise_distance(Tensor(a), Tensor(b), p=3).numpy(),
                               (d ** 3).sum(-1) ** (1 / 3), rtol=1e-12)
    check_grad(lambda s, t: F.cosine_similarity(s, t, dim=1), a, b)
    check_grad(lambda s, t: F.pairwise_distance(s, t), a, b)


def adaptive_ref(x, out, reduce):
    """PyTorch's windows [floor(i * n / o), ceil((i + 1) * n / o)) over the last len(out)."""
    for axis, o in zip(range(-len(out), 0), out):
        n = x.shape[axis]
        parts = [reduce(np.take(x, range(i * n // o, -(-(i + 1) * n // o)), axis), axis)
                 for i in range(o)]
        x = np.stack(parts, axis)
    return x


@given(h=st.integers(1, 9), w=st.integers(1, 9), oh=st.integers(1, 6), ow=st.integers(1, 6),
       seed=st.integers(0, 100))
def test_adaptive_pool2d(h, w, oh, ow, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, h, w))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(Tensor(x), (oh, ow)).numpy(),
                               adaptive_ref(x, (oh, ow), np.mean), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(F.adaptive_max_pool2d(Tensor(x), (oh, ow)).numpy(),
                               adaptive_ref(x, (oh, ow), np.max), rtol=0)


def test_adaptive_pool_1d_none_unbatched_and_gradients():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 11))  # unbatched (C, L)
    np.testing.assert_allclose(F.adaptive_avg_pool1d(Tensor(x), 4).numpy(),
                               adaptive_ref(x, (4,), np.mean), rtol=1e-12)
    np.testing.assert_allclose(F.adaptive_max_pool1d(Tensor(x), 3).numpy(),
                               adaptive_ref(x, (3,), np.max), rtol=0)
    x4 = rng.standard_normal((1, 2, 5, 7))
    assert F.adaptive_avg_pool2d(Tensor(x4), (None, 3)).shape == (1, 2, 5, 3)
    x4, = spaced(rng, (1, 2, 5, 7))
    check_grad(lambda t: F.adaptive_avg_pool2d(t, (3, 4)), x4)
    check_grad(lambda t: F.adaptive_max_pool2d(t, (3, 4)), x4)
    check_grad(lambda t: F.adaptive_avg_pool2d(t, 1), x4)
    with pytest.raises(NotImplementedError):
        F.adaptive_max_pool2d(Tensor(x4), 2, return_indices=True)


def unfold_ref(x, k, dilation, padding, stride):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (k[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (k[1] - 1) - 1) // stride[1] + 1
    out = np.zeros((n, c, k[0], k[1], oh, ow))
    for i in range(k[0]):
        for j in range(k[1]):
            for y in range(oh):
                for z in range(ow):
                    out[:, :, i, j, y, z] = xp[:, :, y * stride[0] + i * dilation[0],
                                               z * stride[1] + j * dilation[1]]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


@pytest.mark.parametrize("k,d,p,s", [((2, 3), (1, 1), (1, 0), (2, 1)), ((2, 2), (2, 1), (0, 1),
                                                                        (1, 2)), ((1, 1), (1, 1),
                                                                                  (0, 0), (1, 1))])
def test_unfold(k, d, p, s):
    x = np.random.default_rng(5).standard_normal((2, 3, 6, 5))
    out = F.unfold(Tensor(x), k, dilation=d, padding=p, stride=s)
    np.testing.assert_array_equal(out.numpy(), unfold_ref(x, k, d, p, s))
    assert F.unfold(Tensor(x[0]), k, d, p, s).shape == out.shape[1:]


def test_pixel_shuffle_round_trip():
    x = np.random.default_rng(6).standard_normal((2, 12, 3, 4))
    r = 2
    ref = np.zeros((2, 3, 6, 8))
    for c in range(3):
        for i in range(r):
            for j in range(r):
                ref[:, c, i::r, j::r] = x[:, c * r * r + i * r + j]
    out = F.pixel_shuffle(Tensor(x), r)
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(F.pixel_unshuffle(out, r).numpy(), x)
    with pytest.raises(ValueError):
        F.pixel_shuffle(Tensor(x), 3)


def test_norms():
    rng = np.random.default_rng(7)
    x, w, b = rng.standard_normal((2, 4, 3, 5)), rng.standard_normal(4), rng.standard_normal(4)
    mean, var = x.mean((2, 3), keepdims=True), x.var((2, 3), keepdims=True)
    ref = (x - mean) / np.sqrt(var + 1e-5) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(F.instance_norm(Tensor(x), weight=Tensor(w), bias=Tensor(b))
                               .numpy(), ref, rtol=1e-9, atol=1e-12)
    g = x.reshape(2, 2, -1)
    gref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    gref = gref.reshape(x.shape) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(F.group_norm(Tensor(x), 2, Tensor(w), Tensor(b)).numpy(), gref,
                               rtol=1e-9, atol=1e-12)
    rw = rng.standard_normal((3, 5))
    rref = x / np.sqrt((x ** 2).mean((2, 3), keepdims=True) + 2.0 ** -52) * rw
    np.testing.assert_allclose(F.rms_norm(Tensor(x), (3, 5), Tensor(rw)).numpy(), rref,
                               rtol=1e-12)
    x32 = x.astype(np.float32)  # eps=None: float32's machine epsilon
    small = (x32 * 1e-4).astype(np.float32)
    ref32 = small / np.sqrt((small.astype(np.float64) ** 2).mean(-1, keepdims=True) + 2.0 ** -23)
    np.testing.assert_allclose(F.rms_norm(Tensor(small), 5).numpy(), ref32, rtol=1e-5)
    check_grad(lambda t, s, c: F.instance_norm(t, weight=s, bias=c), x, w, b)
    check_grad(lambda t, s: F.rms_norm(t, (3, 5), s, eps=1e-6), x, rw)
    check_grad(lambda t, s, c: F.group_norm(t, 2, s, c), x, w, b)


def test_batch_norm_train_updates_running_stats_and_eval_uses_them():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 3, 5))
    rm, rv = Tensor(np.zeros(3)), Tensor(np.ones(3))
    out = F.batch_norm(Tensor(x), rm, rv, training=True, momentum=0.2)
    mean, var = x.mean((0, 2)), x.var((0, 2))
    np.testing.assert_allclose(out.numpy(), (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rm.numpy(), 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), 0.8 + 0.2 * x.var((0, 2), ddof=1), rtol=1e-12)
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    out = F.batch_norm(Tensor(x), rm, rv, Tensor(w), Tensor(b))
    ref = (x - rm.numpy()[:, None]) / np.sqrt(rv.numpy()[:, None] + 1e-5) * w[:, None] + b[:, None]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-9)
    check_grad(lambda t, s, c: F.batch_norm(t, None, None, s, c, training=True), x, w, b)
    with pytest.raises(ValueError, match="momentum=None"):
        F.batch_norm(Tensor(x), rm, rv, training=True, momentum=None)


def test_embedding_and_convs():
    rng = np.random.default_rng(9)
    w, idx = rng.standard_normal((6, 3)), np.array([[0, 5, 2], [2, 2, 1]])
    np.testing.assert_array_equal(F.embedding(Tensor(idx), Tensor(w)).numpy(), w[idx])
    wt = Tensor(w, requires_grad=True)
    F.embedding(Tensor(idx), wt, padding_idx=2).sum().backward()
    counts = np.bincount(idx.ravel(), minlength=6).astype(float)
    counts[2] = 0  # the padding row gets no gradient
    np.testing.assert_array_equal(wt.grad.numpy(), np.repeat(counts[:, None], 3, 1))
    x, k = rng.standard_normal((2, 4, 9)), rng.standard_normal((6, 2, 3))
    ref = np.zeros((2, 6, 9))
    xp = np.pad(x, ((0, 0), (0, 0), (2, 2)))  # 'same' with dilation 2: 2 each side
    for o in range(6):
        g = o // 3
        for t in range(3):
            ref[:, o] += np.einsum("nci,c->ni", xp[:, 2 * g:2 * g + 2, 2 * t:2 * t + 9], k[o, :, t])
    out = F.conv1d(Tensor(x), Tensor(k), padding="same", dilation=2, groups=2)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="stride 1"):
        F.conv1d(Tensor(x), Tensor(k), stride=2, padding="same", groups=2)
    x3 = rng.standard_normal((1, 2, 3, 4, 3))
    k3 = rng.standard_normal((1, 2, 2, 2, 2))
    out3 = F.conv3d(Tensor(x3), Tensor(k3))
    win = np.lib.stride_tricks.sliding_window_view(x3[0], (2, 2, 2), axis=(1, 2, 3))
    np.testing.assert_allclose(out3.numpy()[0, 0], np.einsum("cxyzijk,cijk->xyz", win, k3[0]),
                               rtol=1e-10)
    # transposed conv is the adjoint of conv: <conv(x), y> == <x, conv_transpose(y)>
    y = rng.standard_normal((2, 6, 4))
    fwd = F.conv1d(Tensor(x), Tensor(k), stride=2, groups=2).numpy()
    back = F.conv_transpose1d(Tensor(y), Tensor(k), stride=2, groups=2, output_padding=0)
    assert back.shape[2] == 9 - 0 and np.isclose((fwd * y).sum(), (x * back.numpy()).sum())


def test_pooling_1d():
    x = np.random.default_rng(10).standard_normal((2, 3, 9))
    out = F.max_pool1d(Tensor(x), 3, stride=2, padding=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)), constant_values=-np.inf)
    ref = np.stack([xp[..., 2 * i:2 * i + 3].max(-1) for i in range(5)], -1)
    np.testing.assert_array_equal(out.numpy(), ref)
    out = F.avg_pool1d(Tensor(x), 3, stride=2, padding=1, count_include_pad=False)
    xz = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    cnt = np.pad(np.ones(9), 1)
    ref = np.stack([xz[..., 2 * i:2 * i + 3].sum(-1) / cnt[2 * i:2 * i + 3].sum()
                    for i in range(5)], -1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)


def test_channel_dropout_zeroes_whole_channels():
    x = np.ones((8, 16, 3, 3))
    out = F.dropout2d(Tensor(x), 0.5).numpy()
    per_channel = out.reshape(8, 16, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1)), \
        "dropout2d must drop or keep (scaled by 2) each channel whole"
    assert 0 < (per_channel[..., 0] == 0).mean() < 1
    assert np.array_equal(F.dropout2d(Tensor(x), 0.5, training=False).numpy(), x)
    out = F.dropout1d(Tensor(np.ones((16, 5))), 0.5).numpy()  # unbatched (C, L)
    assert np.all((out == 0).all(-1) | (out == 2).all(-1))
