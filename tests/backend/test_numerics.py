"""Numerics on every device against numpy: IEEE division, the ulp bounds docs/numerics.md
states for the transcendental functions, float16 reductions, and casts between every
pair of dtypes through vectorised kernels.

Ulp errors are measured against a wider reference: float64 for float16 and float32
results, numpy's long double (80-bit on x86) for float64 results.
"""
import numpy as np
import pytest

from codegen.dtypes import dtypes
from codegen.linearizer import linearize
from codegen.renderer.llvmir import LLVMRenderer
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.autograd.tanh import POLY_BELOW
from lazyten.creation import to_numpy_dtype
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from tests.helpers import rne_bf16

NP = {d: to_numpy_dtype(d) for d in dtypes.all()}  # bfloat16: float32 arrays of its values
FLOATS = [np.float16, np.float32, np.float64]
EXTENDED = np.finfo(np.longdouble).nmant > 52  # a reference wider than float64 exists


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in ulps of `want` rounded to got's dtype; NaN and inf must match."""
    with np.errstate(all="ignore"):
        rounded = want.astype(got.dtype)
        spacing = np.spacing(np.abs(rounded)).astype(want.dtype)
        dist = np.abs(got.astype(want.dtype) - want) / spacing
    same = (np.isnan(got) & np.isnan(rounded)) | ((got == rounded) & np.isinf(rounded))
    bad = np.isinf(rounded) | np.isnan(rounded) | np.isnan(got) | np.isinf(got)
    return np.where(same, 0.0, np.where(bad, np.inf, dist)).astype(np.float64)


def reference_type(ft):
    return np.longdouble if ft == np.float64 else np.float64


# ---- division ----
def division_operands(ft, n=20_000, seed=0):
    """Quotients across the exponent range, with zeros, infinities, NaN and subnormals."""
    rng = np.random.default_rng(seed)
    info = np.finfo(ft)
    span = min(info.maxexp // 2, 40)
    a = rng.standard_normal(n) * np.exp2(rng.integers(-span, span, n))
    b = rng.standard_normal(n) * np.exp2(rng.integers(-span, span, n))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 3.0, float(info.tiny),
               float(info.smallest_subnormal), float(info.max), 1e-5, 0.1]
    sa = np.repeat(special, len(special))
    sb = np.tile(special, len(special))
    return (np.concatenate([a, sa]).astype(ft), np.concatenate([b, sb]).astype(ft))


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("ft", FLOATS, ids=lambda t: t.__name__)
def test_division_is_ieee(device, ft):
    """x / y is the correctly rounded quotient, bit for bit what numpy gives (once it was
    x * (1/y): 26% of float32 quotients an ulp off, float16 1e-5 / 1e-5 = inf)."""
    a, b = division_operands(ft)
    got = (Tensor(a, device=device) / Tensor(b, device=device)).numpy()
    with np.errstate(all="ignore"):
        want = a / b
    wrong = ~same_bits(got, want)
    assert not wrong.any(), (f"{wrong.sum()} of {len(a)} {ft.__name__} quotients differ from "
                             f"numpy, e.g. {a[wrong][:3]} / {b[wrong][:3]} = {got[wrong][:3]}, "
                             f"want {want[wrong][:3]}")


def test_division_by_scalars_and_of_integers(device):
    x = np.arange(1, 2000, dtype=np.float32)
    for y in (3.3, 0.3, 7.0, 1e-3):
        got = (Tensor(x, device=device) * y / y).numpy()
        want = x * np.float32(y) / np.float32(y)
        assert np.array_equal(got, want), f"(x * {y}) / {y} differs from numpy"
        assert np.array_equal((y / Tensor(x, device=device)).numpy(), np.float32(y) / x)
    i, j = np.arange(-50, 50, dtype=np.int32), np.arange(1, 101, dtype=np.int32)
    got = (Tensor(i, device=device) / Tensor(j, device=device)).numpy()
    assert got.dtype == np.float32  # as PyTorch: true division of integers is float32
    assert np.array_equal(got, i.astype(np.float32) / j.astype(np.float32))


