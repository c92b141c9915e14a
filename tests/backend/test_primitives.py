"""Every primitive op as a one-op kernel on every device, against numpy.

Each case builds exactly one kernel from LazyBuffer primitives (no Tensor-level rewriting)
so a failure names the op and dtype a runtime gets wrong. bfloat16 values travel as float32
arrays; their references are rounded by tests/helpers.rne_bf16 (written apart from lazyten).
"""
import numpy as np
import pytest

from codegen.dtypes import dtypes
from codegen.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from lazyten import Tensor
from lazyten.creation import to_numpy_dtype
from lazyten.realize import Stats
from tests.helpers import rne_bf16

NP = {d: to_numpy_dtype(d) for d in dtypes.all()}
RTOL = {dtypes.float16: 1e-3, dtypes.bfloat16: 2.0 ** -8, dtypes.float32: 2e-6,
        dtypes.float64: 1e-13}
BF16 = dtypes.bfloat16
SIZE = 61  # odd, so vector paths see a tail


def data(dtype, n=SIZE, seed=0, low=None, high=None, nonzero=False):
    """Values of `dtype` covering signs and magnitudes (specials are added per test)."""
    rng = np.random.default_rng(seed)
    if dtype == dtypes.bool:
        return rng.random(n) < 0.5
    if dtype.is_float:
        x = rng.standard_normal(n) * 4 if low is None else rng.uniform(low, high, n)
        return rne_bf16(x) if dtype == BF16 else x.astype(NP[dtype])
    info = np.iinfo(NP[dtype])
    lo = max(info.min, -100 if low is None else low)
    hi = min(info.max, 100 if high is None else high)
    x = rng.integers(lo, hi, n, endpoint=True, dtype=NP[dtype])
    return np.where(x == 0, 1, x).astype(NP[dtype]) if nonzero else x


def one_kernel(device, build, *arrays, dtypes_=None):
    """Run `build(*lazybuffers)` as one kernel on `device` and return it as numpy. The
    arrays are tensors of their numpy dtype, or of `dtypes_` (bfloat16 needs saying)."""
    dtypes_ = dtypes_ or [None] * len(arrays)
    lbs = [Tensor(a, device=device, dtype=d).lazydata for a, d in zip(arrays, dtypes_)]
    out = Tensor(build(*lbs), device=device)
    before = Stats.kernels
    result = out.numpy()
    assert Stats.kernels - before == 1, "expected exactly one kernel"
    return result


