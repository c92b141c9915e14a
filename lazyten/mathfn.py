"""Math functions composed of Tensor ops (Tensors in, a Tensor out; values only: the
Tensor methods and their gradients are pointwise.py's and autograd/special.py's).

The special functions expm1, log1p, the hyperbolic functions and their inverses, erf, erfc,
logaddexp, and the inverse trigonometric functions asin, acos, atan, atan2. Each is built
from existing ops in a form that keeps its relative precision where the textbook formula
cancels (log(1 + x) for tiny x, 1 - erf(x) for large x). docs/numerics.md states the
errors, in ulps.

atan reduces its argument twice, each step exact or within an ulp: |x| > 1 to 1/|x|
(atan(x) = pi/2 - atan(1/x)), then t > tan(pi/12) to (t sqrt3 - 1) / (t + sqrt3)
(atan(t) = pi/6 + atan(that)), leaving |u| <= tan(pi/12) = 0.268, where the Maclaurin series
u - u^3/3 + u^5/5 - ... converges by 0.072 a term. asin and acos are atan of exact-ish
ratios.
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes

LN2 = math.log(2)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_TANH_CUBIC = 0.044715
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


def _chebyshev_to_powers(coeffs: list[float]) -> list[float]:
    """The coefficients in powers of u of sum_k coeffs[k] T_k(u). On |u| <= 1 the power
    form of this series is as well conditioned as the Chebyshev one (its coefficients sum
    to 1.01 in absolute value against a value of 0.56-0.95), and Horner's rule costs one
    multiply-add a term against three ops for Clenshaw's recurrence."""
    out = [0.0] * len(coeffs)
    before, chebyshev = [0.0], [1.0]  # T_(k-1), T_k as power coefficients (T_-1 := 0)
    for k, c in enumerate(coeffs):
        for i, p in enumerate(chebyshev):
            out[i] += c * p
        twice = [0.0] + [(1.0 if k == 0 else 2.0) * p for p in chebyshev]  # T_1 = u T_0
        before, chebyshev = chebyshev, [x - (before[i] if i < len(before) else 0.0)
                                        for i, x in enumerate(twice)]
    return out


# P(t) in powers of u = 2t / (2/3) - 1, for the 14 terms float32 uses
ERFCX_POWERS_F32 = _chebyshev_to_powers(ERFCX_CHEB[:14])
# float32 gelu's and erf's one fit (no branch), `tools/fit_erfcx.py --wide`: P with K = 2,
# t = 2 / (2 + a), for a <= 14.5 / sqrt 2 (gelu's a is |x| / sqrt 2: beyond, gelu is under
# the smallest subnormal, and P's extrapolation is multiplied by e^(-a^2) = 0), in
# u = (t - t_min) 2 / (1 - t_min) - 1: the first 10 terms of the degree-24 interpolant,
# 4e-8 relative; halved (exact) in powers, as gelu wants Phi = erfc / 2.
WIDE_T_MIN = 2 / (2 + 14.5 * SQRT_HALF)
WIDE_U_SCALE = 2 / (1 - WIDE_T_MIN)  # u = t * WIDE_U_SCALE - WIDE_U_SHIFT: one multiply-add
WIDE_U_SHIFT = 1 + WIDE_T_MIN * WIDE_U_SCALE
ERFCX_WIDE_CHEB = [
    0.6198982037599655, 0.3309311805455051, 0.048536610751898634, 0.0013370935313479083,
    -0.0006795687343860123, -3.876121714811028e-05, 1.5289850486586825e-05,
    3.460897573433437e-07, -4.2870071264332e-07, 2.5699854703759612e-08]
HALF_ERFCX_WIDE_POWERS = [c / 2 for c in _chebyshev_to_powers(ERFCX_WIDE_CHEB)]
SQRT3 = math.sqrt(3.0)
TAN_PI_12 = 2 - SQRT3
# atan(u) = u * sum_n (-1)^n u^(2n) / (2n + 1); u^2 <= 0.0718: float32 needs 7 terms (the
# next is 1e-9 relative), float64 15 (1e-18)
ATAN_SERIES = [(-1) ** n / (2 * n + 1) for n in range(15)]


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


