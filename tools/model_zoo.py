"""The models of tools/model_steps.py and tools/step_phases.py, each written once against
an `nn`/`F` pair (torch.nn or lazyten.nn and their functional modules), and their batches.

- mlp: 100-300-300-7 with relu and gelu, batch 32 and 512;
- transformer: one pre-norm block (token and position embeddings, causal
  scaled_dot_product_attention over 4 heads, gelu MLP, a vocabulary head), d=128, 64
  tokens, vocabulary 512, batch 4 and 16;
- cnn: three 3x3 convs with BatchNorm2d (one of stride 2, a residual add), global
  average pool, linear; 32x32x3 inputs, batch 8 and 32;
- vgg: two 3x3 convs with relu and 2x2 max pooling, two linears; batch 16 and 64;
- mobile: a stride-2 conv, a depthwise 3x3 conv (groups = channels), a pointwise 1x1
  conv, each with BatchNorm2d and relu6, adaptive average pool, linear; batch 16 and 64;
- conv1d: two 1-d convs (kernel 5, 8 -> 32 -> 32 channels over 128 samples) with relu,
  adaptive average pool, linear; batch 16 and 64;
- rnn: an Elman RNN written by hand (embedding, 16 steps of tanh(x_t Wx + h Wh), a
  vocabulary head on every step's state), d=128, vocabulary 64; batch 8 and 32;
- lstm: an LSTM written by hand (embedding, 16 steps of four gates from one Linear of
  x_t and one of h, chunked; sigmoid and tanh), d=64, vocabulary 64; batch 8 and 32;
- nn_lstm, nn_gru: embedding, nn.LSTM / nn.GRU (d=64, batch-first, 16 steps), a
  vocabulary head on every step; torch runs its own fused recurrent kernels; batch 8, 32;
- encoder: nn.TransformerEncoderLayer (d=64, 4 heads, feed-forward 256, batch-first,
  no dropout) over 32 positions, linear; batch 4 and 16;
- unet: a 3x3 conv with BatchNorm2d and relu, 2x2 max pooling, a 3x3 conv, nearest 2x
  upsampling, the skip concatenated along the channels, a 1x1 conv to a class per pixel;
  32x32x3 inputs, batch 4 and 16;
- deconv: two stride-2 3x3 convs, two stride-2 2x2 ConvTranspose2d back to 32x32, a class
  per pixel; batch 8 and 32;
- mlp_ln: 100-256-256-7 with LayerNorm after each hidden linear, silu and gelu; batch 64
  and 256;
- gn_cnn: 3x3 convs with GroupNorm, silu and mish (one of stride 2), bilinear 2x
  upsampling, a conv to 12 channels, PixelShuffle(2), InstanceNorm2d, leaky relu, global
  average pool, linear; 32x32x3 inputs, batch 8 and 32;
- bilstm: embedding, a 2-layer bidirectional nn.LSTM (d=64, 16 steps), a vocabulary head
  on every step; batch 8 and 32;
- bn_mlp: 100-256-256-7 with BatchNorm1d after each hidden linear, leaky relu and elu;
  batch 64 and 256;
- wavenet: a 1x1 conv (8 -> 32 channels over 128 samples), four causal gated layers
  (tanh and sigmoid of 2-tap convs at dilations 1, 2, 4, 8, left-padded, residual), mean
  over time, linear; batch 16 and 64;
- embbag: a bag of words, embedding (5000 x 64) of 48 tokens averaged, 64-128-10 MLP;
  batch 64 and 512.
- vit: a vision transformer, 4x4 patches of 32x32x3 inputs embedded by a strided conv
  (d=64), a class token and learned positions, one pre-norm TransformerEncoderLayer (4
  heads, feed-forward 128), LayerNorm, a linear head on the class token; batch 8 and 32;
- resnet: a 3x3 conv stem and three basic blocks (two 3x3 convs without bias, each with
  BatchNorm2d; the second and third of stride 2 with a 1x1 conv and BatchNorm2d on the
  shortcut), 16-32-64 channels, global average pool, linear; batch 8 and 32;
- gpt: token and position embeddings (vocabulary 256, 32 tokens, d=96), two pre-norm gelu
  TransformerEncoderLayers (3 heads) under a causal float mask, LayerNorm, an unbiased
  vocabulary head; batch 4 and 16.

vit, resnet and gpt train as their usual loops do: the gradients clipped to norm 1
(`clip_grad_norm_`) before each step, and gpt with AdamW (weight decay 0.01).
"""
from __future__ import annotations

