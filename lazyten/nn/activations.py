"""Activation layers without parameters, in PyTorch's module spelling (ReLU6, SiLU, Mish,
LeakyReLU, ELU, SELU, CELU, Softplus, Softsign, Hardswish, Hardsigmoid, Hardtanh,
LogSigmoid, Softmin, GLU, Threshold, Tanhshrink). Each holds its settings and calls
nn/functional_act.py's function, which calls the Tensor method. `inplace` is accepted for
PyTorch code and changes nothing. PReLU, which has a parameter, is in nn/layers.py.
"""
from __future__ import annotations

from lazyten.nn import functional_act as F
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

__all__ = ["ReLU6", "SiLU", "Mish", "LeakyReLU", "ELU", "SELU", "CELU", "Softplus",
           "Softsign", "Hardswish", "Hardsigmoid", "Hardtanh", "LogSigmoid", "Softmin", "GLU",
           "Threshold", "Tanhshrink"]


class _Inplace(Module):
    """An activation whose only setting is PyTorch's `inplace` flag."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU6(_Inplace):
    """min(max(x, 0), 6)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.relu6()


class SiLU(_Inplace):
    """x * sigmoid(x)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.silu()


class Mish(_Inplace):
    """x * tanh(softplus(x))."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mish()


class SELU(_Inplace):
    """scale * elu(x, alpha) with PyTorch's constants."""

    def forward(self, x: Tensor) -> Tensor:
        return x.selu()


class Hardswish(_Inplace):
    """x * relu6(x + 3) / 6."""

    def forward(self, x: Tensor) -> Tensor:
        return x.hardswish()


class Hardsigmoid(_Inplace):
    """relu6(x + 3) / 6."""

    def forward(self, x: Tensor) -> Tensor:
        return x.hardsigmoid()


class LeakyReLU(Module):
    """x where x >= 0, else negative_slope * x."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return x.leakyrelu(self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return x.elu(self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class CELU(ELU):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    def forward(self, x: Tensor) -> Tensor:
        return x.celu(self.alpha)


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, x itself where beta * x > threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softsign(Module):
    """x / (1 + |x|)."""

    def forward(self, x: Tensor) -> Tensor:
        return x.softsign()


class LogSigmoid(Module):
    """log(sigmoid(x)), computed stably."""

    def forward(self, x: Tensor) -> Tensor:
        return x.logsigmoid()


class Tanhshrink(Module):
    """x - tanh(x)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.tanhshrink(x)


class Hardtanh(Module):
    """x clipped to [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val {min_val} must not exceed max_val {max_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        return x.hardtanh(self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Softmin(Module):
    """softmax(-x) along `dim`."""

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        if self.dim is None:
            raise ValueError("Softmin needs dim (PyTorch's implicit choice is deprecated)")
        return F.softmin(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class GLU(Module):
    """First half of `dim` times the sigmoid of the second half."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Threshold(Module):
    """x where x > threshold, else value."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.threshold(x, self.threshold, self.value)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}"
