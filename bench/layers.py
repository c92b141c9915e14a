"""Registry of the layer-class workloads (issue 15): the shapes people run, not only ours.

Groups (none is part of a plain run: name them in --only, or pass --all):
  softmax_widths  softmax, log_softmax, layernorm (affine) over the last axis, at widths
                  that are not a multiple of the vector width (1000, 3000, 50257)
  attention       softmax(q @ k^T * scale) @ v over (batch, heads, seq, head_dim); forward,
                  and forward + backward (gradients of q, k, v; of `(out * grad).sum()`,
                  and at a ViT shape of `out.sum()`, whose seed is a broadcast constant)
  conv3x3         3x3 conv, padding 1, stride 1, with bias, 16-256 channels, 8-56 pixels;
                  forward, and forward + backward (gradients of input, weight, bias)
  activations     sin, forward; exact (erf) gelu, forward, and forward + backward (the gradient of
                  `(out * grad).sum()`), at a BERT MLP's hidden width 3072
  embedding       an Embedding's forward and weight gradient at a GPT-2 vocabulary, a
                  bag of words and a width that is no multiple of the vector width
  mlp_train       one training step of a 784-256-256-10 MLP with Adam, with and without jit
  dispatch        one small realized op (16 elements), per call

Imports numpy only. `inputs(w, rng)` builds every workload's seeded float32 inputs, which
lazy_layers.py (lazyten) and base_layers.py (numpy, torch) both use.
"""
from __future__ import annotations
import math

import numpy as np

from bench.spec import Target, Workload

NORM_SHAPES = [(64, 1000), (4096, 1000), (1024, 3000), (256, 50257)]  # (rows, width)
ATTN_SHAPES = [(2, 8, 256, 64), (1, 12, 512, 64), (4, 4, 128, 32)]  # (batch, heads, seq, dim)
SUM_SEEDED_SHAPE = (4, 12, 197, 64)  # a ViT-B/16 layer's attention, seeded by out.sum()
CONV_SHAPES = [(8, 16, 56), (16, 64, 28), (16, 128, 14), (8, 256, 8)]  # (N, C in = out, H = W)
GELU_SHAPES = [(64, 3072), (512, 3072)]  # (rows, width)
EMB_SHAPES = [(50257, 768, 256), (5000, 64, 3072), (1000, 100, 512)]  # (vocab, width, tokens)
MLP_SIZES = (784, 256, 256, 10)
DISPATCH_N = 16
DISPATCH_CALLS = 200  # ops per timed call: one op is a few microseconds


def _speed(text: str, ratio: float) -> tuple[Target, ...]:
    return (Target(text, "speed", ratio, "torch"),)


def _norms() -> list[Workload]:
    out = []
    for op in ("softmax", "log_softmax", "layernorm"):
        for rows, width in NORM_SHAPES:
            # torch.compile only for softmax: each compile costs 10-30 s on 2 cores
            compiled = ("torch_compile",) if op == "softmax" else ()
            out.append(Workload(
                f"{op}_{rows}x{width}", "softmax_widths",
                f"{op} over the last axis of {rows}x{width} fp32"
                + (" (weight, bias)" if op == "layernorm" else ""),
                nbytes=4.0 * 2 * rows * width, baselines=("numpy", "torch") + compiled,
                targets=_speed(f"{op} width {width} >= 1.0x torch eager", 1.0),
                deadline=(40.0, 25.0), default=False,
                params={"op": op, "rows": rows, "width": width}))
    return out


