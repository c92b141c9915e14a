"""More torch.nn.functional names built from Tensor ops here, with PyTorch's argument names,
order and defaults: gumbel_softmax, bilinear, upsample (interpolate's deprecated alias),
local_response_norm, rrelu, alpha_dropout and fold (col2im, the adjoint of unfold).
Random draws (gumbel noise, rrelu's training slopes, alpha_dropout's mask) come from
lazyten's generator (Tensor.manual_seed). Re-exported by nn/functional.py.
"""
from __future__ import annotations
import math
import warnings

from codegen.helpers import make_pair
from lazyten.errors import ShapeError
from lazyten.tensor import Tensor

__all__ = ["gumbel_softmax", "bilinear", "upsample", "local_response_norm", "rrelu",
           "alpha_dropout", "fold"]

# the smallest normal float32: keeps the uniform draw off 0, so the gumbel noise is finite
_TINY = 1.1754943508222875e-38
# SELU's scale * alpha: the value SELU saturates to, which dropped units of alpha_dropout take
_SELU_SATURATION = 1.7580993408473766


def gumbel_softmax(logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) along dim, g standard Gumbel noise; hard=True gives the
    one-hot of its argmax forward and the soft sample's gradient (straight-through).
    `eps` is unused, as in torch (kept for its signature)."""
    uniform = Tensor.rand(*logits.shape, device=logits.device).clip(_TINY, 1.0)
    gumbels = -(-uniform.log()).log()
    soft = ((logits + gumbels.cast(logits.dtype)) / tau).softmax(dim)
    if not hard:
        return soft
    axis = dim % logits.ndim
    index = soft.argmax(axis, keepdim=True)
    shape = [1] * logits.ndim
    shape[axis] = logits.shape[axis]
    positions = Tensor.arange(logits.shape[axis], device=logits.device).reshape(shape)
    one_hot = (positions == index).cast(soft.dtype)
    return one_hot - soft.detach() + soft


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]; inputs
    (*, in1) and (*, in2) with the same leading shape, weight (out, in1, in2)."""
    if weight.ndim != 3 or input1.shape[-1:] != weight.shape[1:2] \
            or input2.shape[-1:] != weight.shape[2:] or input1.shape[:-1] != input2.shape[:-1]:
        raise ShapeError(f"bilinear: inputs {input1.shape} and {input2.shape} do not fit "
                         f"weight {weight.shape} (out, in1, in2)")
    out_features, in1, in2 = weight.shape
    lead = input1.shape[:-1]
    # x1 @ W as one matmul: (N, in1) @ (in1, out * in2), then a product and sum over in2
    mixed = input1.reshape(-1, in1) @ weight.permute(1, 0, 2).reshape(in1, out_features * in2)
    out = (mixed.reshape(-1, out_features, in2) * input2.reshape(-1, 1, in2)).sum(-1)
    out = out.reshape(lead + (out_features,))
    return out + bias if bias is not None else out


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated in torch in favour of interpolate, which it calls (warning as torch does)."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate "
                  "instead.", stacklevel=2)
    return input.interpolate(size, scale_factor, mode, align_corners)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """input / (k + alpha * mean of input^2 over `size` neighbouring channels)^beta, the
    window zero-padded by size // 2 before and (size - 1) // 2 after (divided by size
    always, as torch); input (N, C, *) with at least 3 dims."""
    if input.ndim < 3:
        raise ShapeError(f"local_response_norm needs an input of 3 or more dims (N, C, *), "
                         f"got shape {input.shape}")
    if input.numel() == 0:
        return input
    channels_last = (input * input).transpose(1, -1)
    pads = [(0, 0)] * (input.ndim - 1) + [(size // 2, (size - 1) // 2)]
    windows = channels_last.pad(pads)._pool((size,), 1, 1)  # (..., C, size)
    mean = windows.mean(-1).transpose(1, -1)
    return input / (mean * alpha + k) ** beta


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,
          inplace: bool = False) -> Tensor:
    """Leaky ReLU whose negative slope is drawn uniform in [lower, upper) per element when
    training, and is (lower + upper) / 2 otherwise."""
    if not training:
        return input.leakyrelu((lower + upper) / 2)
    slopes = Tensor.uniform(*input.shape, low=lower, high=upper, device=input.device)
    return (input >= 0).where(input, input * slopes.cast(input.dtype))


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Tensor:
    """Dropout for SELU networks (training only): a dropped unit takes SELU's saturation
    value, then an affine map a * x + b restores zero mean and unit variance."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0 or not training or input.numel() == 0:
        return input
    if p == 1:
        return input * 0
    alpha = _SELU_SATURATION
    a = 1 / math.sqrt((alpha * alpha * p + 1) * (1 - p))
    keep = Tensor.rand(*input.shape, device=input.device) >= p
    # kept: a * x + alpha * a * p; dropped: a * -alpha + alpha * a * p
    return keep.where(input * a, -alpha * a) + alpha * a * p


def _dilated(x: Tensor, stride: tuple[int, ...]) -> Tensor:
    """(..., h, w) -> (..., h * sh, w * sw) with x[..., i, j] at (i * sh, j * sw), 0 elsewhere."""
    *lead, h, w = x.shape
    spread = x.reshape(tuple(lead) + (h, 1, w, 1))
    pads = [(0, 0)] * len(lead) + [(0, 0), (0, stride[0] - 1), (0, 0), (0, stride[1] - 1)]
    return spread.pad(pads).reshape(tuple(lead) + (h * stride[0], w * stride[1]))


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """col2im: (N, C * kh * kw, L) -> (N, C, H, W) (unbatched (C * kh * kw, L) -> (C, H, W)),
    each column a window (unfold's order) added where it was taken from; overlaps sum. Built
    as one shifted, stride-spread copy of the columns per kernel offset, added up."""
    if input.ndim not in (2, 3):
        raise ShapeError(f"fold needs (N, C * kh * kw, L) or (C * kh * kw, L) input, got "
                         f"{input.shape}")
    size, kernel = make_pair(output_size), make_pair(kernel_size)
    dil, pad, step = make_pair(dilation), make_pair(padding), make_pair(stride)
    counts = [(n + 2 * p - d * (k - 1) - 1) // s + 1
              for n, k, d, p, s in zip(size, kernel, dil, pad, step)]
    lead, (rows, length) = input.shape[:-2], input.shape[-2:]
    if rows % (kernel[0] * kernel[1]) or min(counts) <= 0 or length != counts[0] * counts[1]:
        raise ShapeError(f"fold: input {input.shape} does not fit kernel {kernel} and "
                         f"{counts[0]} x {counts[1]} windows of output size {size}")
    channels = rows // (kernel[0] * kernel[1])
    cols = input.reshape(lead + (channels, kernel[0], kernel[1], counts[0], counts[1]))
    full = (size[0] + 2 * pad[0], size[1] + 2 * pad[1])
    out: Tensor | None = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            spread = _dilated(cols[..., i, j, :, :], step)
            top, left = i * dil[0], j * dil[1]
            placed = spread.pad([(0, 0)] * (len(lead) + 1) + [
                (top, full[0] - top - spread.shape[-2]), (left, full[1] - left - spread.shape[-1])])
            out = placed if out is None else out + placed
    assert out is not None, "a kernel has at least one offset"
    crop = [(0, 0)] * (len(lead) + 1) + [(-pad[0], -pad[0]), (-pad[1], -pad[1])]
    return out.pad(crop) if any(pad) else out
