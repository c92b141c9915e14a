"""Parameter-free layers that pool, resize, pad, rearrange or drop whole channels, in
PyTorch's module spelling: MaxPool1d, AvgPool1d, adaptive pooling, Upsample, PixelShuffle,
PixelUnshuffle, ZeroPad2d, ConstantPad1d/2d, Unflatten, Dropout1d/2d/3d. Each holds its
settings and calls the functional (nn/functional*.py) that does the math.
"""
from __future__ import annotations

from lazyten.nn import functional_act, functional_layers
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["MaxPool1d", "AvgPool1d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Upsample", "PixelShuffle",
           "PixelUnshuffle", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "Unflatten",
           "Dropout1d", "Dropout2d", "Dropout3d"]


class MaxPool1d(Module):
    """Max over kernel_size windows of the last dim (stride defaults to kernel_size)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor):
        return functional_layers.max_pool1d(x, self.kernel_size, self.stride, self.padding,
                                            self.dilation, self.ceil_mode,
                                            self.return_indices)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    """Mean over kernel_size windows of the last dim."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.avg_pool1d(x, self.kernel_size, self.stride, self.padding,
                                            self.ceil_mode, self.count_include_pad)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class _Adaptive(Module):
    """Pool to a fixed output size (an int, or a tuple whose None entries keep the input's
    size), PyTorch's windows."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_Adaptive):
    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.adaptive_avg_pool1d(x, self.output_size)


class AdaptiveAvgPool2d(_Adaptive):
    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.adaptive_avg_pool2d(x, self.output_size)


class _AdaptiveMax(_Adaptive):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__(output_size)
        self.return_indices = return_indices


class AdaptiveMaxPool1d(_AdaptiveMax):
    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.adaptive_max_pool1d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMax):
    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class Upsample(Module):
    """Resize to `size` or by `scale_factor` (Tensor.interpolate's modes)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return x.interpolate(self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{what}, mode={self.mode!r}"


class PixelShuffle(Module):
    """(*, C * r^2, H, W) -> (*, C, H * r, W * r)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) -> (*, C * r^2, H, W)."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return functional_layers.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class ConstantPad1d(Module):
    """Pad the last dim by `padding` (an int, or (left, right)) with `value`."""
    nd = 1

    def __init__(self, padding, value: float):
        super().__init__()
        flat = (padding,) * (2 * self.nd) if isinstance(padding, int) else tuple(padding)
        if len(flat) != 2 * self.nd:
            raise ValueError(f"{type(self).__name__} needs {2 * self.nd} padding amounts, "
                             f"got {padding}")
        self.padding, self.value = flat, value

    def forward(self, x: Tensor) -> Tensor:
        return x.pad(self.padding, value=self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad2d(ConstantPad1d):
    """Pad the last two dims by (left, right, top, bottom) (or one int) with `value`."""
    nd = 2


class ZeroPad2d(ConstantPad2d):
    """Pad the last two dims by (left, right, top, bottom) (or one int) with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"padding={self.padding}"


class Unflatten(Module):
    """Split dim `dim` into `unflattened_size`."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Dropout2d(Module):
    """Zero whole channels with probability p in training mode, scaling the rest by
    1/(1-p); identity in eval mode. The mode follows Dropout's rule (nn/module.py)."""
    spatial = 2

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        self._training = None
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        spatial = 1 if self.spatial == 2 and x.ndim == 3 else self.spatial  # (N, C, L)
        return functional_act.channel_dropout(x, self.p, self.training, spatial)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Dropout1d(Dropout2d):
    """Dropout2d over (N, C, L) or (C, L)."""
    spatial = 1


class Dropout3d(Dropout2d):
    """Dropout2d over (N, C, D, H, W) or (C, D, H, W)."""
    spatial = 3
