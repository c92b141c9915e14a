"""More torch.nn modules, PyTorch's constructor arguments and defaults, each built on a
Tensor method or an nn/functional*.py function: the reflect / replicate / circular
padding modules and ZeroPad1d/3d, ConstantPad3d; UpsamplingNearest2d/Bilinear2d,
Softmax2d, Hardshrink, Softshrink, CosineSimilarity, PairwiseDistance, Unfold,
ChannelShuffle; MaxPool3d, AvgPool3d, AdaptiveAvgPool3d, BatchNorm3d and
ConvTranspose1d/3d (weight (in_channels, out_channels / groups, *kernel), torch's init).
Input (N, C, *spatial) as torch; where torch takes an unbatched (C, *spatial) so do these.
"""
from __future__ import annotations
import math

from codegen.helpers import make_pair, prod
from lazyten.errors import ShapeError
from lazyten.nn import BatchNorm, functional_act, functional_layers
from lazyten.nn.module import Module
from lazyten.nn.params import uniform_bias
from lazyten.nn.shape_layers import ConstantPad1d, Upsample, ZeroPad2d, _Adaptive
from lazyten.tensor import Tensor

# annotated: mypy cannot type it through nn/__init__.py's import cycle otherwise
__all__: list[str] = ["ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
                      "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d",
                      "CircularPad1d", "CircularPad2d", "CircularPad3d", "ZeroPad1d",
                      "ZeroPad3d", "ConstantPad3d", "UpsamplingNearest2d",
                      "UpsamplingBilinear2d", "Softmax2d", "Hardshrink", "Softshrink",
                      "CosineSimilarity", "PairwiseDistance", "Unfold", "ChannelShuffle",
                      "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d", "BatchNorm3d",
                      "ConvTranspose1d", "ConvTranspose3d"]


# ---- padding ----
class _ModePad(Module):
    """Pad the last `nd` dims of a (C, *spatial) or (N, C, *spatial) input by `padding`
    (an int for every side, or torch's flat tuple: last dim first, (left, right, top,
    bottom, front, back)) with Tensor.pad's `mode`."""
    nd, mode = 1, "reflect"

    def __init__(self, padding):
        super().__init__()
        flat = (padding,) * (2 * self.nd) if isinstance(padding, int) else tuple(padding)
        if len(flat) != 2 * self.nd:
            raise ValueError(f"{type(self).__name__} needs {2 * self.nd} padding amounts, "
                             f"got {padding}")
        self.padding = flat

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (self.nd + 1, self.nd + 2):
            raise ShapeError(f"{type(self).__name__} pads {self.nd}-d inputs of "
                             f"{self.nd + 1} or {self.nd + 2} dims, got shape {x.shape}")
        return x.pad(self.padding, mode=self.mode)


class ReflectionPad1d(_ModePad):
    """Mirror the last dim about its edges (the edge not repeated); each pad < its size."""


class ReflectionPad2d(_ModePad):
    nd = 2


class ReflectionPad3d(_ModePad):
    nd = 3


class ReplicationPad1d(_ModePad):
    """Repeat the edge values of the last dim."""
    mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    nd = 2


class ReplicationPad3d(ReplicationPad1d):
    nd = 3


class CircularPad1d(_ModePad):
    """Wrap the last dim around (the left pad comes from the right end); pad <= size."""
    mode = "circular"


class CircularPad2d(CircularPad1d):
    nd = 2


class CircularPad3d(CircularPad1d):
    nd = 3


class ConstantPad3d(ConstantPad1d):
    """Pad the last three dims by (left, right, top, bottom, front, back) (or one int) with
    `value`."""
    nd = 3


class ZeroPad1d(ZeroPad2d):
    """Pad the last dim by (left, right) (or one int) with zeros."""
    nd = 1


class ZeroPad3d(ZeroPad2d):
    """Pad the last three dims by (left, right, top, bottom, front, back) with zeros."""
    nd = 3


# ---- resizing, activations, distances, rearranging ----
class UpsamplingNearest2d(Upsample):
    """Upsample(size, scale_factor, mode="nearest")."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Upsample(size, scale_factor, mode="bilinear", align_corners=True): torch's legacy
    module aligns the corner pixels, unlike Upsample's default."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class Softmax2d(Module):
    """softmax over the channels (dim -3) of (N, C, H, W) or (C, H, W)."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got shape {x.shape}")
        return x.softmax(-3)


class Hardshrink(Module):
    """x where |x| > lambd, else 0."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, x: Tensor) -> Tensor:
        return functional_act.hardshrink(x, self.lambd)


class Softshrink(Hardshrink):
    """x moved lambd towards 0, and 0 where |x| <= lambd."""

    def forward(self, x: Tensor) -> Tensor:
        return functional_act.softshrink(x, self.lambd)


class CosineSimilarity(Module):
    """forward(x1, x2): the cosine of their angle along `dim` (each norm at least eps)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return functional_act.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """forward(x1, x2): ||x1 - x2 + eps||_p along the last dim (torch keeps p in `norm`)."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return functional_act.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class Unfold(Module):
    """im2col: (N, C, H, W) -> (N, C * kh * kw, L), one column per window (F.unfold)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.unfold(x, self.kernel_size, self.dilation, self.padding,
                                        self.stride)


