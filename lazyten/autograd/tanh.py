"""tanh, the unary primitive: two forms, each exact to a few ulps, chosen by dtype.

float32 (and the 16-bit floats, computed in float32): an odd polynomial below |x| = 0.625,
x + x^3 P(x^2) with P of degree 4, and (1 - u) / (1 + u) with u = e^(-2|x|) above, signed
like x. One exp and one division an element, and the polynomial's few fmas (D131): 1.9
ulps at most where Kahan's form below gave 4.3, at a quarter of its time on a CPU.
P's coefficients are a weighted least-squares fit (Lawson's iteration towards the minimax
fit) of (tanh(a) - a) / a^3 in a^2 over [0, 0.625], made in float64 and rounded to float32
by tools/fit_tanh.py; its error there is 0.07 ulp before the float32 rounding of the sum.
Above 0.625, u <= 0.29, so 1 - u and 1 + u cancel nothing.

float64: tanh|x| = -t / (t + 2) with t = expm1(-2|x|) in [-1, 0], signed like x. Near 0,
expm1(y) is Kahan's (u - 1) * y / log(u) with u = e^y: the rounding of u cancels between
numerator and denominator, so it keeps its relative precision, where 2 * sigmoid(2x) - 1
loses all but a few digits. (A float64 polynomial would need about 12 terms.)
"""
from __future__ import annotations
import math

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, TernaryOps, UnaryOps
from lazyten.autograd.function import Function
from lazyten.lazy import LazyBuffer

POLY_BELOW = 0.625  # |x| below this takes the polynomial (float32)
# P(s) = C[0] + C[1] s + ... for tanh(x) = x + x^3 P(x^2) (tools/fit_tanh.py)
POLY = (-0.3333328068256378, 0.13331443071365356, -0.05373980849981308,
        0.020639395341277122, -0.005705337505787611)


class Tanh(Function):
    traced = True

    def forward(self, x):
        magnitude = _float32_tanh(x) if x.dtype == dtypes.float32 else _kahan_tanh(x)
        # tanh(+-0) is x itself: the sign tests cannot see -0.0
        self.ret = x.e(BinaryOps.CMPNE, x.const(0)).e(TernaryOps.WHERE, magnitude, x)
        return self.ret

    def backward(self, grad):  # 1 - tanh(x)^2
        square = self.ret.e(BinaryOps.MUL, self.ret)
        return self.ret.const(1).e(BinaryOps.ADD, square.e(UnaryOps.NEG)).e(BinaryOps.MUL, grad)


def _float32_tanh(x: LazyBuffer) -> LazyBuffer:
    """tanh(x) for float32 but at +-0: the odd polynomial near 0, else (1 - u) / (1 + u)."""
    size = x.e(BinaryOps.MAX, x.e(UnaryOps.NEG))
    square = x.e(BinaryOps.MUL, x)
    poly = x.const(POLY[-1])
    for c in reversed(POLY[:-1]):  # Horner's rule
        poly = poly.e(BinaryOps.MUL, square).e(BinaryOps.ADD, x.const(c))
    near = x.e(BinaryOps.ADD, x.e(BinaryOps.MUL, square).e(BinaryOps.MUL, poly))
    u = size.e(BinaryOps.MUL, x.const(-2)).e(UnaryOps.EXP)
    far = x.const(1).e(BinaryOps.ADD, u.e(UnaryOps.NEG)).e(
        BinaryOps.FDIV, u.e(BinaryOps.ADD, x.const(1)))
    far = _signed_like(x, far)
    return size.e(BinaryOps.CMPLT, x.const(POLY_BELOW)).e(TernaryOps.WHERE, near, far)


def _kahan_tanh(x: LazyBuffer) -> LazyBuffer:
    """tanh(x) but at +-0 through expm1(-2|x|), Kahan's expm1 near 0 (float64)."""
    y = x.e(BinaryOps.MAX, x.e(UnaryOps.NEG)).e(BinaryOps.MUL, x.const(-2))
    u = y.e(UnaryOps.EXP)
    log_u = u.e(UnaryOps.LOG2).e(BinaryOps.MUL, u.const(math.log(2)))
    kahan = u.e(BinaryOps.ADD, u.const(-1)).e(BinaryOps.MUL, y.e(BinaryOps.FDIV, log_u))
    # u == 1: log u is 0 and expm1(y) = y. Below y = -ln 2, u - 1 does not cancel and
    # is the better value (log u is the least exact step), and u = 0 needs it
    t = y.e(BinaryOps.CMPLT, y.const(-math.log(2))).e(
        TernaryOps.WHERE, u.e(BinaryOps.ADD, u.const(-1)), kahan)
    t = u.e(BinaryOps.CMPNE, u.const(1)).e(TernaryOps.WHERE, t, y)
    return _signed_like(x, t.e(UnaryOps.NEG).e(BinaryOps.FDIV, t.e(BinaryOps.ADD, t.const(2))))


def _signed_like(x: LazyBuffer, magnitude: LazyBuffer) -> LazyBuffer:
    negative = x.e(BinaryOps.CMPLT, x.const(0))
    return negative.e(TernaryOps.WHERE, magnitude.e(UnaryOps.NEG), magnitude)
