"""torch.nn.functional's convolutions, pooling, normalisation and rearranging functions
beyond nn/functional.py's, with PyTorch's argument names, order and defaults: conv1d/3d and
the transposed convs, max/avg pooling in 1 and 3 dims, adaptive pooling, batch/group/
instance/RMS norm, embedding, unfold (im2col) and pixel (un)shuffle. Each is a Tensor
method or a few Tensor ops; re-exported by nn/functional.py.
"""
from __future__ import annotations

import numpy as np

from codegen.helpers import make_pair
from codegen.dtypes import dtypes
from lazyten.autograd.composite import Composite
from lazyten.index_check import check_index
from lazyten.nn.params import conv_padding
from lazyten.tensor import Tensor, no_grad

__all__ = ["conv1d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "max_pool1d", "max_pool3d", "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "batch_norm", "group_norm", "instance_norm", "rms_norm",
           "embedding", "unfold", "pixel_shuffle", "pixel_unshuffle"]

# machine epsilon by dtype name: rms_norm's default eps, as torch.finfo(dtype).eps
_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
        "float64": 2.0 ** -52}


# ---- convolution ----
def _conv(input: Tensor, weight: Tensor, bias: Tensor | None, stride, padding, dilation,
          groups: int) -> Tensor:
    nd = weight.ndim - 2
    if padding == "same" and make_pair(stride, nd) != (1,) * nd:
        raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
    padding = conv_padding(padding, weight.shape[2:], make_pair(dilation, nd))
    return input.conv2d(weight, bias, groups=groups, stride=stride, dilation=dilation,
                        padding=padding)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """1-d convolution of (N, C, L) by weight (out, C / groups, k); padding may be
    'valid'/'same'."""
    return _conv(input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed convolution, weight (in_channels, out_channels / groups, *kernel); the
    weight's rank picks 1-3 spatial dims."""
    return input.conv_transpose2d(weight, bias, groups=groups, stride=stride,
                                  dilation=dilation, padding=padding,
                                  output_padding=output_padding)


conv_transpose1d = conv_transpose3d = conv_transpose2d


# ---- pooling ----
def _pool_args(nd: int, kernel_size, stride, padding, dilation=1) -> dict:
    return {"kernel_size": make_pair(kernel_size, nd), "dilation": make_pair(dilation, nd),
            "stride": None if stride is None else make_pair(stride, nd),
            "padding": make_pair(padding, nd)}


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    return input.max_pool2d(**_pool_args(1, kernel_size, stride, padding, dilation),
                            ceil_mode=ceil_mode, return_indices=return_indices)


def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    return input.max_pool2d(**_pool_args(3, kernel_size, stride, padding, dilation),
                            ceil_mode=ceil_mode, return_indices=return_indices)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    return input.avg_pool2d(**_pool_args(1, kernel_size, stride, padding),
                            ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def avg_pool3d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    return input.avg_pool2d(**_pool_args(3, kernel_size, stride, padding),
                            ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                            divisor_override=divisor_override)


def _adaptive_sizes(input: Tensor, output_size, nd: int) -> tuple[tuple[int, int], ...]:
    """(input size, output size) of each pooled dim; None keeps the input's size."""
    if input.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"adaptive pooling over {nd} dims got input {input.shape}")
    sizes = (output_size,) * nd if isinstance(output_size, int) or output_size is None \
        else tuple(output_size)
    if len(sizes) != nd:
        raise ValueError(f"adaptive pooling over {nd} dims got output_size {output_size}")
    ins = input.shape[-nd:]
    pairs = tuple((n, n if o is None else int(o)) for n, o in zip(ins, sizes))
    if any(o <= 0 or n <= 0 for n, o in pairs):
        raise ValueError(f"adaptive pooling of input {input.shape} to {output_size}: sizes "
                         f"must be positive")
    return pairs


def _bounds(n_in: int, n_out: int) -> list[tuple[int, int]]:
    """PyTorch's window of output i: [floor(i * in / out), ceil((i + 1) * in / out))."""
    return [(i * n_in // n_out, -(-(i + 1) * n_in // n_out)) for i in range(n_out)]


def _adaptive_avg(input: Tensor, output_size, nd: int) -> Tensor:
    pairs = _adaptive_sizes(input, output_size, nd)
    if all(n % o == 0 for n, o in pairs):  # equal windows: an ordinary pool
        kernel = tuple(n // o for n, o in pairs)
        return input.avg_pool2d(kernel, stride=kernel)
    out = input
    for axis, (n, o) in zip(range(-nd, 0), pairs):
        # mean of each window as a (in, out) matrix of 1/len weights, applied along `axis`
        weights = np.zeros((n, o))  # float64, cast to the input dtype below
        for i, (start, stop) in enumerate(_bounds(n, o)):
            weights[start:stop, i] = 1 / (stop - start)
        matrix = Tensor(weights, device=input.device).cast(input.dtype)
        out = (out.transpose(axis, -1) @ matrix).transpose(axis, -1)
    return out


def _adaptive_max(input: Tensor, output_size, nd: int, return_indices: bool) -> Tensor:
    if return_indices:
        raise NotImplementedError("adaptive max pooling with return_indices is not supported")
    pairs = _adaptive_sizes(input, output_size, nd)
    if all(n % o == 0 for n, o in pairs):
        kernel = tuple(n // o for n, o in pairs)
        return input.max_pool2d(kernel, stride=kernel)
    out = input
    for axis, (n, o) in zip(range(-nd, 0), pairs):  # a box's max is a max of maxes per axis
        parts = [out[(..., slice(start, stop)) + (slice(None),) * (-1 - axis)]
                 .max(axis=axis, keepdim=True) for start, stop in _bounds(n, o)]
        out = parts[0].cat(*parts[1:], dim=axis)
    return out


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    return _adaptive_avg(input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over PyTorch's adaptive windows (they may overlap and differ in size)."""
    return _adaptive_avg(input, output_size, 2)


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    return _adaptive_avg(input, output_size, 3)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False) -> Tensor:
    return _adaptive_max(input, output_size, 1, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False) -> Tensor:
    return _adaptive_max(input, output_size, 2, return_indices)


# ---- normalisation ----
def _channel_shape(input: Tensor) -> tuple[int, ...]:
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float | None = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise over every dim but 1 with the batch's statistics (training, updating the
    running ones in place when given) or the running ones."""
    if input.ndim < 2:
        raise ValueError(f"batch_norm needs (N, C, ...) input, got {input.shape}")
    if training:
        out, mean, var = input._batch_norm_train(weight, bias, eps)
        if running_mean is not None and running_var is not None:
            if momentum is None:
                raise ValueError("batch_norm: momentum=None (a cumulative average) needs the "
                                 "number of batches seen: use nn.BatchNorm*d(momentum=None)")
            update_running(running_mean, running_var, mean, var,
                           input.numel() // input.shape[1], momentum)
        return out
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm without training needs running_mean and running_var")
    mean, var = running_mean, running_var
    invstd = (var + eps).rsqrt()
    return input.batchnorm(weight, bias, mean.cast(input.dtype), invstd.cast(input.dtype))


def update_running(running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor,
                   count: int, momentum: float | None, batches: Tensor | None = None) -> None:
    """BatchNorm's running statistics updated in place from a batch of `count` values per
    channel, as PyTorch's: running (1 - m) + stat m, the variance unbiased; `momentum`
    None: the cumulative average, m = 1 / `batches` (the batches seen, this one counted).
    Each update is one traced call (a graph node, not about ten ops with constants, D156)."""
    factor = count / (count - 1) if count > 1 else 1.0
    with no_grad():
        weight: tuple[Tensor, ...] = ()
        if momentum is None:
            assert batches is not None, "the cumulative average needs the batches seen"
            weight = (batches.cast(running_mean.dtype).reciprocal(),)
        for running, stat, f in ((running_mean, mean, 1.0), (running_var, var, factor)):
            running.assign(running.apply(Composite, stat, *weight, body=_blended,
                                         momentum=momentum, factor=f))


def _blended(running: Tensor, stat: Tensor, *weight: Tensor, momentum: float | None,
             factor: float) -> Tensor:
    """One running statistic's update: running (1 - m) + stat factor m (in the ops' order
    before D156, so the values are the same), in the running dtype; m is `momentum`, or
    the 0-d tensor `weight` where that is None (1 / batches seen)."""
    m = weight[0] if weight else momentum
    assert m is not None, "a momentum or its tensor"
    stat = stat * factor if factor != 1.0 else stat
    return running * (1 - m) + stat.cast(running.dtype) * m


def _affine(out: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """Per-channel (dim 1) scale and shift."""
    out = out * weight.reshape(_channel_shape(out)) if weight is not None else out
    return out + bias.reshape(_channel_shape(out)) if bias is not None else out


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each group of channels over its channels and positions."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise ValueError(f"group_norm: input {input.shape} does not split into {num_groups} "
                         f"groups of channels")
    grouped = input.reshape(input.shape[0], num_groups, -1).layernorm(eps=eps)
    return _affine(grouped.reshape(input.shape), weight, bias)


def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) over its positions."""
    if running_mean is not None or running_var is not None or not use_input_stats:
        raise NotImplementedError("instance_norm with running statistics is not supported")
    if input.ndim < 3:
        raise ValueError(f"instance_norm needs (N, C, ...) input, got {input.shape}")
    out = input._layer_norm(tuple(range(2, input.ndim)), eps, None, None)
    return _affine(out, weight, bias)


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) dims, times weight;
    eps defaults to the dtype's machine epsilon, as PyTorch."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    n = len(shape)
    if input.shape[input.ndim - n:] != shape:
        raise ValueError(f"rms_norm over {shape} got input {input.shape}")
    eps = _EPS.get(input.dtype.name, 2.0 ** -23) if eps is None else eps
    axes = tuple(range(input.ndim - n, input.ndim))
    out = input * (input.square().mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


# ---- lookup and rearranging ----
def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """weight's rows picked by the integer `input` (each in [0, rows): another raises
    IndexError when the result is realized, as PyTorch); the tokens equal to padding_idx
    give no gradient (its row gets none). `sparse` gives the dense gradient."""
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError("embedding's max_norm and scale_grad_by_freq are not "
                                  "supported")
    if input.dtype.is_float or input.dtype == dtypes.bool:
        raise TypeError(f"embedding indices must be integers, got {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"embedding weight must be 2-d (rows, width), got shape {weight.shape}")
    rows = weight.shape[0]
    # the table's rows where the one-hot picks, summed: the compiler reads the picked rows
    # (an indirect load, D69); the gradient, where(one-hot, g, 0) summed over the tokens,
    # adds each token's row to the row it picks (a scatter on a CPU, D153) and nothing
    # elsewhere (a one-hot matmul's 0 * inf made every row nan)
    onehot = input.unsqueeze(-1) == Tensor.arange(rows, device=input.device)
    onehot = check_index(onehot, input, rows, "Embedding")
    picked = onehot.unsqueeze(-1).where(weight, 0).sum(-2)
    if padding_idx is None:
        return picked
    if not -rows <= padding_idx < rows:
        raise ValueError(f"padding_idx {padding_idx} is out of range for {rows} rows")
    # a padding token's value without its gradient: what the others add stays one scatter
    padding = (input == padding_idx % rows).unsqueeze(-1)
    return padding.where(picked.detach(), picked)


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """im2col: (N, C, H, W) -> (N, C * kh * kw, L), each column one window, L windows in
    row-major order (an unbatched (C, H, W) gives (C * kh * kw, L))."""
    if input.ndim not in (3, 4):
        raise ValueError(f"unfold needs (N, C, H, W) or (C, H, W) input, got {input.shape}")
    kernel = make_pair(kernel_size)
    pads = [(p, p) for p in make_pair(padding)]
    x = input.pad([(0, 0)] * (input.ndim - 2) + pads) if any(p for p, _ in pads) else input
    windows = x._pool(kernel, make_pair(stride), make_pair(dilation))  # (.., C, oh, ow, kh, kw)
    lead = input.ndim - 3
    order = tuple(range(lead)) + tuple(lead + i for i in (0, 3, 4, 1, 2))
    cols = windows.permute(order)
    return cols.reshape(input.shape[:lead] + (-1, cols.shape[-2] * cols.shape[-1]))


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C * r^2, H, W) -> (*, C, H * r, W * r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: {c} channels do not divide by {r}^2")
    x = input.reshape(tuple(lead) + (c // (r * r), r, r, h, w))
    n = len(lead)
    order = tuple(range(n)) + tuple(n + i for i in (0, 3, 1, 4, 2))
    return x.permute(order).reshape(tuple(lead) + (c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H * r, W * r) -> (*, C * r^2, H, W), the inverse of pixel_shuffle."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: {h}x{w} does not divide by {r}")
    x = input.reshape(tuple(lead) + (c, h // r, r, w // r, r))
    n = len(lead)
    order = tuple(range(n)) + tuple(n + i for i in (0, 2, 4, 1, 3))
    return x.permute(order).reshape(tuple(lead) + (c * r * r, h // r, w // r))
