"""Window kernels (pools, convs) tile for every CPU vector width without storing padding.

The tile pass pads an output row no vector divides to whole vectors (OptOps.PAD_OUT,
D57) for the lanes its first unroll is expected to give it. A 3x3 stride-1 pool with
padding 1 at 12 or 13 pixels got the pad but no unroll on AVX2, and the linearizer
stopped on "a padded output axis without vector lanes" (found by the D70 work; an
AssertionError from deep inside codegen on a plain `max_pool2d`). Now the pass tiles the
row unpadded when the lanes do not run along it.

Every kernel of random window ops is lowered for 128-, 256- and 512-bit targets (on any
host: lowering runs no code), and run on this host against numpy.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel
from codegen.linearizer import linearize
from codegen.opt import optimize
from codegen.opt.tiling import _row_is_lanes
from codegen.target import cpu
from lazyten import Tensor
from lazyten.schedule import create_schedule

TARGETS = [cpu(bits) for bits in (128, 256, 512)]


def _windows(x: np.ndarray, k: int, stride: int, pad: int, fill: float) -> np.ndarray:
    """(N, C, OH, OW, k, k) windows of x padded by `pad` with `fill`."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    w = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    return w[:, :, ::stride, ::stride]


def _ops(kind: str, x: Tensor, k: int, stride: int, pad: int) -> Tensor:
    if kind == "max":
        return x.max_pool2d(k, stride=stride, padding=pad)
    if kind == "avg":
        return x.avg_pool2d(k, stride=stride, padding=pad)
    c = x.shape[1]
    weight = Tensor(np.linspace(-1, 1, c * c * k * k, dtype=np.float32).reshape(c, c, k, k))
    return x.conv2d(weight, stride=stride, padding=pad)


def _reference(kind: str, x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    x64 = x.astype(np.float64)
    if kind == "max":
        return _windows(x64, k, stride, pad, -np.inf).max(axis=(4, 5))
    if kind == "avg":
        return _windows(x64, k, stride, pad, 0.0).mean(axis=(4, 5))
    c = x.shape[1]
    weight = np.linspace(-1, 1, c * c * k * k, dtype=np.float32).reshape(c, c, k, k)
    return np.einsum("ncyxij,ocij->noyx", _windows(x64, k, stride, pad, 0.0), weight)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("size", [12, 13])
def test_padded_3x3_pool_found_by_the_conv_work(kind, size):
    x = np.random.default_rng(size).standard_normal((2, 3, size, size)).astype(np.float32)
    got = _ops(kind, Tensor(x), 3, 1, 1).numpy()
    np.testing.assert_allclose(got, _reference(kind, x, 3, 1, 1), rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["max", "avg", "conv"]), k=st.integers(2, 5),
       stride=st.integers(1, 3), size=st.integers(5, 30), channels=st.integers(1, 5),
       data=st.data())
def test_window_kernels_lower_for_every_width_and_match_numpy(kind, k, stride, size,
                                                              channels, data):
    pad = data.draw(st.integers(0, k // 2), label="padding")
    x = np.random.default_rng(size).standard_normal((2, channels, size, size)).astype(np.float32)
    out = _ops(kind, Tensor(x), k, stride, pad)
    for item in create_schedule([out.lazydata]):
        if item.ast is None:
            continue
        for target in TARGETS:
            kernel = optimize(Kernel(item.ast), target)
            assert kernel.padded_axis < 0 or _row_is_lanes(kernel), \
                f"{target.vector_bits}-bit: a padded row without lanes: {kernel.applied}"
            linearize(item.ast, target)  # raised on such a kernel
    out = _ops(kind, Tensor(x), k, stride, pad)  # the schedule above consumed nothing
    np.testing.assert_allclose(out.numpy(), _reference(kind, x, k, stride, pad),
                               rtol=1e-4, atol=1e-4)
