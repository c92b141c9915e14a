"""Random models trained side by side with PyTorch: a generator of the bugs that only a
whole training step shows (a layer's gradient, an optimiser option, a shape the kernels
had not met), comparing losses and weights step by step.

    python tools/model_fuzz.py [--models 40] [--seed 0] [--steps 4] [--jit]

Each model is a random stack written once against an `nn` module (torch.nn or lazyten.nn):
vector inputs (Linear, activations, LayerNorm, BatchNorm1d), images (Conv2d of kernel 1-5,
stride 1-2, padding 0-2, groups, BatchNorm2d / GroupNorm / InstanceNorm2d, pooling,
adaptive average pooling), sequences (Conv1d), or token ids (Embedding, LayerNorm,
attention through scaled_dot_product_attention, or a TransformerEncoderLayer), odd sizes
throughout. Weights are
torch's initialisation copied through the state dict; both sides train a few steps with a
random optimiser (SGD with momentum / nesterov / weight decay, Adam, AdamW, amsgrad) on a
random loss (cross entropy with or without label smoothing, MSE). A model fails when a
loss differs by more than 1e-4 relative (float32; the two sides sum in different orders),
a gradient of the first step by more than 1e-3 relative or 1e-5 of the largest gradient
(and, compared with torch's float64 gradient, by more than ten times torch's float32
error: a gradient that is 0 up to rounding is noise on both sides),
a weight after SGD steps by more than 1e-4 (Adam's weights are not compared: it turns
gradients that are 0 up to rounding into full steps), or when lazyten raises where
torch does not. Needs torch (not a
dependency of lazyten: this is a tool, not a test).
"""
from __future__ import annotations
import argparse
import traceback

import numpy as np

ACTS = ["relu", "gelu", "silu", "tanh", "sigmoid", "elu", "leaky_relu", "softplus", "mish",
        "hardswish"]


def _act(F, name: str, x):
    return getattr(F, name)(x)