def _horner(powers: list[float], z):
    """The polynomial sum_i powers[i] z^i by Horner's rule: one multiply-add a term."""
    out = powers[-1]
    for c in reversed(powers[:-1]):
        out = out * z + c
    return out


def _erf_small(x):
    """The Maclaurin series of erf, for |x| <= 0.5."""
    terms = ERF_SERIES if x.dtype == dtypes.float64 else ERF_SERIES[:7]
    return x * _horner(terms, x * x)


def _erfc_tail(a):
    """erfc(a) for a >= 0.5: exp(-a^2) * t * P(t). exp(-a^2) is exp(-s^2) * exp(-(a-s)(a+s))
    with s = a rounded to 8 (float64: 21) bits after the point, so s^2 is exact: rounding
    a^2 would cost a^2 * 2^-24 relative, 40 float32 ulps at a = 9. The rounding adds and
    subtracts 1.5 * 2^23 (2^52) to a * 2^8 (2^21) < 2^22: two ops, nan stays nan (trunc
    took about 20). |(a-s)(a+s)| <= 2^-9 * 24 = 0.047 (float64: 2^-22 * 60), so its
    factor is a Taylor polynomial, not a second exp."""
    f64 = a.dtype == dtypes.float64
    a = a.minimum(30.0 if f64 else 12.0)  # erfc is 0 from 10.1 (float32), 27.3 (float64)
    scale, magic = (2.0 ** 21, 1.5 * 2.0 ** 52) if f64 else (2.0 ** 8, 1.5 * 2.0 ** 23)
    s = ((a * scale + magic) - magic) / scale
    t = 1 / (1 + a)
    series = _erfcx_series(t * (2 / ERFCX_T_MAX) - 1, f64)
    return (-(s * s)).exp() * (_exp_small(-((a - s) * (a + s))) * (t * series))


def _erfcx_series(u, f64: bool):
    """P at u: float32 by Horner's rule in powers of u (one multiply-add a term; as
    accurate as Clenshaw's recurrence there), float64 by Clenshaw's recurrence over the
    31 Chebyshev terms (in powers, erfc's float64 error against 30-digit mpmath grew
    from 4 to 7 ulps)."""
    if not f64:
        return _horner(ERFCX_POWERS_F32, u)
    u2 = 2 * u
    b1, b2 = ERFCX_CHEB[-1], 0.0
    for c in reversed(ERFCX_CHEB[1:-1]):
        b1, b2 = u2 * b1 - b2 + c, b1
    return u * b1 - b2 + ERFCX_CHEB[0]


def _exp_small(d):
    """e^d for |d| <= 0.05: the Taylor polynomial to d^4 (the next term is 2.6e-9 relative
    at 0.05, under half a float32 ulp; float64's |d| is under 1.5e-5: 6e-28)."""
    return 1 + d * (1 + d * (0.5 + d * (1 / 6 + d * (1 / 24))))


def erf(x):
    """The Maclaurin series below |x| = 0.5, 1 - erfc(|x|) above. There erf >= 0.52, so
    erfc needs only absolute precision: float32 takes gelu's one fit with x * x as rounded
    [D137], float64 erfc's tail."""
    negative = x < 0
    a = negative.where(-x, x)
    if x.dtype == dtypes.float64:
        tail = 1 - _erfc_tail(a.maximum(0.5))
    else:
        tail = 1 - 2 * _half_erfc_f32(a, (-(x * x)).exp())
    return (a < 0.5).where(_erf_small(x.clip(-0.5, 0.5)), negative.where(-tail, tail))


