"""dtypes: promotion (PyTorch's table, plus the documented choices for uint16/32/64), casts
between every pair against references written here, bfloat16 arithmetic (float32 math
rounded to bfloat16 after every op), host conversion, unsigned semantics and bitcast.

The bfloat16 reference is tests/helpers.rne_bf16 (np.frexp / np.round, nothing shared
with lazyten's bit tricks); integer and float references are exact Python arithmetic.
"""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from codegen.dtypes import dtypes, promote, round_bf16
from lazyten import Tensor
from lazyten.creation import bf16_bits, bf16_values
from tests.helpers import fast, rne_bf16

BF16, F16, F32, F64 = dtypes.bfloat16, dtypes.float16, dtypes.float32, dtypes.float64
U16, U32, U64 = dtypes.uint16, dtypes.uint32, dtypes.uint64
SIGNED = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]
UNSIGNED = [dtypes.uint8, U16, U32, U64]
FLOATS = [F16, BF16, F32, F64]


# ---- promotion ----
# PyTorch's table (c10/core/ScalarType.cpp, _promoteTypesLookup) for the types it promotes
_TORCH = "u1 i1 i2 i4 i8 f2 f4 f8 b1 bf".split()
_TORCH_TABLE = """
u1 u1 i2 i2 i4 i8 f2 f4 f8 u1 bf
i1 i2 i1 i2 i4 i8 f2 f4 f8 i1 bf
i2 i2 i2 i2 i4 i8 f2 f4 f8 i2 bf
i4 i4 i4 i4 i4 i8 f2 f4 f8 i4 bf
i8 i8 i8 i8 i8 i8 f2 f4 f8 i8 bf
f2 f2 f2 f2 f2 f2 f2 f4 f8 f2 f4
f4 f4 f4 f4 f4 f4 f4 f4 f8 f4 f4
f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8
b1 u1 i1 i2 i4 i8 f2 f4 f8 b1 bf
bf bf bf bf bf bf f4 f4 f8 bf bf
"""
_CODE = {"u1": dtypes.uint8, "i1": dtypes.int8, "i2": dtypes.int16, "i4": dtypes.int32,
         "i8": dtypes.int64, "f2": F16, "f4": F32, "f8": F64, "b1": dtypes.bool, "bf": BF16}
TORCH_PAIRS = [(_CODE[row[0]], _CODE[col], _CODE[cell])
               for row in (line.split() for line in _TORCH_TABLE.strip().splitlines())
               for col, cell in zip(_TORCH, row[1:])]


@pytest.mark.parametrize("a,b,want", TORCH_PAIRS, ids=lambda d: d.name)
def test_promotion_follows_pytorch(a, b, want):
    assert promote(a, b) == want and promote(b, a) == want, f"{a.name} with {b.name}"


def test_promotion_of_wide_unsigned_types():
    """PyTorch promotes uint16/32/64 only with floats (the float wins) and raises for any
    other mix. lazyten follows numpy there (the narrowest type holding both), except
    uint64 with a signed type, where numpy's float64 would lose bits: TypeError."""
    for u in (U16, U32, U64):
        for f in FLOATS:
            assert promote(u, f) == f and promote(f, u) == f
        assert promote(u, dtypes.bool) == u and promote(u, dtypes.uint8) == u
    assert promote(U16, U32) == U32 and promote(U32, U64) == U64 and promote(U16, U64) == U64
    want = {(U16, dtypes.int8): dtypes.int32, (U16, dtypes.int16): dtypes.int32,
            (U16, dtypes.int32): dtypes.int32, (U16, dtypes.int64): dtypes.int64,
            (U32, dtypes.int8): dtypes.int64, (U32, dtypes.int32): dtypes.int64,
            (U32, dtypes.int64): dtypes.int64}
    for (u, s), result in want.items():
        assert promote(u, s) == result and result.name == np.promote_types(u.name, s.name).name
    for s in SIGNED:
        with pytest.raises(TypeError, match="uint64"):
            promote(U64, s)
        with pytest.raises(TypeError, match=f"{s.name}"):
            Tensor(np.ones(2, np.uint64)) + Tensor(np.ones(2, s.name))


