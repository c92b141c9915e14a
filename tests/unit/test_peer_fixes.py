"""Fixes found by running tinygrad's operator suite against lazyten: Tensor.gradient,
PyTorch edge cases (clip gradient, indexing placement, pads...), exception classes that
are also RuntimeError as in PyTorch, and missing keywords. Expected values are numpy's or
written out by hand from PyTorch's documented rules."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor
from gradcheck import H, spaced


def _fd_grad(fn, arrays, i):
    """Central finite-difference gradient of the scalar fn(*arrays) w.r.t. arrays[i]."""
    out = np.zeros_like(arrays[i])
    for idx in np.ndindex(arrays[i].shape):
        plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
        plus[i][idx] += H
        minus[i][idx] -= H
        out[idx] = (fn(*[Tensor(a) for a in plus]).item()
                    - fn(*[Tensor(a) for a in minus]).item()) / (2 * H)
    return out


# ---- Tensor.gradient ----
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**16))
def test_gradient_matches_finite_differences_and_backward(n, m, seed):
    rng = np.random.default_rng(seed)
    a, b = spaced(rng, (n, m), (m,))

    def fn(x, y):
        return ((x * y).exp() + x.relu() * y).sum()

    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = fn(x, y)
    gx, gy = out.gradient(x, y)
    np.testing.assert_allclose(gx.numpy(), _fd_grad(fn, [a, b], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gy.numpy(), _fd_grad(fn, [a, b], 1), rtol=1e-6, atol=1e-7)
    assert x.grad is None and y.grad is None  # .grad untouched
    gx2, = out.gradient(x)  # the graph is kept: a second call works
    np.testing.assert_array_equal(gx2.numpy(), gx.numpy())
    out.backward()  # ... and so does backward() afterwards, with the same values
    np.testing.assert_array_equal(x.grad.numpy(), gx.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), gy.numpy())


def test_gradient_of_an_intermediate_and_with_an_explicit_gradient():
    x = Tensor(np.array([1., 2., 3.]), requires_grad=True)
    h = x * x
    out = h * 3
    gh, gx = out.gradient(h, x, gradient=Tensor(np.array([1., 10., 100.])))
    np.testing.assert_allclose(gh.numpy(), [3., 30., 300.])
    np.testing.assert_allclose(gx.numpy(), [6., 120., 1800.])  # 3 * 2x * gradient


def test_gradient_of_a_non_scalar_needs_a_gradient():
    x = Tensor([1., 2.], requires_grad=True)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        (x * 2).gradient(x)


def test_gradient_rejects_unused_targets_and_targets_without_requires_grad():
    x, unused = Tensor([1., 2.], requires_grad=True), Tensor([3.], requires_grad=True)
    out = (x * x).sum()
    with pytest.raises(RuntimeError, match=r"target 1 .*shape \(1,\).*not used"):
        out.gradient(x, unused)
    with pytest.raises(RuntimeError, match="requires_grad=True"):
        out.gradient(Tensor([1., 2.]))
    np.testing.assert_allclose(out.gradient(x)[0].numpy(), [2., 4.])  # graph still intact


# ---- edge cases as PyTorch ----
def test_clip_with_number_bounds_passes_gradient_at_and_inside_the_bounds():
    """PyTorch's clamp backward (torch 2.13, measured): 1 where min <= x <= max, 0 beyond
    (this test said strictly inside before: clamp(0, 2.5)'s gradient at 0 was 0, not 1);
    hardtanh and relu6 exclude the bounds, as PyTorch's."""
    values = np.array([-3., -2.5, 0., 1.5, 2.])
    for kwargs, expected in [({"min": -2.5, "max": 1.5}, [0, 1, 1, 1, 0]),
                             ({"min": -2.5}, [0, 1, 1, 1, 1]), ({"max": 1.5}, [1, 1, 1, 1, 0]),
                             ({"min": 1.0, "max": -1.0}, [0, 0, 0, 0, 0])]:
        x = Tensor(values, requires_grad=True)
        out = x.clip(**kwargs)
        lo, hi = kwargs.get("min", -np.inf), kwargs.get("max", np.inf)
        np.testing.assert_array_equal(out.numpy(), np.minimum(np.maximum(values, lo), hi))
        out.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), expected)
    for fn, bounds in [(lambda t: t.hardtanh(-2.5, 1.5), [0, 0, 1, 0, 0]),
                       (lambda t: t.relu6(), [0, 0, 0, 1, 1])]:
        x = Tensor(values, requires_grad=True)
        fn(x).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), bounds)
    x = Tensor(np.array([0., 6., 3.]), requires_grad=True)
    x.relu6().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 1])


