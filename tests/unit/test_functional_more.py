"""nn/functional_more.py, nn/more_layers2.py, nn/rnn_utils.py and nn/utils.py's vector
helpers against numpy references (float64), their gradients against finite differences
(tests/gradcheck.py), and the random ones by fixing lazyten's draw or by their statistics."""
from __future__ import annotations
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor, nn
import lazyten.nn.functional as F
from lazyten.nn.utils.rnn import pad_sequence
from tests.gradcheck import check_grad, spaced

SELU_SATURATION = 1.7580993408473766


# ---- nn.utils: parameters_to_vector / vector_to_parameters ----
def test_parameters_to_vector_values_and_gradient():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(4)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    vec = nn.utils.parameters_to_vector([ta, tb])
    np.testing.assert_array_equal(vec.numpy(), np.concatenate([a.ravel(), b]))
    (vec * Tensor(np.arange(10.0))).sum().backward()
    np.testing.assert_array_equal(ta.grad.numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(tb.grad.numpy(), np.arange(6.0, 10.0))


def test_vector_to_parameters_writes_in_place_without_gradient():
    layer = nn.Linear(3, 2)
    weight, bias = layer.weight, layer.bias
    values = np.arange(8.0, dtype=np.float32)
    vec = Tensor(values, requires_grad=True)
    nn.utils.vector_to_parameters(vec, layer.parameters())
    assert layer.weight is weight and layer.bias is bias, "the parameter objects are kept"
    np.testing.assert_array_equal(weight.numpy(), values[:6].reshape(2, 3))
    np.testing.assert_array_equal(bias.numpy(), values[6:])
    assert weight.requires_grad
    (weight * 2).sum().backward()
    assert vec.grad is None, "the write must not be recorded in the autograd graph"
    np.testing.assert_array_equal(weight.grad.numpy(), np.full((2, 3), 2.0))
    np.testing.assert_array_equal(nn.utils.parameters_to_vector(layer.parameters()).numpy(),
                                  values)


def test_vector_to_parameters_rejects_bad_vectors():
    p = Tensor(np.zeros(3), requires_grad=True)
    with pytest.raises(TypeError):
        nn.utils.vector_to_parameters(np.zeros(3), [p])
    with pytest.raises(ValueError):
        nn.utils.vector_to_parameters(Tensor(np.zeros(2)), [p])


# ---- nn.utils.rnn.pad_sequence ----
def _pad_reference(arrays, batch_first, value, side):
    longest = max(len(a) for a in arrays)
    out = np.full((len(arrays), longest) + arrays[0].shape[1:], value)
    for i, a in enumerate(arrays):
        if side == "right":
            out[i, :len(a)] = a
        else:
            out[i, longest - len(a):] = a
    return out if batch_first else out.swapaxes(0, 1)


@settings(max_examples=20, deadline=None)
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4),
       trailing=st.sampled_from([(), (2,), (1, 3)]), batch_first=st.booleans(),
       side=st.sampled_from(["right", "left"]), value=st.sampled_from([0.0, -1.5]))
def test_pad_sequence_matches_numpy(lengths, trailing, batch_first, side, value):
    rng = np.random.default_rng(len(lengths))
    arrays = [rng.standard_normal((n,) + trailing) for n in lengths]
    out = nn.utils.rnn.pad_sequence([Tensor(a) for a in arrays], batch_first=batch_first,
                                    padding_value=value, padding_side=side)
    want = _pad_reference(arrays, batch_first, value, side)
    assert out.shape == want.shape, f"pad_sequence shape: expected {want.shape}, got {out.shape}"
    np.testing.assert_array_equal(out.numpy(), want)


def test_pad_sequence_gradient_reaches_each_sequence():
    a, b = np.arange(6.0).reshape(3, 2), np.ones((1, 2))
    check_grad(lambda x, y: pad_sequence([x, y], padding_value=2.0, padding_side="left"), a, b)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    weight = np.arange(12.0).reshape(2, 3, 2)
    (pad_sequence([ta, tb], batch_first=True) * Tensor(weight)).sum().backward()
    np.testing.assert_array_equal(ta.grad.numpy(), weight[0])
    np.testing.assert_array_equal(tb.grad.numpy(), weight[1, :1])


