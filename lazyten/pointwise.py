"""Elementwise Tensor methods beyond elementwise.py's: the special functions (expm1, log1p,
hyperbolic, erf, erfc, logaddexp), the inverse trigonometric functions (asin, acos, atan,
atan2), copysign, logsigmoid, selu, idiv; mixed into Tensor.

The values are mathfn.py's compositions of Tensor ops; each method applies an autograd
Function of autograd/special.py, which gives PyTorch's gradient formula: the composite's
own derivative would run through `where` branches that are nan where they are not selected.
Float results; integer inputs compute in float32, half and bfloat16 in float32.
"""
from __future__ import annotations

from codegen.dtypes import dtypes
from lazyten.autograd.special import Atan2, CopySign, Special, Special2
from lazyten.errors import DTypeError
from lazyten.mathfn import (LN2, TWO_OVER_SQRT_PI, acos, acosh, asin, asinh, atan, atanh, cosh,
                            erf, erfc, expm1, log1p, logaddexp, sinh)
from lazyten.mixin import TensorMixin

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


class PointwiseMixin(TensorMixin):
    """Special functions, inverse trigonometric functions and a few PyTorch/tinygrad
    elementwise extras."""

    # ---- special functions ----
    def _special(self, value, slope):
        return self._opmath(lambda x: x.apply(Special, value=value, slope=slope, tensor=type(x)))

    def expm1(self): return self._special(expm1, lambda x, y: y + 1)
    def log1p(self): return self._special(log1p, lambda x, y: 1 / (x + 1))
    def sinh(self): return self._special(sinh, lambda x, y: cosh(x))
    def cosh(self): return self._special(cosh, lambda x, y: sinh(x))
    def asinh(self): return self._special(asinh, lambda x, y: (x * x + 1).rsqrt())
    def acosh(self): return self._special(acosh, lambda x, y: ((x - 1) * (x + 1)).rsqrt())
    def atanh(self): return self._special(atanh, lambda x, y: 1 / (1 - x * x))
    def erf(self): return self._special(erf, lambda x, y: TWO_OVER_SQRT_PI * (-(x * x)).exp())
    def erfc(self): return self._special(erfc, lambda x, y: -TWO_OVER_SQRT_PI * (-(x * x)).exp())
    arcsinh, arccosh, arctanh = asinh, acosh, atanh

    def _special2(self, other, value, slope):
        x, y = self._broadcasted(other)
        x, y = x._float(), y._float()
        tensor = type(self)
        if x.dtype.opmath != x.dtype:  # float16, bfloat16
            return x.float().apply(Special2, y.float(), value=value, slope=slope,
                                   tensor=tensor).cast(x.dtype)
        return x.apply(Special2, y, value=value, slope=slope, tensor=tensor)

    def logaddexp(self, other):
        """log(e^x + e^y) without overflow; d/dx = 1 / (1 + e^(y - x)) as PyTorch."""
        return self._special2(other, lambda x, y: logaddexp(x, y, lambda d: d.exp(), 1.0, LN2),
                              lambda x, y, z: (x - y).sigmoid())

    def logaddexp2(self, other):
        """log2(2^x + 2^y); d/dx = 1 / (1 + 2^(y - x))."""
        return self._special2(
            other, lambda x, y: logaddexp(x, y, lambda d: d.exp2(), 1 / LN2, 1.0),
            lambda x, y, z: ((x - y) * LN2).sigmoid())

    # ---- inverse trigonometric functions and extras ----
    def asin(self):
        return self._special(asin, lambda x, y: ((1 - x) * (1 + x)).rsqrt())

    def acos(self):
        return self._special(acos, lambda x, y: -((1 - x) * (1 + x)).rsqrt())

    def atan(self):
        return self._special(atan, lambda x, y: 1 / (1 + x * x))

    arcsin, arccos, arctan = asin, acos, atan

    def atan2(self, other):
        """The angle of the point (other, self), as torch.atan2(self, other)."""
        y, x = self._broadcasted(other)
        y, x = y._float(), x._float()
        tensor = type(self)
        if y.dtype.opmath != y.dtype:  # float16, bfloat16 compute in float32
            return y.float().apply(Atan2, x.float(), tensor=tensor).cast(y.dtype)
        return y.apply(Atan2, x, tensor=tensor)

    arctan2 = atan2

    def copysign(self, other):
        """|self| with the sign bit of `other` (-0.0 and nan signs too); a float result.
        The gradient is result / self (0 at self = 0) for self, 0 for other."""
        x, y = self._broadcasted(other)
        x, y = x._float(), y._float()
        return x.apply(CopySign, y.cast(x.dtype), tensor=type(self))

    def logsigmoid(self):
        """log(sigmoid(x)) = -(max(-x, 0) + log1p(e^-|x|)): no overflow, and relative
        precision for large x where the result is a tiny -e^-x."""
        return self._opmath(lambda x: -((-x).maximum(0) + (-x.abs()).exp().log1p()))

    def selu(self):
        """scale * (x if x > 0 else alpha * (e^x - 1)), PyTorch's constants."""
        return self._opmath(lambda x: SELU_SCALE * (x > 0).where(x, SELU_ALPHA * x.elu()))

    def idiv(self, other, reverse: bool = False):
        """Integer division rounding toward zero (tinygrad; torch.div(rounding_mode="trunc"))."""
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float or x.dtype == dtypes.bool:
            raise DTypeError(f"idiv needs integer tensors, got {x.dtype.name}; use "
                            f"div(rounding_mode='trunc') for floats")
        return x.div(y, rounding_mode="trunc")