class ChannelShuffle(Module):
    """(N, C, *) with the channels read as (groups, C / groups) and written transposed:
    channel i * groups + g of the output is channel g * (C / groups) + i of the input."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 3:
            raise ShapeError(f"ChannelShuffle expects an input of more than 2 dims, got "
                             f"shape {x.shape}")
        n, c, *rest = x.shape
        if self.groups <= 0 or c % self.groups:
            raise ShapeError(f"ChannelShuffle: {c} channels do not divide into {self.groups} "
                             f"groups")
        grouped = x.reshape(n, self.groups, c // self.groups, *rest)
        return grouped.transpose(1, 2).reshape(x.shape)


# ---- 3-d pooling and normalisation ----
class MaxPool3d(Module):
    """Max over kernel_size windows of the last three dims (stride defaults to
    kernel_size); return_indices gives flat indices into each D * H * W volume."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor):
        return functional_layers.max_pool3d(x, self.kernel_size, self.stride, self.padding,
                                            self.dilation, self.ceil_mode,
                                            self.return_indices)


class AvgPool3d(Module):
    """Mean over kernel_size windows of the last three dims, with ceil_mode,
    count_include_pad and divisor_override as torch."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.avg_pool3d(x, self.kernel_size, self.stride, self.padding,
                                            self.ceil_mode, self.count_include_pad,
                                            self.divisor_override)


class AdaptiveAvgPool3d(_Adaptive):
    """Mean over torch's adaptive windows of the last three dims."""

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.adaptive_avg_pool3d(x, self.output_size)


class BatchNorm3d(BatchNorm):
    """BatchNorm over (N, C, D, H, W); other ranks raise, as torch's."""

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 5:
            raise ValueError(f"BatchNorm3d expected 5D input, got shape {x.shape}")
        return super().forward(x)


# ---- transposed convolutions ----
class _ConvTransposeNd(Module):
    """A transposed convolution over `nd` dims with ConvTranspose2d's parameters: weight
    (in_channels, out_channels / groups, *kernel), kaiming-uniform (a = sqrt(5)) with the
    fan_in of dims 1.., as torch; bias uniform in +-1 / sqrt(that fan_in)."""
    nd = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros"):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible "
                             f"by groups={groups}")
        if padding_mode != "zeros":
            raise ValueError(f"only padding_mode='zeros' is supported for "
                             f"{type(self).__name__}, got {padding_mode!r}")
        nd = self.nd
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = make_pair(kernel_size, nd), make_pair(stride, nd)
        self.padding, self.dilation = make_pair(padding, nd), make_pair(dilation, nd)
        self.output_padding = make_pair(output_padding, nd)
        shape = (in_channels, out_channels // groups) + self.kernel_size
        self.weight = Tensor.kaiming_uniform(*shape, a=math.sqrt(5), requires_grad=True)
        self.bias = uniform_bias(out_channels, prod(shape[1:])) if bias else None

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        if x.ndim == self.nd + 1:  # unbatched (C, *spatial)
            if output_size is not None and len(output_size) == x.ndim:
                output_size = tuple(output_size)[1:]
            return self.forward(x.unsqueeze(0), output_size)[0]
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups,
                                  stride=self.stride, dilation=self.dilation,
                                  padding=self.padding,
                                  output_padding=self._output_padding(x, output_size))

    def _output_padding(self, x: Tensor, output_size) -> tuple[int, ...]:
        """torch's rule: output_size (spatial, or with the leading dims) picks the extra
        size within [smallest, smallest + stride - 1] of each spatial dim."""
        if output_size is None:
            return self.output_padding
        sizes = tuple(output_size)[-self.nd:] if len(output_size) >= self.nd else ()
        if len(sizes) != self.nd or len(output_size) not in (self.nd, x.ndim):
            raise ValueError(f"output_size {output_size} must have {self.nd} or {x.ndim} "
                             f"entries")
        extra = []
        for n, want, k, s, p, d in zip(x.shape[2:], sizes, self.kernel_size, self.stride,
                                       self.padding, self.dilation):
            smallest = (n - 1) * s - 2 * p + d * (k - 1) + 1
            if not smallest <= want <= smallest + s - 1:
                raise ValueError(f"output_size {output_size} is outside "
                                 f"[{smallest}, {smallest + s - 1}] for input {x.shape}")
            extra.append(want - smallest)
        return tuple(extra)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution of (N, C, L) or (C, L), weight (in, out / groups, k)."""
    nd = 1


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution of (N, C, D, H, W), weight (in, out / groups, kd, kh, kw)."""
    nd = 3
