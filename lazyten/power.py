"""Powers: x ** n for a Python int n, float x ** y with C99 pow's special cases.

Values are built from Tensor ops (Tensors in, a Tensor out); Tensor.pow (elementwise.py)
picks the path, and autograd/special.py's Pow gives them PyTorch's gradients.
"""
from __future__ import annotations

from codegen.ops import BinaryOps
from lazyten.autograd.primitives import BinaryNoGrad


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


def int_tensor_power(x, y):
    """x ** y for integer tensors (y broadcast to x's dtype): squaring over every bit y's
    dtype can hold, so it wraps exactly as repeated multiplication does (numpy, PyTorch;
    float64's pow was inexact past 2**53 and saturated past the dtype). A negative y gives
    PyTorch's answers: 1 ** y = 1, (-1) ** y = +-1 (the sign of an odd y), else 0."""
    bits = y.dtype.itemsize * 8 - (0 if y.dtype.is_unsigned else 1)
    e = y.maximum(0)
    out, square = x.ones_like(), x
    for i in range(bits):
        out = ((e & 1) != 0).where(out * square, out)
        if i + 1 < bits:
            square, e = square * square, e >> 1
    if y.dtype.is_unsigned:
        return out
    odd = (y & 1) != 0
    negative = (x == 1).where(1, ((x == -1) & odd).where(-1, (x == -1).where(1, 0))).cast(x.dtype)
    return (y < 0).where(negative, out)


def float_pow(x, y):
    """Float x ** y as exp2(y * log2|x|) with C99 pow's special cases."""
    magnitude = (y * x.abs().log2()).exp2()
    odd = y.apply(BinaryNoGrad, y.full_like(2.0).detach(), op=BinaryOps.MOD).abs() == 1
    negative = (x < 0) | ((x == 0) & (x.detach().reciprocal() < 0))  # -0.0 counts
    finite_negative = (x < 0) & (x > float("-inf"))
    result = (negative & odd).where(-magnitude, magnitude)
    result = (finite_negative & (y != y.trunc())).where(float("nan"), result)
    one = (y == 0) | (x == 1) | ((x == -1) & y.isinf())
    return one.where(1.0, result)
