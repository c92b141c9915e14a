"""Still more torch.nn modules, PyTorch's constructor arguments, defaults, parameter names
and reprs, each over an nn/functional_more.py function: Bilinear (weight (out, in1, in2)
and bias uniform in +-1/sqrt(in1), as torch), LocalResponseNorm, RReLU and AlphaDropout
(random only in training mode: the module's own, as Dropout's) and Fold (col2im).
"""
from __future__ import annotations
import math

from lazyten.nn import functional_more
from lazyten.nn.module import Module
from lazyten.tensor import Tensor

# annotated: mypy cannot type it through nn/__init__.py's import cycle otherwise
__all__: list[str] = ["Bilinear", "LocalResponseNorm", "RReLU", "AlphaDropout", "Fold"]


class Bilinear(Module):
    """y = x1^T W x2 + b per output feature: forward(input1 (*, in1), input2 (*, in2))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True):
        super().__init__()
        if in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={in1_features})")
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        bound = 1 / math.sqrt(in1_features)
        self.weight = Tensor.uniform(out_features, in1_features, in2_features, low=-bound,
                                     high=bound, requires_grad=True)
        self.bias = (Tensor.uniform(out_features, low=-bound, high=bound, requires_grad=True)
                     if bias else None)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return functional_more.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """F.local_response_norm over neighbouring channels of (N, C, *)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x: Tensor) -> Tensor:
        return functional_more.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class RReLU(Module):
    """F.rrelu: random negative slopes in [lower, upper) in training mode, their mean in
    eval mode. The mode is the module's own, or Tensor.training while the layer is outside
    any Module and was never switched (nn/module.py)."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self._training = None
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, x: Tensor) -> Tensor:
        return functional_more.rrelu(x, self.lower, self.upper, self.training)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class AlphaDropout(Module):
    """F.alpha_dropout in training mode (its mode rule is RReLU's), the identity otherwise."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        self._training = None
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return functional_more.alpha_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Fold(Module):
    """F.fold: (N, C * kh * kw, L) columns summed back into (N, C, *output_size)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return functional_more.fold(x, self.output_size, self.kernel_size, self.dilation,
                                    self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")