def erfc(x):
    """erfc directly for |x| >= 0.5 (2 - erfc(-x) below -0.5): relative precision in the
    tail, where 1 - erf(x) would be all rounding error."""
    tail = _erfc_tail(x.abs().maximum(0.5))
    return (x.abs() < 0.5).where(1 - _erf_small(x.clip(-0.5, 0.5)),
                                 (x < 0).where(2 - tail, tail))


def _half_erfc_f32(a, bell):
    """erfc(a) / 2 for float32 a >= 0 by one fit and no branch [D137]: e^(-a^2) t P(t) / 2
    with t = 2 / (2 + a), P over a <= 14.5 / sqrt 2. `bell` is e^(-a^2) as the caller
    computes it (so its error is the caller's: see gelu and erf)."""
    t = 2 / (2 + a)
    u = t * WIDE_U_SCALE - WIDE_U_SHIFT
    return bell * (t * _horner(HALF_ERFCX_WIDE_POWERS, u))


def _normal_cdf_f32(x):
    """Phi(x) and e^(-x^2 / 2), for float32 gelu [D137]: Phi(-|x|) = erfc(|x| / sqrt 2) / 2,
    one fit over every x and no branch, and Phi(|x|) = 1 - Phi(-|x|). e^(-x^2 / 2) takes
    x * x as rounded, which costs x^2 / 2 * 2^-24 relative where x << 0 (erfc(-x / sqrt 2)
    paid twice that for rounding x / sqrt 2). erfc's form, with its exact-square split,
    second branch and 14-term series, made gelu's kernel 95 AVX-512 instructions a
    vector; this one is 47."""
    negative = x < 0
    bell = (x * x * -0.5).exp()
    lower = _half_erfc_f32(negative.where(-x, x) * SQRT_HALF, bell)  # Phi(-|x|)
    return negative.where(lower, 1 - lower), bell


def gelu(x):
    """x * Phi(x). float64: x * erfc(-x / sqrt 2) / 2 (erfc keeps Phi's relative precision
    for x << 0); float32 by _normal_cdf_f32, which keeps it too."""
    if x.dtype == dtypes.float64:
        return 0.5 * x * erfc(x * -SQRT_HALF)
    return x * _normal_cdf_f32(x)[0]


def gelu_slope(x, y):
    """d gelu / dx = Phi(x) + x phi(x), as PyTorch computes it (nan at +-inf, as there)."""
    if x.dtype == dtypes.float64:
        return 0.5 * erfc(x * -SQRT_HALF) + x * ((x * x * -0.5).exp() * INV_SQRT_2PI)
    cdf, bell = _normal_cdf_f32(x)
    return cdf + x * (bell * INV_SQRT_2PI)


def gelu_tanh(x):
    """PyTorch's tanh approximation of gelu: x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2."""
    inner = SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x ** 3)
    return 0.5 * x * (1 + inner.tanh())


def gelu_tanh_slope(x, y):
    """Its derivative, as PyTorch computes it: (1 + t) / 2 + x (1 - t^2) k (1 + 3c x^2) / 2,
    t = tanh(k (x + c x^3))."""
    t = (SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x ** 3)).tanh()
    inner_slope = SQRT_2_OVER_PI * (1 + 3 * GELU_TANH_CUBIC * (x * x))
    return 0.5 * (1 + t) + 0.5 * x * ((1 - t * t) * inner_slope)


def logaddexp(x, y, exp, log1p_scale: float, tie: float):
    """max(x, y) + log1p(exp(-|x - y|)) * scale; x + tie where x == y (also +-inf)."""
    d = -(x - y).abs()
    out = x.maximum(y) + log1p(exp(d)) * log1p_scale
    return (x == y).where(x + tie, out)


def _atan_unit(t):
    """atan(t) for 0 <= t <= 1 (and nan)."""
    big = t > TAN_PI_12
    u = big.where((t * SQRT3 - 1) / (t + SQRT3), t)
    terms = ATAN_SERIES if u.dtype == dtypes.float64 else ATAN_SERIES[:7]
    acc = _horner(terms, u * u)
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