import numpy as np


def build(nn, F, kind: str):
    """The model `kind` written against `nn` (torch.nn or lazyten.nn) and `F` (functional)."""
    if kind == "mlp":
        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.l1, self.l2, self.l3 = nn.Linear(100, 300), nn.Linear(300, 300), nn.Linear(300, 7)

            def forward(self, x):
                return self.l3(F.gelu(self.l2(F.relu(self.l1(x)))))
        return MLP()
    if kind == "transformer":
        class Block(nn.Module):
            def __init__(self, d=128, heads=4, vocab=512, tokens=64):
                super().__init__()
                self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(tokens, d)
                self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.ln2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
                self.lnf, self.head, self.heads = nn.LayerNorm(d), nn.Linear(d, vocab), heads

            def forward(self, idx, pos):
                x = self.emb(idx) + self.pos(pos)
                b, t, d = x.shape
                qkv = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads)
                q, k, v = qkv.permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(a.permute(0, 2, 1, 3).reshape(b, t, d))
                x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
                return self.head(self.lnf(x))
        return Block()
    if kind == "cnn":
        class CNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
                self.c2, self.b2 = nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.BatchNorm2d(64)
                self.c3, self.b3 = nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64)
                self.fc = nn.Linear(64, 10)

            def forward(self, x):
                x = F.relu(self.b1(self.c1(x)))
                x = F.relu(self.b2(self.c2(x)))
                x = F.relu(self.b3(self.c3(x)) + x)
                return self.fc(F.avg_pool2d(x, 16).reshape(x.shape[0], 64))
        return CNN()
    if kind == "vgg":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))
    if kind == "mobile":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.Conv2d(32, 64, 1), nn.BatchNorm2d(64), nn.ReLU6(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    if kind == "conv1d":
        return nn.Sequential(
            nn.Conv1d(8, 32, 5, padding=2), nn.ReLU(), nn.Conv1d(32, 32, 5, padding=2), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 10))
    if kind == "rnn":
        class RNN(nn.Module):
            def __init__(self, d=128, vocab=64):
                super().__init__()
                self.emb, self.wx, self.wh = nn.Embedding(vocab, d), nn.Linear(d, d), nn.Linear(d, d)
                self.head = nn.Linear(d, vocab)

            def forward(self, idx):
                xs, h, outs = self.emb(idx), None, []
                for t in range(idx.shape[1]):
                    z = self.wx(xs[:, t])
                    h = (z if h is None else z + self.wh(h)).tanh()
                    outs.append(h)
                return self.head(_stacked(outs))
        return RNN()
    if kind == "lstm":
        class LSTM(nn.Module):
            def __init__(self, d=64, vocab=64):
                super().__init__()
                self.emb, self.wx, self.wh = nn.Embedding(vocab, d), nn.Linear(d, 4 * d), nn.Linear(d, 4 * d)
                self.head = nn.Linear(d, vocab)

            def forward(self, idx):
                xs, outs = self.emb(idx), []
                h = c = xs[:, 0] * 0
                for t in range(idx.shape[1]):
                    i, f, g, o = (self.wx(xs[:, t]) + self.wh(h)).chunk(4, -1)
                    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
                    h = o.sigmoid() * c.tanh()
                    outs.append(h)
                return self.head(_stacked(outs))
        return LSTM()
    if kind in ("nn_lstm", "nn_gru"):
        class Recurrent(nn.Module):
            def __init__(self, d=64, vocab=64):
                super().__init__()
                layer = nn.LSTM if kind == "nn_lstm" else nn.GRU
                self.emb, self.rnn = nn.Embedding(vocab, d), layer(d, d, batch_first=True)
                self.head = nn.Linear(d, vocab)

            def forward(self, idx):
                return self.head(self.rnn(self.emb(idx))[0])
        return Recurrent()
    if kind == "encoder":
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
                self.head = nn.Linear(64, 10)

            def forward(self, x):
                return self.head(self.layer(x))
        return Encoder()
    if kind == "unet":
        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.down = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
                self.mid = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
                self.up = nn.Upsample(scale_factor=2)
                self.out = nn.Conv2d(48, 10, 1)

            def forward(self, x):
                skip = self.down(x)
                deep = self.up(self.mid(F.max_pool2d(skip, 2)))
                return self.out(_cat([skip, deep], 1)).permute(0, 2, 3, 1)
        return UNet()
    if kind == "deconv":
        class Deconv(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
                self.dec = nn.Sequential(nn.ConvTranspose2d(32, 16, 2, stride=2), nn.ReLU(),
                                         nn.ConvTranspose2d(16, 10, 2, stride=2))

            def forward(self, x):
                return self.dec(self.enc(x)).permute(0, 2, 3, 1)
        return Deconv()
    if kind == "mlp_ln":
        class NormedMLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(100, 256), nn.LayerNorm(256), nn.SiLU(),
                                          nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU(),
                                          nn.Linear(256, 7))

            def forward(self, x):
                return self.body(x)
        return NormedMLP()
    if kind == "gn_cnn":
        class GroupNormCNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(3, 32, 3, padding=1), nn.GroupNorm(8, 32), nn.SiLU(),
                    nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.GroupNorm(8, 32), nn.Mish(),
                    nn.Upsample(scale_factor=2, mode="bilinear"), nn.Conv2d(32, 12, 3, padding=1),
                    nn.PixelShuffle(2), nn.InstanceNorm2d(3), nn.LeakyReLU(0.1),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 10))

            def forward(self, x):
                return self.body(x)
        return GroupNormCNN()
    if kind == "bilstm":
        class BiLSTM(nn.Module):
            def __init__(self, d=64, vocab=64):
                super().__init__()
                self.emb = nn.Embedding(vocab, d)
                self.rnn = nn.LSTM(d, d, num_layers=2, bidirectional=True, batch_first=True)
                self.head = nn.Linear(2 * d, vocab)

            def forward(self, idx):
                return self.head(self.rnn(self.emb(idx))[0])
        return BiLSTM()
    if kind == "bn_mlp":
        class BatchNormMLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(100, 256), nn.BatchNorm1d(256), nn.LeakyReLU(),
                                          nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ELU(),
                                          nn.Linear(256, 7))

            def forward(self, x):
                return self.body(x)
        return BatchNormMLP()
    if kind == "wavenet":
        class WaveNet(nn.Module):
            def __init__(self, c=32):
                super().__init__()
                self.inp = nn.Conv1d(8, c, 1)
                self.filters = nn.ModuleList([nn.Conv1d(c, c, 2, dilation=d) for d in (1, 2, 4, 8)])
                self.gates = nn.ModuleList([nn.Conv1d(c, c, 2, dilation=d) for d in (1, 2, 4, 8)])
                self.head = nn.Linear(c, 10)

            def forward(self, x):
                h = self.inp(x)
                for d, f, g in zip((1, 2, 4, 8), self.filters, self.gates):
                    padded = F.pad(h, (d, 0))  # causal: each output sees the past only
                    h = h + f(padded).tanh() * g(padded).sigmoid()
                return self.head(h.mean(-1))
        return WaveNet()
    if kind == "embbag":
        class BagOfWords(nn.Module):
            def __init__(self, vocab=5000, d=64):
                super().__init__()
                self.emb = nn.Embedding(vocab, d)
                self.mlp = nn.Sequential(nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 10))

            def forward(self, idx):
                return self.mlp(self.emb(idx).mean(1))
        return BagOfWords()
    if kind == "vit":
        class ViT(nn.Module):
            def __init__(self, d=64, patch=4):
                super().__init__()
                self.patch = nn.Conv2d(3, d, patch, stride=patch)
                self.cls = nn.Parameter(_tensor(nn, np.zeros((1, 1, d), np.float32)))
                self.pos = nn.Parameter(_tensor(nn, np.zeros((1, 65, d), np.float32)))
                self.enc = nn.TransformerEncoderLayer(d, 4, 128, dropout=0.0, batch_first=True,
                                                      norm_first=True)
                self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

            def forward(self, x):
                tokens = self.patch(x).flatten(2).transpose(1, 2)
                tokens = _cat([self.cls.expand(x.shape[0], 1, tokens.shape[-1]), tokens], 1)
                return self.head(self.norm(self.enc(tokens + self.pos))[:, 0])
        return ViT()
    if kind == "resnet":
        class Basic(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
                self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
                self.down = None if stride == 1 and cin == cout else nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

            def forward(self, x):
                y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
                return F.relu(y + (x if self.down is None else self.down(x)))

        class ResNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                          nn.ReLU())
                self.blocks = nn.Sequential(Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 64, 2))
                self.fc = nn.Linear(64, 10)

            def forward(self, x):
                return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))
        return ResNet()
    if kind == "gpt":
        class GPT(nn.Module):
            def __init__(self, d=96, vocab=256, tokens=32):
                super().__init__()
                self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(tokens, d)
                self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(
                    d, 3, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu")
                    for _ in range(2)])
                self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
                causal = np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)
                self.register_buffer("mask", _tensor(nn, causal), persistent=False)
                self.register_buffer("at", _tensor(nn, np.arange(tokens)), persistent=False)

            def forward(self, idx):
                x = self.emb(idx) + self.pos(self.at)
                for block in self.blocks:
                    x = block(x, src_mask=self.mask)
                return self.head(self.ln(x))
        return GPT()
    raise ValueError(f"unknown model {kind!r}: {', '.join(SIZES)}")



