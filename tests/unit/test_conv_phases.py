"""The input gradient of a strided convolution, phase by phase (D66 addendum).

Each phase of the input (position mod stride, per axis) takes only its own taps, so the
gradient is stride^nd small convolutions over the output gradient as it is, not one over
the output gradient dilated with zeros. Checked against a numpy scatter of every tap in
float64 at odd sizes (1, 2 and 3 spatial axes, strides 2-4 per axis, kernels 1-5,
asymmetric padding, groups, non-contiguous inputs), against finite differences, and
for the work it does: no more multiply-adds than the forward.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyten import Tensor
from lazyten.nn import functional as F
from lazyten.realize import Stats
from tests.gradcheck import check_grad, spaced

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def scatter_input_grad(g, w, x_shape, stride, padding, groups):
    """d sum(conv(x, w) * g) / dx by definition: every output position's gradient times
    every tap, added into the padded input position the tap read, then cropped."""
    sp = x_shape[2:]
    padded = np.zeros(x_shape[:2] + tuple(s + b + a for s, (b, a) in zip(sp, padding)))
    cout, cin_g = w.shape[:2]
    per = cout // groups
    for taps in itertools.product(*[range(k) for k in w.shape[2:]]):
        for out in itertools.product(*[range(o) for o in g.shape[2:]]):
            at = tuple(o * s + t for o, s, t in zip(out, stride, taps))
            for grp in range(groups):
                wt = w[(slice(grp * per, (grp + 1) * per), slice(None)) + taps]
                gt = g[(slice(None), slice(grp * per, (grp + 1) * per)) + out]
                padded[(slice(None), slice(grp * cin_g, (grp + 1) * cin_g)) + at] += gt @ wt
    return padded[(slice(None), slice(None)) + tuple(slice(b, b + s) for s, (b, _) in
                                                     zip(sp, padding))]


@st.composite
def strided_convs(draw):
    nd = draw(st.sampled_from([1, 2, 2, 3]))
    kernel = draw(st.integers(1, 5 if nd < 3 else 3))
    stride = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    if all(s == 1 for s in stride):
        stride = (2,) + stride[1:]
    padding = tuple(draw(st.integers(0, kernel)) for _ in range(nd))
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    size = draw(st.integers(max(1, kernel - 2 * min(padding)), 9 if nd < 3 else 6))
    sizes = tuple(max(size - i, kernel) for i in range(nd))
    return (draw(st.integers(1, 2)), cin, cout, sizes, kernel, stride, padding, groups,
            draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(strided_convs())
def test_strided_input_gradient_matches_the_scatter(case):
    n, cin, cout, sizes, kernel, stride, padding, groups, transposed = case
    nd = len(sizes)
    rng = np.random.default_rng(sum(sizes) + kernel)
    xn = rng.standard_normal((n, cin) + sizes)
    wn = rng.standard_normal((cout, cin // groups) + (kernel,) * nd)
    x = Tensor(xn, requires_grad=True)
    xin = x
    if transposed and nd >= 2:  # a non-contiguous input: the transpose of a transpose
        x = Tensor(np.ascontiguousarray(np.swapaxes(xn, -1, -2)), requires_grad=True)
        xin = x.transpose(-1, -2)
    out = CONV[nd](xin, Tensor(wn), stride=stride, padding=padding, groups=groups)
    gn = rng.standard_normal(out.shape)
    (out * Tensor(gn)).sum().backward()
    want = scatter_input_grad(gn, wn, xn.shape, stride, [(p, p) for p in padding], groups)
    got = x.grad.numpy()
    if transposed and nd >= 2:
        got = np.swapaxes(got, -1, -2)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("stride,padding", [(2, 1), (3, (2, 0)), ((2, 3), 0)])
def test_strided_gradients_match_finite_differences(stride, padding):
    rng = np.random.default_rng(5)
    x, w, b = spaced(rng, (2, 4, 7, 8), (6, 2, 3, 3), (6,))
    check_grad(lambda a, c, d: a.conv2d(c, d, stride=stride, padding=padding, groups=2),
               x, w, b)


def test_the_strided_input_gradient_adds_no_zeros():
    """At stride 2 the dilated output gradient is 3/4 zeros: convolving it did 4x the
    forward's multiply-adds. The phases do at most the forward's."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((2, 8, 16, 16)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    before = Stats.flops
    out = x.conv2d(w, stride=2, padding=1).realize()
    forward = Stats.flops - before
    out.sum().backward()
    before = Stats.flops
    x.grad.realize()
    assert Stats.flops - before <= 1.1 * forward, (Stats.flops - before, forward)


def test_the_phases_are_summed_once_for_every_reader():
    """The phase convs are added in one kernel of their own (D66): a batch norm after a
    stride-2 conv reads the input gradient in six kernels, and inlined into each of them
    the sum was four masked gathers per element over axes that no longer merged (a CNN's
    BatchNorm backward at 32 x 32 x 32 x 32: 4-7 ms a kernel, 0.2 ms on memory)."""
    from codegen.helpers import prod
    from codegen.ops import BufferOps
    from lazyten.schedule import create_schedule
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((2, 4, 8, 8)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((6, 4, 3, 3)).astype(np.float32))
    x.conv2d(w, stride=2, padding=1).sum().backward()
    g = x.grad
    readers = [g.sum((0, 2, 3)), (g * x).sum((0, 2, 3)), (g - g.mean()).abs().max()]
    items = [i for i in create_schedule([t.lazydata for t in readers]) if i.ast is not None]
    # (the phase convs read the output gradient padded: masked too, but not reductions to
    # a channel or a number as the readers are)
    masked = [i for i in items if prod(i.out.shape) <= 4 and any(
        n.op is BufferOps.LOAD and any(v.mask is not None for v in n.arg.st.views)
        for n in i.ast.walk())]
    assert not masked, [i.out.shape for i in masked]
    want = scatter_input_grad(np.ones((2, 6, 4, 4)), w.numpy().astype(np.float64),
                              (2, 4, 8, 8), (2, 2), ((1, 1), (1, 1)), 1)
    np.testing.assert_allclose(readers[0].numpy(), want.sum((0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(readers[1].numpy(), (want * x.numpy()).sum((0, 2, 3)),
                               rtol=1e-4, atol=1e-4)
