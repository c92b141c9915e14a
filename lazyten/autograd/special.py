"""Autograd Functions whose forward is a composite of Tensor ops and whose backward is
the closed-form derivative (PyTorch's formula), not the derivative of the composite: the
composites branch with `where`, and the branch not taken may be nan or inf, which generic
autograd would carry into the gradient.

Special and Special2 take the value and slope functions as arguments (pointwise.py passes
mathfn.py's); Atan2, CopySign and Pow compute their values with mathfn.py's and power.py's
functions. `tensor` is the Tensor class the ops run on (this package does not import it).
Softmax, built in every classifier's step, writes the same composite in LazyBuffer ops.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, ReduceOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.dims import norm_axes
from lazyten.lazy import LazyBuffer
from lazyten.mathfn import atan2, signbit
from lazyten.power import float_pow, int_power
from lazyten.traced import code_key, pointwise


class Special(Function):
    """y = value(x) with dy/dx = slope(x, y); value and slope are Tensor functions run
    on `tensor` (the Tensor class), as all Functions here do."""

    def forward(self, x, value=None, slope=None, tensor=None):
        self.x, self.slope, self.tensor = x, slope, tensor
        self.ret = pointwise(value, value, tensor._wrap, x)  # mathfn's: module-level
        return self.ret

    def backward(self, grad):
        slope = self.slope
        return pointwise(lambda g, x, y: g * slope(x, y), _tagged("slope", slope),
                         self.tensor._wrap, grad, self.x, self.ret)


class Special2(Function):
    """z = value(x, y) with dz/dx = slope(x, y, z) and dz/dy = slope(y, x, z)."""

    def forward(self, x, y, value=None, slope=None, tensor=None):
        self.x, self.y, self.slope, self.tensor = x, y, slope, tensor
        self.ret = pointwise(value, code_key(value), tensor._wrap, x, y)
        return self.ret

    def backward(self, grad):
        slope, key, wrap = self.slope, _tagged("slope2", self.slope), self.tensor._wrap

        def part(g, x, y, z):
            return g * slope(x, y, z)
        gx = pointwise(part, key, wrap, grad, self.x, self.y, self.ret) \
            if self.needs_input_grad[0] else None
        gy = pointwise(part, key, wrap, grad, self.y, self.x, self.ret) \
            if self.needs_input_grad[1] else None
        return gx, gy


def _tagged(tag: str, fn) -> tuple | None:
    """A trace key for a wrapper of `fn` (None where fn has none)."""
    key = code_key(fn)
    return None if key is None else (tag, key)


class Atan2(Function):
    """z = atan2(y, x): dz/dy = x / (x^2 + y^2), dz/dx = -y / (x^2 + y^2)."""

    def forward(self, y, x, tensor=None):
        self.y, self.x, self.tensor = y, x, tensor
        return atan2(tensor._wrap(y), tensor._wrap(x)).lazydata

    def backward(self, grad):
        wrap = self.tensor._wrap
        y, x, g = wrap(self.y), wrap(self.x), wrap(grad)
        norm = x * x + y * y
        scale = (norm == 0).where(0.0, g / norm)  # 0 at the origin, as PyTorch (not 0/0)
        gy = (scale * x).lazydata if self.needs_input_grad[0] else None
        gx = (-scale * y).lazydata if self.needs_input_grad[1] else None
        return gy, gx


class CopySign(Function):
    """z = |x| with y's sign bit: dz/dx = +-1 (the sign x's needs to become z's; 0 at x = 0,
    as PyTorch's result / x), dz/dy = 0."""

    def forward(self, x, y, tensor=None):
        self.x, self.y, self.tensor = x, y, tensor
        magnitude = tensor._wrap(x).abs()
        self.ret = signbit(tensor._wrap(y)).where(-magnitude, magnitude).lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        x, g = wrap(self.x), wrap(grad)
        flip = signbit(x) != signbit(wrap(self.ret))
        gx = (x == 0).where(0.0, flip.where(-g, g)).lazydata if self.needs_input_grad[0] else None
        gy = wrap(self.y).zeros_like().lazydata if self.needs_input_grad[1] else None
        return gx, gy


