"""A conv whose output rows fill half a register or less runs over its input unfolded along
the row's taps (D126), against numpy.

The forward copies the padded input as (batch, channels x kw, *rows, output row), tap j of
channel c at channel c x kw + j, and convolves it with one tap a row: its rows are the
output's, so the output's rows and positions make one axis of whole vectors. The rule is
checked where it fires (rows of 8 and 4, a weight past the L2) and where it does not;
the unfolding itself, forced on every conv with a row of taps, is compared with numpy at
random shapes, dilations, paddings, groups, strides across rows and dimensions.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyten.autograd.conv_rules as conv_rules
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from tests.unit.test_conv_channel_lanes import conv_ref
from tests.unit.test_conv_speed_rules import conv_grads, lowered, rnd

TARGET = get_runtime("CPU").renderer.target
HOST16 = TARGET.lanes == 16


def past_l2(cout: int) -> int:
    """Input channels that make a cout x cin x 3 x 3 float32 weight just larger than the L2."""
    return TARGET.l2_bytes // (cout * 9 * 4) + 1


@pytest.mark.parametrize("width,fires,cin", [(8, True, 0), (4, True, 0), (7, False, 0),
                                             (16, False, 0), (8, True, 64), (4, True, 64)])
def test_narrow_rows_are_unfolded(width, fires, cin):
    """Rows of 8 (half a register) and 4, 128 output channels, a weight past the L2 (cin 0)
    or within it: the input is unfolded and the conv's lanes run along its merged
    positions; rows of 7 (49 positions, no whole vectors) keep D66's channel lanes, rows
    of 16 their own lanes. The values match numpy."""
    cin = cin or past_l2(128)
    # 2^24 multiply-adds or more, the rule's least (with a weight just past a 1 MB L2 two
    # images of 4 x 4 are half of it: the batch follows the machine's L2)
    batch = max(2, -(-(1 << 24) // (128 * cin * 9 * width * width)))
    xn, wn = rnd((batch, cin, width, width)), rnd((128, cin, 3, 3), seed=1) / 30
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    if HOST16:
        schedule = create_schedule([out.lazydata])
        assert (len(schedule) == 2 and schedule[0].out.shape[:3] == (batch, cin, 3)) == fires, \
            [item.out.shape for item in schedule]
        if fires:
            k = lowered(out)
            assert k.lanes == 16 and k.strides(k.out_key, len(k.full_shape) - 1) == 1, k.applied
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn), rtol=1e-4, atol=1e-4)


def test_unfolded_conv_gradients():
    """Input and weight gradients of a conv the rule unfolds (the input gradient, a conv of
    the output gradient with the transposed weight, is unfolded too), against numpy's
    adjoint."""
    cin = past_l2(128)
    xn, wn = rnd((2, cin, 8, 8)), rnd((128, cin, 3, 3), seed=1) / 30
    gn = rnd((2, 128, 8, 8), seed=2)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    out = x.conv2d(w, padding=1)
    if HOST16:
        assert create_schedule([out.lazydata])[0].out.shape[:3] == (2, cin, 3)
    (out * Tensor(gn)).sum().backward()
    gx, gw = conv_grads(xn.astype(np.float64), wn.astype(np.float64), gn.astype(np.float64))
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-3, atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(nd=st.sampled_from([1, 2, 3]), kw=st.sampled_from([2, 3, 5]), dil=st.sampled_from([1, 2]),
       pad=st.sampled_from([0, 1, 2]), groups=st.sampled_from([1, 2]),
       stride=st.sampled_from([1, 2]), width=st.integers(5, 11), n=st.sampled_from([1, 3]))
def test_unfolding_matches_numpy(monkeypatch, nd, kw, dil, pad, groups, stride, width, n):
    """`_row_taps_unfolded`, forced on every conv with a row of taps (the other axes strided
    by `stride`), against numpy: random dimensions (1-3), row kernels of 2, 3 and 5 taps,
    dilations, paddings, groups."""
    monkeypatch.setattr(conv_rules, "unfolds_row_taps",
                        lambda device, shape, weight, spec: weight.shape[-1] >= 2 and
                        spec.stride[-1] == 1)
    spatial = (4,) * (nd - 1) + (width,)
    kernel = (3,) * (nd - 1) + (kw,)
    if width + 2 * pad < dil * (kw - 1) + 1:
        return
    cin, cout = 2 * groups, 3 * groups
    xn, wn = rnd((n, cin) + spatial), rnd((cout, cin // groups) + kernel, seed=1)
    strides = (stride,) * (nd - 1) + (1,)
    dilation = (1,) * (nd - 1) + (dil,)
    padding = (1,) * (nd - 1) + (pad,)
    out = Tensor(xn).conv2d(Tensor(wn), stride=strides, dilation=dilation, padding=padding,
                            groups=groups)
    np.testing.assert_allclose(out.numpy(), _ref(xn, wn, strides, dilation, padding, groups),
                               rtol=1e-4, atol=1e-4)


def _ref(x, w, stride, dilation, padding, groups):
    """numpy N-d conv, tap by tap, in float64."""
    nd = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    out_sp = [(xp.shape[2 + i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
              for i in range(nd)]
    out = np.zeros((x.shape[0], w.shape[0]) + tuple(out_sp))
    for tap in np.ndindex(*w.shape[2:]):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                       for t, d, o, s in zip(tap, dilation, out_sp, stride))
        patch = xp[(slice(None), slice(None)) + window]
        for g in range(groups):
            taps = w[(slice(g * og, (g + 1) * og), slice(None)) + tap].astype(np.float64)
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...",
                                                     patch[:, g * cg:(g + 1) * cg], taps)
    return out


def test_integer_conv_is_unfolded_too():
    """An integer conv (Tensor ops, no Conv node: `forward_tensors`) takes the same rule and
    builds the same unfolded graph; its values are exact."""
    cin = past_l2(128)
    rng = np.random.default_rng(4)
    xn = rng.integers(-8, 8, (2, cin, 8, 8)).astype(np.int32)
    wn = rng.integers(-8, 8, (128, cin, 3, 3)).astype(np.int32)
    out = Tensor(xn).conv2d(Tensor(wn), padding=1)
    if HOST16:
        assert create_schedule([out.lazydata])[0].out.shape[:3] == (2, cin, 3)
    np.testing.assert_array_equal(out.numpy(), _ref(xn, wn, (1, 1), (1, 1), (1, 1), 1))
