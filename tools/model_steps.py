"""Training steps of models that are not in bench/, lazyten against PyTorch eager, one process.

    python tools/model_steps.py [mlp|transformer|cnn ...] [--steps 30] [--jit]

Each model is written once against an `nn`/`F` pair and built twice, as torch.nn and as
lazyten.nn, with the same weights (torch's initialisation, copied through the state dict).
A step is zero_grad, forward, cross entropy, backward, Adam. The first six steps of both
run on the same batches and their losses are compared (a wrong gradient or optimiser
shows as a diverging loss); then each side's best mean step time over five rounds is
printed with the ratio torch / lazyten (> 1: lazyten faster); the two sides take turns
round by round. torch runs on 2 threads.

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
"""
from __future__ import annotations
import argparse
import time

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
    raise ValueError(f"unknown model {kind!r}: {', '.join(SIZES)}")



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
    if kind in ("cnn", "vgg", "mobile", "gn_cnn"):
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


def stepper(lib, model, kind: str, batches, use_jit: bool = False):
    """step(i): one training step on batches[i % len] with Adam; returns a realized loss."""
    if lib.__name__ == "torch":
        opt, tensor = lib.optim.Adam(model.parameters(), lr=1e-3), lib.from_numpy
        F = lib.nn.functional
    else:
        opt = lib.optim.Adam(list(model.parameters()), lr=1e-3)
        tensor, F = lib.Tensor, lib.nn.functional
    pos = np.arange(64)

    def step(x, y):
        opt.zero_grad()
        out = model(x, tensor(pos)) if kind == "transformer" else model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    if use_jit and lib.__name__ != "torch":
        step = lib.jit(step)
    data = [(tensor(x), tensor(y)) for x, y in batches]
    return lambda i: float(step(*data[i % len(data)]).item())


def best_seconds(steps_of: list, steps: int, rounds: int = 5) -> list[float]:
    """Each step function's best mean time over `rounds` rounds of steps // rounds steps;
    the functions take turns round by round, so a machine whose speed drifts (as shared
    ones do, by up to 2x within minutes) slows both sides alike."""
    best, per_round = [float("inf")] * len(steps_of), max(1, steps // rounds)
    for r in range(rounds):
        for k, step in enumerate(steps_of):
            start = time.perf_counter()
            for i in range(per_round):
                step(r * per_round + i)
            best[k] = min(best[k], (time.perf_counter() - start) / per_round)
    return best


def compare(kind: str, size: int, steps: int, use_jit: bool) -> str:
    import torch
    import lazyten
    torch.set_num_threads(2)
    torch.manual_seed(0)
    reference = build(torch.nn, torch.nn.functional, kind)
    model = build(lazyten.nn, lazyten.nn.functional, kind)
    model.load_state_dict({k: lazyten.Tensor(v.detach().numpy().copy())
                           for k, v in reference.state_dict().items()})
    rng = np.random.default_rng(0)
    batches = [batch(kind, size, rng) for _ in range(4)]
    ints = [(x.astype(np.int64) if kind in ("transformer", *_TOKENS) else x, y.astype(np.int64))
            for x, y in batches]
    torch_step = stepper(torch, reference, kind, ints)
    lazy_step = stepper(lazyten, model, kind, ints, use_jit)
    want, got = [torch_step(i) for i in range(6)], [lazy_step(i) for i in range(6)]
    error = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(want, got))
    t_torch, t_lazy = best_seconds([torch_step, lazy_step], steps)
    return (f"{kind:<12} b{size:<4} {'jit ' if use_jit else ''}loss rel. diff {error:.1e}  "
            f"torch {t_torch * 1e3:8.2f} ms  lazyten {t_lazy * 1e3:8.2f} ms  "
            f"ratio {t_torch / t_lazy:5.2f}x")


SIZES = {"mlp": (32, 512), "transformer": (4, 16), "cnn": (8, 32), "vgg": (16, 64),
         "mobile": (16, 64), "conv1d": (16, 64), "rnn": (8, 32), "lstm": (8, 32),
         "nn_lstm": (8, 32), "nn_gru": (8, 32), "encoder": (4, 16), "unet": (4, 16),
         "deconv": (8, 32), "mlp_ln": (64, 256), "gn_cnn": (8, 32), "bilstm": (8, 32),
         "bn_mlp": (64, 256), "wavenet": (16, 64), "embbag": (64, 512)}
_TOKENS = ("rnn", "lstm", "nn_lstm", "nn_gru", "bilstm", "embbag")  # models of token sequences (16 of 64)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"of {', '.join(SIZES)}; all if none")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--jit", action="store_true", help="lazyten's step under lazyten.jit")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in SIZES]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(SIZES)}")
    for kind in args.models or list(SIZES):
        for size in SIZES[kind]:
            print(compare(kind, size, args.steps, args.jit), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
