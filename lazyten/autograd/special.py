"""Autograd Functions whose forward is a composite of Tensor ops and whose backward is
the closed-form derivative (PyTorch's formula), not the derivative of the composite: the
composites branch with `where`, and the branch not taken may be nan or inf, which generic
autograd would carry into the gradient.

Special and Special2 take the value and slope functions as arguments (pointwise.py passes
mathfn.py's); Atan2, CopySign and Pow compute their values with mathfn.py's and power.py's
functions. `tensor` is the Tensor class the ops run on (this package does not import it).
"""
from __future__ import annotations

from lazyten.autograd.function import Function
from lazyten.dims import norm_axes
from lazyten.mathfn import atan2, signbit
from lazyten.power import float_pow, int_power


class Special(Function):
    """y = value(x) with dy/dx = slope(x, y); value and slope are Tensor functions run
    on `tensor` (the Tensor class), as all Functions here do."""

    def forward(self, x, value=None, slope=None, tensor=None):
        self.x, self.slope, self.tensor = x, slope, tensor
        self.ret = value(tensor._wrap(x)).lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        return (wrap(grad) * self.slope(wrap(self.x), wrap(self.ret))).lazydata


class Special2(Function):
    """z = value(x, y) with dz/dx = slope(x, y, z) and dz/dy = slope(y, x, z)."""

    def forward(self, x, y, value=None, slope=None, tensor=None):
        self.x, self.y, self.slope, self.tensor = x, y, slope, tensor
        self.ret = value(tensor._wrap(x), tensor._wrap(y)).lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        x, y, z, g = wrap(self.x), wrap(self.y), wrap(self.ret), wrap(grad)
        gx = (g * self.slope(x, y, z)).lazydata if self.needs_input_grad[0] else None
        gy = (g * self.slope(y, x, z)).lazydata if self.needs_input_grad[1] else None
        return gx, gy


class Atan2(Function):
    """z = atan2(y, x): dz/dy = x / (x^2 + y^2), dz/dx = -y / (x^2 + y^2)."""

    def forward(self, y, x, tensor=None):
        self.y, self.x, self.tensor = y, x, tensor
        return atan2(tensor._wrap(y), tensor._wrap(x)).lazydata

    def backward(self, grad):
        wrap = self.tensor._wrap
        y, x, g = wrap(self.y), wrap(self.x), wrap(grad)
        scale = g / (x * x + y * y)
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
    could not stay inside its row kernel (D55) in a training step."""

    def forward(self, x, axis: int = -1, log: bool = False, tensor=None):
        self.axis, self.log, self.tensor = axis, log, tensor
        t = tensor._wrap(x)
        if t.ndim and t.shape[norm_axes(axis, t.ndim)[0]] == 0:  # over nothing: empty, as PyTorch
            self.ret = (t * 1).lazydata
            return self.ret
        shifted = t - t.amax(axis, keepdim=True)
        if log:
            out = shifted - shifted.exp().sum(axis, keepdim=True).log()
        else:
            e = shifted.exp()
            out = e * e.sum(axis, keepdim=True).reciprocal()  # one division per row, as PyTorch
        self.ret = out.lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        y, g = wrap(self.ret), wrap(grad)
        if self.log:
            return (g - y.exp() * g.sum(self.axis, keepdim=True)).lazydata
        return (y * (g - (g * y).sum(self.axis, keepdim=True))).lazydata