def test_pad_sequence_rejects_bad_input():
    with pytest.raises(ValueError):
        pad_sequence([])
    with pytest.raises(ValueError):
        pad_sequence([Tensor(np.zeros(2))], padding_side="middle")
    with pytest.raises(ValueError):
        pad_sequence([Tensor(np.zeros((2, 3))), Tensor(np.zeros((2, 4)))])


# ---- gumbel_softmax ----
def test_gumbel_softmax_is_softmax_of_logits_plus_the_drawn_gumbel_noise():
    logits = np.random.default_rng(1).standard_normal((5, 4))
    Tensor.manual_seed(3)
    out = F.gumbel_softmax(Tensor(logits), tau=0.5, dim=0).numpy()
    # lazyten's generator (Tensor.manual_seed) draws float32 uniforms u; g = -log(-log(u))
    uniform = np.random.default_rng(3).random((5, 4)).astype(np.float32).astype(np.float64)
    z = (logits - np.log(-np.log(uniform))) / 0.5
    want = np.exp(z - z.max(0)) / np.exp(z - z.max(0)).sum(0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-12)


def test_gumbel_softmax_hard_is_one_hot_forward_and_soft_backward():
    logits = np.random.default_rng(2).standard_normal((3, 6))
    weight = Tensor(np.random.default_rng(4).standard_normal((3, 6)))
    grads, outs = [], []
    for hard in (False, True):
        Tensor.manual_seed(7)
        x = Tensor(logits, requires_grad=True)
        out = F.gumbel_softmax(x, tau=2.0, hard=hard)
        outs.append(out.numpy())
        (out * weight).sum().backward()
        grads.append(x.grad.numpy())
    soft, hard_out = outs
    np.testing.assert_array_equal(hard_out, np.eye(6)[soft.argmax(-1)])
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-14)
    assert np.abs(grads[0]).max() > 0, "the soft sample's gradient is not zero"


# ---- bilinear ----
def test_bilinear_matches_einsum_and_finite_differences():
    rng = np.random.default_rng(5)
    x1, x2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 5))
    weight, bias = rng.standard_normal((6, 4, 5)), rng.standard_normal(6)
    out = F.bilinear(Tensor(x1), Tensor(x2), Tensor(weight), Tensor(bias)).numpy()
    want = np.einsum("...i,oij,...j->...o", x1, weight, x2) + bias
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    check_grad(F.bilinear, x1, x2, weight, bias)
    check_grad(lambda a, b, w: F.bilinear(a, b, w), x1[0, 0], x2[0, 0], weight)
    with pytest.raises(ValueError):
        F.bilinear(Tensor(x1), Tensor(x1), Tensor(weight))


def test_bilinear_module_init_keys_and_forward():
    Tensor.manual_seed(0)
    layer = nn.Bilinear(20, 3, 7)
    assert list(layer.state_dict()) == ["weight", "bias"]
    assert layer.weight.shape == (7, 20, 3) and layer.bias.shape == (7,)
    bound = 1 / math.sqrt(20)  # torch: uniform in +-1/sqrt(in1_features)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound and abs(w.mean()) < 0.05
    assert np.abs(layer.bias.numpy()).max() <= bound
    assert nn.Bilinear(2, 3, 4, bias=False).bias is None
    rng = np.random.default_rng(0)
    x1, x2 = rng.standard_normal((5, 20)), rng.standard_normal((5, 3))
    want = np.einsum("ni,oij,nj->no", x1, w.astype(np.float64), x2) + layer.bias.numpy()
    np.testing.assert_allclose(layer(Tensor(x1), Tensor(x2)).numpy(), want, rtol=1e-5, atol=1e-5)