def test_tensor_results_take_the_promoted_dtype_and_python_scalars_do_not_promote():
    h, b = Tensor(np.array([1.5, 2.25], np.float16)), Tensor([1.5, 2.25], dtype=BF16)
    assert (h + b).dtype == F32 and (b + Tensor([1.0, 2.0])).dtype == F32
    assert (Tensor([3, 4]) + b).dtype == BF16 and (Tensor([True, False]) * b).dtype == BF16
    np.testing.assert_array_equal((h + b).numpy(), [3.0, 4.5])
    u = Tensor(np.array([0, 7, 2 ** 32 - 1], np.uint32))
    assert (u + 1).dtype == U32 and (u + 1.5).dtype == F32 and (b * 2).dtype == BF16


# ---- casts between every pair ----
def _values(src):
    """Values of src, with the extremes: integers and bools exactly, floats and bfloat16
    (float32 arrays of bfloat16 values) with specials, fractions and both signs."""
    if src == dtypes.bool:
        return np.array([True, False, True, False, True, True])
    if src.is_int:
        info = np.iinfo(src.name)
        v = [int(info.min), int(info.max), 0, 1, int(info.max) // 3, 100]
        v += [-1, -100, int(info.min) + 5] if info.min < 0 else [int(info.max) - 5, 2 ** 7]
        return np.array(v, dtype=src.name)
    v = [0.5, -0.5, 2.75, -2.75, 100.25, -0.0, 1e-3, 65519.0, 65520.0, 3e38, 1e-40, 7.0]
    v += [np.inf, -np.inf, np.nan]
    if src == F16:
        with np.errstate(over="ignore"):
            return np.array(v, np.float16)  # (65520 and 3e38 overflow: inf)
    return rne_bf16(v) if src == BF16 else np.array(v, src.name)


def _round_int(n: int, bits: int) -> float:
    """The integer n rounded to `bits` significant bits, ties to even (exact arithmetic)."""
    m = abs(n)
    shift = max(m.bit_length() - bits, 0)
    q, r = divmod(m, 1 << shift)
    if shift and (r > 1 << (shift - 1) or (r == 1 << (shift - 1) and q & 1)):
        q += 1
    return math.copysign(float(q << shift), n)


def _cast_reference(x: np.ndarray, src, dst) -> np.ndarray:
    """What each conversion means: to bool, nonzero (NaN too); integer to integer, the value
    modulo 2**bits (two's complement); float to integer, truncated toward zero, then modulo
    2**bits; integer to float, rounded to nearest even, too big is inf; float to float,
    rounded to nearest even (bfloat16 by rne_bf16)."""
    out_np = np.float32 if dst == BF16 else np.dtype(dst.name)
    if dst == dtypes.bool:
        return x != 0
    if dst.is_int:
        bits = dst.itemsize * 8
        ints = [int(v) if src.is_int or src == dtypes.bool else math.trunc(float(v)) for v in x]
        wrapped = [(v % 2 ** bits) - (2 ** bits if not dst.is_unsigned and v % 2 ** bits >=
                                      2 ** (bits - 1) else 0) for v in ints]
        return np.array(wrapped, dtype=out_np)
    if dst == BF16:
        return rne_bf16([float(v) for v in x])
    if src.is_int or src == dtypes.bool:
        mantissa, limit = {F16: (11, 65520.0), F32: (24, 2.0 ** 128), F64: (53, math.inf)}[dst]
        vals = [_round_int(int(v), mantissa) for v in x]
        return np.array([v if abs(v) < limit else math.copysign(math.inf, v) for v in vals],
                        out_np)
    with np.errstate(over="ignore"):
        return x.astype(np.float64).astype(out_np)  # numpy's float conversions are RNE


def _in_range(x: np.ndarray, src, dst) -> np.ndarray:
    """Float -> integer is defined where the truncated value fits int64 (uint64: up to
    2**64), as in C through int64; NaN and inf are undefined."""
    if not (src.is_float and dst.is_int):
        return np.ones(len(x), bool)
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        hi = 2.0 ** 64 if dst == U64 else 2.0 ** 63
        return np.isfinite(x) & (x > -2.0 ** 63) & (x < hi)


@pytest.mark.parametrize("src", dtypes.all(), ids=lambda d: d.name)
def test_cast_every_pair(src):
    x = _values(src)
    t = Tensor(x, dtype=src)
    outs = {dst: t.cast(dst) for dst in dtypes.all() if dst != src}
    Tensor.realize(*outs.values())
    for dst, out in outs.items():
        keep = _in_range(x, src, dst)
        got, want = out.numpy()[keep], _cast_reference(x[keep], src, dst)
        assert out.dtype == dst and np.array_equal(got, want, equal_nan=True), \
            f"{src.name} -> {dst.name}: {x[keep]} gave {got}, expected {want}"


def test_float_to_uint64_past_int64_and_negative_wraparound():
    x = np.array([2.0 ** 63, 1.5 * 2 ** 63, 2.0 ** 64 - 2 ** 11, -1.0, -2.75, 3.9])
    want = [2 ** 63, 3 * 2 ** 62, 2 ** 64 - 2 ** 11, 2 ** 64 - 1, 2 ** 64 - 2, 3]
    assert Tensor(x).cast(U64).tolist() == want
    assert Tensor(np.float32([-1.0, -300.0])).cast(dtypes.uint8).tolist() == [255, 212]
    assert Tensor(np.int8([-1, -128])).cast(U64).tolist() == [2 ** 64 - 1, 2 ** 64 - 128]
    assert Tensor(np.uint64([2 ** 64 - 1, 2 ** 63])).cast(F64).tolist() == [2.0 ** 64, 2.0 ** 63]


# ---- bfloat16 ----
def test_bf16_host_conversion_rounds_to_nearest_even():
    """Tensor(data, dtype=bfloat16) rounds once on the host (float64 input too: no double
    rounding through float32); .numpy() is float32 (exact), .tolist()/.item() floats."""
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -30, -(1 + 2 ** -8 + 2 ** -40),
                  3.4e38, -3.3e38, 1e-40, 2.0 ** -134, 3 * 2.0 ** -134, -0.0, np.inf, np.nan])
    t = Tensor(x, dtype=BF16)
    got = t.numpy()
    assert got.dtype == np.float32 and t.dtype == BF16
    np.testing.assert_array_equal(got, rne_bf16(x))
    assert np.signbit(got[9]) and np.isnan(got[11])
    assert got[2] == 1 + 2 ** -7, "rounded twice (via float32) it would be 1.0"
    assert t.tolist()[:2] == [1.0, 1 + 2 ** -6] and isinstance(t[0].item(), float)
    assert Tensor(np.arange(-300, 300, 7), dtype=BF16).numpy().tolist() == \
        rne_bf16(np.arange(-300, 300, 7)).tolist()
    assert Tensor(3.14159, dtype=BF16).item() == float(rne_bf16(3.14159))



