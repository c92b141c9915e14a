"""PyTorch-style nn ops against numpy: pad modes, interpolate (per-pixel loops following
PyTorch's index formulas), scaled_dot_product_attention, pooling's ceil_mode and divisor,
negative conv padding; forward values, gradients (finite differences) and bad input."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
import lazyten.nn.functional as F
from gradcheck import check_grad
from helpers import assert_tensor, conv_ref, fast, make_layout

NP_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


# ======================================================================================
# pad
# ======================================================================================
@st.composite
def pad_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    mode = draw(st.sampled_from(list(NP_MODE)))
    limit = {"reflect": lambda n: n - 1, "circular": lambda n: n}.get(mode, lambda n: 3)
    pairs = [(draw(st.integers(0, limit(n))), draw(st.integers(0, limit(n)))) for n in shape]
    return shape, mode, pairs


@given(case=pad_case(), layout=st.sampled_from(["contiguous", "flip", "step"]))
@fast(30)
def test_pad_modes_match_numpy(case, layout):
    shape, mode, pairs = case
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = make_layout(x, layout).pad(pairs, mode=mode)
    assert_tensor(got, np.pad(x, pairs, mode=NP_MODE[mode]), exact=True)
    flat = tuple(v for p in reversed(pairs) for v in p)  # torch's order, last dim first
    assert_tensor(F.pad(make_layout(x, layout), flat, mode=mode), np.pad(x, pairs, NP_MODE[mode]),
                  exact=True)


def test_pad_negative_crops_then_pads_and_special_values():
    x = np.array([[1.0, np.inf, -np.inf, np.nan, 5.0]], np.float32)
    got = Tensor(x).pad([(0, 0), (-1, 2)], mode="reflect")
    assert_tensor(got, np.pad(x[:, 1:], [(0, 0), (0, 2)], mode="reflect"))
    assert_tensor(F.pad(Tensor(x), (1, -2), value=7.0),
                  np.pad(x[:, :3], [(0, 0), (1, 0)], constant_values=7.0))
    assert_tensor(Tensor(x).pad2d((2, -1, 1, 0), value=3.0),
                  np.pad(x[:, :4], [(1, 0), (2, 0)], constant_values=3.0))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_mode_gradients(mode):
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    check_grad(lambda t: t.pad([(0, 0), (2, 1), (3, 2)], mode=mode), x)


def test_pad_bad_input():
    x = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="less than its size 3"):
        x.pad([(0, 0), (3, 0)], mode="reflect")
    with pytest.raises(ValueError, match="must not exceed its size 3"):
        x.pad([(0, 0), (0, 4)], mode="circular")
    with pytest.raises(ValueError, match="padding mode must be one of"):
        x.pad([(0, 0), (1, 0)], mode="wrap")
    with pytest.raises(ValueError, match="takes no value"):
        x.pad([(0, 0), (1, 0)], value=1.0, mode="replicate")
    with pytest.raises(ValueError, match="even length"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="left, right, top, bottom"):
        x.pad2d((1, 2))


# ======================================================================================
# interpolate: references follow PyTorch's UpSample.h formulas pixel by pixel
# ======================================================================================
def _torch_scale(n_in, n_out, scale, align_corners, dt=np.float32):
    if align_corners:
        return dt(n_in - 1) / dt(n_out - 1) if n_out > 1 else dt(0)
    return dt(1.0 / scale) if scale else dt(n_in) / dt(n_out)


def _nearest_src(d, n_in, n_out, scale, exact):
    if n_out == n_in:
        return d
    s = _torch_scale(n_in, n_out, scale, False)
    v = (np.float32(d) + np.float32(0.5)) * s if exact else np.float32(d) * s
    return min(int(math.floor(v)), n_in - 1)


def _linear_src(d, n_in, n_out, scale, align_corners):
    """(i0, i1, w0, w1) of output position d, as compute_source_index_and_lambda."""
    if n_out == n_in:
        return d, d, 1.0, 0.0
    s = _torch_scale(n_in, n_out, scale, align_corners)
    src = s * np.float32(d) if align_corners else max(s * (np.float32(d) + np.float32(0.5))
                                                       - np.float32(0.5), np.float32(0))
    i0 = min(int(math.floor(src)), n_in - 1)
    w1 = min(max(float(np.float32(src) - np.float32(i0)), 0.0), 1.0)
    return i0, i0 + (i0 < n_in - 1), 1 - w1, w1


def interpolate_ref(x, size, scales, mode, align_corners):
    """One output pixel at a time: nearest picks one source, linear modes mix 2^nd."""
    nd = x.ndim - 2
    out = np.zeros(x.shape[:2] + tuple(size), np.float64)
    for pos in np.ndindex(*size):
        if mode.startswith("nearest"):
            src = tuple(_nearest_src(p, x.shape[2 + i], size[i], scales[i], mode != "nearest")
                        for i, p in enumerate(pos))
            out[(...,) + pos] = x[(...,) + src]
            continue
        taps = [_linear_src(p, x.shape[2 + i], size[i], scales[i], align_corners)
                for i, p in enumerate(pos)]
        total = 0.0
        for corner in np.ndindex(*(2,) * nd):
            w = np.prod([t[2 + c] for t, c in zip(taps, corner)])
            if w != 0:
                total = total + w * x[(...,) + tuple(t[c] for t, c in zip(taps, corner))]
        out[(...,) + pos] = total
    return out


@st.composite
def interp_case(draw):
    mode = draw(st.sampled_from(["nearest", "nearest-exact", "linear", "bilinear", "trilinear"]))
    nd = {"linear": 1, "bilinear": 2, "trilinear": 3}.get(mode) or draw(st.integers(1, 3))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + tuple(
        draw(st.integers(1, 5 if nd < 3 else 3)) for _ in range(nd))
    align = draw(st.sampled_from([None, False, True])) if not mode.startswith("nearest") else None
    if draw(st.booleans()):
        size = tuple(draw(st.integers(1, 7 if nd < 3 else 4)) for _ in range(nd))
        return shape, mode, align, size, None
    scale = tuple(draw(st.sampled_from([0.5, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0])) for _ in range(nd))
    return shape, mode, align, None, scale


@given(case=interp_case())
@fast(40)
def test_interpolate_matches_pytorch_formulas(case):
    shape, mode, align, size, scale = case
    out_size = size or tuple(math.floor(n * s) for n, s in zip(shape[2:], scale))
    if min(out_size) <= 0:
        return
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    scales = scale or (None,) * len(out_size)
    expected = interpolate_ref(x, out_size, scales, mode, bool(align)).astype(np.float32)
    got = F.interpolate(make_layout(x, "flip"), size=size, scale_factor=scale, mode=mode,
                        align_corners=align)
    assert_tensor(got, expected, rtol=1e-5, atol=1e-6)


def test_interpolate_scale_factor_vs_recompute():
    """With scale_factor PyTorch maps indices through 1/scale_factor, not in/out: for 5 -> 8
    (scale 1.7) nearest reads floor(d / 1.7), with recompute floor(d * 5 / 8)."""
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
    got = Tensor(x).interpolate(scale_factor=1.7).numpy().ravel()
    assert list(got) == [math.floor(d / 1.7) for d in range(8)]
    got = Tensor(x).interpolate(scale_factor=1.7, recompute_scale_factor=True).numpy().ravel()
    assert list(got) == [min(math.floor(d * 5 / 8), 4) for d in range(8)]


def test_interpolate_inf_stays_local():
    x = np.array([[[0.0, np.inf, 2.0, 3.0, 4.0, 5.0]]], np.float32)
    got = Tensor(x).interpolate(scale_factor=2, mode="linear").numpy().ravel()
    expected = interpolate_ref(x, (12,), (2.0,), "linear", False).ravel()
    np.testing.assert_array_equal(got, expected.astype(np.float32))
    assert np.isfinite(got[6:]).all() and not np.isnan(got).any()
    ints = np.arange(6, dtype=np.int32).reshape(1, 1, 2, 3)
    assert_tensor(Tensor(ints).interpolate(size=(4, 5)),
                  interpolate_ref(ints, (4, 5), (None, None), "nearest", False).astype(np.int32))


@pytest.mark.parametrize("mode,shape,kw", [
    ("nearest", (1, 2, 3, 4), dict(size=(5, 7))), ("bilinear", (1, 2, 3, 4), dict(size=(5, 2))),
    ("bilinear", (2, 1, 3, 3), dict(scale_factor=2, align_corners=True)),
    ("linear", (1, 2, 4), dict(scale_factor=0.5)), ("trilinear", (1, 1, 2, 3, 2), dict(size=3))])
def test_interpolate_gradients(mode, shape, kw):
    x = np.random.default_rng(3).standard_normal(shape)
    check_grad(lambda t: t.interpolate(mode=mode, **kw), x)


def test_interpolate_bad_input():
    x = Tensor(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match="'linear' needs a 3-d input"):
        x.interpolate(size=3, mode="linear")
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        x.interpolate()
    with pytest.raises(ValueError, match="align_corners can only be set"):
        x.interpolate(size=3, align_corners=True)
    with pytest.raises(ValueError, match="does not fit 2 spatial dims"):
        x.interpolate(size=(2, 2, 2))
    with pytest.raises(ValueError, match="recompute_scale_factor needs scale_factor"):
        x.interpolate(size=2, recompute_scale_factor=True)
    with pytest.raises(ValueError, match="mode must be one of"):
        x.interpolate(size=2, mode="bicubic")
    with pytest.raises(ValueError, match="3-d, 4-d or 5-d"):
        Tensor(np.zeros(4, np.float32)).interpolate(size=2)
    with pytest.raises(TypeError, match="needs a float input"):
        Tensor(np.zeros((1, 1, 4), np.int32)).interpolate(size=2, mode="linear")


# ======================================================================================
# scaled_dot_product_attention
# ======================================================================================
def sdpa_ref(q, k, v, mask=None, is_causal=False, scale=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        mask = np.tril(np.ones(scores.shape[-2:], bool))
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


@given(data=st.data(), masking=st.sampled_from(["none", "bool", "float", "causal"]))
@fast(20)
def test_sdpa_matches_numpy(data, masking):
    lq, s, e, ev = (data.draw(st.integers(1, 4)) for _ in range(4))
    batch_q = tuple(data.draw(st.lists(st.integers(1, 2), max_size=2)))
    batch_k = tuple(1 if data.draw(st.booleans()) else b for b in batch_q)
    rng = np.random.default_rng(4)
    q = rng.standard_normal(batch_q + (lq, e)).astype(np.float32)
    k = rng.standard_normal(batch_k + (s, e)).astype(np.float32)
    v = rng.standard_normal(batch_k + (s, ev)).astype(np.float32)
    mask = None
    if masking == "bool":
        mask = rng.random((lq, s)) < 0.7
        mask[:, 0] = True  # no row fully masked (that row is NaN, as in PyTorch's math path)
    elif masking == "float":
        mask = rng.standard_normal((lq, s)).astype(np.float32)
    scale = data.draw(st.sampled_from([None, 0.3]))
    got = F.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v),
                                         None if mask is None else Tensor(mask),
                                         is_causal=masking == "causal", scale=scale)
    expected = sdpa_ref(q, k, v, mask, masking == "causal", scale).astype(np.float32)
    assert_tensor(got, expected, rtol=1e-5, atol=1e-5)


def test_sdpa_dropout_and_gradients():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3)))
    check_grad(lambda a, b, c: a.scaled_dot_product_attention(b, c, is_causal=True), q, k, v)
    mask = Tensor(rng.standard_normal((3, 5)))
    check_grad(lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=mask), q, k, v)
    # dropout_p > 0 drops whatever the training mode; the weights of a row then sum to 0 or
    # 1/(1-p) per kept entry: with v = identity the output is the dropped weights themselves
    ones = Tensor(np.eye(5)[None].repeat(2, 0).astype(np.float32))
    out = Tensor(q.astype(np.float32)).scaled_dot_product_attention(
        Tensor(k.astype(np.float32)), ones, dropout_p=0.5).numpy()
    weights = sdpa_ref(q, k, np.eye(5)[None].repeat(2, 0))
    kept = out != 0
    assert 0 < kept.mean() < 1, f"dropout 0.5 kept {kept.mean():.0%} of the weights"
    np.testing.assert_allclose(out[kept], 2 * weights[kept], rtol=1e-5)


def test_sdpa_bad_input():
    q, k = Tensor(np.zeros((2, 3, 4), np.float32)), Tensor(np.zeros((2, 5, 4), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        q.scaled_dot_product_attention(k, Tensor(np.zeros((2, 4, 3), np.float32)))
    with pytest.raises(ValueError, match="not both"):
        q.scaled_dot_product_attention(k, k, attn_mask=Tensor(np.ones((3, 5), bool)),
                                       is_causal=True)
    with pytest.raises(ValueError, match="does not broadcast"):
        q.scaled_dot_product_attention(k, k, attn_mask=Tensor(np.ones((3, 4), bool)))
    with pytest.raises(ValueError, match="batch dims do not broadcast"):
        q.scaled_dot_product_attention(Tensor(np.zeros((3, 5, 4), np.float32)),
                                       Tensor(np.zeros((3, 5, 4), np.float32)))


# ======================================================================================
# pooling and convolution padding
# ======================================================================================
def avg_pool_ref(x, k, s, p, ceil, include_pad, divisor=None):
    """PyTorch's avg_pool2d loop: window clipped to the padded input for the divisor."""
    def size(n, k, s, p):
        o = (n + 2 * p - k + (s - 1 if ceil else 0)) // s + 1
        return o - 1 if ceil and (o - 1) * s >= n + p else o
    (h, w), out = x.shape[-2:], None
    oh, ow = size(h, k[0], s[0], p[0]), size(w, k[1], s[1], p[1])
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i, j in np.ndindex(oh, ow):
        hs, ws = i * s[0] - p[0], j * s[1] - p[1]
        he, we = min(hs + k[0], h + p[0]), min(ws + k[1], w + p[1])
        pool = (he - hs) * (we - ws)
        hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
        d = divisor or (pool if include_pad else (he - hs) * (we - ws))
        out[..., i, j] = x[..., hs:he, ws:we].sum((-2, -1)) / d
    return out


