"""A conv's weight gradient sums its batch in pieces whose tile rows fit the L1 (D128),
against numpy.

The weight gradient's CPU tile streams 8 rows (4 output x 4 input channels) of all the
batch's positions for each tap; where pieces of whole images keep them within the L1,
one kernel sums each piece into its own slice of a (pieces, out, in, *kernel) output and
a second adds the slices. The rule is checked where it fires and where it does not; the
rule fires for strided convs too (D148) and not where the whole batch fits the L1; the
pieces themselves, forced on random convs (strides, dilations, asymmetric padding,
groups, float64, a transposed input), are compared with numpy's weight gradient.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyten.autograd.conv_rules as conv_rules
from codegen.helpers import Context
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from tests.unit.test_conv_speed_rules import rnd

TARGET = get_runtime("CPU").renderer.target


def weight_grad_ref(x, g, kernel, stride, dilation, pads, groups):
    """numpy's weight gradient of sum(g * conv(x, w)): tap by tap, group by group."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0)) + tuple(pads))
    oh, ow = g.shape[2:]
    cin_g, cout_g = x.shape[1] // groups, g.shape[1] // groups
    gw = np.zeros((g.shape[1], cin_g) + tuple(kernel))
    for ky in range(kernel[0]):
        for kx in range(kernel[1]):
            y0, x0 = ky * dilation[0], kx * dilation[1]
            patch = xp[:, :, y0:y0 + (oh - 1) * stride[0] + 1:stride[0],
                       x0:x0 + (ow - 1) * stride[1] + 1:stride[1]]
            for grp in range(groups):
                gw[grp * cout_g:(grp + 1) * cout_g, :, ky, kx] = np.einsum(
                    "bohw,bchw->oc", g[:, grp * cout_g:(grp + 1) * cout_g],
                    patch[:, grp * cin_g:(grp + 1) * cin_g])
    return gw


def pieces(w: Tensor) -> int:
    """The leading axis of the weight gradient's partial sums in w.grad's schedule (1: none)."""
    rank = len(w.shape)
    return next((item.out.shape[0] for item in create_schedule([w.grad.lazydata])
                 if len(item.out.shape) > rank + 1 and item.out.shape[0] > 1), 1)


def weight_grad(xn, wn, gn, **conv):
    x, w = Tensor(xn), Tensor(wn, requires_grad=True)
    (x.conv2d(w, **conv) * Tensor(gn)).sum().backward()
    return w