def _tensor(nn, array: np.ndarray):
    """A tensor of `array` in the library `nn` belongs to."""
    if nn.__name__.startswith("torch"):
        import torch
        return torch.from_numpy(array)
    from lazyten import Tensor
    return Tensor(array)


def _cat(parts: list, dim: int):
    """lazyten's cat is a Tensor method (as tinygrad's); torch's a function."""
    if hasattr(parts[0], "stack"):
        return parts[0].cat(*parts[1:], dim=dim)
    import torch
    return torch.cat(parts, dim=dim)


def _stacked(outs: list):
    """Each step's state stacked along axis 1 (lazyten's stack is a Tensor method, as
    tinygrad's; torch's a function)."""
    if hasattr(outs[0], "stack"):
        return outs[0].stack(*outs[1:], dim=1)
    import torch
    return torch.stack(outs, dim=1)


def batch(kind: str, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, integer labels) for one step."""
    if kind == "transformer":
        return rng.integers(0, 512, (size, 64)), rng.integers(0, 512, (size, 64))
    if kind == "gpt":
        return rng.integers(0, 256, (size, 32)), rng.integers(0, 256, (size, 32))
    if kind in ("cnn", "vgg", "mobile", "gn_cnn", "vit", "resnet"):
        return rng.standard_normal((size, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, size)
    if kind in ("unet", "deconv"):  # a class per pixel
        return (rng.standard_normal((size, 3, 32, 32)).astype(np.float32),
                rng.integers(0, 10, (size, 32, 32)))
    if kind == "embbag":
        return rng.integers(0, 5000, (size, 48)), rng.integers(0, 10, size)
    if kind in ("conv1d", "wavenet"):
        return rng.standard_normal((size, 8, 128)).astype(np.float32), rng.integers(0, 10, size)
    if kind in _TOKENS:
        return rng.integers(0, 64, (size, 16)), rng.integers(0, 64, (size, 16))
    if kind == "encoder":
        return rng.standard_normal((size, 32, 64)).astype(np.float32), rng.integers(0, 10, (size, 32))
    return rng.standard_normal((size, 100)).astype(np.float32), rng.integers(0, 7, size)


SIZES = {"mlp": (32, 512), "transformer": (4, 16), "cnn": (8, 32), "vgg": (16, 64),
         "mobile": (16, 64), "conv1d": (16, 64), "rnn": (8, 32), "lstm": (8, 32),
         "nn_lstm": (8, 32), "nn_gru": (8, 32), "encoder": (4, 16), "unet": (4, 16),
         "deconv": (8, 32), "mlp_ln": (64, 256), "gn_cnn": (8, 32), "bilstm": (8, 32),
         "bn_mlp": (64, 256), "wavenet": (16, 64), "embbag": (64, 512),
         "vit": (8, 32), "resnet": (8, 32), "gpt": (4, 16)}
_TOKENS = ("rnn", "lstm", "nn_lstm", "nn_gru", "bilstm", "embbag", "gpt")  # models of token sequences
CLIPPED = ("vit", "resnet", "gpt")  # clip_grad_norm_(parameters, 1.0) before each step
ADAMW = ("gpt",)                    # AdamW(weight_decay=0.01) instead of Adam
