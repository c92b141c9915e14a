"""nn.TransformerEncoder, nn.TransformerDecoderLayer and nn.TransformerDecoder
(lazyten/nn/transformer.py) and copy.deepcopy of tensors and modules: state_dict keys
against torch's documented names (hard-coded), forward values against float64 numpy
references built from each layer's parameters, gradients against finite differences."""
import copy

import numpy as np
import pytest

from gradcheck import check_grad
from lazyten import Tensor, nn
from tests.unit.test_nn_layers_more import layer_norm, mha_params, mha_ref, rnd

# torch.nn's names for TransformerDecoderLayer(8, 2, 16) (torch's naming, not ours)
DECODER_KEYS = [f"{attn}.{name}" for attn in ("self_attn", "multihead_attn")
                for name in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")] + \
    ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"] + \
    [f"norm{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")]


def test_deepcopy_copies_the_data_and_keeps_leaves_only():
    lin = nn.Linear(4, 3)
    lin.weight.grad = Tensor(np.ones((3, 4), np.float32))
    twin = copy.deepcopy(lin)
    np.testing.assert_array_equal(twin.weight.numpy(), lin.weight.numpy())
    assert twin.weight.requires_grad and twin.weight.dtype == lin.weight.dtype
    np.testing.assert_array_equal(twin.weight.grad.numpy(), np.ones((3, 4)))
    before = lin.weight.numpy().copy()
    twin.weight.assign(twin.weight * 0 + 5).realize()  # in place, in the copy's memory only
    np.testing.assert_array_equal(lin.weight.numpy(), before)
    np.testing.assert_array_equal(twin.weight.numpy(), np.full((3, 4), 5))
    assert lin.weight.lazydata.realized is not twin.weight.lazydata.realized
    with pytest.raises(RuntimeError, match="not a leaf"):
        copy.deepcopy(lin.weight * 2)


def _decoder_params(layer, seed):
    """float64 values for every parameter outside the attentions, set in place."""
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(v.shape) * 0.5 for k, v in layer.state_dict().items()
              if "attn" not in k}
    for key, value in arrays.items():
        module, name = key.split(".")
        setattr(getattr(layer, module), name, Tensor(value, requires_grad=True))
    return arrays


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_layer_against_numpy(norm_first):
    layer = nn.TransformerDecoderLayer(8, 2, 16, norm_first=norm_first, batch_first=True).eval()
    assert list(layer.state_dict()) == DECODER_KEYS
    own, other = mha_params(layer.self_attn, seed=1), mha_params(layer.multihead_attn, seed=2)
    arrays = _decoder_params(layer, 3)
    tgt, memory = rnd(2, 4, 8, seed=4), rnd(2, 6, 8, seed=5)
    causal = np.triu(np.ones((4, 4), bool), 1)  # True: do not attend
    pad = np.zeros((2, 6), bool)
    pad[0, 4:] = True  # sample 0 ignores its last two memory positions

    def norm(i, h):
        return layer_norm(h, arrays[f"norm{i}.weight"], arrays[f"norm{i}.bias"])

    def attend_self(h):
        return mha_ref(h, h, h, *own, 2, np.where(causal, -np.inf, 0))[0]

    def attend_memory(h):
        return mha_ref(h, memory, memory, *other, 2, np.where(pad, -np.inf, 0)[:, None, None])[0]

    def ff(h):
        hidden = np.maximum(h @ arrays["linear1.weight"].T + arrays["linear1.bias"], 0)
        return hidden @ arrays["linear2.weight"].T + arrays["linear2.bias"]
    if norm_first:
        h = tgt + attend_self(norm(1, tgt))
        h = h + attend_memory(norm(2, h))
        ref = h + ff(norm(3, h))
    else:
        h = norm(1, tgt + attend_self(tgt))
        h = norm(2, h + attend_memory(h))
        ref = norm(3, h + ff(h))
    out = layer(Tensor(tgt), Tensor(memory), tgt_mask=Tensor(causal),
                memory_key_padding_mask=Tensor(pad))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-8, atol=1e-10)
    check_grad(lambda t, m: layer(t, m, tgt_is_causal=True, tgt_mask=Tensor(causal)),
               tgt, memory)


@pytest.mark.parametrize("batch_first", [True, False])
def test_stacks_copy_their_layer_and_apply_the_copies_in_turn(batch_first):
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first),
                                3, norm=nn.LayerNorm(8)).eval()
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, batch_first=batch_first),
                                2).eval()
    assert list(enc.state_dict())[:2] == ["layers.0.self_attn.in_proj_weight",
                                          "layers.0.self_attn.in_proj_bias"]
    assert "norm.weight" in enc.state_dict() and "layers.2.norm2.bias" in enc.state_dict()
    assert sorted(dec.state_dict()) == sorted(f"layers.{i}.{k}" for i in (0, 1) for k in DECODER_KEYS)
    first, second = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    np.testing.assert_array_equal(first.numpy(), second.numpy())  # copies of one layer...
    assert first.lazydata.realized is not second.lazydata.realized  # ...each its own memory
    for i, layer in enumerate(enc.layers):  # now different values, each layer its own
        layer.linear1.weight = Tensor(rnd(16, 8, seed=20 + i) * 0.3, requires_grad=True)
    src, tgt = rnd(2, 5, 8, seed=6), rnd(2, 3, 8, seed=7)
    lay = (lambda a: a) if batch_first else (lambda a: np.ascontiguousarray(a.transpose(1, 0, 2)))
    memory = enc(Tensor(lay(src)))
    h = Tensor(lay(src))
    for layer in enc.layers:
        h = layer(h)
    want = layer_norm(h.numpy(), enc.norm.weight.numpy(), enc.norm.bias.numpy())
    np.testing.assert_allclose(memory.numpy(), want, rtol=1e-5, atol=1e-5)
    out = dec(Tensor(lay(tgt)), memory)
    h = Tensor(lay(tgt))
    for layer in dec.layers:
        h = layer(h, memory)
    np.testing.assert_allclose(out.numpy(), h.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="num_layers"):
        nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 0)