def test_division_gradients(device):
    """d(x/y)/dx = 1/y and d(x/y)/dy = -x/y^2, against float64 finite differences."""
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-4, 4, 17), rng.uniform(0.5, 3, 17) * rng.choice([-1, 1], 17)
    tx = Tensor(x, device=device, requires_grad=True)
    ty = Tensor(y, device=device, requires_grad=True)
    (tx / ty).sum().backward()
    eps = 1e-6
    np.testing.assert_allclose(tx.grad.numpy(), ((x + eps) / y - (x - eps) / y) / (2 * eps),
                               rtol=1e-7)
    np.testing.assert_allclose(ty.grad.numpy(), (x / (y + eps) - x / (y - eps)) / (2 * eps),
                               rtol=1e-6)


# ---- transcendental functions: the bounds docs/numerics.md states ----
def _domain(name: str, ft) -> np.ndarray:
    """Inputs covering each function's whole useful range; every float16 where it fits."""
    info = np.finfo(ft)
    if ft == np.float16:
        every = np.arange(2 ** 16, dtype=np.uint16).view(np.float16)
        x = every[np.isfinite(every)]
        return np.concatenate([x, np.array([np.inf, -np.inf, np.nan], np.float16)])
    rng = np.random.default_rng(0)
    n = 200_000
    top = np.log(float(info.max))                       # e^x overflows above this
    bottom = np.log(float(info.smallest_subnormal)) - 1  # and rounds to 0 below this
    small = np.geomspace(float(info.tiny), 1, 3000)
    positive = np.exp(rng.uniform(np.log(float(info.smallest_subnormal)), top, n))
    x = {
        "exp": np.concatenate([rng.uniform(bottom, top + 1, n), small, -small]),
        "exp2": np.concatenate([rng.uniform(bottom / np.log(2), top / np.log(2) + 1, n),
                                small, -small]),
        "log": np.concatenate([positive, rng.uniform(0.5, 2, n)]),
        "log2": np.concatenate([positive, rng.uniform(0.5, 2, n)]),
        "sin": np.concatenate([rng.uniform(-1e4, 1e4, n), rng.uniform(-7, 7, n), small, -small,
                               _far(ft, rng), _near_quadrants(ft, rng)]),
        "cos": np.concatenate([rng.uniform(-1e4, 1e4, n), rng.uniform(-7, 7, n), small, -small,
                               _far(ft, rng), _near_quadrants(ft, rng)]),
        "sqrt": positive,
        "tanh": np.concatenate([rng.uniform(-20, 20, n), small, -small]),
        "sigmoid": np.concatenate([rng.uniform(bottom, -bottom, n), small, -small]),
    }[name]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]
    return np.concatenate([x, special]).astype(ft)


def _far(ft, rng, n: int = 20_000) -> np.ndarray:
    """Arguments of sin and cos up to the dtype's largest, either side of 2^24 (where
    float32 CPU code hands lanes to libm, D139) included: reduced by pi/2 at any size."""
    top = np.log(float(np.finfo(ft).max))
    edge = np.float32(2.0 ** 24)
    around = np.nextafter(np.full(50, edge), np.float32(0)), np.full(1, edge), \
        np.nextafter(np.full(50, edge), np.float32(np.inf))
    x = np.concatenate([np.exp(rng.uniform(np.log(1e4), top, n)), *around])
    return x * rng.choice([-1.0, 1.0], len(x))


def _near_quadrants(ft, rng, n: int = 20_000) -> np.ndarray:
    """The floats nearest to multiples of pi/2 (where x - q * pi/2 cancels most) and
    their neighbours, for q up to about 2^25."""
    q = rng.integers(1, 2 ** 25, n).astype(np.float64)
    x = (q * (np.pi / 2)).astype(ft)
    return np.concatenate([x, np.nextafter(x, ft(0)), np.nextafter(x, ft(np.inf))])


