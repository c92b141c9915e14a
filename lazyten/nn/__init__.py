"""Neural-network layers: Modules (nn/module.py) holding parameter Tensors, PyTorch-style.

Each layer takes Tensors in and gives a Tensor out in `forward`; the math lives in Tensor
methods (nnops.py), so a layer only owns its parameters and PyTorch's default
initialisation. Parameters are realized buffers from the start, so optimisers can update
them in place. Layers without parameters (activations, pooling, losses) are in
nn/stateless.py, nn/activations.py, nn/shape_layers.py and nn/loss_layers.py; more layers
with parameters in nn/layers.py (Conv1d/3d, PReLU, RMSNorm, InstanceNorm), nn/recurrent.py
(RNN, LSTM, GRU and their cells) and
nn/attention_layers.py (MultiheadAttention, TransformerEncoderLayer), nn/transformer.py
(TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer),
nn/more_layers.py (padding modes, 3-d pooling, BatchNorm3d, ConvTranspose1d/3d and other
small torch.nn modules); containers in
nn/container.py; torch.nn.init's in-place initialisations (`nn.init.kaiming_normal_(w)`,
xavier_uniform_, orthogonal_, ...) in nn/init.py. Plain objects that hold layers still
work: `get_parameters` / `get_state_dict` (nn/state.py) find tensors by walking attributes.
"""
from __future__ import annotations
import math

import numpy as np

from codegen.helpers import make_pair, prod
from lazyten.nn.functional import (avg_pool2d, binary_cross_entropy,  # re-exported
                                   binary_cross_entropy_with_logits, cross_entropy,
                                   max_pool2d, mse_loss)
from lazyten.nn.functional_layers import embedding, update_running
from lazyten.nn import activations, layers, loss_layers, recurrent, shape_layers
from lazyten.nn.activations import *  # noqa: F401,F403
from lazyten.nn.container import ModuleDict, ModuleList, ParameterList, Sequential
from lazyten.nn.layers import *  # noqa: F401,F403
from lazyten.nn.loss_layers import *  # noqa: F401,F403
from lazyten.nn.recurrent import *  # noqa: F401,F403
from lazyten.nn.module import Module, Parameter
from lazyten.nn import utils  # noqa: F401  # nn.utils.clip_grad_norm_, as torch.nn.utils
from lazyten.nn import init  # noqa: F401  # nn.init.xavier_uniform_, as torch.nn.init
from lazyten.nn.params import (conv_padding as _conv_padding, filled as _filled,
                               uniform_bias as _uniform_bias)
from lazyten.nn.shape_layers import *  # noqa: F401,F403
from lazyten.nn.stateless import (AvgPool2d, CrossEntropyLoss, Flatten, GELU, Identity,
                                  LogSoftmax, MaxPool2d, MSELoss, ReLU, Sigmoid, Softmax, Tanh)
from lazyten.tensor import Tensor, no_grad

__all__ = ["Linear", "Conv2d", "ConvTranspose2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d",
           "LayerNorm", "GroupNorm", "Embedding", "Dropout", "max_pool2d", "avg_pool2d",
           "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits",
           "mse_loss"]


__all__ += ["Module", "Parameter", "Sequential", "ModuleList", "ReLU", "GELU", "Sigmoid",
            "Tanh", "Softmax", "LogSoftmax", "Flatten", "Identity", "MaxPool2d", "AvgPool2d",
            "CrossEntropyLoss", "MSELoss", "ModuleDict", "ParameterList"]
__all__ += (activations.__all__ + layers.__all__ + loss_layers.__all__ + recurrent.__all__
            + shape_layers.__all__ + ["MultiheadAttention", "TransformerEncoderLayer",
                                      "TransformerEncoder", "TransformerDecoderLayer",
                                      "TransformerDecoder", "Transformer"])


