"""Special functions: expm1, log1p, the hyperbolic functions and their inverses, erf, erfc,
logaddexp. Tensors in, a Tensor of the (float) input's dtype out; mixed into Tensor.

Each is built from existing ops in a form that keeps its relative precision where the
textbook formula cancels (log(1 + x) for tiny x, 1 - erf(x) for large x). The gradient is
PyTorch's formula, from a small autograd Function: the forward graph's own derivative
would run through `where` branches that are nan where they are not selected.
docs/numerics.md states the errors, in ulps.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from lazyten import function as F
from lazyten.mixin import TensorMixin

LN2 = math.log(2)
SQRT1_2 = math.sqrt(0.5)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
# erf(x) = x * sum_n c_n x^(2n) for |x| < 0.5 (Maclaurin series): c_n = 2/sqrt(pi) *
# (-1)^n / (n! (2n + 1)). float32 needs 7 terms (the next is 5e-10 relative), float64 13.
ERF_SERIES = [TWO_OVER_SQRT_PI * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(13)]
# erfc(x) = exp(-x^2) * t * P(t) for x >= 0.5, t = 1 / (1 + x) in (0, 2/3]: P is this
# Chebyshev series in u = 2t / (2/3) - 1, the degree-30 interpolant of exp(x^2) erfc(x) / t
# at Chebyshev nodes, computed with 40-digit mpmath by tools/fit_erfcx.py. All 31 terms:
# 3e-18 relative (float64); the first 14 (float32): 1e-9.
ERFCX_T_MAX = 2 / 3
ERFCX_CHEB = [
    0.754453266838174, 0.1833498186238203, -0.011128162109638537, -0.0037550549555210133,
    0.00057012416658588, 7.666860040754297e-05, -3.4083995807179106e-05, 1.908351942071352e-06,
    1.405038132723401e-06, -3.9807937678177153e-07, 6.16145658660129e-09,
    2.3810192095576287e-08, -6.629093143155028e-09, 1.5638407448270362e-10,
    4.4122985532404724e-10, -1.4579874502370573e-10, 1.1124581335165271e-11,
    8.279608611426526e-12, -3.738614871729994e-12, 5.854126424629089e-13,
    1.2310988314745355e-13, -9.875668531494441e-14, 2.5712474065088192e-14,
    -4.722298820228367e-16, -2.3238356730714444e-15, 9.8025030270227e-16,
    -1.6529862105148095e-16, -3.2421617625285025e-17, 3.1111883361150795e-17,
    -1.0029960467926008e-17, 1.36474138184307e-18]


class Special(F.Function):
    """y = value(x) with dy/dx = slope(x, y); value and slope are Tensor functions run
    on `tensor` (the Tensor class), as Pow does in power.py."""

    def forward(self, x, value=None, slope=None, tensor=None):
        self.x, self.slope, self.tensor = x, slope, tensor
        self.ret = value(tensor._wrap(x)).lazydata
        return self.ret

    def backward(self, grad):
        wrap = self.tensor._wrap
        return (wrap(grad) * self.slope(wrap(self.x), wrap(self.ret))).lazydata


class Special2(F.Function):
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


# ---- values (float Tensors in and out; no gradient of their own) ----
def expm1(x):
    """Kahan: (u - 1) * x / log(u) with u = e^x, whose rounding cancels between the two
    factors; u - 1 itself where |x| >= ln 2 (no cancellation, and u may be 0 or inf)."""
    u = x.exp()
    kahan = (u - 1) * (x / u.log())
    return (u == 1).where(x, (x.abs() < LN2).where(kahan, u - 1))


def log1p(x):
    """Goldberg: log(u) * x / (u - 1) with u = 1 + x: the rounding of u cancels as in
    expm1; where u rounds to 1, log1p(x) = x to working precision."""
    u = 1 + x
    kahan = u.log() * (x / (u - 1))
    return (u == 1).where(x, (x == math.inf).where(x, kahan))


def _odd(x, magnitude):
    """magnitude (of |x|) signed like x; x itself at +-0 (so -0.0 stays -0.0)."""
    return (x == 0).where(x, (x < 0).where(-magnitude, magnitude))


def _exp_big(a):
    """e^a / 2 where e^a overflows but e^a / 2 may not: (e^(a/2) / 2) * e^(a/2)."""
    half = (a * 0.5).exp()
    return (half * 0.5) * half


def sinh(x):
    """sinh|x| = (E + E / (E + 1)) / 2 with E = expm1|x|: no cancellation near 0."""
    a = x.abs()
    e = expm1(a)
    return _odd(x, (e < math.inf).where((e + e / (e + 1)) * 0.5, _exp_big(a)))


def cosh(x):
    a = x.abs()
    e = a.exp()
    return (e < math.inf).where(e * 0.5 + 0.5 / e, _exp_big(a))


def asinh(x):
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x|; log(a) + ln 2 beyond 2^28, where
    sqrt(1 + a^2) rounds to a (and a^2 may overflow)."""
    a = x.abs()
    square = a * a
    small = log1p(a + square / (1 + (1 + square).sqrt()))
    return _odd(x, (a > 2.0 ** 28).where(a.log() + LN2, small))