@fast(200)
@given(st.floats(allow_nan=False, width=64) |
       st.floats(-2.0 ** -120, 2.0 ** -120) | st.floats(3.3e38, 3.5e38))
def test_bf16_host_roundings_agree(value):
    """The two host roundings to bfloat16 are one function: codegen's round_bf16 (one
    Python float: constants in kernels) and creation's bf16_bits (numpy arrays: tensor
    data), each checked against rne_bf16 so that neither can drift."""
    want = float(rne_bf16(value))
    for got in (round_bf16(value), float(bf16_values(bf16_bits(np.array([value])))[0])):
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (value, got, want)

def test_bf16_arithmetic_rounds_after_every_op():
    rng = np.random.default_rng(0)
    a, b, c = (rne_bf16(rng.standard_normal(257) * 8) for _ in range(3))
    d = rne_bf16(rng.uniform(0.5, 4, 257))
    ta, tb, tc, td = (Tensor(v, dtype=BF16) for v in (a, b, c, d))
    out = (ta * tb + tc) / td - ta
    assert out.dtype == BF16
    f32 = np.float32
    want = rne_bf16(f32(rne_bf16(f32(rne_bf16(f32(rne_bf16(a * b)) + c)) / d)) - a)
    np.testing.assert_array_equal(out.numpy(), want)
    # one rounding for the whole expression would differ somewhere: the test can fail
    assert not np.array_equal(rne_bf16((a.astype(np.float64) * b + c) / d - a), want)
    np.testing.assert_array_equal(ta.abs().sqrt().numpy(), rne_bf16(np.sqrt(np.abs(a))))
    np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    ulp = np.abs(rne_bf16(np.exp(a / 4))) * 2.0 ** -7
    assert (np.abs((ta / 4).exp().numpy() - rne_bf16(np.exp(rne_bf16(a / 4)))) <= ulp).all()


