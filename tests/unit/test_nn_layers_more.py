"""Layers added for PyTorch models (nn/layers.py, activations.py, shape_layers.py,
container.py's ModuleDict/ParameterList, attention_layers.py): state_dict keys against
torch's documented names (hard-coded here), PyTorch's default initialisation, forward
values against float64 numpy references, gradients against finite differences."""
import math

import numpy as np
import pytest

import lazyten.nn.functional as F
from gradcheck import check_grad
from lazyten import Tensor, nn

erf = np.vectorize(math.erf)


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# torch.nn's state_dict keys for the same constructor call (torch's naming, not ours)
TORCH_KEYS = [
    (lambda: nn.Conv1d(2, 4, 3), ["weight", "bias"]),
    (lambda: nn.Conv3d(2, 4, 3, bias=False), ["weight"]),
    (lambda: nn.PReLU(3), ["weight"]),
    (lambda: nn.RMSNorm(8), ["weight"]),
    (lambda: nn.RMSNorm(8, elementwise_affine=False), []),
    (lambda: nn.InstanceNorm2d(3), []),
    (lambda: nn.InstanceNorm1d(3, affine=True), ["weight", "bias"]),
    (lambda: nn.MultiheadAttention(8, 2), ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                           "out_proj.bias"]),
    (lambda: nn.MultiheadAttention(8, 2, bias=False), ["in_proj_weight", "out_proj.weight"]),
    (lambda: nn.TransformerEncoderLayer(8, 2, 16),
     ["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]),
    (lambda: nn.ModuleDict({"enc": nn.Linear(2, 3),
                            "head": nn.Sequential(nn.Conv1d(1, 2, 1), nn.PReLU())}),
     ["enc.weight", "enc.bias", "head.0.weight", "head.0.bias", "head.1.weight"]),
    (lambda: nn.ParameterList([Tensor(np.zeros(2)), Tensor(np.zeros(3))]), ["0", "1"]),
    (lambda: nn.Sequential(nn.Conv1d(1, 2, 1), nn.SiLU(), nn.AdaptiveAvgPool1d(1),
                           nn.Flatten(), nn.Dropout1d(), nn.Linear(2, 2)),
     ["0.weight", "0.bias", "5.weight", "5.bias"]),
]


@pytest.mark.parametrize("make,keys", TORCH_KEYS)
def test_state_dict_keys_are_torchs(make, keys):
    module = make()
    assert list(module.state_dict()) == keys, f"{module!r}"
    copy = make()  # the load_state_dict(torch_model.state_dict()) path of tools/model_steps
    copy.load_state_dict({k: v.numpy() for k, v in module.state_dict().items()})
    for k, v in copy.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), module.state_dict()[k].numpy())


def test_default_initialisation_bounds():
    def within(t, bound, what):
        values = np.abs(t.numpy())
        assert values.max() <= bound and values.max() > 0.8 * bound, \
            f"{what}: max |value| {values.max()} for PyTorch's bound {bound}"
    conv = nn.Conv1d(6, 32, 5, groups=2)  # fan_in = 3 * 5
    within(conv.weight, 1 / math.sqrt(15), "Conv1d weight (kaiming_uniform a=sqrt 5)")
    within(conv.bias, 1 / math.sqrt(15), "Conv1d bias")
    within(nn.Conv3d(2, 16, 2).weight, 1 / math.sqrt(16), "Conv3d weight")
    mha = nn.MultiheadAttention(16, 4)
    within(mha.in_proj_weight, math.sqrt(6 / (16 + 48)), "in_proj_weight (xavier_uniform)")
    within(mha.out_proj.weight, 1 / math.sqrt(16), "out_proj.weight")
    assert not mha.in_proj_bias.numpy().any() and not mha.out_proj.bias.numpy().any()
    assert np.all(nn.PReLU(4, init=0.1).weight.numpy() == np.float32(0.1))
    assert np.all(nn.RMSNorm((2, 3)).weight.numpy() == 1)
    norm = nn.InstanceNorm2d(3, affine=True)
    assert np.all(norm.weight.numpy() == 1) and not norm.bias.numpy().any()
    assert all(p.requires_grad for p in mha.parameters()) and len(list(mha.parameters())) == 4