def _attention() -> list[Workload]:
    out = []
    for shape in ATTN_SHAPES:
        b, h, s, d = shape
        tag = "x".join(map(str, shape))
        fwd = 4.0 * b * h * s * s * d  # two batched matmuls
        out.append(Workload(
            f"attn_fwd_{tag}", "attention", f"softmax(q @ k^T * scale) @ v, b,h,s,d = {tag}",
            flops=fwd, baselines=("numpy", "torch", "torch_compile"),
            targets=_speed(f"attention fwd {tag} >= 1.0x torch eager", 1.0),
            deadline=(40.0, 25.0), default=False, params={"shape": shape, "backward": False}))
        out.append(Workload(
            f"attn_fwdbwd_{tag}", "attention", f"attention {tag} forward + grads of q, k, v",
            flops=3 * fwd, baselines=("numpy", "torch"),
            targets=_speed(f"attention fwd+bwd {tag} >= 1.0x torch eager", 1.0),
            deadline=(60.0, 35.0), default=False, params={"shape": shape, "backward": True}))
    # `out.sum().backward()`, the idiom of tests and tutorials: its seed is a constant, so
    # dP = ones @ v^T and dV = P^T @ ones are reduces repeated along a broadcast (D136)
    b, h, s, d = SUM_SEEDED_SHAPE
    tag = "x".join(map(str, SUM_SEEDED_SHAPE))
    out.append(Workload(
        f"attn_sumbwd_{tag}", "attention", f"attention {tag} forward + out.sum().backward()",
        flops=12.0 * b * h * s * s * d, baselines=("numpy", "torch"),
        targets=_speed(f"attention sum().backward() {tag} >= 1.0x torch eager", 1.0),
        deadline=(60.0, 35.0), default=False,
        params={"shape": SUM_SEEDED_SHAPE, "backward": True, "seed": "sum"}))
    return out


def _conv() -> list[Workload]:
    out = []
    for shape in CONV_SHAPES:
        n, c, hw = shape
        tag = f"{n}x{c}x{hw}"
        fwd = 2.0 * n * c * c * hw * hw * 9
        out.append(Workload(
            f"conv3x3_fwd_{tag}", "conv3x3",
            f"conv {c}->{c} 3x3 pad 1 + bias, batch {n}, {hw}x{hw}", flops=fwd,
            baselines=("numpy", "torch", "torch_compile"),
            targets=_speed(f"3x3 conv fwd {tag} >= 0.8x torch eager", 0.8),
            deadline=(40.0, 25.0), default=False, params={"shape": shape, "backward": False}))
        out.append(Workload(
            f"conv3x3_fwdbwd_{tag}", "conv3x3",
            f"3x3 conv {tag} forward + grads of input, weight, bias", flops=3 * fwd,
            baselines=("numpy", "torch"),
            targets=_speed(f"3x3 conv fwd+bwd {tag} >= 0.8x torch eager", 0.8),
            deadline=(60.0, 35.0), default=False, params={"shape": shape, "backward": True}))
    return out


def _gelu() -> list[Workload]:
    out = []
    for rows, width in GELU_SHAPES:
        tag = f"{rows}x{width}"
        for backward in (False, True):
            kind = "fwdbwd" if backward else "fwd"
            out.append(Workload(
                f"gelu_{kind}_{tag}", "activations",
                f"exact gelu of {tag} fp32" + (", forward + gradient" if backward else ""),
                nbytes=4.0 * rows * width * (4 if backward else 2), baselines=("torch",),
                targets=_speed(f"gelu {kind} {tag} >= 1.0x torch eager", 1.0),
                deadline=(40.0, 25.0), default=False,
                params={"shape": (rows, width), "backward": backward}))
        out.append(Workload(  # (D139)
            f"sin_fwd_{tag}", "activations", f"sin of {tag} fp32",
            nbytes=8.0 * rows * width, baselines=("torch",),
            targets=_speed(f"sin fwd {tag} >= 1.0x torch eager", 1.0), deadline=(40.0, 25.0),
            default=False, params={"shape": (rows, width), "backward": False, "fn": "sin"}))
    return out


def _embedding() -> list[Workload]:
    out = []
    for vocab, width, tokens in EMB_SHAPES:
        tag = f"{vocab}x{width}x{tokens}"
        out.append(Workload(
            f"embedding_fwdbwd_{tag}", "embedding",
            f"embedding {vocab}x{width} fp32 of {tokens} tokens, forward + weight gradient",
            nbytes=4.0 * (vocab * width + 3 * tokens * width), baselines=("numpy", "torch"),
            targets=_speed(f"embedding fwd+bwd {tag} >= 1.0x torch eager", 1.0),
            deadline=(40.0, 25.0), default=False, params={"shape": (vocab, width, tokens)}))
    return out


