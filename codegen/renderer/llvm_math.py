"""exp2, exp, log2, sin and cos for float32 written in LLVM IR, so loops over them vectorise.

`llvm.exp2.f32` and friends become calls into libm, one element at a time; these
inline functions use only arithmetic, compares and bit casts, which LLVM turns into SIMD
code for scalar loops (the loop vectoriser) and explicit vectors alike. docs/numerics.md
lists their measured errors.

exp2(x): n = round(x), f = x - n in [-1/2, 1/2], 2^f from a degree-6 polynomial (fitted
to relative error on Chebyshev nodes: at most 1e-7, under one float32 ulp), times 2^n
built from exponent bits in two halves so subnormal results and overflow to inf come out
right. x is clamped to [-160, 160] first, where the result is 0 or inf. n is rounded by
adding and subtracting MAGIC = 1.5 * 2^23, and read as an integer from the sum's bits:
no `rint` and no `fptosi`, whose result for a NaN is poison, so a NaN runs through every
step unguarded and comes out NaN (exp on AVX2: 35 -> 30 instructions a vector, a
64K-float exp 45 -> 38 us). With AVX-512 (`scalef`) 2^n is one
`vscalefps`, which scales by a float power and rounds once as the two factors do: on
vectors of 4, 8 or 16 lanes the instruction itself; in scalar code `llvm.ldexp`, which
LLVM's loop vectoriser turns into it (an elementwise exp of 1M floats 378 -> 316 us).
Results are bit for bit the same (D60).

exp(x): the Cody-Waite split. k = round(x * log2(e)), r = x - k*ln2 with ln2 in two
parts: LN2_HI has 9 significant bits, so k * LN2_HI is exact and so is x - k * LN2_HI
(the two are within a factor 2); subtracting k * LN2_LO rounds once, in a number below
0.35. e^r comes from a degree-7 polynomial (relative error 1e-9), times 2^k as in exp2.
Computing exp2(x * log2(e)) instead rounds the product, an error of up to |x| * 2^-24 in
the exponent: 62 ulps near x = 88.

log2(x): x = m * 2^e with m in [sqrt(1/2), sqrt(2)], log2(m) = 2/ln2 * atanh(t) with
t = (m-1)/(m+1), summed to t^9 (|t| < 0.172), the leading term t * 2/ln2 fused into the
final multiply-add so it never rounds alone: within 2.5 float32 ulps. Subnormal inputs
are scaled by 2^23 first. log2(0) = -inf, log2(inf) = inf, negative or NaN gives NaN.

sin(x) and cos(x) (D139): in float64, the float32 x widened exactly. q = round(x * 2/pi),
r = x - q * pi/2 with pi/2 in two float64 parts (PIO2_HI + PIO2_LO, 1.5e-33 short of
pi/2): x - q * PIO2_HI is exact (one fused multiply-add whose result is smaller than x),
so r carries one rounding and an error of q * 1.5e-33, nothing next to the float32 ulp of
any r a float32 x below REDUCE_LIMIT leaves. sin r and cos r on |r| <= pi/4 come from
their Taylor series to r^9 and r^10 (truncation under 3e-9 relative), the quadrant
(q mod 4, from the rounding's bits as in exp) picks one and its sign, and the result is
rounded to float32 once: within about half an ulp. Lanes past REDUCE_LIMIT (inf and NaN
included) take libm's sinf / cosf instead, in a branch the common case skips; 0 keeps its
sign (sin(-0.0) is -0.0).
"""
from __future__ import annotations
import math
import struct
from typing import Callable

EXP2_POLY = [1.0, 0.6931471824645996, 0.24022646248340607, 0.05550329014658928,
             0.009618519805371761, 0.0013399859890341759, 0.00015337577497120947]
# e^r on [-0.35, 0.35], fitted to relative error on Chebyshev nodes like EXP2_POLY
EXP_POLY = [1.0, 1.0, 0.5, 0.166666641831398, 0.041666265577077866, 0.008333663456141949,
            0.001394638093188405, 0.00019727551261894405]
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # LN2_HI + LN2_LO = ln 2 to 3e-12
MAGIC = 12582912.0  # 1.5 * 2^23: adding it rounds a float below 2^22 to an integer
_MAGIC_BITS = 0x4B400000  # its bits: those of MAGIC + n are these + n
_LN2 = 0.6931471805599453
PIO2_HI, PIO2_LO = 1.5707963267948966, 6.123233995736766e-17  # pi/2 to 1.5e-33
REDUCE_LIMIT = 2.0 ** 24  # |x| past this (a float32 there is an integer) goes to libm
MAGIC64 = 6755399441055744.0  # 1.5 * 2^52: adding it rounds a float64 below 2^51
SIN_TAYLOR = [(-1.0) ** (k + 1) / math.factorial(2 * k + 3) for k in range(4)]  # r^3 ... r^9
COS_TAYLOR = [(-1.0) ** k / math.factorial(2 * k) for k in range(6)]      # 1 ... r^10
Literal = Callable[[float], str]  # a float32 constant -> its IR literal, splat over the lanes