def test_conv_prelu_rmsnorm_instancenorm_layers():
    conv = nn.Conv1d(4, 6, 4, padding="same", dilation=2, groups=2)
    x = Tensor(rnd(2, 4, 9, seed=1).astype(np.float32))
    ref = F.conv1d(x, conv.weight, conv.bias, padding="same", dilation=2, groups=2)
    np.testing.assert_array_equal(conv(x).numpy(), ref.numpy())
    assert conv(x).shape == (2, 6, 9)
    conv3 = nn.Conv3d(2, 3, (1, 2, 3), stride=(1, 2, 1), padding=1)
    assert conv3(Tensor(np.ones((1, 2, 3, 4, 5), np.float32))).shape == (1, 3, 5, 3, 5)
    xs = rnd(2, 3, 4, 5, seed=2)
    prelu = nn.PReLU(3)
    prelu.weight = Tensor(np.array([0.1, -0.5, 2.0]), requires_grad=True)
    np.testing.assert_allclose(prelu(Tensor(xs)).numpy(), np.where(
        xs >= 0, xs, np.array([0.1, -0.5, 2.0])[:, None, None] * xs), rtol=1e-12)
    rms = nn.RMSNorm((4, 5), eps=1e-6)
    rms.weight = Tensor(rnd(4, 5, seed=3), requires_grad=True)
    ref = xs / np.sqrt((xs ** 2).mean((2, 3), keepdims=True) + 1e-6) * rnd(4, 5, seed=3)
    np.testing.assert_allclose(rms(Tensor(xs)).numpy(), ref, rtol=1e-12)
    inorm = nn.InstanceNorm2d(3)
    one = xs[0]  # unbatched (C, H, W)
    ref = (one - one.mean((1, 2), keepdims=True)) / np.sqrt(one.var((1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(inorm(Tensor(one)).numpy(), ref, rtol=1e-9, atol=1e-12)
    with pytest.raises(NotImplementedError):
        nn.InstanceNorm2d(3, track_running_stats=True)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mha_ref(q, k, v, w, b, ow, ob, heads, mask=0.0):
    """Batch-first (N, L, E) multi-head attention in float64; mask additive."""
    e = q.shape[-1]
    d = e // heads

    def split(x, i):
        y = x @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e]
        return y.reshape(y.shape[0], y.shape[1], heads, d).transpose(0, 2, 1, 3)
    weights = softmax(split(q, 0) @ split(k, 1).transpose(0, 1, 3, 2) / math.sqrt(d) + mask)
    out = (weights @ split(v, 2)).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return out @ ow.T + ob, weights


def mha_params(m, seed=0):
    rng = np.random.default_rng(seed)
    e = m.embed_dim
    arrays = [rng.standard_normal((3 * e, e)) * 0.5, rng.standard_normal(3 * e) * 0.1,
              rng.standard_normal((e, e)) * 0.5, rng.standard_normal(e) * 0.1]
    set_mha(m, *[Tensor(a, requires_grad=True) for a in arrays])
    return arrays


def set_mha(m, w, b, ow, ob):
    m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias = w, b, ow, ob


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_masks(batch_first, need_weights):
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    params = mha_params(m)
    q, kv = rnd(3, 5, 8, seed=4), rnd(3, 6, 8, seed=5)
    pad = np.zeros((3, 6), bool)
    pad[0, 4:] = True  # sample 0 ignores its last two keys
    causal = np.triu(np.ones((5, 6), bool), 1)  # True: do not attend
    mask = np.where(causal, -np.inf, 0)[None, None] + np.where(pad, -np.inf, 0)[:, None, None]
    ref, ref_w = mha_ref(q, kv, kv, *params, 2, mask)
    lay = (lambda a: a) if batch_first else (lambda a: a.transpose(1, 0, 2))
    out, weights = m(Tensor(lay(q)), Tensor(lay(kv)), Tensor(lay(kv)),
                     key_padding_mask=Tensor(pad), need_weights=need_weights,
                     attn_mask=Tensor(causal))
    np.testing.assert_allclose(out.numpy(), lay(ref), rtol=1e-9, atol=1e-12)
    if need_weights:
        np.testing.assert_allclose(weights.numpy(), ref_w.mean(1), rtol=1e-9, atol=1e-12)
    else:
        assert weights is None
    float_mask = rnd(6, 5, 6, seed=6)  # (N * heads, L, S), added
    out, per_head = m(Tensor(lay(q)), Tensor(lay(kv)), Tensor(lay(kv)),
                      attn_mask=Tensor(float_mask), average_attn_weights=False)
    ref, ref_w = mha_ref(q, kv, kv, *params, 2, float_mask.reshape(3, 2, 5, 6))
    np.testing.assert_allclose(out.numpy(), lay(ref), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(per_head.numpy(), ref_w, rtol=1e-9, atol=1e-12)


def test_multihead_attention_unbatched_causal_and_gradients():
    m = nn.MultiheadAttention(8, 4)
    params = mha_params(m, seed=1)
    x = rnd(5, 8, seed=7)
    causal = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, 0)
    ref, _ = mha_ref(x[None], x[None], x[None], *params, 4, causal)
    xt = Tensor(x)
    out, w = m(xt, xt, xt, need_weights=False, is_causal=True)
    np.testing.assert_allclose(out.numpy(), ref[0], rtol=1e-9, atol=1e-12)
    assert w is None and m(xt, xt, xt)[1].shape == (5, 5)

    def fn(q, kv, *ps):
        set_mha(m, *ps)
        return m(q, kv, kv, attn_mask=Tensor(np.triu(np.ones((4, 6), bool), 2)))[0]
    check_grad(fn, rnd(4, 2, 8, seed=8), rnd(6, 2, 8, seed=9), *params)


def layer_norm(x, w, b, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer(norm_first, activation):
    layer = nn.TransformerEncoderLayer(8, 2, 16, activation=activation, norm_first=norm_first,
                                       batch_first=True).eval()
    rng = np.random.default_rng(10)
    params = mha_params(layer.self_attn)
    arrays = {k: rng.standard_normal(v.shape) * 0.5 for k, v in layer.state_dict().items()
              if not k.startswith("self_attn")}
    for key, value in arrays.items():  # float64 parameters, set in place of the float32 ones
        module, name = key.split(".")
        setattr(getattr(layer, module), name, Tensor(value, requires_grad=True))
    act = (lambda h: np.maximum(h, 0)) if activation == "relu" else \
        (lambda h: 0.5 * h * (1 + erf(h / math.sqrt(2))))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True

    def attn(h):
        return mha_ref(h, h, h, *params, 2, np.where(pad, -np.inf, 0)[:, None, None])[0]

    def ff(h):
        hidden = act(h @ arrays["linear1.weight"].T + arrays["linear1.bias"])
        return hidden @ arrays["linear2.weight"].T + arrays["linear2.bias"]
    norm1 = lambda h: layer_norm(h, arrays["norm1.weight"], arrays["norm1.bias"])  # noqa: E731
    norm2 = lambda h: layer_norm(h, arrays["norm2.weight"], arrays["norm2.bias"])  # noqa: E731
    x = rnd(2, 5, 8, seed=11)
    if norm_first:
        h = x + attn(norm1(x))
        ref = h + ff(norm2(h))
    else:
        h = norm1(x + attn(x))
        ref = norm2(h + ff(h))
    out = layer(Tensor(x), src_key_padding_mask=Tensor(pad))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-8, atol=1e-10)
    check_grad(lambda t: layer(t), x)


def test_dropout_layers_follow_the_module_mode():
    x = Tensor(np.ones((8, 16, 3, 3), np.float32))
    drop = nn.Dropout2d(0.5)
    model = nn.Sequential(drop)
    out = model(x).numpy().reshape(8, 16, 9)
    assert np.all((out == 0).all(-1) | (out == 2).all(-1)) and (out == 0).any()
    model.eval()
    assert np.array_equal(model(x).numpy(), x.numpy())
    assert nn.Dropout3d(0.5)(Tensor(np.ones((4, 2, 2, 2), np.float32))).shape == (4, 2, 2, 2)


def test_parameter_free_layers_match_functionals():
    x = Tensor(rnd(2, 4, 6, 5, seed=12))
    cases = [
        (nn.ReLU6(), F.relu6(x)), (nn.SiLU(), F.silu(x)), (nn.Mish(), F.mish(x)),
        (nn.LeakyReLU(0.2), F.leaky_relu(x, 0.2)), (nn.ELU(0.5), F.elu(x, 0.5)),
        (nn.SELU(), F.selu(x)), (nn.CELU(2.0), F.celu(x, 2.0)),
        (nn.Softplus(2, 3), F.softplus(x, 2, 3)), (nn.Softsign(), F.softsign(x)),
        (nn.Hardswish(), F.hardswish(x)), (nn.Hardsigmoid(), F.hardsigmoid(x)),
        (nn.Hardtanh(-2, 0.5), F.hardtanh(x, -2, 0.5)), (nn.LogSigmoid(), F.logsigmoid(x)),
        (nn.Softmin(1), F.softmin(x, 1)), (nn.GLU(1), F.glu(x, 1)),
        (nn.Threshold(0.1, 20), F.threshold(x, 0.1, 20)), (nn.Tanhshrink(), F.tanhshrink(x)),
        (nn.MaxPool1d(3, 2, 1), F.max_pool1d(x.flatten(2), 3, 2, 1)),
        (nn.AvgPool1d(2), F.avg_pool1d(x.flatten(2), 2)),
        (nn.AdaptiveAvgPool1d(4), F.adaptive_avg_pool1d(x.flatten(2), 4)),
        (nn.AdaptiveMaxPool1d(7), F.adaptive_max_pool1d(x.flatten(2), 7)),
        (nn.AdaptiveAvgPool2d((4, 3)), F.adaptive_avg_pool2d(x, (4, 3))),
        (nn.AdaptiveMaxPool2d(4), F.adaptive_max_pool2d(x, 4)),
        (nn.PixelShuffle(2), F.pixel_shuffle(x, 2)),
        (nn.Upsample(scale_factor=2), x.interpolate(scale_factor=2)),
        (nn.Unflatten(1, (2, 2)), x.reshape(2, 2, 2, 6, 5)),
        (nn.ZeroPad2d((1, 0, 2, 3)), F.pad(x, (1, 0, 2, 3))),
        (nn.ConstantPad2d(1, 2.5), F.pad(x, (1, 1, 1, 1), value=2.5)),
        (nn.ConstantPad1d((0, 2), -1.0), F.pad(x, (0, 2), value=-1.0)),
    ]
    for module, ref in cases:
        takes_flat = isinstance(module, (nn.MaxPool1d, nn.AvgPool1d, nn.AdaptiveAvgPool1d,
                                         nn.AdaptiveMaxPool1d))
        out = module(x.flatten(2) if takes_flat else x)
        np.testing.assert_array_equal(out.numpy(), ref.numpy(), err_msg=repr(module))
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"


def test_module_dict_and_parameter_list():
    md = nn.ModuleDict({"b": nn.ReLU(), "a": nn.Linear(2, 2)})
    assert md.keys() == ["b", "a"] and list(md) == ["b", "a"] and len(md) == 2
    md["c"] = nn.Tanh()
    assert "c" in md and isinstance(md["c"], nn.Tanh)
    assert isinstance(md.pop("b"), nn.ReLU) and md.keys() == ["a", "c"]
    with pytest.raises(KeyError, match="zz"):
        md["zz"]
    with pytest.raises(KeyError, match="items"):
        md["items"] = nn.ReLU()  # a name the class uses
    with pytest.raises(TypeError):
        md["d"] = 3
    assert len(list(md.parameters())) == 2
    pl = nn.ParameterList([Tensor(np.zeros(2))])
    existing = Tensor(np.ones(3), requires_grad=True)
    pl.append(existing)
    assert len(pl) == 2 and pl[1] is existing and pl[-1] is existing
    assert pl[0].requires_grad and len(list(pl.parameters())) == 2
    pl[0] = Tensor(np.ones(4))
    assert pl[0].shape == (4,) and list(pl.state_dict()) == ["0", "1"]
    with pytest.raises(IndexError):
        pl[2]
