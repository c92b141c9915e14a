"""Layer normalisation as one Function: y = (x - mean) / sqrt(var + eps) [* weight] [+ bias]
over `axes`, forward and backward in LazyBuffer ops.

The forward builds the graph the Tensor chain built (`x - x.mean(axes)`, its squares'
mean, `+ eps`, `sqrt`, `reciprocal`, then the broadcast weight and bias), node for node,
without a Function and a Tensor per step (D61): the scheduler sees the same row kernel
(D55). The backward is the closed form (PyTorch's), with n the count of `axes`,
xhat = (x - mean) * rstd and gxhat = g * weight:

    dx = rstd / n * (n * gxhat - sum(gxhat) - xhat * sum(gxhat * xhat))
    dweight = sum of g * xhat over the axes weight is broadcast along; dbias = sum of g

so a training step reads x's row once per gradient reduce, not through the chain's
derivative (eight kernels before). Inputs of one float dtype that is its own opmath
(float32, float64); nnops.py keeps the Tensor chain for the rest.
"""
from __future__ import annotations
from math import prod

from codegen.ops import BinaryOps, ReduceOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer


class LayerNorm(Function):
    """Inputs: x, then weight if `affine[0]`, then bias if `affine[1]`; each parameter's
    shape broadcasts to x's (as `*` and `+` would broadcast it)."""

    def forward(self, x: LazyBuffer, *params: LazyBuffer, axes: tuple[int, ...] = (-1,),
                eps: float = 1e-5, affine: tuple[bool, bool] = (False, False)):
        shape, self.axes = x.shape, axes
        self.count = prod(shape[i] for i in axes)
        mean = _mean(x, axes, self.count)
        centred = x.e(BinaryOps.ADD, mean.expand(shape).e(UnaryOps.NEG))
        var = _mean(centred.e(BinaryOps.MUL, centred), axes, self.count)
        self.rstd = var.e(BinaryOps.ADD, var.const(eps)).e(UnaryOps.SQRT).e(UnaryOps.RECIP)
        self.norm = out = centred.e(BinaryOps.MUL, self.rstd.expand(shape))
        self.weight = self.bias = None
        if affine[0]:
            self.weight = _Broadcast(params[0], shape)
            out = out.e(BinaryOps.MUL, self.weight.value)
        if affine[1]:
            self.bias = _Broadcast(params[-1], shape)
            out = out.e(BinaryOps.ADD, self.bias.value)
        return out

    def backward(self, grad: LazyBuffer):
        weight, bias, norm = self.weight, self.bias, self.norm
        gx = None
        if self.needs_input_grad[0]:
            g_norm = grad if weight is None else grad.e(BinaryOps.MUL, weight.value)
            total = g_norm.r(ReduceOps.SUM, self.axes).expand(norm.shape)
            along = g_norm.e(BinaryOps.MUL, norm).r(ReduceOps.SUM, self.axes).expand(norm.shape)
            inner = g_norm.e(BinaryOps.MUL, g_norm.const(self.count)).e(
                BinaryOps.ADD, total.e(UnaryOps.NEG)).e(
                BinaryOps.ADD, along.e(BinaryOps.MUL, norm).e(UnaryOps.NEG))
            scale = self.rstd.e(BinaryOps.MUL, self.rstd.const(1 / self.count))
            gx = inner.e(BinaryOps.MUL, scale.expand(norm.shape))
        grads: list[LazyBuffer | None] = [gx]
        if weight is not None:
            grads.append(weight.gradient(norm.e(BinaryOps.MUL, grad))
                         if self.needs_input_grad[1] else None)
        if bias is not None:
            grads.append(bias.gradient(grad) if self.needs_input_grad[-1] else None)
        return tuple(grads)


class _Broadcast:
    """A parameter broadcast to x's shape (`value`), as Tensor broadcasting does it: a
    reshape that adds leading 1s, then an expand; `gradient` undoes both."""

    def __init__(self, param: LazyBuffer, shape: tuple[int, ...]):
        self.shape = param.shape
        self.padded = (1,) * (len(shape) - len(param.shape)) + param.shape
        self.value = param.reshape(self.padded).expand(shape)

    def gradient(self, grad: LazyBuffer) -> LazyBuffer:
        axes = tuple(i for i, (a, b) in enumerate(zip(self.padded, grad.shape)) if a != b)
        return grad.r(ReduceOps.SUM, axes).reshape(self.shape)


def _mean(x: LazyBuffer, axes: tuple[int, ...], count: int) -> LazyBuffer:
    """Tensor.mean of a float over `axes`, kept: the sum, divided by the count."""
    total = x.r(ReduceOps.SUM, axes)
    return total.e(BinaryOps.FDIV, total.const(count))