def _hex(value: float) -> str:
    """LLVM's spelling of a float constant: the hex of its float64 bits."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def _f(value: float, lanes: int) -> str:
    """A float32 constant (hex of its double widening), splat across vector lanes."""
    lit = _hex(struct.unpack("<f", struct.pack("<f", value))[0])
    return lit if lanes == 1 else f"splat (float {lit})"


def _i(value: int, lanes: int) -> str:
    return str(value) if lanes == 1 else f"splat (i32 {value})"


def _floats(lanes: int) -> Literal:
    return lambda value: _f(value, lanes)


def _ints(lanes: int) -> Callable[[int], str]:
    return lambda value: _i(value, lanes)


def _types(lanes: int) -> tuple[str, str, str, str]:
    if lanes == 1:
        return "float", "i32", "i1", "f32"
    return f"<{lanes} x float>", f"<{lanes} x i32>", f"<{lanes} x i1>", f"v{lanes}f32"


def _horner(name: str, coefs: list[float], x: str, t: str, f: Literal) -> list[str]:
    """%{name}0 = sum(coefs[k] * x^k), by Horner's rule with fused multiply-adds."""
    top = len(coefs) - 1
    lines = [f"  %{name}{top} = fadd {t} {f(coefs[top])}, {f(0.0)}"]
    for k in range(top - 1, -1, -1):
        lines += [f"  %{name}m{k} = fmul contract {t} %{name}{k + 1}, {x}",
                  f"  %{name}{k} = fadd contract {t} %{name}m{k}, {f(coefs[k])}"]
    return lines


def _clamped(low: float, high: float, t: str, b: str, f: Literal) -> list[str]:
    """%x3 = %x clamped to [low, high]; NaN stays NaN (both compares are false for it)."""
    return [f"  %lo = fcmp olt {t} %x, {f(low)}",
            f"  %x1 = select {b} %lo, {t} {f(low)}, {t} %x",
            f"  %hi = fcmp ogt {t} %x1, {f(high)}",
            f"  %x3 = select {b} %hi, {t} {f(high)}, {t} %x1"]


def _zero_below(low: float, t: str, b: str, f: Literal) -> list[str]:
    """%pz = the polynomial %p0, or 0 where %x <= low (-inf included), where the result
    rounds to 0 anyway: scaling 0 is exact, while scaling %p0 down to a result under the
    smallest normal float takes a microcode assist on x86 (about 150 cycles a vector: a
    causal softmax's exp(-inf) ran 7x slower than the unmasked one) [D129]. Results between
    that and 0 (e^x for x in (-104, -87.3]) stay exact subnormals, assist and all."""
    return [f"  %under = fcmp ole {t} %x, {f(low)}",
            f"  %pz = select {b} %under, {t} {f(0.0)}, {t} %p0"]


def _rounded(x: str, scale: float | None, t: str, f: Literal) -> list[str]:
    """%n = x (times `scale`, multiplied and added in one rounding where the target has
    FMA) rounded to the nearest integer, as a float (|n| below 2^21), and %t = n + MAGIC,
    whose low mantissa bits hold n (`_integer`)."""
    if scale is None:
        lines = [f"  %t = fadd {t} {x}, {f(MAGIC)}"]
    else:
        lines = [f"  %tm = fmul contract {t} {x}, {f(scale)}",
                 f"  %t = fadd contract {t} %tm, {f(MAGIC)}"]
    return lines + [f"  %n = fsub {t} %t, {f(MAGIC)}"]


def _integer(lanes: int) -> list[str]:
    """%ni = the integer %n as i32, read from %t's bits: no fptosi, whose result for a NaN
    is poison (LLVM may then assume anything of the whole result); for a NaN it is some
    integer, and the result is NaN whatever it scales by."""
    t, i, _, _ = _types(lanes)
    return [f"  %tb = bitcast {t} %t to {i}",
            f"  %ni = sub {i} %tb, {_ints(lanes)(_MAGIC_BITS)}"]