def test_atan2_gradient_at_the_origin_is_zero_as_pytorch():
    y = Tensor(np.array([0., -0., 1.]), requires_grad=True)
    x = Tensor(np.array([0., 0., 1.]), requires_grad=True)
    y.atan2(x).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0, 0, 0.5])
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, -0.5])


def test_clip_with_tensor_bounds_shares_the_gradient_at_ties():
    x = Tensor(np.array([-3., -2.5, 0., 1.5, 2.]), requires_grad=True)
    lo = Tensor(np.full(5, -2.5), requires_grad=True)
    hi = Tensor(np.full(5, 1.5), requires_grad=True)
    x.clip(lo, hi).sum().backward()  # PyTorch 2.14's values for this case
    np.testing.assert_array_equal(x.grad.numpy(), [0, .5, 1, .5, 0])
    np.testing.assert_array_equal(lo.grad.numpy(), [1, .5, 0, 0, 0])
    np.testing.assert_array_equal(hi.grad.numpy(), [0, 0, 0, .5, 1])


def test_var_and_std_with_correction_at_least_n_divide_by_zero():
    x = Tensor(np.array([[1., 2.], [3., 3.]]))
    with np.errstate(divide="ignore", invalid="ignore"):
        for c in (2, 5):
            expected = ((x.numpy() - x.numpy().mean(1, keepdims=True)) ** 2).sum(1) / 0.0
            np.testing.assert_array_equal(x.var(axis=1, correction=c).numpy(), expected)
            np.testing.assert_array_equal(x.std(axis=1, correction=c).numpy(), np.sqrt(expected))


def test_var_gradient_with_correction_above_n_is_pytorchs_formula():
    """PyTorch's var backward is 2 (x - mean) / (N - correction) even when that is negative;
    std's is 0 there (the std is inf)."""
    a = np.array([[1., 2., 4.]])
    x = Tensor(a, requires_grad=True)
    x.var(axis=1, correction=5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (a - a.mean()) / (3 - 5), rtol=1e-12)
    x = Tensor(a, requires_grad=True)
    x.std(axis=1, correction=5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(a))


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scans_of_a_0d_tensor_check_the_dim(op):
    x = Tensor(2.0)
    for dim in (0, -1):
        assert getattr(x, op)(dim).item() == 2.0
    for dim in (1, -2):
        with pytest.raises(IndexError, match=f"{dim} is out of range"):
            getattr(x, op)(dim)


def test_flip_with_a_repeated_dim_and_linspace_bool_raise():
    with pytest.raises(RuntimeError, match=r"repeat a dim of shape \(3, 4\)"):
        Tensor.ones(3, 4).flip((0, 0))
    with pytest.raises(ValueError):  # also a ValueError, as before
        Tensor.ones(3, 4).flip((1, -1))
    with pytest.raises(RuntimeError, match="bool"):
        Tensor.linspace(5, 10, 3, dtype="bool")