class Linear(Module):
    """y = x @ weight.T + bias, weight laid out (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5),
                                             requires_grad=True)
        self.bias = _uniform_bias(out_features, in_features) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _conv_repr(conv: Conv2d | ConvTranspose2d, output_padding=0) -> str:
    """PyTorch's repr of a convolution: channels, kernel and stride, then what is not default."""
    text = (f"{conv.in_channels}, {conv.out_channels}, kernel_size={conv.kernel_size}, "
            f"stride={make_pair(conv.stride)}")
    if conv.padding not in (0, (0, 0), [0, 0]):
        text += f", padding={conv.padding}"
    if make_pair(conv.dilation) != (1, 1):
        text += f", dilation={make_pair(conv.dilation)}"
    if output_padding not in (0, (0, 0)):
        text += f", output_padding={output_padding}"
    if conv.groups != 1:
        text += f", groups={conv.groups}"
    return text + ("" if conv.bias is not None else ", bias=False")


class Conv2d(Module):
    """2-d convolution, weight (out_channels, in_channels / groups, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible "
                             f"by groups={groups}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = make_pair(kernel_size)
        self.stride, self.dilation, self.groups = stride, make_pair(dilation), groups
        if padding == "same" and make_pair(stride) != (1, 1):
            raise ValueError("padding='same' needs stride 1")
        self.padding = _conv_padding(padding, self.kernel_size, self.dilation)
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Tensor.kaiming_uniform(*shape, a=math.sqrt(5), requires_grad=True)
        self.bias = _uniform_bias(out_channels, prod(shape[1:])) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride,
                        dilation=self.dilation, padding=self.padding)

    def extra_repr(self) -> str:
        return _conv_repr(self)


class ConvTranspose2d(Module):
    """Transposed 2-d convolution, weight (in_channels, out_channels / groups, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible "
                             f"by groups={groups}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = make_pair(kernel_size)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups
        shape = (in_channels, out_channels // groups) + self.kernel_size
        # PyTorch computes fan_in from dim 1 here too (out_channels / groups * kh * kw)
        self.weight = Tensor.kaiming_uniform(*shape, a=math.sqrt(5), requires_grad=True)
        self.bias = _uniform_bias(out_channels, prod(shape[1:])) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(self.weight, self.bias, groups=self.groups,
                                  stride=self.stride, dilation=self.dilation,
                                  padding=self.padding, output_padding=self.output_padding)

    def extra_repr(self) -> str:
        return _conv_repr(self, self.output_padding)


class BatchNorm(Module):
    """Batch normalisation over axis 1 (any rank). In training mode it uses the batch
    statistics and updates the running ones in place; in eval mode it uses the running
    ones. running_var tracks the unbiased variance, as PyTorch does. The mode is the
    module's own (`train()` / `eval()`), or Tensor.training while the layer is outside any
    Module and was never switched (nn/module.py)."""
    # all three are None without track_running_stats
    running_mean: Tensor | None
    running_var: Tensor | None
    num_batches_tracked: Tensor | None

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__()
        self._training = None
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = _filled((num_features,), 1.0, True) if affine else None
        self.bias = _filled((num_features,), 0.0, True) if affine else None
        if track_running_stats:
            self.running_mean = _filled((num_features,), 0.0, False)
            self.running_var = _filled((num_features,), 1.0, False)
            self.num_batches_tracked = Tensor(np.zeros((), np.int64), requires_grad=False)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"batchnorm of {self.num_features} features got input {x.shape}")
        training, running_mean, running_var = self.training, self.running_mean, self.running_var
        if training or running_mean is None or running_var is None:
            if training and x.numel() // x.shape[1] == 1:  # as PyTorch: no statistics in one value
                raise ValueError(f"batchnorm: expected more than 1 value per channel when "
                                 f"training, got input of shape {x.shape}")
            out, mean, var = x._batch_norm_train(self.weight, self.bias, self.eps)
            if training and running_mean is not None:
                self._update_running(mean, var, x.numel() // x.shape[1])
            return out
        mean, var = running_mean, running_var
        invstd = (var + self.eps).rsqrt()
        return x.batchnorm(self.weight, self.bias, mean.cast(x.dtype), invstd.cast(x.dtype))

    def _update_running(self, mean: Tensor, var: Tensor, count: int) -> None:
        running_mean, running_var = self.running_mean, self.running_var
        tracked = self.num_batches_tracked
        assert running_mean is not None and running_var is not None and tracked is not None, \
            "only called with track_running_stats"
        stats = (running_mean, running_var, tracked)
        pending = [t for t in stats if not t.lazydata.is_realized]
        if pending:  # last step's update: finish it so the lazy graph never chains steps
            Tensor.realize(*pending)
        with no_grad():
            tracked.assign(tracked + 1)
        update_running(running_mean, running_var, mean, var, count, self.momentum, tracked)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.weight is not None}, "
                f"track_running_stats={self.running_mean is not None}")


