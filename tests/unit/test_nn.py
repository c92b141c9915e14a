"""nn layers against numpy references: PyTorch's default initialisation, forward values,
BatchNorm's train/eval behaviour and running statistics, losses, and a small training run."""
import math
import re

import numpy as np
import pytest

from lazyten import Tensor, nn
from lazyten.nn.state import get_parameters
from lazyten.optim import Adam


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def training(monkeypatch):
    monkeypatch.setattr(Tensor, "training", True)


# ---- numpy references ----
def np_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    s, p, d = stride, padding, dilation
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = (h + 2 * p - d * (kh - 1) - 1) // s + 1, (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
            out += np.einsum("ngchw,goc->ngohw", patch.reshape(n, groups, cg, oh, ow),
                             wg[..., i, j])
    out = out.reshape(n, o, oh, ow)
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def np_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1):
    """Scatter-add definition: each input pixel adds a weighted kernel to the output."""
    s, p, op = stride, padding, output_padding
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    full = np.zeros((n, groups * og, (h - 1) * s + kh + op, (wd - 1) * s + kw + op))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", x[:, g * cg:(g + 1) * cg],
                                    w[g * cg:(g + 1) * cg, :, i, j])
                full[:, g * og:(g + 1) * og, i:i + s * (h - 1) + 1:s, j:j + s * (wd - 1) + 1:s] \
                    += contrib
    out = full[:, :, p:full.shape[2] - p, p:full.shape[3] - p]
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


# ---- initialisation ----
def check_uniform(t, bound):
    a = t.numpy()
    assert np.abs(a).max() <= bound + 1e-7
    if a.size >= 1000:  # a uniform(-b, b) sample has std b/sqrt(3)
        assert abs(a.std() - bound / math.sqrt(3)) < 0.1 * bound
        assert abs(a.mean()) < 0.1 * bound


def test_default_initialisation_matches_pytorch():
    lin = nn.Linear(64, 32)
    check_uniform(lin.weight, 1 / math.sqrt(64))
    check_uniform(lin.bias, 1 / math.sqrt(64))
    conv = nn.Conv2d(8, 16, 3, groups=2)
    assert conv.weight.shape == (16, 4, 3, 3)
    check_uniform(conv.weight, 1 / math.sqrt(4 * 9))
    check_uniform(conv.bias, 1 / math.sqrt(4 * 9))
    convt = nn.ConvTranspose2d(8, 12, (2, 3), groups=2)
    assert convt.weight.shape == (8, 6, 2, 3) and convt.bias.shape == (12,)
    check_uniform(convt.weight, 1 / math.sqrt(6 * 6))  # PyTorch uses dim 1 as fan_in here
    emb = nn.Embedding(100, 40).weight.numpy()
    assert abs(emb.std() - 1) < 0.06 and abs(emb.mean()) < 0.08
    for norm in (nn.BatchNorm2d(5), nn.LayerNorm(5), nn.GroupNorm(5, 5)):
        np.testing.assert_array_equal(norm.weight.numpy(), np.ones(5))
        np.testing.assert_array_equal(norm.bias.numpy(), np.zeros(5))
    bn = nn.BatchNorm2d(5)
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(5))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(5))
    assert nn.Linear(3, 2, bias=False).bias is None


def test_parameters_are_trainable_buffers():
    layers = [nn.Linear(3, 2), nn.Conv2d(2, 2, 3), nn.ConvTranspose2d(2, 2, 3),
              nn.BatchNorm2d(2), nn.LayerNorm(3), nn.GroupNorm(1, 2), nn.Embedding(4, 3)]
    for layer in layers:
        for name, t in vars(layer).items():
            if isinstance(t, Tensor):
                assert t.lazydata._base is None and t.lazydata.realized is not None, name
                assert t.requires_grad is (not name.startswith(("running", "num_batches")))


# ---- forward values ----
def test_linear_forward():
    lin = nn.Linear(5, 3)
    x = rnd(4, 5)
    expected = x @ lin.weight.numpy().T + lin.bias.numpy()
    np.testing.assert_allclose(lin(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin(Tensor(rnd(2, 4, 5))).numpy().shape, (2, 4, 3))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, groups=2),
                                dict(padding="same")])
