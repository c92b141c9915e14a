"""Parameter creation with PyTorch's default initialisation, shared by the layer modules
(nn/__init__.py, nn/layers.py, nn/attention_layers.py): constant fills, the uniform bias
of fan_in, and conv padding spelled out. Each returns realized tensors (no kernel runs)."""
from __future__ import annotations
import math

import numpy as np

from lazyten.tensor import Tensor

__all__ = ["filled", "uniform_bias", "conv_padding"]


def filled(shape: tuple[int, ...], value: float, requires_grad: bool | None = None) -> Tensor:
    """A realized buffer (copied in from the host, so no kernel runs)."""
    data = np.full(shape, value, dtype=np.float32)
    return Tensor(data, requires_grad=requires_grad)


def uniform_bias(n: int, fan_in: int) -> Tensor:
    """PyTorch's bias init: uniform in +-1/sqrt(fan_in) (0 for an empty fan_in)."""
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    return Tensor.uniform(n, low=-bound, high=bound, requires_grad=True)


def conv_padding(padding, kernel: tuple[int, ...], dilation: tuple[int, ...]):
    """PyTorch's padding argument, with "valid" and "same" spelled out as per-dim pairs."""
    if padding == "valid":
        return 0
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]
    return padding
