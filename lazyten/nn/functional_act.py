"""torch.nn.functional's activations and elementwise helpers over Tensor methods
(elementwise.py, pointwise.py), with PyTorch's argument names, order and defaults, plus
the few built here from Tensor ops: glu, prelu, threshold, hardshrink, softshrink, softmin,
normalize, cosine_similarity, pairwise_distance, dropout2d. Re-exported by nn/functional.py.
`inplace` is accepted for PyTorch code and changes nothing (a new Tensor is returned).
"""
from __future__ import annotations

from lazyten.tensor import Tensor

__all__ = ["relu6", "elu", "selu", "celu", "leaky_relu", "silu", "mish", "softplus",
           "softsign", "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid", "logsigmoid",
           "softmin", "glu", "tanhshrink", "threshold", "hardshrink", "softshrink", "prelu",
           "normalize", "cosine_similarity", "pairwise_distance", "dropout1d", "dropout2d",
           "dropout3d"]


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu6()


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return input.elu(alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.selu()


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return input.celu(alpha)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return input.leakyrelu(negative_slope)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.silu()


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.mish()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as PyTorch."""
    return (input * beta > threshold).where(input, input.softplus(beta))


def softsign(input: Tensor) -> Tensor:
    return input.softsign()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} must not exceed max_val {max_val}")
    return input.hardtanh(min_val, max_val)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardswish()


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return input.hardsigmoid()


def logsigmoid(input: Tensor) -> Tensor:
    return input.logsigmoid()


def softmin(input: Tensor, dim: int, dtype=None) -> Tensor:
    """softmax(-x) along dim."""
    return (-(input.cast(dtype) if dtype is not None else input)).softmax(dim)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of `dim` (its size must be even)."""
    size = input.shape[dim]
    if size % 2:
        raise ValueError(f"glu halves dim {dim}, whose size {size} is odd (input {input.shape})")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def tanhshrink(input: Tensor) -> Tensor:
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, else value."""
    return (input > threshold).where(input, value)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, else 0 (NaN stays NaN, as PyTorch)."""
    return ((input >= -lambd) & (input <= lambd)).where(0.0, input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd where x > lambd, x + lambd where x < -lambd, else 0 (NaN stays NaN, as
    PyTorch's vectorised CPU kernel; its scalar tail gives -0.0 for a negative x, this
    +0.0); lambd must not be negative."""
    if lambd < 0:
        raise ValueError(f"softshrink: lambd must not be negative, got {lambd}")
    middle = input.isnan().where(input, 0.0)
    return (input > lambd).where(input - lambd, (input < -lambd).where(input + lambd, middle))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x >= 0, else weight * x; a weight of n > 1 elements is per channel (dim 1)."""
    if weight.numel() > 1:
        channels = input.shape[1] if input.ndim >= 2 else None
        if weight.numel() != channels:
            raise ValueError(f"prelu weight of {weight.numel()} elements does not fit the "
                             f"{channels} channels of input {input.shape}")
        weight = weight.reshape((1, -1) + (1,) * (input.ndim - 2))
    else:
        weight = weight.reshape(())
    return (input >= 0).where(input, weight * input)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Tensor | None = None) -> Tensor:
    """x / max(||x||_p, eps) along dim."""
    if out is not None:
        raise NotImplementedError("normalize(out=...) is not supported")
    return input / input.norm(p, dim=dim, keepdim=True).maximum(eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim (inputs broadcast)."""
    n1 = x1.norm(2, dim=dim, keepdim=True).maximum(eps)
    n2 = x2.norm(2, dim=dim, keepdim=True).maximum(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p along the last dim."""
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


def channel_dropout(input: Tensor, p: float, training: bool, spatial: int) -> Tensor:
    """Zero whole channels: one keep/drop draw per (N, C) (per C for an unbatched input)."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    lead = input.ndim - spatial
    if lead not in (1, 2):
        raise ValueError(f"channel dropout over {spatial} spatial dims got input {input.shape}")
    shape = input.shape[:lead] + (1,) * spatial
    mask = Tensor.ones(*shape, dtype=input.dtype, device=input.device)
    return input * mask.dropout(p, training=True)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    return channel_dropout(input, p, training, 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of (N, C, H, W) with probability p (a 3-d input is (N, C, L),
    as PyTorch reads it), scale the rest by 1/(1-p)."""
    return channel_dropout(input, p, training, 2 if input.ndim == 4 else 1)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    return channel_dropout(input, p, training, 3)
