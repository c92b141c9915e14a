"""More elementwise ops (elementwise.py is full): the inverse trigonometric functions asin,
acos, atan, atan2, and copysign, logsigmoid, selu, idiv; mixed into Tensor.

atan reduces its argument twice, each step exact or within an ulp: |x| > 1 to 1/|x|
(atan(x) = pi/2 - atan(1/x)), then t > tan(pi/12) to (t sqrt3 - 1) / (t + sqrt3)
(atan(t) = pi/6 + atan(that)), leaving |u| <= tan(pi/12) = 0.268, where the Maclaurin series
u - u^3/3 + u^5/5 - ... converges by 0.072 a term. asin and acos are atan of exact-ish
ratios. The gradients are PyTorch's formulas (mathfn.Special). docs/numerics.md states
the errors, in ulps.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from lazyten import function as F
from lazyten.errors import DTypeError
from lazyten.mathfn import _odd
from lazyten.mixin import TensorMixin

SQRT3 = math.sqrt(3.0)
TAN_PI_12 = 2 - SQRT3
# atan(u) = u * sum_n (-1)^n u^(2n) / (2n + 1); u^2 <= 0.0718: float32 needs 7 terms (the
# next is 1e-9 relative), float64 15 (1e-18)
ATAN_SERIES = [(-1) ** n / (2 * n + 1) for n in range(15)]
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _atan_unit(t):
    """atan(t) for 0 <= t <= 1 (and nan)."""
    big = t > TAN_PI_12
    u = big.where((t * SQRT3 - 1) / (t + SQRT3), t)
    terms = ATAN_SERIES if u.dtype == dtypes.float64 else ATAN_SERIES[:7]
    z = u * u
    acc = terms[-1]
    for c in reversed(terms[:-1]):
        acc = acc * z + c
    return big.where(math.pi / 6 + u * acc, u * acc)


def _atan_abs(a):
    """atan(a) for a >= 0 (inf gives pi/2, nan stays nan)."""
    inverted = a > 1
    small = _atan_unit(inverted.where(1 / a, a))
    return inverted.where(math.pi / 2 - small, small)


def atan(x):
    return _odd(x, _atan_abs(x.abs()))


def asin(x):
    """atan(x / sqrt((1 - x)(1 + x))): 1 - |x| is exact from 1/2 on; nan beyond |x| = 1."""
    a = x.abs()
    return _odd(x, _atan_abs(a / ((1 - a) * (1 + a)).sqrt()))


def acos(x):
    """2 atan(sqrt((1 - x) / (1 + x))), accurate at both ends; nan beyond |x| = 1."""
    return 2 * _atan_abs(((1 - x) / (1 + x)).sqrt())


def signbit(x):
    """True where the sign bit of float x is set: -0.0 and negative nans included."""
    ints = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[x.dtype.itemsize]
    return x.detach().bitcast(ints) < 0


def atan2(y, x):
    """The angle of (x, y) in [-pi, pi], with C's signed zeros and infinities: atan of
    min/max(|x|, |y|) (in [0, 1]), reflected into the right octant."""
    ax, ay = x.abs(), y.abs()
    lo, hi = ax.minimum(ay), ax.maximum(ay)
    ratio = (hi == 0).where(0.0, (lo == math.inf).where(1.0, lo / hi))
    angle = _atan_unit(ratio)
    angle = (ay > ax).where(math.pi / 2 - angle, angle)
    angle = signbit(x).where(math.pi - angle, angle)
    angle = (x.isnan() | y.isnan()).where(math.nan, angle)
    return signbit(y).where(-angle, angle)


class Atan2(F.Function):
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


class CopySign(F.Function):
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


class PointwiseMixin(TensorMixin):
    """Inverse trigonometric functions and a few PyTorch/tinygrad elementwise extras."""

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
        return SELU_SCALE * (self > 0).where(self, SELU_ALPHA * self.minimum(0).expm1())

    def idiv(self, other, reverse: bool = False):
        """Integer division rounding toward zero (tinygrad; torch.div(rounding_mode="trunc"))."""
        x, y = self._broadcasted(other, reverse)
        if x.dtype.is_float or x.dtype == dtypes.bool:
            raise DTypeError(f"idiv needs integer tensors, got {x.dtype.name}; use "
                            f"div(rounding_mode='trunc') for floats")
        return x.div(y, rounding_mode="trunc")