class Pow(Function):
    """x ** y with PyTorch's gradients, which hold at the edges too:
    d/dx = y * x ** (y - 1), and 0 where y == 0 (x ** 0 is constant, x still gets its 0);
    d/dy = x ** y * ln(x), and 0 where x == 0 and y >= 0.
    A negative base with a non-integer exponent is nan forward and in both gradients.

    `power` is a Python int exponent (values by repeated squaring, exact), else `y` is a
    float LazyBuffer of x's shape (values by float_pow). The backward computes the powers
    it needs with the same code; `tensor` is the Tensor class those ops run on."""

    def forward(self, x, y=None, power: int | None = None, tensor=None):
        self.x, self.y, self.power, self.tensor = x, y, power, tensor
        base = tensor._wrap(x)
        out = int_power(base, power) if power is not None else float_pow(base, tensor._wrap(y))
        self.ret = out.lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        x, g = wrap(self.x), wrap(grad)
        if self.y is None:
            n = self.power
            return (g.zeros_like() if n == 0 else g * (n * int_power(x, n - 1))).lazydata
        y = wrap(self.y)
        gx = gy = None
        if self.needs_input_grad[0]:
            gx = (y == 0).where(0.0, g * (y * float_pow(x, y - 1))).lazydata
        if self.needs_input_grad[1]:
            flat = (x == 0) & (y >= 0)
            gy = flat.where(0.0, g * (wrap(self.ret) * x.log())).lazydata
        return gx, gy


class Softmax(Function):
    """y = softmax(x) or log_softmax(x) along `axis`, with PyTorch's backward from y alone:
    dx = y * (g - sum(g * y)), or g - exp(y) * sum(g) for log_softmax. The derivative of
    the composite would read exp(x - max) and the row max again, so the forward's reduces
    could not stay inside its row kernel (D55) in a training step.

    Both directions are written in LazyBuffer ops: the same graph the Tensor composite
    (`t - t.amax(axis, keepdim=True)`, ...) builds, without a Function and a Tensor per
    step (D61). 16-bit floats take exp, log and sum in float32, as the Tensor methods do."""
    traced = True

    def forward(self, x, axis: int = -1, log: bool = False, tensor=None):
        self.axes, self.log = norm_axes(axis, len(x.shape)), log
        if 0 in x.shape:
            if x.shape and x.shape[self.axes[0]] == 0:  # over nothing: empty, as PyTorch
                self.ret = x.e(BinaryOps.MUL, x.const(1))
                return self.ret
            tensor._wrap(x).amax(axis, keepdim=True)  # raises if another axis is empty
        shifted = _minus(x, x.r(ReduceOps.MAX, self.axes))
        e = _exp(shifted)
        if log:
            self.ret = _minus(shifted, _log(_sum(e, self.axes)))
        else:  # one division per row, as PyTorch
            self.ret = e.e(BinaryOps.MUL, _sum(e, self.axes).e(UnaryOps.RECIP).expand(x.shape))
        return self.ret

    def backward(self, grad):
        y = self.ret
        if self.log:
            return _minus(grad, _exp(y).e(BinaryOps.MUL, _sum(grad, self.axes).expand(y.shape)))
        return y.e(BinaryOps.MUL, _minus(grad, _sum(grad.e(BinaryOps.MUL, y), self.axes)))


def _minus(x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    """x - y, y broadcast to x's shape (Sub's forward)."""
    return x.e(BinaryOps.ADD, y.expand(x.shape).e(UnaryOps.NEG))


def _opmath(x: LazyBuffer, fn) -> LazyBuffer:
    """fn(x), a 16-bit float computed in float32 and rounded back (Tensor._opmath)."""
    if x.dtype.opmath is x.dtype:
        return fn(x)
    return fn(x.cast(dtypes.float32)).cast(x.dtype)


def _exp(x: LazyBuffer) -> LazyBuffer:
    return _opmath(x, lambda v: v.e(UnaryOps.EXP))


def _log(x: LazyBuffer) -> LazyBuffer:  # Log's forward
    return _opmath(x, lambda v: v.e(UnaryOps.LOG2).e(BinaryOps.MUL, v.const(math.log(2))))


def _sum(x: LazyBuffer, axes: tuple[int, ...]) -> LazyBuffer:
    """Sum over `axes`, kept as size-1 dims (Tensor.sum of a float)."""
    return _opmath(x, lambda v: v.r(ReduceOps.SUM, axes))
