"""numpy forms of the layer-class workloads (bench/layers.py): the numpy baseline, and, run
in float64, the reference every lazyten result is checked against.

Each function takes and returns plain arrays in the input's dtype. Gradients are those of
`(out * grad).sum()`, the loss both lazyten and torch differentiate.
"""
from __future__ import annotations
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from bench.layers import mlp_batch, mlp_params


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def log_softmax(x: np.ndarray) -> np.ndarray:
    t = x - x.max(axis=-1, keepdims=True)
    t -= np.log(np.exp(t).sum(axis=-1, keepdims=True))
    return t


def layernorm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    t = x - x.mean(axis=-1, keepdims=True)
    t *= 1 / np.sqrt((t * t).mean(axis=-1, keepdims=True) + eps)
    t *= weight
    t += bias
    return t


def norm(op: str, d: dict[str, np.ndarray]) -> np.ndarray:
    """The softmax_widths op `op` on inputs `d`."""
    if op == "layernorm":
        return layernorm(d["x"], d["weight"], d["bias"])
    return {"softmax": softmax, "log_softmax": log_softmax}[op](d["x"])


_erfc = np.vectorize(math.erfc, otypes=[float])  # (numpy has no erfc: one call an element)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact gelu, x Phi(x) (float64: erfc per element, slow)."""
    return 0.5 * x * _erfc(-x / math.sqrt(2))


def gelu_grad(x: np.ndarray, grad: np.ndarray) -> np.ndarray:
    return grad * (0.5 * _erfc(-x / math.sqrt(2)) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi))


def embedding_grad(shape: tuple[int, ...], idx: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """The weight gradient of `(weight[idx] * grad).sum()`: each token's row of grad added
    to the row it picks."""
    out = np.zeros(shape, grad.dtype)
    np.add.at(out, idx, grad)
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(softmax(q @ k^T * scale) @ v, the softmax weights)."""
    p = softmax(q @ k.swapaxes(-1, -2) * (1 / np.sqrt(q.shape[-1])))
    return p @ v, p


def attention_grads(q, k, v, grad) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of q, k, v."""
    scale = 1 / np.sqrt(q.shape[-1])
    _, p = attention(q, k, v)
    dv = p.swapaxes(-1, -2) @ grad
    dp = grad @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) * scale
    return ds @ k, ds.swapaxes(-1, -2) @ q, dv


def _conv(xpad: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid stride-1 convolution (N,C,H,W) x (O,C,kh,kw) -> (N,O,H',W'): im2col + BLAS."""
    win = sliding_window_view(xpad, w.shape[2:], axis=(2, 3))        # N,C,Ho,Wo,kh,kw
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def _pad1(x: np.ndarray) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))


def conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 conv, padding 1, stride 1, plus bias."""
    return _conv(_pad1(x), w) + b.reshape(1, -1, 1, 1)


def conv3x3_grads(x, w, b, grad) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of input, weight, bias: the input's is the full correlation of the
    output gradient with the flipped, transposed kernel."""
    dx = _conv(_pad1(grad), w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    win = sliding_window_view(_pad1(x), (3, 3), axis=(2, 3))         # N,C,H,W,3,3
    dw = np.tensordot(grad, win, axes=([0, 2, 3], [0, 2, 3]))        # O,C,3,3
    return dx, dw, grad.sum(axis=(0, 2, 3))


def mlp_loss(batch: int) -> float:
    """Mean cross entropy of the MLP on the first batch, in float64."""
    x, y = mlp_batch(batch, seed=1)
    h = x.astype(np.float64)
    params = mlp_params()
    for i, (w, b) in enumerate(params):
        h = h @ w.astype(np.float64).T + b
        if i < len(params) - 1:
            h = np.maximum(h, 0)
    m = h.max(axis=1, keepdims=True)
    lse = np.log(np.exp(h - m).sum(axis=1)) + m[:, 0]
    return float(np.mean(lse - h[np.arange(len(y)), y]))