FUNCTIONS = {  # name -> reference on a wider float
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin,
    "cos": np.cos, "sqrt": np.sqrt, "tanh": np.tanh,
    "sigmoid": lambda x: np.where(x >= 0, 1 / (1 + np.exp(-x)), np.exp(x) / (1 + np.exp(x))),
}

# the bounds of docs/numerics.md, in ulps. CPU: this project's code and the host's libm,
# measured. CLANG: the same decompositions over the C compiler's libm (C's double exp2,
# log2, sin, cos; float32 rounds a double result once), measured. OPENCL and CUDA: what
# the API promises for the device's own functions (OpenCL 3.0 section 7.4, CUDA C
# Programming Guide appendix "Mathematical Functions"), carried through the few roundings
# our decompositions add
BOUNDS = {
    "CPU": {np.float32: dict(exp=1, exp2=1, log=3, log2=2.5, sin=1, cos=1, sqrt=0.5, tanh=2,
                             sigmoid=2.5),
            np.float64: dict(exp=1, exp2=1, log=2, log2=1, sin=1, cos=1, sqrt=0.5, tanh=4.5,
                             sigmoid=2.5)},
    "CLANG": {np.float32: dict(exp=1, exp2=1, log=2, log2=1, sin=1, cos=1, sqrt=0.5,
                               tanh=2, sigmoid=2.5),
              np.float64: dict(exp=1, exp2=1, log=2, log2=1, sin=1, cos=1, sqrt=0.5, tanh=4.5,
                               sigmoid=2.5)},
    "OPENCL": {ft: dict(exp=3, exp2=3, log=8, log2=3, sin=4, cos=4, sqrt=0.5, tanh=8,
                        sigmoid=5) for ft in (np.float32, np.float64)},
    # exp2 float32 and log2 float64 measured past the Guide's limits on an H100 (2.14 ulps
    # at a subnormal exp2f result, 1.26 for log2): the measured bounds, rounded up
    "CUDA": {np.float32: dict(exp=2, exp2=2.5, log=3, log2=1, sin=2, cos=2, sqrt=0.5, tanh=6,
                              sigmoid=4),
             np.float64: dict(exp=1, exp2=1, log=3, log2=1.5, sin=2, cos=2, sqrt=0.5, tanh=6,
                              sigmoid=4)},
}


def bound(device: str, name: str, ft) -> float:
    """float16 is computed in float32 and rounded once: within an ulp on every device."""
    if ft == np.float16:
        return 1.0
    kind = device.split(":")[0]
    limit = BOUNDS[kind][ft][name]
    if kind == "OPENCL" and name == "sqrt" and not get_runtime(device).compiler.options:
        limit = 3  # a device without correctly rounded sqrt (the option is not offered)
    return limit if ft != np.float64 or EXTENDED else limit + 1  # reference off by <= 1


@pytest.mark.parametrize("ft", FLOATS, ids=lambda t: t.__name__)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_transcendental_ulp_bounds(device, name, ft):
    x = _domain(name, ft)
    got = getattr(Tensor(x, device=device), name)().numpy()
    assert got.dtype == ft
    with np.errstate(all="ignore"):
        want = FUNCTIONS[name](x.astype(reference_type(ft)))
    err = ulps(got, want)
    worst = int(np.argmax(err))
    limit = bound(device, name, ft)
    assert err[worst] <= limit, (f"{name}({x[worst]!r}) on {device} = {got[worst]!r}, want "
                                 f"{want[worst]!r}: {err[worst]:.2f} ulp, docs/numerics.md "
                                 f"says at most {limit}")


def test_tanh_keeps_relative_precision_near_zero(device):
    """2 * sigmoid(2x) - 1 cancelled: tanh(1e-5) was 0.14% off in float32."""
    x = np.concatenate([np.geomspace(1e-30, 1e-2, 500), -np.geomspace(1e-30, 1e-2, 500)])
    for ft in (np.float32, np.float64):
        got = Tensor(x.astype(ft), device=device).tanh().numpy()
        want = np.tanh(x.astype(ft).astype(reference_type(ft)))
        assert ulps(got, want).max() <= bound(device, "tanh", ft)


