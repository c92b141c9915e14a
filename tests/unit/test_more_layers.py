"""torch.nn modules of nn/more_layers.py and nn.Transformer (nn/transformer.py): forward
values against float64 numpy references written from torch's documented formulas, state
dict keys against torch's names (hard-coded here), gradients of the new math (F.hardshrink,
F.softshrink) against finite differences, and Transformer's wiring against its own
encoder and decoder applied by hand."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten.nn.functional as F
from gradcheck import check_grad, spaced
from lazyten import Tensor, nn
from tests.unit.test_transformer_stacks import DECODER_KEYS


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def triple(v, n=3):
    return (v,) * n if isinstance(v, int) else tuple(v)


# ---- padding ----
NUMPY_MODE = {"Reflection": "reflect", "Replication": "edge", "Circular": "wrap"}


@st.composite
def padding_cases(draw):
    kind, nd = draw(st.sampled_from(sorted(NUMPY_MODE))), draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(2, 4), min_size=nd + 1, max_size=nd + 2)))
    most = {"Reflection": -1, "Replication": 3, "Circular": 0}[kind]  # added to the dim size
    flat = [draw(st.integers(0, min(shape[-1 - i // 2] + most, 3))) for i in range(2 * nd)]
    one = draw(st.booleans()) and max(flat) <= min(shape[-nd:]) + min(most, 0)
    return kind, nd, shape, (flat[0] if one else tuple(flat))


@given(padding_cases())
def test_mode_padding_matches_numpy_pad(case):
    kind, nd, shape, padding = case
    x = rnd(*shape)
    flat = triple(padding, 2 * nd)
    pairs = [(0, 0)] * (len(shape) - nd) + [(flat[2 * i], flat[2 * i + 1]) for i in range(nd)][::-1]
    out = getattr(nn, f"{kind}Pad{nd}d")(padding)(Tensor(x))
    np.testing.assert_array_equal(out.numpy(), np.pad(x, pairs, mode=NUMPY_MODE[kind]),
                                  err_msg=f"{kind}Pad{nd}d({padding}) of {shape}")


def test_mode_padding_crops_and_rejects_what_torch_rejects():
    x = np.arange(4.0).reshape(1, 4)
    # torch: reflect pads the whole input then crops; circular crops first (torch 2.13)
    np.testing.assert_array_equal(nn.ReflectionPad1d((2, -1))(Tensor(x)).numpy(), [[2, 1, 0, 1, 2]])
    np.testing.assert_array_equal(nn.CircularPad1d((2, -1))(Tensor(x)).numpy(), [[1, 2, 0, 1, 2]])
    assert nn.ReflectionPad2d(1).padding == (1, 1, 1, 1) and nn.ZeroPad1d(2).padding == (2, 2)
    with pytest.raises(ValueError, match="4 padding amounts"):
        nn.ReplicationPad2d((1, 2))
    with pytest.raises(ValueError, match="4 or 5 dims"):
        nn.ReflectionPad3d(1)(Tensor(np.zeros((2, 2, 2))))
    with pytest.raises(ValueError, match="less"):
        nn.ReflectionPad1d(4)(Tensor(x))
    with pytest.raises(ValueError, match="exceed"):
        nn.CircularPad1d(5)(Tensor(x))


@pytest.mark.parametrize("make,nd,value", [(lambda p: nn.ZeroPad1d(p), 1, 0.0),
                                           (lambda p: nn.ZeroPad3d(p), 3, 0.0),
                                           (lambda p: nn.ConstantPad3d(p, 2.5), 3, 2.5)])
def test_constant_padding(make, nd, value):
    x = rnd(2, 3, 4, 3, 2)
    for padding in (2, (1, 0, 2, 1, 0, 3)[:2 * nd], (1, -1, 0, 2, -1, 1)[:2 * nd]):
        flat = triple(padding, 2 * nd)
        pairs = [(0, 0)] * (5 - nd) + [(flat[2 * i], flat[2 * i + 1]) for i in range(nd)][::-1]
        crop = tuple(slice(-min(b, 0), n + min(a, 0)) for (b, a), n in zip(pairs, x.shape))
        grow = [(max(b, 0), max(a, 0)) for b, a in pairs]
        want = np.pad(x[crop], grow, constant_values=value)
        np.testing.assert_array_equal(make(padding)(Tensor(x)).numpy(), want, err_msg=f"{padding}")


# ---- resizing, activations, distances, rearranging ----
def nearest_ref(x, size):
    rows = np.floor(np.arange(size[0]) * x.shape[-2] / size[0]).astype(int)
    cols = np.floor(np.arange(size[1]) * x.shape[-1] / size[1]).astype(int)
    return x[..., rows, :][..., cols]


def bilinear_corners_ref(x, size):
    """align_corners=True: output i samples input position i * (n - 1) / (out - 1)."""
    for axis, (n, m) in zip((-2, -1), zip(x.shape[-2:], size)):
        pos = np.arange(m) * ((n - 1) / (m - 1) if m > 1 else 0.0)
        lo = np.floor(pos).astype(int)
        hi, frac = np.minimum(lo + 1, n - 1), pos - lo
        shape = [1] * x.ndim
        shape[axis] = m
        x = np.take(x, lo, axis) * (1 - frac.reshape(shape)) + np.take(x, hi, axis) * frac.reshape(shape)
    return x


@pytest.mark.parametrize("args,kwargs,size", [((), {"scale_factor": 2}, (8, 10)),
                                              (((7, 3),), {}, (7, 3)), ((6,), {}, (6, 6))])
def test_upsampling_modules(args, kwargs, size):
    x = rnd(2, 3, 4, 5)
    np.testing.assert_array_equal(nn.UpsamplingNearest2d(*args, **kwargs)(Tensor(x)).numpy(),
                                  nearest_ref(x, size))
    out = nn.UpsamplingBilinear2d(*args, **kwargs)(Tensor(x)).numpy()
    np.testing.assert_allclose(out, bilinear_corners_ref(x, size), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(out[..., 0, 0], x[..., 0, 0])  # the corners are kept
    np.testing.assert_array_equal(out[..., -1, -1], x[..., -1, -1])


def test_softmax2d_is_over_channels():
    for shape in ((2, 3, 4, 5), (3, 4, 5)):
        x = rnd(*shape)
        e = np.exp(x - x.max(-3, keepdims=True))
        np.testing.assert_allclose(nn.Softmax2d()(Tensor(x)).numpy(), e / e.sum(-3, keepdims=True),
                                   rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="3D or 4D"):
        nn.Softmax2d()(Tensor(rnd(3, 4)))


def hardshrink_ref(x, lambd):
    return np.where((x >= -lambd) & (x <= lambd), 0.0, x)


def softshrink_ref(x, lambd):
    return np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, np.where(np.isnan(x), x, 0)))


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.3, -0.3, 0.50001, -0.50001])


@given(st.lists(st.floats(-3, 3), min_size=1, max_size=12), st.sampled_from([0.0, 0.5, 1.25]))
def test_shrinks_against_numpy(values, lambd):
    x = np.concatenate([np.array(values), SPECIAL])
    for module, function, ref in ((nn.Hardshrink, F.hardshrink, hardshrink_ref),
                                  (nn.Softshrink, F.softshrink, softshrink_ref)):
        out = module(lambd)(Tensor(x)).numpy()
        np.testing.assert_array_equal(out, ref(x, lambd), err_msg=f"{module.__name__}({lambd})")
        assert not np.signbit(out[np.abs(x) <= lambd]).any(), "torch's zeros are +0.0"
        np.testing.assert_array_equal(function(Tensor(x), lambd).numpy(), out)
    np.testing.assert_array_equal(nn.Hardshrink()(Tensor(x)).numpy(), hardshrink_ref(x, 0.5))


def test_shrink_gradients_and_arguments():
    x, = spaced(np.random.default_rng(0), (4, 6), amp=2.0)  # values away from +-0.5
    check_grad(lambda t: F.hardshrink(t), x)
    check_grad(lambda t: nn.Softshrink(0.5)(t), x)
    g = Tensor(x, requires_grad=True)
    nn.Softshrink(0.5)(g).sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), (np.abs(x) > 0.5).astype(float))
    np.testing.assert_array_equal(nn.Hardshrink(-1.0)(Tensor(x)).numpy(), x)  # torch allows it
    with pytest.raises(ValueError, match="lambd"):
        nn.Softshrink(-1.0)(Tensor(x))


def test_cosine_similarity_and_pairwise_distance():
    a, b = rnd(4, 1, 5, seed=1), rnd(3, 5, seed=2)
    dot = (a * b).sum(-1)
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    out = nn.CosineSimilarity(dim=-1)(Tensor(a), Tensor(b)).numpy()
    np.testing.assert_allclose(out, dot / (na * nb), rtol=1e-12)
    tiny = np.array([[1e-9, 0.0], [0.0, 0.0], [3.0, 4.0]])  # each norm clamped at eps on its own
    np.testing.assert_allclose(nn.CosineSimilarity()(Tensor(tiny), Tensor(tiny)).numpy(),
                               [0.01, 0.0, 1.0], rtol=1e-12)
    for p in (2.0, 1.0, 3.0, math.inf):
        module = nn.PairwiseDistance(p, keepdim=p == 1.0)
        assert module.norm == p and module.eps == 1e-6
        want = np.linalg.norm(a - b + 1e-6, ord=p, axis=-1, keepdims=p == 1.0)
        np.testing.assert_allclose(module(Tensor(a), Tensor(b)).numpy(), want, rtol=1e-12)


def im2col_ref(x, k, d, p, s):
    x = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(p[0], p[0]), (p[1], p[1])])
    oh = (x.shape[-2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (x.shape[-1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cols = [x[..., i * s[0]:i * s[0] + d[0] * (k[0] - 1) + 1:d[0],
              j * s[1]:j * s[1] + d[1] * (k[1] - 1) + 1:d[1]] for i in range(oh) for j in range(ow)]
    return np.stack([c.reshape(c.shape[:-3] + (-1,)) for c in cols], -1)


@pytest.mark.parametrize("k,d,p,s", [((2, 3), (1, 1), (0, 0), (1, 1)),
                                     ((2, 3), (1, 2), (1, 1), (2, 2)), ((3, 3), (1, 1), (1, 0), (2, 1))])
def test_unfold_module(k, d, p, s):
    for shape in ((2, 3, 7, 8), (3, 7, 8)):
        x = rnd(*shape)
        out = nn.Unfold(k, dilation=d, padding=p, stride=s)(Tensor(x)).numpy()
        np.testing.assert_array_equal(out, im2col_ref(x, k, d, p, s))


@given(st.integers(1, 4), st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_channel_shuffle(groups, per_group, rest):
    x = rnd(2, groups * per_group, *rest)
    out = nn.ChannelShuffle(groups)(Tensor(x)).numpy()
    for i in range(per_group):
        for g in range(groups):
            np.testing.assert_array_equal(out[:, i * groups + g], x[:, g * per_group + i])


def test_channel_shuffle_rejects_bad_inputs():
    with pytest.raises(ValueError, match="more than 2 dims"):
        nn.ChannelShuffle(2)(Tensor(rnd(2, 4)))
    with pytest.raises(ValueError, match="divide"):
        nn.ChannelShuffle(3)(Tensor(rnd(1, 4, 2)))


# ---- 3-d pooling and normalisation ----
def pool3d_ref(x, k, s, p, d=1, op="max", ceil=False, include_pad=True):
    k, s, p, d = triple(k), triple(s), triple(p), triple(d)
    lead = [(0, 0)] * (x.ndim - 3)
    xp = np.pad(x, lead + [(q, q) for q in p], constant_values=-np.inf if op == "max" else 0)
    inside = np.pad(np.ones(x.shape[-3:]), [(q, q) for q in p])
    sizes = []
    for n, ki, si, pi, di in zip(x.shape[-3:], k, s, p, d):
        span = n + 2 * pi - di * (ki - 1) - 1
        o = (-(-span // si) if ceil else span // si) + 1
        sizes.append(o - 1 if ceil and (o - 1) * si >= n + pi else o)
    out = np.empty(x.shape[:-3] + tuple(sizes))
    for idx in np.ndindex(*sizes):
        box = tuple(slice(i * si, i * si + di * (ki - 1) + 1, di) for i, ki, si, di in zip(idx, k, s, d))
        window = xp[(...,) + box]
        count = window[(0,) * (x.ndim - 3)].size if include_pad else inside[box].sum()
        out[(...,) + idx] = window.max((-3, -2, -1)) if op == "max" else window.sum((-3, -2, -1)) / count
    return out


@pytest.mark.parametrize("args,kwargs", [((2,), {}), ((3,), {"stride": 2, "padding": 1}),
                                         ((3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
                                         (((3, 2, 2),), {"stride": (1, 2, 1), "dilation": (1, 2, 1)})])
def test_max_and_avg_pool3d(args, kwargs):
    x = rnd(2, 3, 5, 6, 7)
    k, s = args[0], kwargs.get("stride", args[0])
    p, ceil = kwargs.get("padding", 0), kwargs.get("ceil_mode", False)
    want = pool3d_ref(x, k, s, p, kwargs.get("dilation", 1), "max", ceil)
    np.testing.assert_array_equal(nn.MaxPool3d(*args, **kwargs)(Tensor(x)).numpy(), want)
    np.testing.assert_array_equal(nn.MaxPool3d(*args, **kwargs)(Tensor(x[0])).numpy(), want[0])
    if "dilation" not in kwargs:
        for include in (True, False):
            out = nn.AvgPool3d(*args, count_include_pad=include, **kwargs)(Tensor(x)).numpy()
            np.testing.assert_allclose(out, pool3d_ref(x, k, s, p, 1, "avg", ceil, include), rtol=1e-12)


def test_pool3d_indices_and_divisor_override():
    x = rnd(2, 3, 4, 6, 4)
    values, indices = nn.MaxPool3d(2, return_indices=True)(Tensor(x))
    np.testing.assert_array_equal(values.numpy(), pool3d_ref(x, 2, 2, 0))
    flat = x.reshape(2, 3, -1)  # indices are flat in each D * H * W volume
    picked = np.take_along_axis(flat, indices.numpy().reshape(2, 3, -1), -1)
    np.testing.assert_array_equal(picked.reshape(values.shape), values.numpy())
    out = nn.AvgPool3d(2, divisor_override=3)(Tensor(x)).numpy()
    np.testing.assert_allclose(out, pool3d_ref(x, 2, 2, 0, op="avg") * 8 / 3, rtol=1e-12)


@pytest.mark.parametrize("output_size", [2, (3, None, 2), (5, 4, 3), 1])
def test_adaptive_avg_pool3d(output_size):
    x = rnd(2, 3, 5, 6, 7)
    sizes = [n if o is None else o for n, o in zip(x.shape[2:], triple(output_size))]
    want = np.empty((2, 3, *sizes))
    for idx in np.ndindex(*sizes):
        box = tuple(slice(i * n // o, -(-(i + 1) * n // o)) for i, n, o in zip(idx, x.shape[2:], sizes))
        want[(...,) + idx] = x[(...,) + box].mean((-3, -2, -1))
    np.testing.assert_allclose(nn.AdaptiveAvgPool3d(output_size)(Tensor(x)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(nn.AdaptiveAvgPool3d(output_size)(Tensor(x[1])).numpy(), want[1],
                               rtol=1e-12)


def test_batchnorm3d_train_eval_and_running_statistics():
    bn = nn.BatchNorm3d(3).train()
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    x = rnd(2, 3, 2, 3, 4) * 2 + 1
    axes = (0, 2, 3, 4)
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean.ravel(), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(axes, ddof=1), rtol=1e-5)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    running = (x - bn.running_mean.numpy().reshape(1, 3, 1, 1, 1)) / \
        np.sqrt(bn.running_var.numpy().reshape(1, 3, 1, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), running, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="5D"):
        bn(Tensor(rnd(2, 3, 4, 4)))


# ---- transposed convolutions ----
def conv_transpose_ref(x, w, b, stride, padding, out_pad, groups, dilation):
    n, cin, *ins = x.shape
    k, cout_g, cin_g = w.shape[2:], w.shape[1], cin // groups
    full = [(i - 1) * s + d * (kk - 1) + 1 + op for i, s, d, kk, op in zip(ins, stride, dilation, k, out_pad)]
    out = np.zeros((n, groups * cout_g, *full))
    for g in range(groups):
        xg, wg = x[:, g * cin_g:(g + 1) * cin_g], w[g * cin_g:(g + 1) * cin_g]
        for offs in np.ndindex(*k):
            part = np.einsum("nc...,co->no...", xg, wg[(slice(None), slice(None)) + offs])
            box = tuple(slice(o * d, o * d + (i - 1) * s + 1, s)
                        for o, d, i, s in zip(offs, dilation, ins, stride))
            out[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + box] += part
    out = out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(padding, full))]
    return out if b is None else out + b.reshape((1, -1) + (1,) * len(ins))


@pytest.mark.parametrize("cls,args,kwargs,shape", [
    (nn.ConvTranspose1d, (4, 6, 3), {}, (2, 4, 7)),
    (nn.ConvTranspose1d, (4, 6, 3), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2,
                                     "dilation": 2}, (2, 4, 7)),
    (nn.ConvTranspose1d, (4, 6, 3), {"stride": 3, "bias": False}, (4, 7)),
    (nn.ConvTranspose3d, (4, 2, (2, 3, 2)), {"stride": (2, 1, 2), "padding": (0, 1, 1)}, (2, 4, 3, 4, 3))])
def test_conv_transpose_modules(cls, args, kwargs, shape):
    conv = cls(*args, **kwargs)
    nd, groups = cls.nd, kwargs.get("groups", 1)
    assert conv.weight.shape == (args[0], args[1] // groups) + triple(args[2], nd)
    assert list(conv.state_dict()) == (["weight", "bias"] if kwargs.get("bias", True) else ["weight"])
    w = rnd(*conv.weight.shape, seed=1)
    b = rnd(args[1], seed=2) if conv.bias is not None else None
    conv.weight = Tensor(w, requires_grad=True)
    conv.bias = None if b is None else Tensor(b, requires_grad=True)
    x = rnd(*shape, seed=3)
    batched = x if len(shape) == nd + 2 else x[None]
    want = conv_transpose_ref(batched, w, b, triple(kwargs.get("stride", 1), nd),
                              triple(kwargs.get("padding", 0), nd),
                              triple(kwargs.get("output_padding", 0), nd), groups,
                              triple(kwargs.get("dilation", 1), nd))
    want = want if len(shape) == nd + 2 else want[0]
    np.testing.assert_allclose(conv(Tensor(x)).numpy(), want, rtol=1e-10, atol=1e-12)


def test_conv_transpose_output_size_and_initialisation():
    conv = nn.ConvTranspose1d(4, 6, 3, stride=3, padding=1)
    x = Tensor(rnd(2, 4, 7))
    assert conv(x).shape == (2, 6, 19)  # the smallest size, (7 - 1) * 3 - 2 + 3
    for size in ([20], (2, 6, 21)):
        assert conv(x, size).shape == (2, 6, size[-1])
        np.testing.assert_allclose(conv(x, size).numpy()[..., :19], conv(x).numpy(), rtol=1e-6, atol=1e-6)
    assert conv(Tensor(rnd(4, 7)), [6, 21]).shape == (6, 21)
    with pytest.raises(ValueError, match="outside"):
        conv(x, [22])
    with pytest.raises(ValueError, match="padding_mode"):
        nn.ConvTranspose1d(4, 6, 3, padding_mode="reflect")
    Tensor.manual_seed(0)
    conv = nn.ConvTranspose1d(4, 256, 3)  # torch's fan_in: weight dims 1.. (256 * 3), not 4 * 3
    bound = 1 / math.sqrt(256 * 3)
    for t in (conv.weight, conv.bias):
        top = np.abs(t.numpy()).max()
        assert 0.9 * bound < top <= bound, f"init max {top}, expected just under {bound}"


# ---- nn.Transformer ----
ENCODER_KEYS = [f"self_attn.{n}" for n in ("in_proj_weight", "in_proj_bias", "out_proj.weight",
                                           "out_proj.bias")] + \
    [f"{m}.{p}" for m in ("linear1", "linear2", "norm1", "norm2") for p in ("weight", "bias")]


def transformer_keys(encoders, decoders, bias=True):
    keys = [f"encoder.layers.{i}.{k}" for i in range(encoders) for k in ENCODER_KEYS] + \
        ["encoder.norm.weight", "encoder.norm.bias"] + \
        [f"decoder.layers.{i}.{k}" for i in range(decoders) for k in DECODER_KEYS] + \
        ["decoder.norm.weight", "decoder.norm.bias"]
    return keys if bias else [k for k in keys if not k.endswith("bias")]


@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_is_decoder_of_encoder(batch_first):
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=3,
                           dim_feedforward=16, dropout=0.0, batch_first=batch_first).eval()
    assert list(model.state_dict()) == transformer_keys(2, 3)
    assert isinstance(model.encoder.norm, nn.LayerNorm) and model.decoder.num_layers == 3
    src, tgt = rnd(2, 5, 8, seed=1), rnd(2, 4, 8, seed=2)
    if not batch_first:
        src, tgt = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
    causal = nn.Transformer.generate_square_subsequent_mask(4)
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    kwargs = {"tgt_mask": causal, "src_key_padding_mask": Tensor(pad),
              "memory_key_padding_mask": Tensor(pad)}
    out = model(Tensor(src), Tensor(tgt), **kwargs).numpy()
    memory = model.encoder(Tensor(src), src_key_padding_mask=Tensor(pad))
    by_hand = model.decoder(Tensor(tgt), memory, tgt_mask=causal, memory_key_padding_mask=Tensor(pad))
    np.testing.assert_allclose(out, by_hand.numpy(), rtol=1e-6, atol=1e-6)
    unmasked = model(Tensor(src), Tensor(tgt)).numpy()
    assert np.abs(unmasked - out).max() > 1e-3, "the masks must change the output"
    first = (lambda a: a[:1]) if batch_first else (lambda a: a[:, :1])  # sample 0 alone
    np.testing.assert_allclose(model(Tensor(first(src)), Tensor(first(tgt))).numpy(), first(unmasked),
                               rtol=1e-5, atol=1e-5)


def test_transformer_square_subsequent_mask():
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    assert mask.dtype.name == "float32" and mask.shape == (4, 4)
    np.testing.assert_array_equal(mask.numpy(), np.triu(np.full((4, 4), -np.inf), 1))
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype="float64").dtype.name == "float64"


def test_transformer_initialisation_bias_and_custom_parts():
    Tensor.manual_seed(0)
    model = nn.Transformer(16, 4, 2, 1, 32, bias=False)
    assert list(model.state_dict()) == transformer_keys(2, 1, bias=False)
    for name, p in model.named_parameters():
        if p.ndim > 1:  # xavier uniform, each layer drawn on its own
            bound = math.sqrt(6 / (p.shape[0] + p.shape[1]))
            top = np.abs(p.numpy()).max()
            assert 0.9 * bound < top <= bound, f"{name}: max {top}, xavier bound {bound}"
    w0, w1 = (model.encoder.layers[i].linear1.weight.numpy() for i in (0, 1))
    assert not np.array_equal(w0, w1), "each layer's matrices are redrawn"
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32), 1)
    weight = encoder.layers[0].linear1.weight
    before = weight.numpy().copy()
    custom = nn.Transformer(16, 4, dim_feedforward=32, custom_encoder=encoder)
    assert custom.encoder is encoder and len(custom.decoder.layers) == 6
    assert custom.encoder.layers[0].linear1.weight is weight and not np.array_equal(weight.numpy(), before)
    with pytest.raises(ValueError, match="d_model"):
        custom(Tensor(rnd(3, 2, 8)), Tensor(rnd(3, 2, 16)))
    with pytest.raises(RuntimeError, match="batch number"):
        custom(Tensor(rnd(3, 2, 16)), Tensor(rnd(3, 1, 16)))
