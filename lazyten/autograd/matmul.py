"""Matmul: x (..., n, k) @ w (..., k, m) as one Function, forward and backward in
LazyBuffer ops.

The product is a broadcast multiply summed over k: x viewed as (..., n, 1, k), w
transposed and viewed as (..., 1, m, k), both expanded to the broadcast batch shape. The
ops, and in the backward the reduces and views that undo them, are those the chain of
Tensor ops (reshape, transpose, expand, multiply, sum) built with a Function and a Tensor
each, in the same order: the scheduler sees the same graph (D61). One exception: the
gradient of a w in memory order (a plain parameter, an Embedding's table) is reduced in
w's own layout, not as w^T viewed transposed (D67).
"""
from __future__ import annotations

from codegen.ops import BinaryOps, ReduceOps
from lazyten.autograd.function import Function
from lazyten.elementwise import broadcast_shape
from lazyten.lazy import LazyBuffer


class Matmul(Function):
    """Inputs of one dtype, at least 2-d each, whose batch dims broadcast. Traced (D79,
    D80): a call is one graph node forward and one per gradient backward."""
    traced = True

    def forward(self, x: LazyBuffer, w: LazyBuffer) -> LazyBuffer:
        k, nd = x.shape[-1], len(w.shape)
        self.x_shape, self.w_shape = x.shape, w.shape
        self.swap = tuple(range(nd - 2)) + (nd - 1, nd - 2)
        xr = x.reshape(x.shape[:-1] + (1, k))
        wt = w.permute(self.swap)
        wr = wt.reshape(wt.shape[:-2] + (1,) + wt.shape[-2:])
        self.xr_shape, self.wt_shape, self.wr_shape = xr.shape, wt.shape, wr.shape
        self.shape = broadcast_shape(xr.shape, wr.shape)
        self.xb, self.wb = broadcast_to(xr, self.shape), broadcast_to(wr, self.shape)
        # w's gradient is laid out as w is: an optimiser's elementwise update then reads
        # it in order (a transposed read walks memory 4 bytes per 2 KB: D67)
        self.w_in_order = w._base is None or w.st.contiguous
        self.kept = self.xb.e(BinaryOps.MUL, self.wb).r(ReduceOps.SUM, (len(self.shape) - 1,))
        return self.kept.reshape(self.shape[:-1])

    def backward(self, grad: LazyBuffer):
        grad = grad.reshape(self.kept.shape).expand(self.shape)
        gx = gw = None
        if self.needs_input_grad[0]:
            gx = unbroadcast(self.wb.e(BinaryOps.MUL, grad), self.xr_shape)
            gx = gx.reshape(self.x_shape)
        if self.needs_input_grad[1] and self.w_in_order:  # reduced as (..., n, k, m)
            swap = tuple(range(len(self.shape) - 2)) + (len(self.shape) - 1, len(self.shape) - 2)
            shape = self.wr_shape[:-2] + (self.wr_shape[-1], self.wr_shape[-2])
            product = self.xb.permute(swap).e(BinaryOps.MUL, grad.permute(swap))
            gw = unbroadcast(product, shape).reshape(self.w_shape)
        elif self.needs_input_grad[1]:  # a transposed view's memory is (m, k): so is this
            gw = unbroadcast(self.xb.e(BinaryOps.MUL, grad), self.wr_shape)
            gw = gw.reshape(self.wt_shape).permute(self.swap)  # a swap is its own inverse
        return gx, gw


class Linear(Matmul):
    """x @ w.T (+ b): w (m, k), b (m,), all of one dtype, as one Function: the ops of
    Tensor.T's Permute, Matmul, and the Add of b broadcast (a Reshape and an Expand, when
    the rank grows), in their order, so the graph is the chain's (D61)."""

    def forward(self, x: LazyBuffer, w: LazyBuffer, b: LazyBuffer | None = None) -> LazyBuffer:
        out = super().forward(x, w.permute((1, 0)))
        if b is None:
            return out
        self.b_shape = b.shape
        return out.e(BinaryOps.ADD, broadcast_to(b, out.shape))

    def backward(self, grad: LazyBuffer):
        gx, gw = super().backward(grad)
        gw = None if gw is None else gw.permute((1, 0))
        if len(self.needs_input_grad) < 3:
            return gx, gw
        gb = unbroadcast(grad, self.b_shape) if self.needs_input_grad[2] else None
        return gx, gw, gb


def padded_shape(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + shape


def broadcast_to(x: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
    """x reshaped to `shape`'s rank and expanded to it (Tensor._broadcast_to's views; also
    LayerNorm's weight and bias)."""
    return x.reshape(padded_shape(x.shape, len(shape))).expand(shape)


def unbroadcast(grad: LazyBuffer, shape: tuple[int, ...]) -> LazyBuffer:
    """The gradient of `broadcast_to` from `shape`: summed over the expanded axes (Expand's
    backward), then reshaped back (Reshape's)."""
    padded = padded_shape(shape, len(grad.shape))
    axis = tuple(i for i, (a, b) in enumerate(zip(padded, grad.shape)) if a != b)
    return (grad.r(ReduceOps.SUM, axis) if axis else grad).reshape(shape)