def acosh(x):
    """log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact near 1); nan below 1."""
    t = x - 1
    small = log1p(t + (2 * t + t * t).sqrt())
    out = (x > 2.0 ** 28).where(x.log() + LN2, small)
    return (x < 1).where(math.nan, out)


def atanh(x):
    """log1p(2a / (1 - a)) / 2 for a = |x|: +-inf at +-1, nan beyond."""
    a = x.abs()
    return _odd(x, 0.5 * log1p(2 * a / (1 - a)))


def _erf_small(x):
    """The Maclaurin series of erf, for |x| <= 0.5."""
    terms = ERF_SERIES if x.dtype == dtypes.float64 else ERF_SERIES[:7]
    z = x * x
    out = terms[-1]
    for c in reversed(terms[:-1]):
        out = out * z + c
    return x * out


def _erfc_tail(a):
    """erfc(a) for a >= 0.5: exp(-a^2) * t * P(t). exp(-a^2) is exp(-s^2) * exp(-(a-s)(a+s))
    with s = a cut to 8 (float64: 21) bits after the point, so s^2 is exact: rounding a^2
    would cost a^2 * 2^-24 relative, 40 float32 ulps at a = 9."""
    f64 = a.dtype == dtypes.float64
    a = a.minimum(30.0 if f64 else 12.0)  # erfc is 0 from 10.1 (float32), 27.3 (float64)
    scale = 2.0 ** (21 if f64 else 8)
    s = (a * scale).trunc() / scale
    t = 1 / (1 + a)
    u2 = t * (4 / ERFCX_T_MAX) - 2  # 2u, for Clenshaw's recurrence
    coeffs = ERFCX_CHEB if f64 else ERFCX_CHEB[:14]
    b1, b2 = coeffs[-1], 0.0
    for c in reversed(coeffs[1:-1]):
        b1, b2 = u2 * b1 - b2 + c, b1
    series = u2 * 0.5 * b1 - b2 + coeffs[0]
    return (-(s * s)).exp() * ((-((a - s) * (a + s))).exp() * (t * series))


def erf(x):
    a = x.abs()
    tail = 1 - _erfc_tail(a.maximum(0.5))
    return (a < 0.5).where(_erf_small(x.clip(-0.5, 0.5)), (x < 0).where(-tail, tail))


def erfc(x):
    """erfc directly for |x| >= 0.5 (2 - erfc(-x) below -0.5): relative precision in the
    tail, where 1 - erf(x) would be all rounding error."""
    tail = _erfc_tail(x.abs().maximum(0.5))
    return (x.abs() < 0.5).where(1 - _erf_small(x.clip(-0.5, 0.5)),
                                 (x < 0).where(2 - tail, tail))


def _logaddexp(x, y, exp, log1p_scale: float, tie: float):
    """max(x, y) + log1p(exp(-|x - y|)) * scale; x + tie where x == y (also +-inf)."""
    d = -(x - y).abs()
    out = x.maximum(y) + log1p(exp(d)) * log1p_scale
    return (x == y).where(x + tie, out)


class MathMixin(TensorMixin):
    """Special functions (float results; integer inputs compute in float32)."""

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
        return self._special2(other, lambda x, y: _logaddexp(x, y, lambda d: d.exp(), 1.0, LN2),
                              lambda x, y, z: (x - y).sigmoid())

    def logaddexp2(self, other):
        """log2(2^x + 2^y); d/dx = 1 / (1 + 2^(y - x))."""
        return self._special2(
            other, lambda x, y: _logaddexp(x, y, lambda d: d.exp2(), 1 / LN2, 1.0),
            lambda x, y, z: ((x - y) * LN2).sigmoid())
