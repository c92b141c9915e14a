"""LeNet-5 (MNIST shapes) for the conv and training benchmarks: seeded parameters, seeded
batches, and a plain numpy reference used both as the numpy baseline of the conv layers
and to check lazyten's results.

    conv 1->6 5x5, relu, maxpool 2  (28x28 -> 24x24 -> 12x12)
    conv 6->16 5x5, relu, maxpool 2 (12x12 -> 8x8 -> 4x4)
    flatten 256, linear 120, relu, linear 84, relu, linear 10, cross entropy
"""
from __future__ import annotations
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SHAPES = {
    "conv1.weight": (6, 1, 5, 5), "conv1.bias": (6,),
    "conv2.weight": (16, 6, 5, 5), "conv2.bias": (16,),
    "fc1.weight": (120, 256), "fc1.bias": (120,),
    "fc2.weight": (84, 120), "fc2.bias": (84,),
    "fc3.weight": (10, 84), "fc3.bias": (10,),
}
LAYERS = ["conv1", "conv2", "fc1", "fc2", "fc3"]


def init_params(seed: int = 0) -> dict[str, np.ndarray]:
    """PyTorch-like default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), float32."""
    rng = np.random.default_rng(seed)
    out = {}
    for layer in LAYERS:
        wshape = SHAPES[f"{layer}.weight"]
        bound = 1 / math.sqrt(int(np.prod(wshape[1:])))
        out[f"{layer}.weight"] = rng.uniform(-bound, bound, wshape).astype(np.float32)
        out[f"{layer}.bias"] = rng.uniform(-bound, bound, SHAPES[f"{layer}.bias"]).astype(np.float32)
    return out


def batch(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 1, 28, 28) float32 and labels (n,) int32."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 1, 28, 28), dtype=np.float32),
            rng.integers(0, 10, n).astype(np.int32))


def np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Valid, stride-1 convolution as im2col + one BLAS matmul (tensordot)."""
    win = sliding_window_view(x, w.shape[2:], axis=(2, 3))           # N,C,Ho,Wo,kh,kw
    out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))         # N,Ho,Wo,O
    out = out.transpose(0, 3, 1, 2)
    return out + b.reshape(1, -1, 1, 1)


def np_maxpool2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def np_convs(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """The two conv layers (each conv, relu, maxpool) forward."""
    h = np_maxpool2(np.maximum(np_conv2d(x, p["conv1.weight"], p["conv1.bias"]), 0))
    return np_maxpool2(np.maximum(np_conv2d(h, p["conv2.weight"], p["conv2.bias"]), 0))


def np_loss(x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray]) -> float:
    """Mean cross entropy of the whole network, in float64 (the reference loss)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    h = np_convs(x.astype(np.float64), p).reshape(x.shape[0], -1)
    h = np.maximum(h @ p["fc1.weight"].T + p["fc1.bias"], 0)
    h = np.maximum(h @ p["fc2.weight"].T + p["fc2.bias"], 0)
    logits = h @ p["fc3.weight"].T + p["fc3.bias"]
    m = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
    return float(np.mean(lse - logits[np.arange(len(y)), y]))