def test_float32_tanh_is_monotonic_where_its_two_forms_meet(device):
    """float32 tanh is a polynomial below |x| = 0.625 and (1 - u) / (1 + u) above (D131):
    over the 20,001 floats around the switch on each side, it never decreases, and each
    value is within the bound."""
    switch = np.float32(POLY_BELOW).view(np.int32)
    x = np.arange(switch - 10_000, switch + 10_001, dtype=np.int32).view(np.float32)
    x = np.concatenate([-x[::-1], x])
    got = Tensor(x, device=device).tanh().numpy()
    assert np.all(np.diff(got.astype(np.float64)) >= 0)
    assert ulps(got, np.tanh(x.astype(np.float64))).max() <= bound(device, "tanh", np.float32)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_odd_functions_keep_the_sign_of_zero(device, dtype):
    """tanh(-0.0) is -0.0, as in numpy and PyTorch (it was +0.0); so are sin, sinh, atan..."""
    x = Tensor(np.array([-0.0, 0.0]), device=device).cast(dtype)
    for name in ("tanh", "sin", "sinh", "asinh", "atanh", "atan", "erf", "expm1", "log1p"):
        got = getattr(x, name)().float().numpy()
        assert got.tolist() == [0.0, 0.0] and np.signbit(got).tolist() == [True, False], \
            f"{name}(-0.0, 0.0) on {dtype} gave {got.tolist()} (signs {np.signbit(got)})"


def test_exp_near_overflow(device):
    """exp2(x * log2(e)) rounds the product: up to 62 ulps near x = 88 in float32."""
    x = np.linspace(80, 88.72, 10_001).astype(np.float32)
    got = Tensor(x, device=device).exp().numpy()
    assert ulps(got, np.exp(x.astype(np.float64))).max() <= bound(device, "exp", np.float32)


# ---- float16 reductions ----
def test_float16_mean_and_sum_accumulate_in_float32(device):
    """A float16 mean over 65,520 or more elements was 0 (or NaN): the float16 sum had
    overflowed; the partial sums of a split reduce rounded to float16 on the way."""
    ones = np.ones(70_000, np.float16)
    got = Tensor(ones, device=device).mean().numpy()
    assert got.dtype == np.float16 and got == 1.0, got
    rng = np.random.default_rng(0)
    x = (rng.random((3, 50_000)) * 0.01).astype(np.float16)
    for axis in (None, 1):
        want = x.astype(np.float64).sum(axis=axis).astype(np.float16)
        got = Tensor(x, device=device).sum(axis=axis).numpy()
        assert got.dtype == np.float16
        assert ulps(got, want.astype(np.float64)).max() <= 1, (got, want)
        got = Tensor(x, device=device).mean(axis=axis).numpy()
        want = x.astype(np.float64).mean(axis=axis)
        assert got.dtype == np.float16 and ulps(got, want).max() <= 1, (got, want)
    big = np.full(1000, 100.0, np.float16)  # each partial sum 1e5 would overflow float16
    assert Tensor(big, device=device).mean().numpy() == 100.0


def test_float16_prod_rounds_once(device):
    x = np.random.default_rng(1).uniform(0.9, 1.12, (4, 200)).astype(np.float16)
    got = Tensor(x, device=device).prod(axis=1).numpy()
    want = x.astype(np.float64).prod(axis=1)
    assert got.dtype == np.float16 and ulps(got, want).max() <= 1, (got, want)


# ---- casts through vector lanes ----
def _values(src: np.dtype, dst: np.dtype) -> np.ndarray:
    """(4, 32) values of `src` that `dst` can hold (numpy leaves out-of-range float ->
    int conversions undefined), with fractions for float -> int truncation."""
    rng = np.random.default_rng(0)
    if src == np.bool_:
        return rng.random((4, 32)) < 0.5
    lo, hi = -100, 100
    if dst.kind in "iu" and src.kind == "f":
        info = np.iinfo(dst)
        lo, hi = max(lo, info.min), min(hi, info.max)
    if src.kind == "u":
        lo = 0
    x = rng.uniform(lo, hi, (4, 32))
    return (x if src.kind == "f" else np.round(x)).astype(src)