def check(got, want, dtype=None):
    """Equal for integers; floats within RTOL of `dtype` (by default numpy's own)."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f":
        rtol = RTOL[dtype or dtypes.from_name(got.dtype.name)]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


# ---- unary ----
UNARY = {UnaryOps.EXP2: (np.exp2, -20, 20), UnaryOps.EXP: (np.exp, -20, 20),
         UnaryOps.LOG2: (np.log2, 1e-3, 1e3), UnaryOps.SIN: (np.sin, -10, 10),
         UnaryOps.COS: (np.cos, -10, 10), UnaryOps.SQRT: (np.sqrt, 0, 1e4),
         UnaryOps.RECIP: (np.reciprocal, -1e3, 1e3)}


UNARY_CASES = [(op, dtypes.float32) for op in UNARY] + [
    (op, d) for op in (UnaryOps.EXP2, UnaryOps.EXP, UnaryOps.SQRT)
    for d in (dtypes.float16, dtypes.float64, BF16)]


@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=lambda x: x.name)
def test_unary_float(device, op, dtype):
    fn, low, high = UNARY[op]
    x = data(dtype, low=low, high=high)
    trig = op in (UnaryOps.SIN, UnaryOps.COS)
    x[:3] = [np.nan, 0.0, -0.0] if trig else [np.inf, np.nan, 0.0]
    with np.errstate(all="ignore"):
        want = rne_bf16(fn(x.astype(np.float64))) if dtype == BF16 else fn(x)
        got = one_kernel(device, lambda a: a.e(op), x, dtypes_=[dtype])
    if dtype == BF16 and op is UnaryOps.SQRT:  # correctly rounded in float32, then once more
        np.testing.assert_array_equal(got, want)
    check(got, want, dtype)  # bfloat16: computed in float32, within one bfloat16 ulp


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.uint8, dtypes.int64, dtypes.float16,
                                   dtypes.uint64, BF16], ids=str)
def test_neg(device, dtype):
    x = data(dtype)
    want = np.logical_not(x) if dtype == dtypes.bool else (-x).astype(x.dtype)
    check(one_kernel(device, lambda a: a.e(UnaryOps.NEG), x, dtypes_=[dtype]), want)


CASTS = [(d, dtypes.float32) for d in dtypes.all() if d != dtypes.float32] + \
        [(dtypes.float32, d) for d in dtypes.all() if d != dtypes.float32] + [
        (dtypes.float64, dtypes.float16), (dtypes.int64, dtypes.int8), (dtypes.uint8, dtypes.int8),
        (dtypes.int16, dtypes.uint8), (dtypes.float16, dtypes.bool),
        (dtypes.float64, BF16), (dtypes.float16, BF16), (BF16, dtypes.float16),
        (dtypes.int32, BF16), (dtypes.uint64, BF16), (BF16, dtypes.int64),
        (dtypes.float64, dtypes.uint64), (dtypes.uint64, dtypes.float64),
        (dtypes.int8, dtypes.uint64), (dtypes.uint32, dtypes.int8), (dtypes.uint64, dtypes.int32)]


def _cast_reference(x: np.ndarray, src, dst) -> np.ndarray:
    """numpy's conversion, with lazyten's documented choices made explicit: to bfloat16
    rounds once, to nearest even; float -> unsigned truncates, and a negative value wraps
    modulo 2**bits (through int64, as C on x86 and numpy do)."""
    if dst == BF16:
        return rne_bf16(x.astype(np.float64) if x.dtype != np.bool_ else x.astype(np.float64))
    if src.is_float and dst.is_unsigned:
        big = x >= 2.0 ** 63
        low = np.where(big, 0, x).astype(np.int64).astype(NP[dst])
        return np.where(big, np.where(big, x, 0).astype(np.uint64), low).astype(NP[dst])
    return x.astype(NP[dst])


@pytest.mark.parametrize("src,dst", CASTS, ids=lambda d: d.name)
def test_cast(device, src, dst):
    x = data(src, high=250)
    if src.is_float:
        x[:4] = [0.5, -0.5, 2.75, -2.75]  # conversion to integers truncates toward zero
        if dst.is_float or dst == dtypes.bool:
            x[4:8] = [np.inf, -np.inf, np.nan, -0.0]
        if src != dtypes.float16 and dst == dtypes.float16:
            x[8:11] = [65520.0, 1e-8, 0.1]  # overflow to inf, underflow, rounding
        if dst == BF16 and src.itemsize >= 4:  # overflow, subnormal, a tie, just past it
            x[8:12] = [3.4e38, 1e-40, 1 + 2 ** -8, 1 + 2 ** -8 + 2 ** -29]
        if src == dtypes.float64 and dst == dtypes.uint64:
            x[8:11] = [2.0 ** 63, 1.5 * 2 ** 63, 2.0 ** 64 - 2 ** 11]  # past int64
    if src.is_unsigned and src.itemsize >= 4:  # values with the top bit set
        x[:3] = [np.iinfo(NP[src]).max, 2 ** (8 * src.itemsize - 1), 2 ** 24 + 1]
    if src == dtypes.int32 and dst == BF16:
        x[:2] = [2 ** 24 + 2 ** 16 + 1, -(2 ** 30 + 2 ** 22)]  # one past a tie; a tie
    if src == BF16:
        x = rne_bf16(x)  # the values the tensor holds
    with np.errstate(all="ignore"):
        want = _cast_reference(x, src, dst)
    got = one_kernel(device, lambda a: a.cast(dst), x, dtypes_=[src])
    if dst == BF16 or (src.is_float and dst.is_int):  # exact: casts round once, or truncate
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), \
            f"{src.name} -> {dst.name}: {got[:12]} != {want[:12]}"
    check(got, want)


# ---- binary ----
def _trunc_div(a, b):
    if a.dtype.kind == "f":
        return a / b
    if a.dtype.kind == "u":
        return a // b
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return (q * np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64))).astype(a.dtype)


# ADD runs on every dtype (types, loads and stores); the other ops on the dtypes that take
# a different code path (bool, unsigned, 64-bit, half computed in float, NaN)
BINARY = {  # op -> (numpy reference, dtypes to run it on)
    BinaryOps.ADD: (np.add, dtypes.all()),
    BinaryOps.MUL: (np.multiply, [dtypes.float16, BF16, dtypes.uint64]),
    BinaryOps.MAX: (np.maximum, [dtypes.int32, dtypes.float32, dtypes.uint64, BF16]),
    BinaryOps.CMPLT: (np.less, [dtypes.uint8, dtypes.float16, dtypes.uint32, dtypes.uint64,
                                BF16]),
    BinaryOps.CMPNE: (np.not_equal, [dtypes.float32]),
    BinaryOps.FDIV: (np.divide, [dtypes.float16, dtypes.float32, dtypes.float64, BF16]),
    BinaryOps.IDIV: (_trunc_div, [dtypes.int8, dtypes.int64, dtypes.uint16, dtypes.uint32,
                                  dtypes.uint64]),
    BinaryOps.MOD: (np.fmod, [dtypes.int32, dtypes.float64, dtypes.uint32, dtypes.uint64, BF16]),
    BinaryOps.AND: (np.bitwise_and, [dtypes.bool]),
    BinaryOps.OR: (np.bitwise_or, [dtypes.int32]),
    BinaryOps.XOR: (np.bitwise_xor, [dtypes.bool]),
}
BINARY_CASES = [(op, d) for op, (_, ds) in BINARY.items() for d in ds]


@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=lambda x: x.name)
def test_binary(device, op, dtype):
    divides = op in (BinaryOps.IDIV, BinaryOps.MOD, BinaryOps.FDIV)
    a, b = data(dtype, seed=1), data(dtype, seed=2, nonzero=divides)
    if dtype.is_float and not divides:
        a[:4], b[:4] = [np.nan, 1.0, np.inf, -0.0], [2.0, np.nan, np.inf, 0.0]  # NaN wins MAX
    if dtype.is_int and not dtype.is_unsigned and divides:
        a[:4], b[:4] = [7, -7, 7, -7], [2, 2, -2, -2]  # C semantics: truncate toward zero
    if dtype.is_unsigned and dtype.itemsize >= 2:  # the top bit set: unsigned div/rem/compare
        top = np.iinfo(NP[dtype]).max
        a[:5], b[:5] = [top, top - 6, 3, top // 2 + 1, 5], [7, 3, top, 2, top // 2 + 2]
    with np.errstate(all="ignore"):
        want = BINARY[op][0](a, b)
    if dtype == BF16 and want.dtype != np.bool_:  # correctly rounded in float32, then once more
        want = rne_bf16(BINARY[op][0](a.astype(np.float64), b.astype(np.float64)))
    want = want if want.dtype == np.bool_ else want.astype(a.dtype)
    got = one_kernel(device, lambda x, y: x.e(op, y), a, b, dtypes_=[dtype, dtype])
    if dtype == BF16:
        assert np.array_equal(got, want, equal_nan=True), (op, got[:8], want[:8])
    check(got, want)


@pytest.mark.parametrize("op", [BinaryOps.SHL, BinaryOps.SHR], ids=lambda x: x.name)
@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64,
                                   dtypes.uint16, dtypes.uint32, dtypes.uint64],
                         ids=lambda x: x.name)
def test_shift(device, op, dtype):
    """Counts in [0, bits): SHL wraps (narrow types too: C widens them to int), SHR is
    arithmetic for signed dtypes (negative values keep their sign), logical for unsigned."""
    bits = 8 * np.dtype(NP[dtype]).itemsize
    info = np.iinfo(NP[dtype])
    a = data(dtype, seed=1, low=info.min, high=info.max)
    b = data(dtype, seed=2, low=0, high=bits - 1)
    a[:3], b[:3] = [info.min, info.max, -1 if info.min else 255], [bits - 1, 1, 3]
    want = (np.left_shift if op is BinaryOps.SHL else np.right_shift)(a, b)
    check(one_kernel(device, lambda x, y: x.e(op, y), a, b), want.astype(a.dtype))


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.float16, BF16], ids=str)
def test_where(device, dtype):
    c, a, b = data(dtypes.bool), data(dtype, seed=1), data(dtype, seed=2)
    check(one_kernel(device, lambda x, y, z: x.e(TernaryOps.WHERE, y, z), c, a, b,
                     dtypes_=[None, dtype, dtype]), np.where(c, a, b))


# ---- reduce ----
REDUCES = [(ReduceOps.SUM, d) for d in (dtypes.bool, dtypes.int8, dtypes.int64, dtypes.float16,
                                        dtypes.float32, dtypes.uint32, BF16)] + \
          [(ReduceOps.MAX, d) for d in (dtypes.bool, dtypes.int32, dtypes.float64, dtypes.uint64,
                                        BF16)]


@pytest.mark.parametrize("op,dtype", REDUCES, ids=lambda x: x.name)
def test_reduce(device, op, dtype):
    x = data(dtype, n=7 * 45).reshape(7, 45)
    if dtype.is_float and op is ReduceOps.MAX:
        x[2, 5] = np.nan  # numpy's max propagates NaN
    if dtype.is_unsigned:
        x[1, :3] = np.iinfo(x.dtype).max  # wraps (sum); the top bit set (max)
    if op is ReduceOps.SUM:  # in the input's dtype (integers wrap); half accumulates in float
        acc = np.float32 if dtype in (dtypes.float16, BF16) else x.dtype
        want = x.sum(axis=1, keepdims=True, dtype=acc).astype(x.dtype)
        want = rne_bf16(want) if dtype == BF16 else want  # one rounding at the end
    else:
        want = x.max(axis=1, keepdims=True)
    got = one_kernel(device, lambda a: a.r(op, (1,)), x, dtypes_=[dtype])
    if dtype == BF16 and op is ReduceOps.SUM:  # float32 sums in any order, rounded once
        np.testing.assert_allclose(got, want, rtol=2.0 ** -8)
    elif dtype in (dtypes.float32, dtypes.float64):  # summation order differs: scale the error
        scale = np.abs(x).sum(axis=1, keepdims=True) * RTOL[dtype]
        np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=np.nanmax(scale),
                                   equal_nan=True)
    else:
        check(got, want)


# ---- constants ----
SPECIAL_VALUES = {
    dtypes.float32: [0.1, 1 / 3, -2.5e-38, 3.4028234663852886e38, -0.0, np.inf, -np.inf, np.nan],
    dtypes.float64: [0.1, 1 / 3, -2.5e-308, 1.7976931348623157e308, -0.0, np.inf, np.nan, 1e-300],
    dtypes.int64: [-2 ** 63, 2 ** 63 - 1, -2 ** 31, 2 ** 31, -1, 0, 7, 123456789012],
    dtypes.int32: [-2 ** 31, 2 ** 31 - 1, -1, 0, 1, 65536, -65537, 99],
    dtypes.uint64: [2 ** 64 - 1, 2 ** 63, 2 ** 63 - 1, 0, 1, 2 ** 32, 12345678901234567890, 3],
    dtypes.uint32: [2 ** 32 - 1, 2 ** 31, 0, 1, 65536, 4000000000, 7],
    dtypes.uint16: [65535, 32768, 0, 1, 255, 40000],
    # rounded to bfloat16: a tie (to even), just past it, overflow, subnormals, specials
    BF16: [0.1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4e38, 3.3e38, 1e-40, -2.0 ** -133, -0.0,
           np.inf, np.nan],
}


@pytest.mark.parametrize("dtype", list(SPECIAL_VALUES), ids=str)
def test_constants_are_exact(device, dtype):
    """Literals in the source must reproduce every bit: extremes, -0.0, inf, NaN."""
    values = SPECIAL_VALUES[dtype]
    index = Tensor(np.arange(len(values), dtype=np.int32), device=device)
    out = Tensor.full((len(values),), values[-1], dtype=dtype, device=device)
    for i, v in enumerate(values[:-1]):
        out = (index == i).where(Tensor.full((len(values),), v, dtype=dtype, device=device), out)
    got, want = out.numpy(), np.array(values, dtype=NP[dtype])
    if dtype == BF16:
        want = rne_bf16(values)
    assert got.tobytes() == want.tobytes() or (dtype.is_float and np.array_equal(
        got, want, equal_nan=True) and (np.signbit(got) == np.signbit(want)).all())


# ---- bitcast ----
BITCASTS = [(s, d) for s in dtypes.all() for d in dtypes.all()
            if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]


@pytest.mark.parametrize("src,dst", BITCASTS, ids=lambda d: d.name)
def test_bitcast(device, src, dst):
    """The bits, unchanged, against numpy's .view (NaN inputs left out: a 16-bit float is a
    float in registers on the GPUs, and its NaN payload may not survive)."""
    size = src.itemsize
    raw = np.random.default_rng(size).integers(0, 256, SIZE * size, dtype=np.uint8)
    bits = raw.view(f"u{size}")
    values = (bits.astype(np.uint32) << 16).view(np.float32) if src == BF16 else \
        bits.view(NP[src])
    if src.is_float:
        bits, values = bits[~np.isnan(values)], values[~np.isnan(values)]
    got = one_kernel(device, lambda a: a.bitcast(dst), values, dtypes_=[src])
    want = (bits.astype(np.uint32) << 16).view(np.float32) if dst == BF16 else bits.view(NP[dst])
    assert np.array_equal(got, want, equal_nan=True), f"{src.name} -> {dst.name}"
