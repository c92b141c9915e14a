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
from lazyten.autograd.matmul import broadcast_to, unbroadcast
from lazyten.lazy import LazyBuffer


class LayerNorm(Function):
    """Inputs: x, then weight if `affine[0]`, then bias if `affine[1]`; each parameter's
    shape broadcasts to x's (as `*` and `+` would broadcast it)."""
    traced = True

    def forward(self, x: LazyBuffer, *params: LazyBuffer, axes: tuple[int, ...] = (-1,),
                eps: float = 1e-5, affine: tuple[bool, bool] = (False, False)):
        shape, self.axes = x.shape, axes
        self.count = prod(shape[i] for i in axes)
        mean = _mean(x, axes, self.count)
        centred = x.e(BinaryOps.ADD, mean.expand(shape).e(UnaryOps.NEG))
        var = _mean(centred.e(BinaryOps.MUL, centred), axes, self.count)
        self.rstd = var.e(BinaryOps.ADD, var.const(eps)).e(UnaryOps.SQRT).e(UnaryOps.RECIP)
        self.norm = out = centred.e(BinaryOps.MUL, self.rstd.expand(shape))
        self.weight = broadcast_to(params[0], shape) if affine[0] else None
        self.bias = broadcast_to(params[-1], shape) if affine[1] else None
        self.param_shapes = [p.shape for p in params]
        if self.weight is not None:
            out = out.e(BinaryOps.MUL, self.weight)
        if self.bias is not None:
            out = out.e(BinaryOps.ADD, self.bias)
        return out

    def backward(self, grad: LazyBuffer):
        weight, bias, norm = self.weight, self.bias, self.norm
        gx = None
        if self.needs_input_grad[0]:
            g_norm = grad if weight is None else grad.e(BinaryOps.MUL, weight)
            total = g_norm.r(ReduceOps.SUM, self.axes).expand(norm.shape)
            along = g_norm.e(BinaryOps.MUL, norm).r(ReduceOps.SUM, self.axes).expand(norm.shape)
            inner = g_norm.e(BinaryOps.MUL, g_norm.const(self.count)).e(
                BinaryOps.ADD, total.e(UnaryOps.NEG)).e(
                BinaryOps.ADD, along.e(BinaryOps.MUL, norm).e(UnaryOps.NEG))
            scale = self.rstd.e(BinaryOps.MUL, self.rstd.const(1 / self.count))
            gx = inner.e(BinaryOps.MUL, scale.expand(norm.shape))
        grads: list[LazyBuffer | None] = [gx]
        if weight is not None:
            grads.append(unbroadcast(norm.e(BinaryOps.MUL, grad), self.param_shapes[0])
                         if self.needs_input_grad[1] else None)
        if bias is not None:
            grads.append(unbroadcast(grad, self.param_shapes[-1])
                         if self.needs_input_grad[-1] else None)
        return tuple(grads)


def _mean(x: LazyBuffer, axes: tuple[int, ...], count: int) -> LazyBuffer:
    """Tensor.mean of a float over `axes`, kept: the sum, divided by the count."""
    total = x.r(ReduceOps.SUM, axes)
    return total.e(BinaryOps.FDIV, total.const(count))