PAIRS = [(s, d) for s in dtypes.all() for d in dtypes.all() if s != d]


def _astype(x: np.ndarray, dst) -> np.ndarray:
    return rne_bf16(x.astype(np.float64)) if dst == dtypes.bfloat16 else x.astype(NP[dst])


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda d: d.name)
def test_vector_casts(device, src, dst):
    """max over axis 0 keeps the dtype and runs on 16-lane vectors on the CPU; the cast
    after it is a vector cast (float -> int8/16/32 and uint8 failed to compile there)."""
    x = _values(NP[src], NP[dst])
    x = rne_bf16(x) if src == dtypes.bfloat16 else x
    out = Tensor(x, device=device, dtype=src).max(axis=0).cast(dst)
    if device == "CPU":
        (item,) = [i for i in create_schedule([out.lazydata]) if i.ast is not None]
        kernel = linearize(item.ast, LLVMRenderer().target)
        # float64 -> float16 is a scalar helper call per lane (no libcall for a vector)
        per_lane = (src, dst) == (dtypes.float64, dtypes.float16)
        assert any(u.op is UOps.CAST and u.src[0].dtype.count > 1 and
                   (u.dtype.count > 1 or per_lane) for u in kernel.uops) or \
            per_lane and any(u.op is UOps.EXTRACT for u in kernel.uops), \
            f"{src.name} -> {dst.name}: the cast did not run on vector lanes"
    got = out.numpy()
    want = _astype(x.max(0), dst)
    assert got.dtype == want.dtype and np.array_equal(got, want), \
        f"{src.name} -> {dst.name}: {got[:6]} != {want[:6]}"
    got = Tensor(x, device=device, dtype=src).cast(dst).max(axis=0).numpy()  # cast in the reduce
    want = _astype(x, dst).max(0)
    assert got.dtype == want.dtype and np.array_equal(got, want), \
        f"{src.name} -> {dst.name} before max: {got[:6]} != {want[:6]}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_constants_beyond_the_dtype_round_to_infinity(device, dtype):
    """A Python number too big for the dtype is an infinity in the kernel, as C's cast
    makes it (the C-style renderers raised OverflowError on 1e300 in float32); one that
    rounds to the largest finite value stays finite."""
    x = Tensor([1.0, -2.0], device=device).cast(dtype)
    got = (x * 1e300).float().numpy()
    np.testing.assert_array_equal(got, [np.inf, -np.inf])
    np.testing.assert_array_equal((x - 1e300).float().numpy(), [-np.inf, -np.inf])
    if dtype == "float32":  # just above FLT_MAX, still nearer to it than to 2**128
        big = float(np.finfo(np.float32).max) * (1 + 2.0 ** -30)
        np.testing.assert_array_equal((x * big).numpy(),
                                      np.float32([np.finfo(np.float32).max, -np.inf]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_rounding_keeps_the_sign_of_zero(device, dtype):
    """trunc/floor/ceil/round give numpy's values and signs: trunc(-0.4), ceil(-0.4),
    round(-0.4) and every rounding of -0.0 are -0.0 (they were +0.0)."""
    vals = np.array([-0.0, 0.0, -0.4, 0.4, -0.5, 0.5, -1.5, 2.5, -2.6, 3.7, -1e30,
                     np.inf, -np.inf, np.nan], np.float32)
    x = Tensor(vals, device=device).cast(dtype)
    exact_in = x.float().numpy().astype(np.float64)  # the inputs as the dtype holds them
    for name, ref_fn in [("trunc", np.trunc), ("floor", np.floor), ("ceil", np.ceil),
                         ("round", np.round)]:
        got = getattr(x, name)().float().numpy().astype(np.float64)
        ref = ref_fn(exact_in)
        np.testing.assert_array_equal(got, ref, err_msg=f"{name} on {dtype}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref),
                                      err_msg=f"sign of {name} on {dtype}: {got} vs {ref}")