def _pad_reference(a, before, after, mode):
    """PyTorch's rule for mixed signs: reflect/replicate pad the whole input then crop;
    circular crops first (numpy's pad modes 'reflect', 'edge', 'wrap')."""
    np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    grow, crop = (max(before, 0), max(after, 0)), (max(-before, 0), max(-after, 0))
    if mode == "circular":
        a = a[crop[0]:len(a) - crop[1]]
        return np.pad(a, grow, mode=np_mode)
    a = np.pad(a, grow, mode=np_mode)
    return a[crop[0]:len(a) - crop[1]]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("before,after", [(-1, 3), (3, -1), (-2, 3), (-1, 2), (2, -2)])
def test_pad_modes_with_mixed_signs(mode, before, after):
    a = np.arange(5.)
    got = Tensor(a).reshape(1, 5).pad((before, after), mode=mode).numpy()[0]
    np.testing.assert_array_equal(got, _pad_reference(a, before, after, mode))


def test_pad_reflect_mixed_signs_on_4d_as_pytorch():
    """tinygrad's case: (3, 3, 3, 3) with (-1, 2, 2, -1) is (3, 3, 4, 4) in PyTorch (the
    cropped dim alone would be too small to reflect by 2)."""
    a = np.arange(81.).reshape(3, 3, 3, 3)
    got = Tensor(a).pad((-1, 2, 2, -1), mode="reflect").numpy()
    expected = np.pad(a, [(0, 0), (0, 0), (2, 0), (0, 2)], mode="reflect")[:, :, :-1, 1:]
    np.testing.assert_array_equal(got, expected)


def test_pool_over_three_dims_with_a_3d_kernel():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 1, 4, 6, 4))
    windows = a.reshape(2, 1, 2, 2, 3, 2, 2, 2)
    np.testing.assert_allclose(Tensor(a).avg_pool2d(kernel_size=(2, 2, 2)).numpy(),
                               windows.mean(axis=(3, 5, 7)), rtol=1e-12)
    np.testing.assert_array_equal(Tensor(a).max_pool2d(kernel_size=(2, 2, 2)).numpy(),
                                  windows.max(axis=(3, 5, 7)))
    with pytest.raises(ValueError, match="needs at least 3 dims"):
        Tensor.ones(4, 4).avg_pool2d(kernel_size=(2, 2, 2))


def test_indexing_ints_are_basic_indices_as_pytorch():
    """PyTorch applies ints first, so they never separate index tensors: expected values
    are numpy's with the ints applied first (a[ints][rest])."""
    a = np.arange(2 * 5 * 6 * 5 * 3 * 4, dtype=np.float32).reshape(2, 5, 6, 5, 3, 4)
    d = np.random.default_rng(1).integers(0, 5, (2, 1, 1, 5, 1, 1))
    got = Tensor(a)[1, :, 3:11:2, Tensor(d), 0:2]
    assert got.shape == (5, 2, 2, 1, 1, 5, 1, 1, 2, 4)  # torch's shape for tinygrad's case
    np.testing.assert_array_equal(got.numpy(), a[1][:, 3:11:2, d, 0:2])
    b = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
    i, j = np.array([0, 1]), np.array([[1], [3]])
    for index, torch_shape in [((slice(None), i, 1, i), (2, 2, 6)),  # PyTorch 2.14's shapes
                               ((1, slice(None), i, 0, j), (3, 2, 2)),
                               ((i, None, i), (2, 1, 4, 5, 6)), ((i, 1, i), (2, 5, 6))]:
        t_index = tuple(Tensor(k) if isinstance(k, np.ndarray) else k for k in index)
        got = Tensor(b)[t_index]
        assert got.shape == torch_shape
        ints = [k for k, v in enumerate(index) if isinstance(v, int)]
        first = tuple(v if k in ints else slice(None) for k, v in enumerate(index))
        rest = tuple(v for k, v in enumerate(index) if k not in ints)
        np.testing.assert_array_equal(got.numpy(), b[first][rest])


# ---- exception classes: PyTorch's RuntimeError, and still lazyten's ValueError/TypeError ----
def _f(*shape):
    return Tensor.ones(*shape)