# ---- upsample ----
def test_upsample_warns_and_equals_interpolate():
    x = Tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 4)))
    with pytest.warns(UserWarning, match="deprecated"):
        out = F.upsample(x, scale_factor=2, mode="bilinear", align_corners=True)
    want = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    np.testing.assert_array_equal(out.numpy(), want.numpy())


# ---- local_response_norm ----
def _lrn_reference(x, size, alpha, beta, k):
    sq = np.pad(x * x, [(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    channels = x.shape[1]
    mean = sum(sq[:, i:i + channels] for i in range(size)) / size
    return x / (k + alpha * mean) ** beta


@settings(max_examples=15, deadline=None)
@given(size=st.integers(1, 6), channels=st.integers(1, 5),
       spatial=st.sampled_from([(3,), (2, 3), (2, 1, 2)]))
def test_local_response_norm_matches_numpy(size, channels, spatial):
    x = np.random.default_rng(size).standard_normal((2, channels) + spatial)
    out = F.local_response_norm(Tensor(x), size, alpha=0.3, beta=0.6, k=1.5).numpy()
    np.testing.assert_allclose(out, _lrn_reference(x, size, 0.3, 0.6, 1.5), rtol=1e-12)
    module = nn.LocalResponseNorm(size, alpha=0.3, beta=0.6, k=1.5)
    np.testing.assert_array_equal(module(Tensor(x)).numpy(), out)


def test_local_response_norm_gradient_and_rank():
    (x,) = spaced(np.random.default_rng(0), (2, 5, 3), amp=3.0)
    check_grad(lambda t: F.local_response_norm(t, 3, alpha=0.5, beta=0.75, k=1.0), x)
    check_grad(lambda t: F.local_response_norm(t, 2, alpha=0.2), x)
    with pytest.raises(ValueError):
        F.local_response_norm(Tensor(np.ones((2, 3))), 2)


# ---- rrelu ----
def test_rrelu_eval_uses_the_mean_slope():
    x = np.linspace(-3, 3, 13)
    out = F.rrelu(Tensor(x), lower=0.1, upper=0.3).numpy()
    np.testing.assert_allclose(out, np.where(x >= 0, x, 0.2 * x), rtol=1e-15)
    module = nn.RReLU(0.1, 0.3).eval()
    np.testing.assert_allclose(module(Tensor(x)).numpy(), out, rtol=1e-15)


def test_rrelu_training_draws_uniform_slopes_and_backpropagates_them():
    rng = np.random.default_rng(0)
    x = np.where(rng.random(20000) < 0.5, -1.0, 1.0) * rng.uniform(0.5, 2.0, 20000)
    for run in (lambda t: F.rrelu(t, 0.1, 0.3, training=True),
                lambda t: nn.RReLU(0.1, 0.3).train()(t)):
        t = Tensor(x, requires_grad=True)
        out = run(t)
        out.sum().backward()
        values, grad = out.numpy(), t.grad.numpy()
        np.testing.assert_array_equal(values[x > 0], x[x > 0])
        slopes = values[x < 0] / x[x < 0]
        assert 0.1 <= slopes.min() and slopes.max() < 0.3, "slopes outside [lower, upper)"
        # uniform on [0.1, 0.3): mean 0.2, std 0.2 / sqrt(12)
        assert abs(slopes.mean() - 0.2) < 0.003 and abs(slopes.std() - 0.2 / 12 ** 0.5) < 0.003
        np.testing.assert_allclose(grad[x < 0], slopes, rtol=1e-6)
        np.testing.assert_array_equal(grad[x > 0], 1.0)


# ---- alpha_dropout ----
def test_alpha_dropout_values_and_statistics():
    p = 0.3
    x = np.random.default_rng(0).standard_normal(100000)
    a = 1 / math.sqrt((SELU_SATURATION ** 2 * p + 1) * (1 - p))
    Tensor.manual_seed(0)
    for out in (F.alpha_dropout(Tensor(x), p, training=True).numpy(),
                nn.AlphaDropout(p).train()(Tensor(x)).numpy()):
        kept = np.isclose(out, a * x + SELU_SATURATION * a * p, rtol=0, atol=1e-12)
        dropped = np.isclose(out, SELU_SATURATION * a * (p - 1), rtol=0, atol=1e-12)
        assert (kept | dropped).all(), "each output is either kept (affine) or the dropped value"
        assert abs(dropped.mean() - p) < 0.01, f"drop rate {dropped.mean()}, expected {p}"
        assert abs(out.mean()) < 0.02 and abs(out.std() - 1) < 0.02, "mean 0 / std 1 is kept"
    np.testing.assert_array_equal(F.alpha_dropout(Tensor(x), p).numpy(), x)  # training=False
    np.testing.assert_array_equal(nn.AlphaDropout(p).eval()(Tensor(x)).numpy(), x)
    np.testing.assert_array_equal(F.alpha_dropout(Tensor(x), 1.0, True).numpy(), 0 * x)
    with pytest.raises(ValueError):
        F.alpha_dropout(Tensor(x), 1.5, True)


# ---- fold ----
def _fold_reference(cols, size, kernel, dilation, padding, stride):
    n, rows, _ = cols.shape
    counts = [(s + 2 * p - d * (k - 1) - 1) // st_ + 1
              for s, k, d, p, st_ in zip(size, kernel, dilation, padding, stride)]
    channels = rows // (kernel[0] * kernel[1])
    out = np.zeros((n, channels, size[0] + 2 * padding[0], size[1] + 2 * padding[1]))
    blocks = cols.reshape(n, channels, kernel[0], kernel[1], counts[0], counts[1])
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            for r in range(counts[0]):
                for c in range(counts[1]):
                    out[:, :, r * stride[0] + i * dilation[0], c * stride[1] + j * dilation[1]] \
                        += blocks[:, :, i, j, r, c]
    return out[:, :, padding[0]:padding[0] + size[0], padding[1]:padding[1] + size[1]]


CASES = [((5, 6), (2, 3), (1, 1), (0, 0), (1, 1)), ((7, 8), (3, 3), (2, 1), (1, 2), (2, 3)),
         ((4, 4), (2, 2), (1, 1), (0, 0), (2, 2)), ((6, 5), (3, 2), (1, 1), (1, 1), (1, 2))]


@pytest.mark.parametrize("size,kernel,dilation,padding,stride", CASES)
def test_fold_matches_numpy_and_inverts_unfold_up_to_overlaps(size, kernel, dilation, padding,
                                                              stride):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3) + size)
    args = dict(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    cols = F.unfold(Tensor(x), **args)
    out = F.fold(cols, size, **args).numpy()
    want = _fold_reference(cols.numpy(), size, kernel, dilation, padding, stride)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    overlaps = F.fold(F.unfold(Tensor(np.ones((1, 1) + size)), **args), size, **args).numpy()
    np.testing.assert_allclose(out, x * overlaps, rtol=1e-12, atol=1e-12)
    unbatched = F.fold(cols[0], size, **args).numpy()
    np.testing.assert_array_equal(unbatched, out[0])
    module = nn.Fold(size, kernel, dilation, padding, stride)
    np.testing.assert_array_equal(module(cols).numpy(), out)


def test_fold_gradient_and_bad_shapes():
    rng = np.random.default_rng(1)
    cols = rng.standard_normal((2, 2 * 6, 3 * 3))  # 3 x 3 windows
    check_grad(lambda t: F.fold(t, (4, 5), (2, 3), dilation=(1, 1), padding=(1, 0),
                                stride=(2, 1)), cols)
    with pytest.raises(ValueError):
        F.fold(Tensor(cols), (4, 5), 2)  # 9 windows, but a 2x2 kernel makes 12 in 4x5
    with pytest.raises(ValueError):
        F.fold(Tensor(cols[:, :5]), (4, 5), (2, 3), padding=(1, 0), stride=(2, 1))