class BatchNorm1d(BatchNorm):
    """BatchNorm over (N, C) or (N, C, L)."""


class BatchNorm2d(BatchNorm):
    """BatchNorm over (N, C, H, W)."""


class LayerNorm(Module):
    """Normalise over the last len(normalized_shape) axes, then scale and shift."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        shape = self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = _filled(shape, 1.0, True) if elementwise_affine else None
        self.bias = _filled(shape, 0.0, True) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if x.shape[x.ndim - n:] != self.normalized_shape:
            raise ValueError(f"layernorm over {self.normalized_shape} got input {x.shape}")
        return x._layer_norm(tuple(range(x.ndim - n, x.ndim)), self.eps, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.weight is not None}")


class GroupNorm(Module):
    """Normalise each group of channels of (N, C, ...) over its channels and positions."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"{num_channels} channels do not split into {num_groups} groups")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = _filled((num_channels,), 1.0, True) if affine else None
        self.bias = _filled((num_channels,), 0.0, True) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"groupnorm of {self.num_channels} channels got input {x.shape}")
        grouped = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps)
        out = grouped.reshape(x.shape)
        if self.weight is None or self.bias is None:  # both or neither (affine)
            return out
        shape = (1, self.num_channels) + (1,) * (x.ndim - 2)
        return out * self.weight.reshape(shape) + self.bias.reshape(shape)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.weight is not None}")


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table picked by integer indices
    (F.embedding); the padding_idx row starts at zero and gets no gradient, as PyTorch's."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq:
            raise NotImplementedError("Embedding's max_norm and scale_grad_by_freq are not "
                                      "supported")
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"padding_idx {padding_idx} is out of range for "
                             f"{num_embeddings} rows")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        weight = Tensor.normal(num_embeddings, embedding_dim)
        if self.padding_idx is not None:
            row = Tensor.arange(num_embeddings).reshape(num_embeddings, 1)
            weight = (row == self.padding_idx).where(0.0, weight)
        self.weight = weight.contiguous().realize().requires_grad_()

    def forward(self, idx: Tensor) -> Tensor:
        return embedding(idx, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class Dropout(Module):
    """Zero each element with probability p in training mode, scaling the rest by 1/(1-p);
    pass the input through in eval mode. The mode is the module's own, or Tensor.training
    while the layer is outside any Module and was never switched (nn/module.py)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self._training = None
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        with Tensor.train(self.training):  # the module's mode, whatever the thread's is
            return x.dropout(self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# last: these layers are built from Linear, LayerNorm and Dropout above
from lazyten.nn.attention_layers import MultiheadAttention, TransformerEncoderLayer  # noqa: E402,F401
from lazyten.nn.transformer import (Transformer, TransformerDecoder,  # noqa: E402,F401
                                    TransformerDecoderLayer, TransformerEncoder)
from lazyten.nn import more_layers  # noqa: E402  # 3-d layers subclass BatchNorm above
from lazyten.nn.more_layers import *  # noqa: E402,F401,F403
from lazyten.nn import more_layers2  # noqa: E402
from lazyten.nn.more_layers2 import *  # noqa: E402,F401,F403

__all__ += more_layers.__all__ + more_layers2.__all__
