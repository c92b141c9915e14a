"""Powers: x ** n for a Python int n, float x ** y with C99 pow's special cases, and the
autograd Function that gives them PyTorch's gradients.

Values are built from Tensor ops (Tensors in, a Tensor out); Tensor.pow picks the path.
"""
from __future__ import annotations

from codegen.ops import BinaryOps
from lazyten import function as F


def int_power(x, n: int):
    """x ** n for a Python int n by repeated squaring: exact (and wrapping) for ints."""
    if n == 0:
        return x.ones_like()
    if n < 0:
        return int_power(x, -n).reciprocal()
    out, square = None, x
    while n:
        if n & 1:
            out = square if out is None else out * square
        n >>= 1
        if n:
            square = square * square
    return out


def float_pow(x, y):
    """Float x ** y as exp2(y * log2|x|) with C99 pow's special cases."""
    magnitude = (y * x.abs().log2()).exp2()
    odd = y.apply(F.BinaryNoGrad, y.full_like(2.0).detach(), op=BinaryOps.MOD).abs() == 1
    negative = (x < 0) | ((x == 0) & (x.detach().reciprocal() < 0))  # -0.0 counts
    finite_negative = (x < 0) & (x > float("-inf"))
    result = (negative & odd).where(-magnitude, magnitude)
    result = (finite_negative & (y != y.trunc())).where(float("nan"), result)
    one = (y == 0) | (x == 1) | ((x == -1) & y.isinf())
    return one.where(1.0, result)


class Pow(F.Function):
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
