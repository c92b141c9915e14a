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
(float32, float64); nnops.py keeps the Tensor chain for the rest. BatchNorm (training)
is the same Function over the batch and positions, with its statistics given.
"""
from __future__ import annotations
from math import prod

from codegen.ops import BinaryOps, ReduceOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.autograd.matmul import broadcast_to, padded_shape, unbroadcast
from lazyten.lazy import LazyBuffer


class _Normalize(Function):
    """(x - mean) * rstd over `axes`, then the affine parameters, and its closed-form
    backward; a subclass's forward computes or takes the statistics."""

    def _normalize(self, x: LazyBuffer, mean: LazyBuffer, var: LazyBuffer,
                   params: tuple[LazyBuffer, ...], axes: tuple[int, ...], eps: float,
                   affine: tuple[bool, bool], centred: LazyBuffer | None = None) -> LazyBuffer:
        shape, self.axes = x.shape, axes
        self.count = prod(shape[i] for i in axes)
        if centred is None:
            centred = x.e(BinaryOps.ADD, mean.expand(shape).e(UnaryOps.NEG))
        self.rstd = var.e(BinaryOps.ADD, var.const(eps)).e(UnaryOps.SQRT).e(UnaryOps.RECIP)
        self.norm = out = centred.e(BinaryOps.MUL, self.rstd.expand(shape))
        self.weight = broadcast_to(params[0], shape) if affine[0] else None
        # the weight at the statistics' shape where it is one number along `axes` (D151)
        along = [i in axes or i - len(shape) in axes for i in range(len(shape))]
        kept = tuple(1 if a else n for a, n in zip(along, shape))
        mine = padded_shape(params[0].shape, len(shape)) if affine[0] else ()
        self.weight_kept = broadcast_to(params[0], kept) if affine[0] and all(
            n == 1 for a, n in zip(along, mine) if a) else None
        self.bias = broadcast_to(params[-1], shape) if affine[1] else None
        self.param_shapes = [p.shape for p in params]
        if self.weight is not None:
            out = out.e(BinaryOps.MUL, self.weight)
        if self.bias is not None:
            out = out.e(BinaryOps.ADD, self.bias)
        return out

    def _gradients(self, grad: LazyBuffer) -> list[LazyBuffer | None]:
        """The input's gradient, then the weight's and the bias's where there are some.
        Where the weight is one number along `axes` (BatchNorm's, per channel) the input
        gradient's sums are the parameters' gradients times it, sum(g w) = w sum(g) and
        sum(g w xhat) = w sum(g xhat): two reduces of g where there were four, each one
        computing g's chain again (a BatchNorm1d after an elu: 2.4 MFLOP a reduce, D151)."""
        weight, bias, norm = self.weight, self.bias, self.norm
        sums = self._parameter_sums(grad)
        gx = None
        if self.needs_input_grad[0]:
            g_norm = grad if weight is None else grad.e(BinaryOps.MUL, weight)
            if sums is not None:  # (w sum(g) and w sum(g xhat), w one number per row)
                w = self.weight_kept
                assert w is not None, "the sums are shared only with a weight"
                total = sums[1].e(BinaryOps.MUL, w).expand(norm.shape)
                along = sums[0].e(BinaryOps.MUL, w).expand(norm.shape)
            else:
                total = g_norm.r(ReduceOps.SUM, self.axes).expand(norm.shape)
                along = g_norm.e(BinaryOps.MUL, norm).r(ReduceOps.SUM, self.axes).expand(
                    norm.shape)
            inner = g_norm.e(BinaryOps.MUL, g_norm.const(self.count)).e(
                BinaryOps.ADD, total.e(UnaryOps.NEG)).e(
                BinaryOps.ADD, along.e(BinaryOps.MUL, norm).e(UnaryOps.NEG))
            scale = self.rstd.e(BinaryOps.MUL, self.rstd.const(1 / self.count))
            gx = inner.e(BinaryOps.MUL, scale.expand(norm.shape))
        grads: list[LazyBuffer | None] = [gx]
        if weight is not None:
            along_g = norm.e(BinaryOps.MUL, grad) if sums is None else sums[0]
            grads.append(unbroadcast(along_g, self.param_shapes[0])
                         if self.needs_input_grad[-len(self.param_shapes)] else None)
        if bias is not None:
            grads.append(unbroadcast(grad if sums is None else sums[1], self.param_shapes[-1])
                         if self.needs_input_grad[-1] else None)
        return grads

    def _parameter_sums(self, grad: LazyBuffer) -> tuple[LazyBuffer, LazyBuffer] | None:
        """(sum(g xhat), sum(g)) over `axes`, kept, where the weight is one number along
        `axes` and the input needs a gradient (else None: each gradient sums its own)."""
        if self.weight_kept is None or not self.needs_input_grad[0]:
            return None
        return (self.norm.e(BinaryOps.MUL, grad).r(ReduceOps.SUM, self.axes),
                grad.r(ReduceOps.SUM, self.axes))


class LayerNorm(_Normalize):
    """Inputs: x, then weight if `affine[0]`, then bias if `affine[1]`; each parameter's
    shape broadcasts to x's (as `*` and `+` would broadcast it)."""
    traced = True

    def forward(self, x: LazyBuffer, *params: LazyBuffer, axes: tuple[int, ...] = (-1,),
                eps: float = 1e-5, affine: tuple[bool, bool] = (False, False)):
        count = prod(x.shape[i] for i in axes)
        mean = _mean(x, axes, count)
        centred = x.e(BinaryOps.ADD, mean.expand(x.shape).e(UnaryOps.NEG))
        var = _mean(centred.e(BinaryOps.MUL, centred), axes, count)
        return self._normalize(x, mean, var, params, axes, eps, affine, centred)

    def backward(self, grad: LazyBuffer):
        return tuple(self._gradients(grad))


class BatchNorm(_Normalize):
    """Batch normalisation with the batch's statistics: LayerNorm over `axes` (the batch
    and positions, every axis but the channels'), its statistics given. Inputs: x, its
    mean and biased variance over `axes` (kept, shape 1 there), then weight and bias as
    LayerNorm's. The caller computes the statistics from x's value (no gradient) and
    shares them with the running-statistics update, so one reduce each serves both; the
    backward is LayerNorm's closed form, which already counts the gradient that reaches x
    through the statistics, so they take none. (Through the Tensor chain, the derivative of
    the mean and of the variance: 47 bases in a layer's gradients, here 38, and a third
    less Python per training step: D65 addendum.)"""
    traced = True

    def forward(self, x: LazyBuffer, mean: LazyBuffer, var: LazyBuffer, *params: LazyBuffer,
                axes: tuple[int, ...] = (0,), eps: float = 1e-5,
                affine: tuple[bool, bool] = (False, False)):
        return self._normalize(x, mean, var, params, axes, eps, affine)

    def backward(self, grad: LazyBuffer):
        gx, *params = self._gradients(grad)
        return (gx, None, None, *params)


def _mean(x: LazyBuffer, axes: tuple[int, ...], count: int) -> LazyBuffer:
    """Tensor.mean of a float over `axes`, kept: the sum, divided by the count."""
    total = x.r(ReduceOps.SUM, axes)
    return total.e(BinaryOps.FDIV, total.const(count))
