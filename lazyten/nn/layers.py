"""More layers with parameters, PyTorch's names, parameter names and default
initialisation: Conv1d and Conv3d (Conv2d is in nn/__init__.py), PReLU, RMSNorm and
InstanceNorm1d/2d/3d. Each owns its parameters and calls a functional (nn/functional*.py)
or Tensor method for the math.
"""
from __future__ import annotations
import math

from codegen.helpers import make_pair, prod
from lazyten.nn import functional_act, functional_layers
from lazyten.nn.module import Module
from lazyten.nn.params import conv_padding, filled, uniform_bias
from lazyten.tensor import Tensor

__all__ = ["Conv1d", "Conv3d", "PReLU", "RMSNorm", "InstanceNorm1d", "InstanceNorm2d",
           "InstanceNorm3d"]


class _ConvNd(Module):
    """An nd-dim convolution, weight (out_channels, in_channels / groups, *kernel), with
    Conv2d's arguments and initialisation."""
    nd = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros"):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible "
                             f"by groups={groups}")
        if padding_mode != "zeros":
            raise NotImplementedError(f"padding_mode={padding_mode!r} is not supported")
        nd = self.nd
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = make_pair(kernel_size, nd), make_pair(stride, nd)
        self.dilation = make_pair(dilation, nd)
        if padding == "same" and self.stride != (1,) * nd:
            raise ValueError("padding='same' needs stride 1")
        self.padding = padding
        self._pads = conv_padding(padding, self.kernel_size, self.dilation)
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Tensor.kaiming_uniform(*shape, a=math.sqrt(5), requires_grad=True)
        self.bias = uniform_bias(out_channels, prod(shape[1:])) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                        dilation=self.dilation, padding=self._pads)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding not in (0, (0,) * self.nd):
            text += f", padding={self.padding}"
        if self.dilation != (1,) * self.nd:
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + ("" if self.bias is not None else ", bias=False")


class Conv1d(_ConvNd):
    """1-d convolution of (N, C, L), weight (out_channels, in_channels / groups, k)."""
    nd = 1


class Conv3d(_ConvNd):
    """3-d convolution of (N, C, D, H, W), weight (out, in / groups, kd, kh, kw)."""
    nd = 3


class PReLU(Module):
    """x where x >= 0, else weight * x; one weight, or one per channel (dim 1), all
    starting at `init`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = filled((num_parameters,), init, True)

    def forward(self, x: Tensor) -> Tensor:
        return functional_act.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the last len(normalized_shape) dims, times a weight
    starting at ones; eps=None takes the input dtype's machine epsilon, as PyTorch."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = filled(self.normalized_shape, 1.0, True) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.weight is not None}")


class _InstanceNorm(Module):
    """Normalise each (sample, channel) over its positions; PyTorch's defaults affine=False
    and track_running_stats=False (running statistics are not supported)."""
    nd = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False):
        super().__init__()
        if track_running_stats:
            raise NotImplementedError("InstanceNorm with track_running_stats is not supported")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = filled((num_features,), 1.0, True) if affine else None
        self.bias = filled((num_features,), 0.0, True) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == self.nd + 1:  # unbatched (C, *spatial)
            return self.forward(x.unsqueeze(0))[0]
        if x.ndim != self.nd + 2 or (self.weight is not None and x.shape[1] != self.num_features):
            raise ValueError(f"{type(self).__name__}({self.num_features}) got input {x.shape}")
        return functional_layers.instance_norm(x, weight=self.weight, bias=self.bias,
                                               eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.weight is not None}, track_running_stats=False")


class InstanceNorm1d(_InstanceNorm):
    """InstanceNorm over (N, C, L) or (C, L)."""
    nd = 1


class InstanceNorm2d(_InstanceNorm):
    """InstanceNorm over (N, C, H, W) or (C, H, W)."""
    nd = 2


class InstanceNorm3d(_InstanceNorm):
    """InstanceNorm over (N, C, D, H, W) or (C, D, H, W)."""
    nd = 3