def max_pool_ceil_ref(x, k, s, p):
    h, w = x.shape[-2:]
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(p[0], p[0] + s[0]), (p[1], p[1] + s[1])],
                constant_values=-np.inf)
    sizes = [(n + 2 * pp - kk + ss - 1) // ss + 1 for n, kk, ss, pp in zip((h, w), k, s, p)]
    sizes = [o - 1 if (o - 1) * ss >= n + pp else o for o, ss, n, pp in zip(sizes, s, (h, w), p)]
    out = np.zeros(x.shape[:-2] + tuple(sizes), x.dtype)
    for i, j in np.ndindex(*sizes):
        out[..., i, j] = xp[..., i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].max((-2, -1))
    return out


@given(data=st.data(), ceil=st.booleans(), include_pad=st.booleans())
@fast(25)
def test_avg_pool2d_ceil_mode_and_divisor(data, ceil, include_pad):
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    s = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    p = (data.draw(st.integers(0, k[0] // 2)), data.draw(st.integers(0, k[1] // 2)))
    h, w = data.draw(st.integers(k[0], 7)), data.draw(st.integers(k[1], 7))
    divisor = data.draw(st.sampled_from([None, 3]))
    x = np.random.default_rng(6).standard_normal((2, h, w)).astype(np.float32)
    got = F.avg_pool2d(Tensor(x), k, s, p, ceil_mode=ceil, count_include_pad=include_pad,
                       divisor_override=divisor)
    expected = avg_pool_ref(x, k, s, p, ceil, include_pad, divisor).astype(np.float32)
    assert_tensor(got, expected, rtol=1e-5, atol=1e-6)
    got = F.max_pool2d(Tensor(x), k, s, p, ceil_mode=ceil)
    if ceil:
        assert_tensor(got, max_pool_ceil_ref(x, k, s, p), exact=True)


def test_pool_gradients_and_bad_padding():
    x = np.random.default_rng(7).standard_normal((1, 2, 5, 6))
    check_grad(lambda t: t.avg_pool2d(3, 2, padding=1, ceil_mode=True,
                                      count_include_pad=False), x)
    check_grad(lambda t: t.max_pool2d(2, 2, ceil_mode=True), x)
    with pytest.raises(ValueError, match="at most half of kernel"):
        Tensor(x).avg_pool2d(2, padding=2)


@pytest.mark.parametrize("op", ["conv2d", "conv1d", "conv3d"])
def test_conv_negative_padding_crops(op):
    rng = np.random.default_rng(8)
    nd = {"conv1d": 1, "conv2d": 2, "conv3d": 3}[op]
    x = rng.standard_normal((1, 2) + (5,) * nd)
    w = rng.standard_normal((3, 2) + (2,) * nd)
    pads = [(-1, 1), (2, -2), (0, -1)][:nd]
    crop = tuple(slice(max(0, -b), x.shape[2 + i] - max(0, -a)) for i, (b, a) in enumerate(pads))
    xc = np.pad(x[(..., ) + crop], [(0, 0), (0, 0)] + [(max(0, b), max(0, a)) for b, a in pads])
    got = getattr(Tensor(x.astype(np.float32)), op)(Tensor(w.astype(np.float32)), padding=pads)
    assert_tensor(got, conv_ref(xc, w).astype(np.float32), rtol=1e-5, atol=1e-5)
    check_grad(lambda a, b: getattr(a, op)(b, padding=pads), x, w)
    check_grad(lambda a, b: a.conv2d(b, padding=-1), x, w)