def test_the_batch_is_summed_in_pieces_that_fit_the_l1():
    """8 images of 14 x 14, 64 channels in and out: 8 rows of an image's positions are 6 KB,
    so the pieces are the largest divisor of 8 whose rows fit the L1 (4 on a 32 KB L1),
    and the weight gradient is numpy's."""
    xn, wn, gn = rnd((8, 64, 14, 14)), rnd((64, 64, 3, 3), seed=1), rnd((8, 64, 14, 14), seed=2)
    w = weight_grad(xn, wn, gn, padding=1)
    image = 8 * 14 * 14 * 4
    chunk = max((b for b in range(1, 8) if 8 % b == 0 and b * image <= TARGET.cached_bytes),
                default=8)
    if TARGET.lanes > 1:
        assert pieces(w) == 8 // chunk > 1
    np.testing.assert_allclose(w.grad.numpy(), weight_grad_ref(xn, gn, (3, 3), (1, 1), (1, 1),
                                                               ((1, 1), (1, 1)), 1),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,cout,stride", [((16, 32, 32, 32), 64, 2), ((8, 64, 28, 28), 128, 2)])
def test_a_strided_conv_sums_its_batch_in_pieces(shape, cout, stride):
    """A stride-2 conv's tile (channel lanes: 16 output channels x 3 taps) streams the
    output gradient of the whole batch for each input channel and tap row: it takes the
    pieces too (D148), 8 rows of an image's positions a piece's unit as at stride 1."""
    xn, wn = rnd(shape), rnd((cout, shape[1], 3, 3), seed=1)
    out_hw = shape[2] // stride
    gn = rnd((shape[0], cout, out_hw, out_hw), seed=2)
    w = weight_grad(xn, wn, gn, padding=1, stride=stride)
    image = 8 * out_hw * out_hw * 4
    chunk = max((b for b in range(1, shape[0]) if shape[0] % b == 0 and
                 b * image <= TARGET.cached_bytes), default=shape[0])
    if TARGET.lanes > 1:
        assert pieces(w) == shape[0] // chunk > 1
    np.testing.assert_allclose(w.grad.numpy(), weight_grad_ref(
        xn, gn, (3, 3), (stride, stride), (1, 1), ((1, 1), (1, 1)), 1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,cout,conv", [
    ((8, 64, 14, 14), 64, {"padding": 1, "stride": 2}),   # 8 images of 7 x 7 fit the L1
    ((8, 128, 8, 8), 128, {"padding": 1}),                # 8 images of 8 x 8 fit the L1
    ((8, 64, 7, 7), 64, {"padding": 1}),                  # rows of 7 take channel lanes
    ((2, 16, 60, 60), 16, {"padding": 1}),                # one image's rows are past the L1
    ((8, 8, 14, 14), 8, {"padding": 1}),                  # 8 channels: no 4 x 4 tile
    ((2, 64, 14, 14), 64, {"padding": 1}),                # under 2^24 multiply-adds
])
def test_the_whole_batch_where_pieces_do_not_pay(shape, cout, conv):
    """Where the rule does not hold the weight gradient is one reduce over the batch."""
    xn, wn = rnd(shape), rnd((cout, shape[1], 3, 3), seed=1)
    x, w = Tensor(xn), Tensor(wn, requires_grad=True)
    x.conv2d(w, **conv).sum().backward()
    assert pieces(w) == 1


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([2, 4, 6]), groups=st.sampled_from([1, 2]),
       stride=st.sampled_from([1, 2]), dil=st.sampled_from([1, 2]),
       pads=st.tuples(*[st.integers(0, 2)] * 4), width=st.integers(5, 11),
       dtype=st.sampled_from([np.float32, np.float64]), transposed=st.booleans(),
       data=st.data())
def test_pieces_match_numpy(monkeypatch, n, groups, stride, dil, pads, width, dtype,
                            transposed, data):
    """The pieces forced on random convs (any divisor of the batch) against numpy. (Conv
    runs untraced: a traced backward is kept by the shapes, not by the forced rule.)"""
    chunk = data.draw(st.sampled_from([b for b in range(1, n) if n % b == 0]))
    monkeypatch.setattr(conv_rules, "batch_chunk", lambda *args: chunk)
    cin, cout, height = 2 * groups, 3 * groups, 6
    xn = rnd((n, cin, width, height) if transposed else (n, cin, height, width), dtype)
    wn = rnd((cout, cin // groups, 3, 2), dtype, seed=1)
    x = Tensor(xn)
    if transposed:
        x, xn = x.transpose(2, 3), xn.transpose(0, 1, 3, 2)
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))  # (before, after) per dim
    hp, wp = height + pads[0] + pads[1], width + pads[2] + pads[3]
    oh, ow = (hp - dil * 2 - 1) // stride + 1, (wp - dil - 1) // stride + 1
    if oh < 1 or ow < 1:
        return
    gn = rnd((n, cout, oh, ow), dtype, seed=2)
    w = Tensor(wn, requires_grad=True)
    with Context(GRAPH_TRACE=0):
        (x.conv2d(w, stride=stride, dilation=dil, padding=padding, groups=groups) *
         Tensor(gn)).sum().backward()
    assert pieces(w) == n // chunk
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(
        w.grad.numpy(), weight_grad_ref(xn, gn, (3, 2), (stride,) * 2, (dil,) * 2,
                                        padding, groups),
        rtol=tol, atol=tol)
