"""A strided transposed convolution, phase by phase (lazyten/autograd/conv.py
`ConvTranspose`, D150).

conv_transpose(x, w) is the input gradient of the convolution it transposes, so it runs
as stride^nd small convolutions over x as it is, where convolving x dilated with zeros
did stride^nd times the work. Checked against a numpy scatter of every tap in float64 at
odd sizes (1-3 spatial axes, strides 2-3, kernels 1-4, padding, output padding, groups,
non-contiguous inputs, bias), its gradients against finite differences, and for the work
it does: no more multiply-adds than the taps that land.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lazyten import Tensor
from lazyten.nn import functional as F
from lazyten.realize import Stats
from tests.gradcheck import check_grad, spaced
from tests.unit.test_conv_phases import scatter_input_grad

TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def np_conv_transpose(x, w, stride, padding, output_padding, groups):
    """numpy: the scatter of every input position's taps (w laid out (in, out / groups,
    *kernel), PyTorch's), into an output of PyTorch's size."""
    sp = [(i - 1) * s - 2 * p + k + op for i, s, p, k, op in
          zip(x.shape[2:], stride, padding, w.shape[2:], output_padding)]
    return scatter_input_grad(x, w, (x.shape[0], w.shape[1] * groups) + tuple(sp), stride,
                              [(p, p) for p in padding], groups)


@st.composite
def transposed_convs(draw):
    nd = draw(st.sampled_from([1, 2, 2, 3]))
    kernel = draw(st.integers(1, 4 if nd < 3 else 3))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    if all(s == 1 for s in stride):
        stride = (2,) + stride[1:]
    padding = tuple(draw(st.integers(0, max(0, kernel - 1))) for _ in range(nd))
    output_padding = tuple(draw(st.integers(0, s - 1)) for s in stride)
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, 6 if nd < 3 else 4)) for _ in range(nd))
    return (draw(st.integers(1, 2)), cin, cout, sizes, kernel, stride, padding,
            output_padding, groups, draw(st.booleans()), draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(transposed_convs())
def test_strided_transposed_conv_matches_the_scatter(case):
    n, cin, cout, sizes, kernel, stride, padding, output_padding, groups, transposed, bias = case
    nd = len(sizes)
    out_sp = [(i - 1) * s - 2 * p + kernel + op for i, s, p, op in
              zip(sizes, stride, padding, output_padding)]
    assume(min(out_sp) > 0)  # (PyTorch rejects the rest too: test_bad_input.py)
    rng = np.random.default_rng(sum(sizes) * 10 + kernel)
    xn = rng.standard_normal((n, cin) + sizes)
    wn = rng.standard_normal((cin, cout // groups) + (kernel,) * nd)
    bn = rng.standard_normal(cout)
    x = Tensor(xn)
    if transposed and nd >= 2:  # a non-contiguous input: the transpose of a transpose
        x = Tensor(np.ascontiguousarray(np.swapaxes(xn, -1, -2))).transpose(-1, -2)
    out = TRANSPOSED[nd](x, Tensor(wn), Tensor(bn) if bias else None, stride=stride,
                         padding=padding, output_padding=output_padding, groups=groups)
    want = np_conv_transpose(xn, wn, stride, padding, output_padding, groups)
    if bias:
        want = want + bn.reshape((1, cout) + (1,) * nd)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("stride,padding,output_padding,groups", [
    (2, 0, 0, 1), (2, 1, 1, 2), (3, (2, 0), (1, 2), 1), ((2, 3), 1, 0, 2)])
def test_strided_transposed_conv_gradients_match_finite_differences(
        stride, padding, output_padding, groups):
    rng = np.random.default_rng(3)
    x, w, b = spaced(rng, (2, 4, 4, 5), (4, 6 // groups, 3, 2), (6,))
    check_grad(lambda a, c, d: a.conv_transpose2d(c, d, stride=stride, padding=padding,
                                                  output_padding=output_padding,
                                                  groups=groups), x, w, b)


def test_a_strided_transposed_conv_adds_no_zeros():
    """A 2x2 stride-2 upsampling convolves x dilated 4x with zeros, 3/4 of them: each
    output takes one tap of each input channel, and the phases do those multiply-adds
    and no more (the forward and both gradients)."""
    rng = np.random.default_rng(0)
    n, cin, cout, size = 2, 16, 8, 8
    x = Tensor(rng.standard_normal((n, cin, size, size)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((cin, cout, 2, 2)).astype(np.float32), requires_grad=True)
    taps = 2 * n * cin * cout * size * size * 4  # every input times every tap, once
    before = Stats.flops
    out = x.conv_transpose2d(w, stride=2).realize()
    assert Stats.flops - before <= 1.1 * taps, (Stats.flops - before, taps)
    out.sum().backward()
    for grad in (x.grad, w.grad):
        assert grad is not None
        before = Stats.flops
        grad.realize()
        assert Stats.flops - before <= 1.1 * taps, (Stats.flops - before, taps)