_SCALEF = {4: ("128", "i8", ""), 8: ("256", "i8", ""), 16: ("512", "i16", ", i32 4")}
BITS, LDEXP, VSCALEF = "bits", "ldexp", "vscalef"  # how value * 2^power is computed


def scaling(lanes: int, scalef: bool) -> str:
    """How exp and exp2 on `lanes` floats scale by 2^n: `scalef` (a target with AVX-512's
    vscalefps) gives explicit vectors the instruction itself (VSCALEF) and scalar code
    llvm.ldexp, which the loop vectoriser turns into it (LDEXP; elsewhere ldexp is a libm
    call per element); else two factors of exponent bits (BITS)."""
    if not scalef:
        return BITS
    return VSCALEF if lanes in _SCALEF else LDEXP if lanes == 1 else BITS


def _scaled(value: str, lanes: int, how: str) -> tuple[list[str], list[str]]:
    """(lines ending in `ret` of value * 2^n, their declarations), n the integer %n, also
    in %t's bits. VSCALEF is one instruction (i32 4: the current rounding mode). None
    needs a guard for NaN: a NaN value stays NaN whatever it is scaled by."""
    t, i, _, _ = _types(lanes)
    if how == VSCALEF:
        bits, mask, rounding = _SCALEF[lanes]
        name = f"@llvm.x86.avx512.mask.scalef.ps.{bits}"
        return ([f"  %y = call {t} {name}({t} {value}, {t} %n, {t} zeroinitializer, "
                 f"{mask} -1{rounding})", f"  ret {t} %y"],
                [f"declare {t} {name}({t}, {t}, {t}, {mask}{', i32' if rounding else ''})"])
    if how == LDEXP:
        return ([*_integer(lanes), f"  %y = call {t} @llvm.ldexp.f32.i32({t} {value}, {i} %ni)",
                 f"  ret {t} %y"], [f"declare {t} @llvm.ldexp.f32.i32({t}, {i})"])
    return [*_integer(lanes), *_times_power_of_two(value, lanes), f"  ret {t} %y"], []


def exp2(lanes: int, scalef: bool = False) -> tuple[str, list[str]]:
    """(function name, [definition, declarations]) of exp2 on float32 x lanes; `scalef`:
    the target has AVX-512's vscalefps."""
    t, _, b, sfx = _types(lanes)
    name, f, how = f"@lazyten_exp2_{sfx}", _floats(lanes), scaling(lanes, scalef)
    tail, declarations = _scaled("%pz", lanes, how)
    body = [*_clamped(-160.0, 160.0, t, b, f), *_rounded("%x3", None, t, f),
            f"  %fr = fsub {t} %x3, %n",
            *_horner("p", EXP2_POLY, "%fr", t, f), *_zero_below(-150.0, t, b, f), *tail]
    head = f"define internal {t} {name}({t} %x) alwaysinline {{"
    return name, ["\n".join([head] + body + ["}"]), *declarations]


def exp(lanes: int, scalef: bool = False) -> tuple[str, list[str]]:
    """(function name, [definition, declarations]) of e^x on float32 x lanes; `scalef`:
    the target has AVX-512's vscalefps."""
    t, _, b, sfx = _types(lanes)
    name, f, how = f"@lazyten_exp_{sfx}", _floats(lanes), scaling(lanes, scalef)
    tail, declarations = _scaled("%pz", lanes, how)
    # outside [-104, 89] e^x rounds to 0 or overflows; the clamp keeps n in range. n *
    # LN2_HI and x - n * LN2_HI are exact, so they may fuse into one FMA or not alike
    body = [*_clamped(-104.0, 89.0, t, b, f), *_rounded("%x3", 1 / _LN2, t, f),
            f"  %khi = fmul contract {t} %n, {f(LN2_HI)}",
            f"  %r1 = fsub contract {t} %x3, %khi",
            f"  %klo = fmul contract {t} %n, {f(LN2_LO)}",
            f"  %rr = fsub contract {t} %r1, %klo",
            *_horner("p", EXP_POLY, "%rr", t, f), *_zero_below(-104.0, t, b, f), *tail]
    head = f"define internal {t} {name}({t} %x) alwaysinline {{"
    return name, ["\n".join([head] + body + ["}"]), *declarations]


