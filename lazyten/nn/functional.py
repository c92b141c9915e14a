"""torch.nn.functional's names over Tensor methods: `import lazyten.nn.functional as F`.

Each function takes PyTorch's argument names and order and forwards to the Tensor method
that holds the math (nnops.py, losses.py, padding.py, resize.py, attention.py, einsum.py).
The legacy `size_average` / `reduce` loss arguments map to `reduction` as PyTorch's do.
More names live in functional_act.py (activations, distances, channel dropout),
functional_layers.py (convs, pooling, norms, embedding, unfold, pixel shuffle) and
functional_losses.py (the other losses); this module re-exports them all.
"""
from __future__ import annotations
from lazyten.losses import _reduce_loss
from lazyten.nn import functional_act, functional_layers, functional_losses, functional_more
from lazyten.nn.functional_act import *  # noqa: F401,F403
from lazyten.nn.functional_layers import *  # noqa: F401,F403
from lazyten.nn.functional_losses import *  # noqa: F401,F403
from lazyten.nn.functional_more import *  # noqa: F401,F403
from lazyten.nn.functional_losses import _reduction
from lazyten.tensor import Tensor

__all__ = ["relu", "gelu", "softmax", "log_softmax", "dropout", "conv2d", "linear", "one_hot",
           "pad", "interpolate", "scaled_dot_product_attention", "max_pool2d", "avg_pool2d",
           "layer_norm", "nll_loss", "cross_entropy", "l1_loss", "mse_loss",
           "binary_cross_entropy", "binary_cross_entropy_with_logits"]
__all__ += functional_act.__all__ + functional_layers.__all__ + functional_losses.__all__
__all__ += functional_more.__all__


# ---- activations and regularisation ----
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact (erf) or approximate='tanh'."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return input.gelu(approximate=approximate)


def softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    return (input.cast(dtype) if dtype is not None else input).softmax(dim)


def log_softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    return (input.cast(dtype) if dtype is not None else input).log_softmax(dim)


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Zero with probability p and scale by 1/(1-p) when `training` (True by default)."""
    return input.dropout(p, training=training)


# ---- layers ----
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return input.linear(weight, bias)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """Convolution (the weight's rank picks 1-3 spatial dims); padding may be 'valid'/'same'."""
    nd = weight.ndim - 2
    if padding == "valid":
        padding = 0
    elif padding == "same":
        if any(s != 1 for s in ((stride,) * nd if isinstance(stride, int) else stride)):
            raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
        dil = (dilation,) * nd if isinstance(dilation, int) else tuple(dilation)
        total = [d * (k - 1) for k, d in zip(weight.shape[2:], dil)]
        padding = [(t // 2, t - t // 2) for t in total]
    return input.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation,
                        padding=padding)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last len(normalized_shape) dims, then scale and shift."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if input.shape[input.ndim - len(shape):] != shape:
        raise ValueError(f"layer_norm over {shape} got input {input.shape}")
    return input._layer_norm(tuple(range(input.ndim - len(shape), input.ndim)), eps, weight, bias)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot rows; num_classes=-1 reads max + 1 from the data (realizes it)."""
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    return tensor.one_hot(num_classes)


def pad(input: Tensor, pad: tuple, mode: str = "constant", value: float | None = None) -> Tensor:
    """torch's flat padding (last dim first: left, right, top, bottom, ...); negative crops."""
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad {pad} must have an even length of at most 2 * {input.ndim} "
                         f"(input {input.shape})")
    if not pad:
        return input
    return input.pad(pad, value=0.0 if value is None else value, mode=mode)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported")
    return input.interpolate(size, scale_factor, mode, align_corners, recompute_scale_factor)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    return query.scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, scale)


# ---- pooling ----
def max_pool2d(input: Tensor, kernel_size=(2, 2), stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    return input.max_pool2d(kernel_size, stride, dilation, padding, ceil_mode=ceil_mode,
                            return_indices=return_indices)


def avg_pool2d(input: Tensor, kernel_size=(2, 2), stride=None, padding=0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    return input.avg_pool2d(kernel_size, stride, 1, padding, ceil_mode=ceil_mode,
                            count_include_pad=count_include_pad,
                            divisor_override=divisor_override)


# ---- losses ----
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    return input.nll_loss(target, weight, ignore_index, _reduction(size_average, reduce, reduction))


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    return input.cross_entropy(target, weight, ignore_index,
                               _reduction(size_average, reduce, reduction), label_smoothing)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
            reduction: str = "mean") -> Tensor:
    return input.l1_loss(target, _reduction(size_average, reduce, reduction))


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
             reduction: str = "mean") -> Tensor:
    return input.mse(target, _reduction(size_average, reduce, reduction))


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    if weight is None:
        return input.binary_crossentropy(target, reduction)
    return _reduce_loss(input.binary_crossentropy(target, "none") * weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """BCE of logits; pos_weight scales the positive term (broadcast over the class dim)."""
    reduction = _reduction(size_average, reduce, reduction)
    if weight is None:
        return input.binary_crossentropy_logits(target, reduction, pos_weight=pos_weight)
    loss = input.binary_crossentropy_logits(target, "none", pos_weight=pos_weight)
    return _reduce_loss(loss * weight, reduction)