@pytest.mark.parametrize("old,call,match", [
    (ValueError, lambda: _f(2, 4).matmul(_f(1, 3)), r"\(2, 4\) @ \(1, 3\)"),
    (ValueError, lambda: _f(4).dot(_f(1, 2)), r"\(4,\) @ \(1, 2\)"),
    (ValueError, lambda: Tensor(1.0).matmul(_f(3, 3)), r"\(\) and \(3, 3\)"),
    (ValueError, lambda: Tensor.einsum("ij,jk", _f(2, 3), _f(4, 4)), "'j' has sizes 3 and 4"),
    (ValueError, lambda: _f(1, 3, 5, 5).conv2d(_f(2, 4, 3, 3)), r"input \(1, 3, 5, 5\)"),
    (ValueError, lambda: _f(2, 3, 4).gather(0, Tensor([0])), r"index shape \(1,\)"),
    (ValueError, lambda: Tensor.stack([_f(2), _f(3)]), "equal shapes"),
    (ValueError, lambda: _f(3, 4, 5, 6).permute(0, 2), r"\(3, 4, 5, 6\)"),
    (ValueError, lambda: _f(2, 3).roll((1, 2)), "need dims"),
    (ValueError, lambda: Tensor.meshgrid(_f(2), _f(3), indexing="bad"), "'bad'"),
    (ValueError, lambda: _f(32, 10).cross_entropy(Tensor.zeros(32, 1, dtype="int64")),
     r"\(32, 1\)"),
    (ValueError, lambda: _f(2, 3) + _f(4, 3), r"\(2, 3\) and \(4, 3\)"),
    (ValueError, lambda: _f(2, 3).reshape(4, 2), r"\(2, 3\)"),
    (ValueError, lambda: _f(2).div(_f(2), rounding_mode="typo"), "'typo'"),
    (ValueError, lambda: _f(2).clip(None, None), "min_ or max_"),
    (ValueError, lambda: Tensor([1, 2]) ** -2, "negative integer powers"),
    (TypeError, lambda: Tensor([1., 2.]).bitwise_and(Tensor([1., 2.])), "float32"),
    (TypeError, lambda: ~Tensor([1., 2.]), "float32"),
    (ValueError, lambda: _f(1, 2, 4).scaled_dot_product_attention(
        _f(1, 2, 4), _f(1, 2, 4), attn_mask=Tensor.ones(2, 2, dtype="bool"), is_causal=True),
     "not both")])
def test_shape_and_dtype_mistakes_are_also_runtime_errors(old, call, match):
    with pytest.raises(RuntimeError, match=match) as info:
        call()
    assert isinstance(info.value, old), "existing `except ValueError/TypeError` must still work"


def test_unknown_pad_mode_is_not_implemented_and_a_value_error():
    with pytest.raises(NotImplementedError, match="'typo'") as info:
        _f(3, 3, 3).pad((3, 0), mode="typo")
    assert isinstance(info.value, ValueError)


# ---- keywords: return_indices, pos_weight, ignore_index, enable_gqa ----
def _max_pool_reference(a, k, stride, pad):
    """Values and PyTorch's indices (flat into H*W, first maximum) by looping in numpy."""
    n, c, h, w = a.shape
    p = np.pad(a, [(0, 0), (0, 0), (pad, pad), (pad, pad)], constant_values=-np.inf)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    vals, idx = np.empty((n, c, oh, ow)), np.empty((n, c, oh, ow), np.int64)
    for i, j in np.ndindex(oh, ow):
        win = p[:, :, i * stride:i * stride + k, j * stride:j * stride + k].reshape(n, c, -1)
        best = win.argmax(-1)
        vals[:, :, i, j] = win.max(-1)
        r, s = best // k + i * stride - pad, best % k + j * stride - pad
        idx[:, :, i, j] = r * w + s
    return vals, idx