def _times_power_of_two(value: str, lanes: int) -> list[str]:
    """%y = value * 2^%ni (%ni in [-160, 160]), as two factors built from exponent bits,
    each a normal float, so subnormal results round once and overflow gives inf."""
    (t, i, _, _), n = _types(lanes), _ints(lanes)
    lines = [f"  %n1 = ashr {i} %ni, {n(1)}",
             f"  %n2 = sub {i} %ni, %n1"]
    for part in ("1", "2"):
        lines += [f"  %b{part} = add {i} %n{part}, {n(127)}",
                  f"  %e{part} = shl {i} %b{part}, {n(23)}",
                  f"  %s{part} = bitcast {i} %e{part} to {t}"]
    return lines + [f"  %y1 = fmul {t} {value}, %s1",
                    f"  %y = fmul {t} %y1, %s2"]


def log2(lanes: int, scalef: bool = False) -> tuple[str, list[str]]:
    """(function name, [definition]) of log2 on float32 x lanes (`scalef` is not used)."""
    t, i, b, sfx = _types(lanes)
    name = f"@lazyten_log2_{sfx}"
    f, n = _floats(lanes), _ints(lanes)
    coef = [2 / _LN2 / (2 * k + 1) for k in range(5)]
    body = [f"  %sub = fcmp olt {t} %x, {f(2.0 ** -126)}",   # subnormal (or 0, negative)
            f"  %xs = fmul {t} %x, {f(2.0 ** 23)}",
            f"  %xn = select {b} %sub, {t} %xs, {t} %x",
            f"  %bits = bitcast {t} %xn to {i}",
            f"  %exp = lshr {i} %bits, {n(23)}",
            f"  %adj = select {b} %sub, {i} {n(150)}, {i} {n(127)}",
            f"  %e0 = sub {i} %exp, %adj",
            f"  %mb = and {i} %bits, {n(0x7FFFFF)}",
            f"  %mo = or {i} %mb, {n(0x3F800000)}",
            f"  %m0 = bitcast {i} %mo to {t}",
            f"  %big = fcmp ogt {t} %m0, {f(1.4142135623730951)}",
            f"  %mh = fmul {t} %m0, {f(0.5)}",
            f"  %m = select {b} %big, {t} %mh, {t} %m0",
            f"  %inc = zext {b} %big to {i}",
            f"  %e = add {i} %e0, %inc",
            f"  %num = fsub {t} %m, {f(1.0)}",
            f"  %den = fadd {t} %m, {f(1.0)}",
            f"  %tt = fdiv {t} %num, %den",
            f"  %t2 = fmul {t} %tt, %tt",
            # log2(m) = t * (c0 + t2 * q): the small tail t * t2 * q rounds on its own and
            # t * c0 + tail is one fused multiply-add, so the leading product never rounds
            *_horner("q", coef[1:], "%t2", t, f),
            f"  %tq = fmul {t} %tt, %q0",
            f"  %tail = fmul {t} %tq, %t2",
            f"  %lm = call {t} @llvm.fma.{sfx}({t} %tt, {t} {f(coef[0])}, {t} %tail)",
            f"  %ef = sitofp {i} %e to {t}",
            f"  %y = fadd {t} %ef, %lm",
            # special inputs: 0 -> -inf, inf -> inf, negative or NaN -> NaN
            f"  %zero = fcmp oeq {t} %x, {f(0.0)}",
            f"  %inf = fcmp oeq {t} %x, {f(float('inf'))}",
            f"  %bad = fcmp ult {t} %x, {f(0.0)}",
            f"  %y1 = select {b} %zero, {t} {f(float('-inf'))}, {t} %y",
            f"  %y2 = select {b} %inf, {t} %x, {t} %y1",
            f"  %y3 = select {b} %bad, {t} {f(float('nan'))}, {t} %y2",
            f"  ret {t} %y3"]
    head = f"define internal {t} {name}({t} %x) alwaysinline {{"
    return name, ["\n".join([head] + body + ["}"]), f"declare {t} @llvm.fma.{sfx}({t}, {t}, {t})"]


def _doubles(lanes: int) -> Literal:
    """float64 constants, splat across vector lanes."""
    return lambda value: _hex(value) if lanes == 1 else f"splat (double {_hex(value)})"


def _longs(lanes: int) -> Callable[[int], str]:
    return lambda value: str(value) if lanes == 1 else f"splat (i64 {value})"


