"""interpolate as one traced call (lazyten/resize.py, D154): its per-axis plans are found
once per sizes and mode, its weights and masks are frozen constants made once, and a
resampling that is more than views runs as one Composite (one graph node forward, one
per gradient). Values against the pixel-by-pixel reference of PyTorch's formulas
(test_ops_nn2.py), on repeated calls (the second reuses the trace), non-contiguous and
broadcast inputs, gradients by the adjoint identity, float16, and inside a jit."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor
from lazyten.autograd.composite import Composite
from lazyten.jit import jit
from lazyten.schedule_cache import CacheStats
from lazyten.traced import CompositeOps
from helpers import fast, make_layout
from test_ops_nn2 import interp_case, interpolate_ref


def _out_size(shape, size, scale):
    return size or tuple(math.floor(n * s) for n, s in zip(shape[2:], scale))


@given(case=interp_case(), layout=st.sampled_from(["contiguous", "flip", "broadcast"]),
       seed=st.integers(0, 2**16))
@fast(40)
def test_repeated_calls_match_the_reference_values_and_adjoint(case, layout, seed):
    """Two calls on different data of one shape (the second runs the trace the first
    made): values as PyTorch's formulas; the gradient g of sum(out * w) is the adjoint of
    the (linear) resampling, so sum(interp(z) * w) == sum(z * g) for any z."""
    shape, mode, align, size, scale = case
    out_size = _out_size(shape, size, scale)
    if min(out_size) <= 0:
        return
    rng = np.random.default_rng(seed)
    scales = scale or (None,) * len(out_size)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        if layout == "broadcast":  # one channel read for every channel
            x[:, 1:] = x[:, :1]
            t = Tensor(np.ascontiguousarray(x[:, :1])).expand(*shape)
        else:
            t = make_layout(x, layout)
        t.requires_grad = True
        out = t.interpolate(size=size, scale_factor=scale, mode=mode, align_corners=align)
        expected = interpolate_ref(x, out_size, scales, mode, bool(align))
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
        w = rng.standard_normal(expected.shape).astype(np.float32)
        (out * Tensor(w)).sum().backward()
        z = rng.standard_normal(shape)
        lhs = float((interpolate_ref(z, out_size, scales, mode, bool(align)) * w).sum())
        g = t.grad.numpy() if layout != "broadcast" else np.broadcast_to(t.grad.numpy(), shape)
        assert t.grad.shape == shape
        assert abs(lhs - float((z * g).sum())) <= 1e-4 * (1 + np.abs(z * g).sum())


@pytest.mark.parametrize("shape,kw", [
    ((2, 3, 5, 4), dict(scale_factor=2, mode="bilinear")),
    ((2, 3, 5, 4), dict(size=(7, 3), mode="bilinear", align_corners=True)),
    ((1, 2, 3, 4, 2), dict(size=(5, 3, 4), mode="trilinear")),
    ((2, 3, 5), dict(size=7, mode="nearest")),  # not an integer factor: a one-hot select
    ((2, 3, 9), dict(scale_factor=0.7, mode="linear"))])
def test_a_resampling_is_one_node_each_way_and_repeats_schedule_nothing(shape, kw):
    x = Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32),
               requires_grad=True)
    out = x.interpolate(**kw)
    assert out.lazydata.base.op is CompositeOps.GRAPH
    assert out._ctx.function is Composite
    (g,) = out.gradient(x, gradient=out.ones_like())
    assert g.lazydata.base.op is CompositeOps.GRAPH
    Tensor.realize(out, g)
    misses = CacheStats.misses
    again = Tensor(np.random.default_rng(1).standard_normal(shape).astype(np.float32),
                   requires_grad=True)
    out2 = again.interpolate(**kw)
    (g2,) = out2.gradient(again, gradient=out2.ones_like())
    Tensor.realize(out2, g2)
    assert CacheStats.misses == misses  # the same graph as the first call's


def test_views_only_nearest_stays_a_view():
    """A nearest resampling by an integer factor is views of the input: no node at all."""
    x = Tensor(np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4))
    out = x.interpolate(scale_factor=2)
    assert out.lazydata.base is x.lazydata.base
    np.testing.assert_array_equal(out.numpy(), np.repeat(np.repeat(x.numpy(), 2, 2), 2, 3))


def test_float16_input_mixes_with_float32_weights_cast_to_half():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float16)
    for _ in range(2):  # the second call reads the cached weights
        got = Tensor(x).interpolate(size=(8, 9), mode="bilinear").numpy()
        assert got.dtype == np.float16
        expected = interpolate_ref(x.astype(np.float32), (8, 9), (None, None), "bilinear", False)
        np.testing.assert_allclose(got.astype(np.float32), expected, rtol=4e-3, atol=4e-3)


def test_inside_a_jit_each_call_reads_its_own_input():
    @jit
    def up(x):
        return (x.interpolate(scale_factor=2, mode="bilinear") * 2).realize()

    rng = np.random.default_rng(4)
    for _ in range(4):
        x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
        expected = 2 * interpolate_ref(x, (8, 10), (2.0, 2.0), "bilinear", False)
        np.testing.assert_allclose(up(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
