"""exp2 / exp / log2 written in LLVM IR (codegen/renderer/llvm_math.py) against numpy.

They replace libm calls for float32 on the CPU, scalar loops and vector lanes alike, so
they are checked over the whole float32 range: normal, subnormal and overflowing results,
and the special inputs (0, -0, inf, -inf, NaN, negatives).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyten import Tensor

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0, 0.5, -1.0, 1e-45, 1e-40, 3e38]


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps of `want` (float64), NaN and inf must match exactly."""
    with np.errstate(over="ignore", invalid="ignore"):
        want32 = want.astype(np.float32)
        dist = np.abs(got.astype(np.float64) - want)
    same_special = (np.isnan(got) & np.isnan(want32)) | ((got == want32) & np.isinf(want32))
    spacing = np.spacing(np.abs(want32).astype(np.float32)).astype(np.float64)
    dist = dist / spacing
    return np.where(same_special, 0.0, np.where(np.isinf(want32) | np.isnan(want32), np.inf, dist))


def test_exp2_whole_range():
    x = np.concatenate([np.linspace(-160, 130, 200_003), SPECIAL]).astype(np.float32)
    got = Tensor(x).exp2().numpy()
    with np.errstate(over="ignore"):
        want = np.exp2(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 1.0, f"exp2({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


def test_exp_whole_range():
    """The Cody-Waite split keeps exp within an ulp; exp2(x * log2(e)) was 62 ulps off."""
    x = np.concatenate([np.linspace(-110, 90, 200_003), SPECIAL]).astype(np.float32)
    got = Tensor(x).exp().numpy()
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 1.0, f"exp({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


def test_log2_whole_range():
    pos = np.geomspace(1e-45, 3.4e38, 200_003)
    x = np.concatenate([pos, np.linspace(0.5, 2.0, 10_001), -pos[::1000], SPECIAL]).astype(np.float32)
    got = Tensor(x).log2().numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log2(x.astype(np.float64))
    err = ulps(got, want)
    assert err.max() <= 2.5, f"log2({x[err.argmax()]}) = {got[err.argmax()]}, want {want[err.argmax()]}"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-80, 80, width=32), min_size=1, max_size=40))  # normal results
def test_exp_log_round_trip(values):
    x = np.array(values, np.float32)
    got, want = Tensor(x).exp().numpy(), np.exp(x.astype(np.float64))
    assert ulps(got, want).max() <= 1.0
    pos = np.abs(x) + np.float32(1e-3)
    np.testing.assert_allclose(Tensor(pos).log().numpy(), np.log(pos), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("fn", ["exp2", "exp", "log2"])
def test_on_vector_lanes(fn):
    """Inside a tiled reduce the functions run on <16 x float> vectors."""
    rng = np.random.default_rng(0)
    a, b = rng.random((8, 24)).astype(np.float32), rng.random((24, 32)).astype(np.float32)
    got = getattr(Tensor(a)[:, :, None] * Tensor(b)[None], fn)().sum(axis=1).numpy()
    want = getattr(np, fn)(a[:, :, None].astype(np.float64) * b[None]).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5)