def sin(lanes: int, scalef: bool = False) -> tuple[str, list[str]]:
    """(function name, [definition, declarations]) of sin on float32 x lanes (`scalef`
    is not used)."""
    return _sin_cos(lanes, cosine=False)


def cos(lanes: int, scalef: bool = False) -> tuple[str, list[str]]:
    """(function name, [definition, declarations]) of cos on float32 x lanes."""
    return _sin_cos(lanes, cosine=True)


def _sin_cos(lanes: int, cosine: bool) -> tuple[str, list[str]]:
    t, _, b, sfx = _types(lanes)
    v = "" if lanes == 1 else f"v{lanes}"
    d, i = ("double", "i64") if lanes == 1 else (f"<{lanes} x double>", f"<{lanes} x i64>")
    fn = "cos" if cosine else "sin"
    name, f = f"@lazyten_{fn}_{sfx}", _floats(lanes)
    g, n = _doubles(lanes), _longs(lanes)
    fma = f"@llvm.fma.{v}f64"
    body = [f"  %ax = call {t} @llvm.fabs.{sfx}({t} %x)",
            f"  %big = fcmp ugt {t} %ax, {f(REDUCE_LIMIT)}",  # (NaN too)
            # (big lanes compute garbage here, not poison: no fptosi; libm replaces them)
            f"  %xd = fpext {t} %x to {d}",
            f"  %tm = fmul {d} %xd, {g(2 / math.pi)}",
            f"  %t = fadd {d} %tm, {g(MAGIC64)}",
            f"  %q = fsub {d} %t, {g(MAGIC64)}",
            f"  %r1 = call {d} {fma}({d} %q, {d} {g(-PIO2_HI)}, {d} %xd)",
            f"  %r = call {d} {fma}({d} %q, {d} {g(-PIO2_LO)}, {d} %r1)",
            f"  %z = fmul {d} %r, %r",
            *_horner("s", SIN_TAYLOR, "%z", d, g),
            f"  %r3 = fmul {d} %r, %z",
            f"  %sr = call {d} {fma}({d} %r3, {d} %s0, {d} %r)",
            *_horner("c", COS_TAYLOR, "%z", d, g),
            # the quadrant q mod 4 from the low bits of t = MAGIC64 + q (cos: q + 1):
            # bit 0 picks cos r for sin r, bit 1 negates
            f"  %tb = bitcast {d} %t to {i}",
            f"  %qb = add {i} %tb, {n(1 if cosine else 0)}",
            f"  %odd = and {i} %qb, {n(1)}",
            f"  %swap = icmp ne {i} %odd, {n(0)}",
            f"  %pick = select {b} %swap, {d} %c0, {d} %sr",
            f"  %half = and {i} %qb, {n(2)}",
            f"  %sign = shl {i} %half, {n(62)}",
            f"  %pb = bitcast {d} %pick to {i}",
            f"  %yb = xor {i} %pb, %sign",
            f"  %yd = bitcast {i} %yb to {d}",
            f"  %{'fast' if cosine else 'y0'} = fptrunc {d} %yd to {t}"]
    if not cosine:  # sin(+-0) = +-0 (the series' r + r^3 P gives +0 for -0)
        body += [f"  %zero = fcmp oeq {t} %x, {f(0.0)}",
                 f"  %fast = select {b} %zero, {t} %x, {t} %y0"]
    any_big = "%big" if lanes == 1 else "%anybig"
    if lanes > 1:
        body.append(f"  %anybig = call i1 @llvm.vector.reduce.or.{v}i1({b} %big)")
    body += [f"  br i1 {any_big}, label %libm, label %done",
             "libm:",
             f"  %lib = call {t} @llvm.{fn}.{sfx}({t} %x)",
             f"  %mix = select {b} %big, {t} %lib, {t} %fast",
             "  br label %done",
             "done:",
             f"  %y = phi {t} [%fast, %entry], [%mix, %libm]",
             f"  ret {t} %y"]
    head = f"define internal {t} {name}({t} %x) alwaysinline {{\nentry:"
    declarations = [f"declare {t} @llvm.fabs.{sfx}({t})",
                    f"declare {d} {fma}({d}, {d}, {d})",
                    f"declare {t} @llvm.{fn}.{sfx}({t})"]
    if lanes > 1:
        declarations.append(f"declare i1 @llvm.vector.reduce.or.{v}i1({b})")
    return name, ["\n".join([head] + body + ["}"]), *declarations]