def spec(rng) -> dict:
    """A random model description (plain data, so both libraries build the same model)."""
    kind = rng.choice(["vector", "image", "tokens", "sequence", "encoder"])
    s: dict = {"kind": kind, "batch": int(rng.choice([1, 3, 8, 17])),
               "classes": int(rng.choice([2, 7, 10])), "acts": [], "layers": []}
    if kind == "vector":
        width = int(rng.choice([5, 16, 33, 100]))
        s["in"] = width
        for _ in range(rng.integers(1, 4)):
            out = int(rng.choice([3, 8, 31, 64, 130]))
            s["layers"].append(("linear", width, out, bool(rng.random() < 0.8)))
            norm = rng.choice(["none", "layernorm", "batchnorm"])
            s["layers"].append((str(norm), out))
            s["layers"].append(("act", str(rng.choice(ACTS))))
            width = out
        s["layers"].append(("linear", width, s["classes"], True))
    elif kind == "image":
        ch, size = int(rng.choice([1, 3, 4])), int(rng.choice([7, 12, 16]))
        s["in"], s["size"] = ch, size
        for _ in range(rng.integers(1, 3)):
            out = int(rng.choice([4, 8, 12]))
            k = int(rng.choice([1, 3, 5]))
            stride = int(rng.choice([1, 2]))
            pad = int(rng.integers(0, k // 2 + 1))
            groups = int(rng.choice([1, g])) if (g := np.gcd(ch, out)) > 1 else 1
            if size + 2 * pad < k:
                continue
            s["layers"].append(("conv", ch, out, k, stride, pad, groups, bool(rng.random() < 0.7)))
            size = (size + 2 * pad - k) // stride + 1
            norm = rng.choice(["none", "batchnorm2d", "groupnorm", "instancenorm"])
            if norm == "groupnorm" and out % 2 == 0:
                s["layers"].append(("groupnorm", 2, out))
            elif norm != "none" and norm != "groupnorm":
                s["layers"].append((str(norm), out))
            s["layers"].append(("act", str(rng.choice(ACTS))))
            if size >= 4 and rng.random() < 0.5:
                s["layers"].append((str(rng.choice(["maxpool", "avgpool"])), 2))
                size //= 2
            ch = out
        if rng.random() < 0.5:  # global pooling to an odd size, as a ResNet head
            side = int(rng.choice([1, 3]))
            s["layers"].append(("adaptive", side))
            size = side
        s["layers"].append(("flatten",))
        s["layers"].append(("linear", ch * size * size, s["classes"], True))
    elif kind == "sequence":  # (batch, channels, length): Conv1d stacks
        ch, length = int(rng.choice([1, 3])), int(rng.choice([9, 20]))
        s["in"], s["size"] = ch, length
        for _ in range(rng.integers(1, 3)):
            out, k = int(rng.choice([4, 6])), int(rng.choice([1, 3]))
            s["layers"].append(("conv1d", ch, out, k, int(rng.choice([1, 2])), k // 2))
            length = (length + 2 * (k // 2) - k) // s["layers"][-1][4] + 1
            s["layers"].append(("act", str(rng.choice(ACTS))))
            ch = out
        s["layers"].append(("flatten",))
        s["layers"].append(("linear", ch * length, s["classes"], True))
    else:
        vocab, d = int(rng.choice([11, 50, 300])), int(rng.choice([8, 24, 32]))
        t = int(rng.choice([3, 9, 16]))
        s.update(vocab=vocab, d=d, t=t, heads=int(rng.choice([1, 2, 4])) if d % 4 == 0 else 1,
                 causal=bool(rng.random() < 0.5), norm_first=bool(rng.random() < 0.5),
                 activation=str(rng.choice(["relu", "gelu"])))
        s["layers"] = [("linear", d, s["classes"], True)]
    s["loss"] = str(rng.choice(["ce", "ce_smooth", "mse"]))
    s["opt"] = str(rng.choice(["sgd", "sgd_momentum", "sgd_nesterov_wd", "adam", "adamw",
                               "adam_amsgrad"]))
    return s


def build(nn, F, s: dict):
    """The model of `s` for one library: a Module with the same parameter names on both."""
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            mods = []
            for layer in s["layers"]:
                name = layer[0]
                if name == "linear":
                    mods.append(nn.Linear(layer[1], layer[2], bias=layer[3]))
                elif name == "conv":
                    _, cin, cout, k, stride, pad, groups, bias = layer
                    mods.append(nn.Conv2d(cin, cout, k, stride=stride, padding=pad, groups=groups,
                                          bias=bias))
                elif name == "layernorm":
                    mods.append(nn.LayerNorm(layer[1]))
                elif name == "batchnorm":
                    mods.append(nn.BatchNorm1d(layer[1]))
                elif name == "batchnorm2d":
                    mods.append(nn.BatchNorm2d(layer[1]))
                elif name == "groupnorm":
                    mods.append(nn.GroupNorm(layer[1], layer[2]))
                elif name == "instancenorm":
                    mods.append(nn.InstanceNorm2d(layer[1], affine=True))
                elif name == "conv1d":
                    _, cin, cout, k, stride, pad = layer
                    mods.append(nn.Conv1d(cin, cout, k, stride=stride, padding=pad))
                elif name == "adaptive":
                    mods.append(nn.AdaptiveAvgPool2d(layer[1]))
                else:
                    mods.append(None)
            self.mods = nn.ModuleList([m for m in mods if m is not None])
            if s["kind"] in ("tokens", "encoder"):
                self.emb = nn.Embedding(s["vocab"], s["d"])
                self.ln = nn.LayerNorm(s["d"])
                self.qkv = nn.Linear(s["d"], 3 * s["d"])
            if s["kind"] == "encoder":
                self.enc = nn.TransformerEncoderLayer(s["d"], s["heads"], 2 * s["d"], dropout=0.0,
                                                      activation=s["activation"], batch_first=True,
                                                      norm_first=s["norm_first"])

        def forward(self, x):
            if s["kind"] == "tokens":
                h = self.ln(self.emb(x))
                b, t, d = h.shape
                q, k, v = self.qkv(h).reshape(b, t, 3, s["heads"], d // s["heads"]).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"])
                x = (a.permute(0, 2, 1, 3).reshape(b, t, d) + h).mean(1)
            if s["kind"] == "encoder":
                x = self.enc(self.ln(self.emb(x))).mean(1)
            it = iter(self.mods)
            for layer in s["layers"]:
                name = layer[0]
                if name == "act":
                    x = _act(F, layer[1], x)
                elif name == "maxpool":
                    x = F.max_pool2d(x, layer[1])
                elif name == "avgpool":
                    x = F.avg_pool2d(x, layer[1])
                elif name == "flatten":
                    x = x.reshape(x.shape[0], -1)
                elif name != "none":
                    x = next(it)(x)
            return x
    return Model()


def optimizer(optim, params, name: str):
    if name == "sgd":
        return optim.SGD(params, lr=0.05)
    if name == "sgd_momentum":
        return optim.SGD(params, lr=0.05, momentum=0.9)
    if name == "sgd_nesterov_wd":
        return optim.SGD(params, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)
    if name == "adam":
        return optim.Adam(params, lr=0.01, betas=(0.8, 0.95))
    if name == "adamw":
        return optim.AdamW(params, lr=0.01, weight_decay=0.1)
    return optim.Adam(params, lr=0.01, amsgrad=True)


def train_step(F, model, opt, s: dict):
    """step(x, y): zero_grad, forward, the loss of `s`, backward, the optimiser's step;
    returns the loss."""
    def step(x, y):
        opt.zero_grad()
        out = model(x)
        if s["loss"] == "mse":
            loss = F.mse_loss(out, F.one_hot(y, s["classes"]).float())
        else:
            loss = F.cross_entropy(out, y, label_smoothing=0.1 if s["loss"] == "ce_smooth" else 0.0)
        loss.backward()
        opt.step()
        return loss
    return step


def data(s: dict, rng):
    b = s["batch"]
    if s["kind"] == "vector":
        x = rng.standard_normal((b, s["in"])).astype(np.float32)
    elif s["kind"] == "sequence":
        x = rng.standard_normal((b, s["in"], s["size"])).astype(np.float32)
    elif s["kind"] == "image":
        x = rng.standard_normal((b, s["in"], s["size"], s["size"])).astype(np.float32)
    else:
        x = rng.integers(0, s["vocab"], (b, s["t"])).astype(np.int64)
    y = rng.integers(0, s["classes"], b).astype(np.int64)
    return x, y


def run(lib, s: dict, batches, state=None, use_jit=False):
    """Train `steps` steps; returns (losses, final weights by name, initial state)."""
    F = lib.nn.functional
    model = build(lib.nn, F, s)
    if state is None:
        state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    else:
        make = lib.from_numpy if lib.__name__ == "torch" else lib.Tensor
        model.load_state_dict({k: make(v.copy()) for k, v in state.items()})
    model.train()
    opt = optimizer(lib.optim, list(model.parameters()), s["opt"])
    tensor = lib.from_numpy if lib.__name__ == "torch" else lib.Tensor
    step = train_step(F, model, opt, s)
    if use_jit and lib.__name__ != "torch":
        step = lib.jit(step)
    losses, first_grads = [], {}
    for x, y in batches:
        losses.append(float(step(tensor(x.copy()), tensor(y.copy())).item()))
        if not first_grads:  # the first step's gradients, before the optimiser moved anything
            first_grads = {k: p.grad.detach().numpy().copy() for k, p in model.named_parameters()
                           if p.grad is not None}
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return losses, weights, state, first_grads


def reference_grads(torch, s: dict, batches, state: dict, loss: float) -> dict:
    """The first step's gradients in float64 (torch, the same weights and batch), or {}
    where its loss is not float32's (then it is no reference for them)."""
    torch.set_default_dtype(torch.float64)
    try:
        state64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v
                   for k, v in state.items()}
        first = [tuple(a.astype(np.float64) if a.dtype == np.float32 else a
                       for a in batches[0])]
        losses, _, _, grads = run(torch, s, first, state64)
    finally:
        torch.set_default_dtype(torch.float32)
    return grads if abs(losses[0] - loss) <= 1e-4 * max(1.0, abs(loss)) else {}


def _as_close_as_torch(got, want, exact, scale: float) -> bool:
    """A float32 gradient that differs from torch's: right if it is within a few times
    torch's own float32 error of the float64 gradient (a gradient that is 0 up to
    rounding, as a bias before BatchNorm's, is noise of that size on both sides)."""
    if exact is None:
        return False
    err_torch = np.abs(want.astype(np.float64) - exact)
    return bool(np.all(np.abs(got.astype(np.float64) - exact) <= 10 * err_torch + 1e-5 * scale))


def check(s: dict, seed: int, steps: int, use_jit: bool) -> str | None:
    import torch
    import lazyten
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    batches = [data(s, rng) for _ in range(steps)]
    try:
        want, want_w, state, want_g = run(torch, s, batches)
    except Exception as e:  # noqa: BLE001  # torch refuses the model: not a finding
        return f"skipped (torch raised {type(e).__name__}: {e})"
    try:
        got, got_w, _, got_g = run(lazyten, s, batches, state, use_jit)
    except Exception:  # noqa: BLE001
        return "lazyten raised:\n" + traceback.format_exc(limit=4)
    for i, (a, b) in enumerate(zip(want, got)):
        if not abs(a - b) <= 1e-4 * max(1.0, abs(a)):
            return f"loss of step {i}: torch {a!r}, lazyten {b!r}"
    scale = max([float(np.abs(g).max()) for g in want_g.values()] + [1e-30])
    exact: dict | None = None
    for name, g in want_g.items():
        if name not in got_g:
            return f"no gradient of {name} at step 0"
        if np.allclose(got_g[name], g, rtol=1e-3, atol=1e-5 * scale):
            continue
        if exact is None:
            exact = reference_grads(torch, s, batches, state, want[0])
        if not _as_close_as_torch(got_g[name], g, exact.get(name), scale):
            return f"gradient of {name} at step 0 differs"
    for name, w in want_w.items():
        if name not in got_w:
            return f"no {name} in lazyten's state dict"
        if s["opt"].startswith("adam"):
            # Adam divides by sqrt(v): a gradient that is 0 up to rounding (a key
            # projection's bias, a bias before BatchNorm) moves its weight by lr per step
            # in a direction set by the rounding, differently on each side
            continue
        scale = max(1.0, float(np.abs(w).max()))
        if not np.allclose(got_w[name], w, rtol=1e-4, atol=1e-4 * scale):
            return f"{name}: max difference {np.abs(got_w[name] - w).max():.2e}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--jit", action="store_true", help="lazyten's step under lazyten.jit")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    failures = skipped = 0
    kinds: dict[str, int] = {}
    for i in range(args.models):
        seed = args.seed * 100_000 + i
        s = spec(np.random.default_rng(seed))
        kinds[str(s["kind"])] = kinds.get(str(s["kind"]), 0) + 1
        problem = check(s, seed, args.steps, args.jit)
        if problem is not None and problem.startswith("skipped"):
            skipped += 1
            print(f"model {seed}: {problem}", flush=True)
        elif problem is not None:
            failures += 1
            print(f"model {seed}: {problem}\n  spec: {s}", flush=True)
    print(f"{args.models} models ({kinds}), {failures} failed, {skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
