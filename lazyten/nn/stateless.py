"""Layers without parameters, in PyTorch's module spelling: activations, softmax, flatten,
identity, pooling and losses. Each `forward` calls the Tensor method that does the math;
the module only holds the settings (checked here, so a bad one fails at construction).
"""
from __future__ import annotations
from typing import Any

from codegen.helpers import make_pair
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["ReLU", "GELU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Flatten", "Identity",
           "MaxPool2d", "AvgPool2d", "CrossEntropyLoss", "MSELoss"]

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


class ReLU(Module):
    """max(x, 0). `inplace` is accepted for PyTorch code and changes nothing."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class GELU(Module):
    """x * Phi(x): exact (approximate="none", PyTorch's default) or the tanh approximation
    (approximate="tanh"); Tensor.gelu computes both."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return x.gelu(approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    """1 / (1 + exp(-x))."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Tanh(Module):
    """tanh(x)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Softmax(Module):
    """softmax along `dim` (required: PyTorch's implicit choice is deprecated)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(axis=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, computed stably."""

    def forward(self, x: Tensor) -> Tensor:
        return x.log_softmax(axis=self.dim)


class Flatten(Module):
    """Merge dims start_dim..end_dim into one (by default all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Identity(Module):
    """Return the input (any arguments are accepted and ignored, as in PyTorch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class MaxPool2d(Module):
    """Max over kernel_size windows of the last two dims; stride defaults to kernel_size,
    padding pads with the dtype's minimum."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode, self.return_indices = dilation, ceil_mode, return_indices
        _check_window(self.kernel_size, self.padding, "MaxPool2d")

    def forward(self, x: Tensor) -> Tensor:
        return x.max_pool2d(self.kernel_size, stride=self.stride, dilation=self.dilation,
                            padding=self.padding, ceil_mode=self.ceil_mode,
                            return_indices=self.return_indices)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
                f"dilation={self.dilation}")


class AvgPool2d(Module):
    """Mean over kernel_size windows of the last two dims, with PyTorch's ceil_mode,
    count_include_pad and divisor_override (Tensor.avg_pool2d)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override
        _check_window(self.kernel_size, self.padding, "AvgPool2d")

    def forward(self, x: Tensor) -> Tensor:
        return x.avg_pool2d(self.kernel_size, stride=self.stride, padding=self.padding,
                            ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad,
                            divisor_override=self.divisor_override)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


def _check_window(kernel_size, padding, owner: str) -> None:
    """PyTorch's rule: a positive kernel, and padding at most half of it."""
    kernel = make_pair(kernel_size)
    if any(k <= 0 for k in kernel):
        raise ValueError(f"{owner}: kernel_size must be positive, got {kernel_size}")
    if isinstance(padding, int) or (isinstance(padding, tuple) and len(padding) == 2 and
                                    all(isinstance(p, int) for p in padding)):
        if any(p < 0 or p > k // 2 for p, k in zip(make_pair(padding), kernel)):
            raise ValueError(f"{owner}: padding {padding} must be between 0 and half of "
                             f"kernel_size {kernel_size}")


class CrossEntropyLoss(Module):
    """Cross entropy of logits (N, C) against class indices (N,) or class probabilities
    (N, C), as Tensor.cross_entropy. `weight` and `ignore_index` are passed on only when
    set, for a Tensor.cross_entropy that takes them."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        self.reduction, self.label_smoothing = _check_reduction(reduction), label_smoothing
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        extra: dict[str, Any] = {} if self.weight is None else {"weight": self.weight}
        if self.ignore_index != -100:
            extra["ignore_index"] = self.ignore_index
        return logits.cross_entropy(target, label_smoothing=self.label_smoothing,
                                    reduction=self.reduction, **extra)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}, label_smoothing={self.label_smoothing}"


class MSELoss(Module):
    """Mean (or sum, or each) squared difference between input and target (broadcast as
    in PyTorch, so keep their shapes equal)."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = _check_reduction(reduction)

    def forward(self, x: Tensor, target: Tensor) -> Tensor:
        return x.mse(target, reduction=self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