def test_conv2d_forward(kw):
    conv = nn.Conv2d(4, 6, 3, **kw)
    x = rnd(2, 4, 7, 7)
    ref_kw = {k: v for k, v in kw.items() if k != "padding"}
    if kw.get("padding") == "same":
        ref_kw["padding"] = 1
    elif "padding" in kw:
        ref_kw["padding"] = kw["padding"]
    expected = np_conv2d(x, conv.weight.numpy(), conv.bias.numpy(), **ref_kw)
    out = conv(Tensor(x)).numpy()
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(groups=2, stride=2)])
def test_conv_transpose2d_forward(kw):
    conv = nn.ConvTranspose2d(4, 6, 3, **kw)
    x = rnd(2, 4, 4, 5)
    expected = np_conv_transpose2d(x, conv.weight.numpy(), conv.bias.numpy(), **kw)
    out = conv(Tensor(x)).numpy()
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def np_batchnorm(x, axes, eps=1e-5):
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_batchnorm_cumulative_average_without_momentum(training, dtype):
    # momentum=None: PyTorch's cumulative moving average, each batch weighted 1 / batches seen
    bn = nn.BatchNorm1d(4, momentum=None)
    run_mean, run_var = np.zeros(4), np.ones(4)
    for n in range(1, 5):
        x = (rnd(6 + n, 4, seed=n) * n + n).astype(dtype)
        bn(Tensor(x))
        x64 = x.astype(np.float64)
        run_mean += (x64.mean(0) - run_mean) / n
        run_var += (x64.var(0, ddof=1) - run_var) / n
        tol = 2e-3 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(bn.running_mean.numpy(), run_mean, rtol=tol, atol=tol)
        np.testing.assert_allclose(bn.running_var.numpy(), run_var, rtol=tol, atol=tol)
    assert bn.num_batches_tracked.item() == 4


def test_batchnorm2d_train_and_eval(training):
    bn = nn.BatchNorm2d(3, momentum=0.2)
    bn.weight.assign(Tensor(np.array([1.0, 2.0, 0.5], np.float32))).realize()
    bn.bias.assign(Tensor(np.array([0.0, -1.0, 3.0], np.float32))).realize()
    w, b = bn.weight.numpy().reshape(1, 3, 1, 1), bn.bias.numpy().reshape(1, 3, 1, 1)
    run_mean, run_var = np.zeros(3), np.ones(3)
    for seed in range(3):
        x = rnd(4, 3, 5, 5, seed=seed) * (seed + 1) + seed
        out = bn(Tensor(x)).numpy()
        np.testing.assert_allclose(out, np_batchnorm(x, (0, 2, 3)) * w + b, rtol=1e-4, atol=1e-4)
        run_mean = 0.8 * run_mean + 0.2 * x.mean((0, 2, 3))
        run_var = 0.8 * run_var + 0.2 * x.var((0, 2, 3), ddof=1)  # unbiased, as PyTorch
        if seed == 0:
            continue  # leave this update pending: the next forward must finish it first
        np.testing.assert_allclose(bn.running_mean.numpy(), run_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), run_var, rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.item() == 3
    storage = bn.running_mean.lazydata.base.realized
    Tensor.training = False
    x = rnd(2, 3, 4, 4, seed=9)
    expected = (x - run_mean.reshape(1, 3, 1, 1)) / np.sqrt(run_var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), expected * w + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), run_mean, rtol=1e-5, atol=1e-6)
    assert bn.running_mean.lazydata.base.realized is storage, "running stats were replaced"


def test_batchnorm_variants(training):
    x = rnd(6, 4)
    bn = nn.BatchNorm1d(4, affine=False, track_running_stats=False)
    assert bn.weight is None and bn.running_mean is None
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), np_batchnorm(x, (0,)), rtol=1e-4, atol=1e-4)
    Tensor.training = False  # no running stats: batch statistics in eval too
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), np_batchnorm(x, (0,)), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="4 features"):
        bn(Tensor(rnd(2, 3)))