@pytest.mark.parametrize("k,stride,pad", [(2, 2, 0), (2, 2, 1), (3, 1, 1), (3, 2, 0)])
def test_max_pool2d_return_indices(k, stride, pad):
    rng = np.random.default_rng(k * 10 + pad)
    a = rng.integers(-3, 4, (2, 3, 5, 6)).astype(np.float32)  # ties: the first one wins
    vals, idx = Tensor(a).max_pool2d(kernel_size=k, stride=stride, padding=pad,
                                     return_indices=True)
    ref_vals, ref_idx = _max_pool_reference(a, k, stride, pad)
    np.testing.assert_array_equal(vals.numpy(), ref_vals)
    assert idx.dtype.name == "int64"
    np.testing.assert_array_equal(idx.numpy(), ref_idx)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**16))
def test_binary_crossentropy_logits_pos_weight(seed):
    rng = np.random.default_rng(seed)
    x, t = rng.standard_normal((4, 3)) * 3, rng.uniform(0, 1, (4, 3))
    pw = rng.uniform(0.1, 3, (3,))
    sig = 1 / (1 + np.exp(-x))
    ref = -(pw * t * np.log(sig) + (1 - t) * np.log(1 - sig))
    got = Tensor(x).binary_crossentropy_logits(Tensor(t), reduction="none",
                                               pos_weight=Tensor(pw)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    np.testing.assert_allclose(Tensor(x).binary_crossentropy_logits(Tensor(t)).numpy(),
                               (-(t * np.log(sig) + (1 - t) * np.log(1 - sig))).mean(), rtol=1e-9)


@pytest.mark.parametrize("ignore_index", [-100, 0, 3])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_sparse_categorical_crossentropy_ignore_index(ignore_index, smoothing, reduction):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12, 10))
    labels = np.array([0, 1, 2, 3] * 3)
    logp = x - x.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    keep = labels != ignore_index
    per = -(1 - smoothing) * logp[np.arange(12), labels] - smoothing * logp.mean(-1)
    per = np.where(keep, per, 0)
    ref = {"mean": per.sum() / keep.sum(), "sum": per.sum(), "none": per}[reduction]
    got = Tensor(x).sparse_categorical_crossentropy(Tensor(labels), label_smoothing=smoothing,
                                                    reduction=reduction, ignore_index=ignore_index)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9)


def test_sparse_categorical_crossentropy_all_ignored_is_nan():
    x = Tensor(np.zeros((2, 3)))
    assert np.isnan(x.sparse_categorical_crossentropy(Tensor([1, 1]), ignore_index=1).item())


def test_attention_enable_gqa_repeats_key_value_heads():
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((2, 4, 3, 5)), rng.standard_normal((2, 2, 3, 5)), \
        rng.standard_normal((2, 2, 3, 5))
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # head h reads kv head h // 2
    scores = q @ kr.swapaxes(-1, -2) / np.sqrt(5)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    ref = weights / weights.sum(-1, keepdims=True) @ vr
    got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-9)
    with pytest.raises(RuntimeError, match="multiple of key/value heads 8"):
        Tensor.ones(1, 31, 2, 4).scaled_dot_product_attention(
            Tensor.ones(1, 8, 2, 4), Tensor.ones(1, 8, 2, 4), enable_gqa=True)


def test_nn_max_pool_return_indices():
    from lazyten import nn
    a = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    vals, idx = nn.MaxPool2d(2, return_indices=True)(Tensor(a))
    np.testing.assert_array_equal(vals.numpy(), [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(idx.numpy(), [[[[5, 7], [13, 15]]]])  # values are indices


def test_max_pool_indices_round_trip_through_max_unpool2d():
    a = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    vals, idx = Tensor(a).max_pool2d(kernel_size=2, return_indices=True)
    block_max = a.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)).repeat(2, 2).repeat(2, 3)
    np.testing.assert_array_equal(vals.max_unpool2d(idx, kernel_size=2).numpy(),
                                  np.where(a == block_max, a, 0))