def test_bf16_sums_accumulate_in_float32_and_round_once():
    x = np.full(1001, 2.0 ** -9, np.float32)
    x[0] = 1.0  # in bfloat16, 1 + 2**-9 is 1: a bfloat16 accumulator would stay at 1
    t = Tensor(x, dtype=BF16)
    assert t.sum().dtype == BF16 and t.sum().item() == 1 + 1000 * 2.0 ** -9
    big = Tensor(np.full((3, 70_000), 1.0, np.float32), dtype=BF16)  # split in stages
    np.testing.assert_array_equal(big.sum(axis=1).numpy(), rne_bf16([70_000.0] * 3))
    assert big.mean().item() == 1.0
    k = np.random.default_rng(1).integers(-64, 64, (20, 30)).astype(np.float32) / 8
    w = np.random.default_rng(2).integers(-64, 64, (30, 5)).astype(np.float32) / 8
    got = Tensor(k, dtype=BF16) @ Tensor(w, dtype=BF16)  # exact in float32, rounded once
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.numpy(), rne_bf16(k.astype(np.float64) @ w))


def test_bf16_gradients_flow_in_bf16():
    x = Tensor([1.5, -2.0, 3.0], dtype=BF16, requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.dtype == BF16 and x.grad.numpy().tolist() == [3.0, -4.0, 6.0]
    assert x.is_floating_point() and BF16.is_float and dtypes.from_name("bf16") == BF16


# ---- unsigned integers ----
def test_min_max_and_python_ints():
    assert [(dtypes.min(d), dtypes.max(d)) for d in (U16, U32, U64)] == \
        [(0, 2 ** 16 - 1), (0, 2 ** 32 - 1), (0, 2 ** 64 - 1)]
    assert (dtypes.min(BF16), dtypes.max(BF16)) == (-math.inf, math.inf)
    u = Tensor(np.array([0, 5, 2 ** 32 - 1], np.uint32))
    assert (u - 1).tolist() == [2 ** 32 - 1, 4, 2 ** 32 - 2]  # wraps, as C and PyTorch do
    assert (u + 2).tolist() == [2, 7, 1] and (u * 3).tolist() == [0, 15, 2 ** 32 - 3]
    assert (Tensor(np.uint8([1, 200])) + 300).tolist() == [45, 244]


def test_unsigned_division_modulo_and_comparison_use_every_bit():
    top = 2 ** 64 - 1
    a = np.array([top, top - 6, 2 ** 63, 3, 2 ** 63 + 5], np.uint64)
    b = np.array([7, 3, 2, top, 2 ** 63 + 4], np.uint64)
    ta, tb = Tensor(a), Tensor(b)
    assert (ta // tb).tolist() == [int(x) // int(y) for x, y in zip(a, b)]
    assert (ta % tb).tolist() == [int(x) % int(y) for x, y in zip(a, b)]
    assert (ta < tb).tolist() == [int(x) < int(y) for x, y in zip(a, b)]
    assert (ta > 2 ** 63).tolist() == [int(x) > 2 ** 63 for x in a]
    assert ta.max().item() == top and ta.min().item() == 3
    assert ta.maximum(tb).tolist() == np.maximum(a, b).tolist()
    u16 = np.array([65535, 40000, 7], np.uint16)
    assert (Tensor(u16) // 3).tolist() == (u16 // 3).tolist()
    assert Tensor(u16).sum().item() == int(u16.astype(np.int64).sum())


# ---- bitcast ----
@pytest.mark.parametrize("size", [2, 4, 8])
def test_bitcast_reinterprets_bits(size):
    """Every pair of one itemsize against numpy's .view, from random bits (NaNs whose
    payload a float register may change are left out)."""
    raw = np.random.default_rng(size).integers(0, 256, 64 * size, dtype=np.uint8)
    kinds = [d for d in dtypes.all() if d.itemsize == size and d != dtypes.bool]
    for src in kinds:
        bits = raw.view(f"u{size}")
        if src.is_float and src != BF16:
            bits = bits[~np.isnan(raw.view(src.name))]
        if src == BF16:
            bits = bits[~np.isnan((bits.astype(np.uint32) << 16).view(np.float32))]
        t = Tensor(bits).bitcast(src)
        for dst in kinds:
            got = t.bitcast(dst).numpy() if dst != src else t.numpy()
            want = (bits.astype(np.uint32) << 16).view(np.float32) if dst == BF16 else \
                bits.view(dst.name)
            assert np.array_equal(got, want, equal_nan=True), f"{src.name} -> {dst.name}"
    x = Tensor(np.float32([1.0, -2.0]), requires_grad=True)
    y = (x * 2).bitcast(dtypes.int32)
    assert y.tolist() == np.float32([2.0, -4.0]).view(np.int32).tolist() and not y.requires_grad


def test_bitcast_needs_equal_itemsizes():
    with pytest.raises(TypeError, match="float32 .4 bytes. to float64 .8 bytes."):
        Tensor(np.ones(3, np.float32)).bitcast(F64)
    with pytest.raises(TypeError, match="bool"):
        Tensor(np.ones(3, np.uint8)).bitcast(dtypes.bool)


def test_unsigned_index_tensors():
    """uint16/32/64 tensors index like numpy; a uint64 index past int64 is out of range
    (not wrapped to a negative, valid, index)."""
    x = Tensor(np.arange(6.0) * 10)
    for d in (np.uint16, np.uint32, np.uint64):
        assert x[Tensor(np.array([2, 5, 0], d))].tolist() == [20.0, 50.0, 0.0]
    w = Tensor(np.arange(6.0).reshape(2, 3))
    assert w.gather(1, Tensor(np.array([[2], [0]], np.uint64))).tolist() == [[2.0], [3.0]]
    with pytest.raises(IndexError, match="out of range"):
        x[Tensor(np.array([2 ** 64 - 1], np.uint64))].numpy()


def test_cat_casts_each_input_once_to_the_common_dtype():
    """bfloat16 + int32 + float32 is float32: the int32 must not round to bfloat16 on the
    way (found by the fuzzer, seed 5066)."""
    a, b = Tensor([[1.5]], dtype=BF16), Tensor(np.array([[2100788683]], np.int32))
    out = a.cat(b, Tensor(np.zeros((0, 1), np.float32)), dim=0)
    assert out.dtype == F32 and out.numpy().tolist() == [[1.5], [float(np.float32(2100788683))]]