def test_layernorm_and_groupnorm():
    x = rnd(2, 6, 3, 4)
    ln = nn.LayerNorm((3, 4))
    ln.weight.assign(Tensor(rnd(3, 4, seed=1))).realize()
    ln.bias.assign(Tensor(rnd(3, 4, seed=2))).realize()
    expected = np_batchnorm(x, (2, 3)) * ln.weight.numpy() + ln.bias.numpy()
    np.testing.assert_allclose(ln(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(nn.LayerNorm(4, elementwise_affine=False)(Tensor(x)).numpy(),
                               np_batchnorm(x, (3,)), rtol=1e-4, atol=1e-4)
    gn = nn.GroupNorm(3, 6)
    gn.weight.assign(Tensor(rnd(6, seed=3))).realize()
    grouped = np_batchnorm(x.reshape(2, 3, -1), (2,)).reshape(x.shape)
    expected = grouped * gn.weight.numpy().reshape(1, 6, 1, 1)
    np.testing.assert_allclose(gn(Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="groups"):
        nn.GroupNorm(4, 6)


def test_embedding_forward_and_gradient():
    emb = nn.Embedding(5, 3)
    idx = np.array([[0, 4, 4], [2, 1, 4]])
    out = emb(Tensor(idx))
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[idx])
    upstream = rnd(2, 3, 3, seed=1)
    (out * Tensor(upstream)).sum().backward()
    expected = np.zeros((5, 3), np.float32)
    np.add.at(expected, idx, upstream)
    np.testing.assert_allclose(emb.weight.grad.numpy(), expected, rtol=1e-6)
    with pytest.raises(TypeError, match="integers"):
        emb(Tensor(np.zeros(2, np.float32)))


def test_dropout(training):
    x = np.ones((64, 64), np.float32)
    out = nn.Dropout(0.25)(Tensor(x)).numpy()
    kept = out != 0
    assert abs(kept.mean() - 0.75) < 0.03
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    Tensor.training = False
    np.testing.assert_array_equal(nn.Dropout(0.25)(Tensor(x)).numpy(), x)
    with pytest.raises(ValueError):
        nn.Dropout(1.0)


def test_pooling_functions():
    x = rnd(2, 3, 6, 6)
    windows = x.reshape(2, 3, 3, 2, 3, 2)
    np.testing.assert_allclose(nn.max_pool2d(Tensor(x)).numpy(), windows.max((3, 5)))
    np.testing.assert_allclose(nn.avg_pool2d(Tensor(x)).numpy(), windows.mean((3, 5)), rtol=1e-6)
    out = nn.max_pool2d(Tensor(x), kernel_size=3, stride=2, padding=1).numpy()
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    expected = np.stack([np.stack([padded[..., 2 * i:2 * i + 3, 2 * j:2 * j + 3].max((-2, -1))
                                   for j in range(3)], -1) for i in range(3)], -2)
    np.testing.assert_allclose(out, expected)


# ---- losses ----
def test_cross_entropy_losses():
    logits, labels = rnd(5, 4), np.array([0, 3, 1, 1, 2])
    logp = np_log_softmax(logits.astype(np.float64))
    nll = -logp[np.arange(5), labels]
    for eps in (0.0, 0.1):
        expected = (1 - eps) * nll - eps * logp.mean(-1)
        got = nn.cross_entropy(Tensor(logits), Tensor(labels), label_smoothing=eps)
        np.testing.assert_allclose(got.numpy(), expected.mean(), rtol=1e-5)
        got = Tensor(logits).sparse_categorical_crossentropy(Tensor(labels), eps, "none")
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)
    probs = np.random.default_rng(1).dirichlet(np.ones(4), 5).astype(np.float32)
    smoothed = probs * 0.8 + 0.2 / 4
    got = Tensor(logits).cross_entropy(Tensor(probs), label_smoothing=0.2, reduction="sum")
    np.testing.assert_allclose(got.numpy(), -(smoothed * logp).sum(), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        Tensor(logits).cross_entropy(Tensor(labels), reduction="avg")


def test_binary_and_regression_losses():
    x, t = rnd(3, 4), (rnd(3, 4, seed=1) > 0).astype(np.float32)
    p = 1 / (1 + np.exp(-x.astype(np.float64)))
    bce = -(t * np.log(p) + (1 - t) * np.log(1 - p))
    np.testing.assert_allclose(nn.binary_cross_entropy(Tensor(p.astype(np.float32)), Tensor(t))
                               .numpy(), bce.mean(), rtol=1e-5)
    np.testing.assert_allclose(nn.binary_cross_entropy_with_logits(Tensor(x), Tensor(t))
                               .numpy(), bce.mean(), rtol=1e-5)
    big = Tensor(np.array([200.0, -200.0], np.float32))
    labels = Tensor(np.array([0.0, 1.0], np.float32))
    np.testing.assert_allclose(big.binary_crossentropy_logits(labels, reduction="none").numpy(),
                               [200, 200])
    np.testing.assert_allclose(nn.mse_loss(Tensor(x), Tensor(t), reduction="sum").numpy(),
                               ((x - t) ** 2).sum(), rtol=1e-5)


# ---- training ----
class TinyConvNet:
    def __init__(self):
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 3 * 3, 2)

    def __call__(self, x):
        x = nn.max_pool2d(self.bn(self.conv(x)).relu(), 2)
        return self.fc(x.flatten(1))


def test_small_convnet_learns(training):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 16)
    images = rng.standard_normal((16, 1, 6, 6)).astype(np.float32) * 0.3
    images[labels == 1, :, :3, :3] += 1.0  # class 1 has a bright top-left corner
    x, y = Tensor(images), Tensor(labels)
    model = TinyConvNet()
    opt = Adam(get_parameters(model), lr=0.03)
    losses = []
    for _ in range(12):
        opt.zero_grad()
        loss = model(x).cross_entropy(y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    Tensor.training = False
    accuracy = (model(x).argmax(-1).numpy() == labels).mean()
    assert accuracy >= 0.9


def test_batchnorm_training_on_one_value_per_channel_raises_as_pytorch():
    """(1, C) or (1, C, 1, 1) in training has no batch statistics: PyTorch raises; the
    normalised output was 0 silently. In eval mode the running statistics serve."""
    for bn, shape in [(nn.BatchNorm1d(3), (1, 3)), (nn.BatchNorm2d(3), (1, 3, 1, 1))]:
        bn.train()
        with pytest.raises(ValueError, match="more than 1 value per channel.*" + re.escape(str(shape))):
            bn(Tensor(np.ones(shape, np.float32)))
        bn.eval()
        np.testing.assert_allclose(bn(Tensor(np.ones(shape, np.float32))).numpy(),
                                   np.full(shape, 1 / np.sqrt(1 + 1e-5)), rtol=1e-6)