def _mlp(batch: int, jit: bool) -> Workload:
    ratio = 1.5 if jit else 1.0
    return Workload(
        f"mlp_b{batch}" + ("_jit" if jit else ""), "mlp_train",
        f"MLP 784-256-256-10 train step (fwd+bwd+Adam), batch {batch}"
        + (", lazyten.jit" if jit else ""),
        items=batch, baselines=("torch",), baseline_key=f"mlp_b{batch}",
        targets=_speed(f"MLP step b{batch}{', jit' if jit else ''} >= {ratio:g}x torch eager",
                       ratio),
        deadline=(40.0, 30.0), default=False, params={"batch": batch, "jit": jit})


_DISPATCH = {"realize": "(a + b).realize()", "numpy": "(a + b).numpy()",
             "scalar": "(a * s).realize() with a new Python number s each call"}


def dispatch_scales(calls: int) -> list[float]:
    """The numbers the `scalar` kind multiplies by: a new one on every call (D104)."""
    return [1.0 + k / 1024 for k in range(calls)]


def _dispatch() -> list[Workload]:
    return [Workload(
        f"dispatch_{kind}", "dispatch", f"{what} on {DISPATCH_N} fp32, per op",
        baselines=("numpy", "torch"), calls=DISPATCH_CALLS,
        targets=_speed(f"dispatch {kind}: within 3x torch eager's time", 1 / 3),
        deadline=(30.0, 20.0), default=False, params={"kind": kind})
        for kind, what in _DISPATCH.items()]


WORKLOADS: list[Workload] = (_norms() + _attention() + _conv() + _gelu() + _embedding()
                             + [_mlp(b, j) for b in (64, 256) for j in (False, True)]
                             + _dispatch())


def mlp_params(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (out, in), bias (out,)) per layer, PyTorch-like uniform init, float32."""
    rng = np.random.default_rng(seed)
    out = []
    for fan_in, fan_out in zip(MLP_SIZES, MLP_SIZES[1:]):
        bound = 1 / math.sqrt(fan_in)
        out.append((rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                    rng.uniform(-bound, bound, (fan_out,)).astype(np.float32)))
    return out


def mlp_batch(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (n, 784) float32 and labels (n,) int32."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, MLP_SIZES[0]), dtype=np.float32),
            rng.integers(0, MLP_SIZES[-1], n).astype(np.int32))


def inputs(w: Workload, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The seeded float32 inputs of one layer-class workload (MLP data: mlp_batch; an
    embedding's token ids are int64)."""
    normal = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    if w.group == "softmax_widths":
        d = {"x": normal(w.params["rows"], w.params["width"])}
        if w.params["op"] == "layernorm":
            d["weight"] = 1 + 0.1 * normal(w.params["width"])
            d["bias"] = 0.1 * normal(w.params["width"])
        return d
    if w.group == "attention":
        d = {k: normal(*w.params["shape"]) for k in ("q", "k", "v", "grad")}
        if w.params.get("seed") == "sum":  # the gradient out.sum() seeds: ones
            d["grad"] = np.ones(w.params["shape"], np.float32)
        return d
    if w.group == "conv3x3":
        n, c, hw = w.params["shape"]
        bound = 1 / math.sqrt(c * 9)
        return {"x": normal(n, c, hw, hw),
                "weight": rng.uniform(-bound, bound, (c, c, 3, 3)).astype(np.float32),
                "bias": rng.uniform(-bound, bound, c).astype(np.float32),
                "grad": normal(n, c, hw, hw)}
    if w.group == "activations":  # gelu's inputs: N(0, 3^2), reaching its far tail
        return {"x": 3 * normal(*w.params["shape"]), "grad": normal(*w.params["shape"])}
    if w.group == "embedding":  # int64 token ids
        vocab, width, tokens = w.params["shape"]
        return {"weight": normal(vocab, width), "idx": rng.integers(0, vocab, tokens),
                "grad": normal(tokens, width)}
    if w.group == "dispatch":
        return {"a": normal(DISPATCH_N), "b": normal(DISPATCH_N)}
    raise KeyError(f"no generic inputs for {w.name}")
