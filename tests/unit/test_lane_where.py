"""A vector `where` whose condition is known in some lanes is emitted lane by lane, against
numpy.

At a row's edge a gate through padding is a vector whose last lanes are known false, and
every operand is 0 there (D71: a lane known off is not loaded). LLVM 22's x86 backend took
a division's 0 / 0 in those lanes to be 0 and turned the select into an AND with the first
lane's condition broadcast, so an avg_pool2d gradient was NaN at the columns no window
reached (test_grad.py's finite differences found it: k=2, stride 3 over 5 x 4). Checked
here at odd sizes, both float widths, through padding that keeps and that does not keep 0.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

from lazyten import Tensor


def avg_pool_grad(g, shape, k, stride):
    """d sum(avg_pool2d(x) * g) / dx by definition."""
    out = np.zeros(shape)
    for i in range(g.shape[2]):
        for j in range(g.shape[3]):
            out[:, :, i * stride:i * stride + k, j * stride:j * stride + k] += \
                g[:, :, i:i + 1, j:j + 1] / (k * k)
    return out


def test_the_gradient_of_a_pool_no_window_reaches_is_zero():
    for dtype in (np.float32, np.float64):
        x = Tensor(np.random.default_rng(0).standard_normal((2, 2, 5, 4)).astype(dtype),
                   requires_grad=True)
        out = x.avg_pool2d((2, 2), stride=3)
        g = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
        (out * Tensor(g)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), avg_pool_grad(g, x.shape, 2, 3), rtol=1e-6,
                                   atol=1e-7)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(0, 5), st.integers(0, 5),
       st.sampled_from([np.float32, np.float64]))
def test_avg_pool_gradients_match_numpy(k, stride, extra_h, extra_w, dtype):
    shape = (2, 3, k + extra_h, k + extra_w)
    x = Tensor(np.random.default_rng(k + 7 * stride).standard_normal(shape).astype(dtype),
               requires_grad=True)
    out = x.avg_pool2d((k, k), stride=stride)
    g = np.random.default_rng(extra_w).standard_normal(out.shape).astype(dtype)
    (out * Tensor(g)).sum().backward()
    got = x.grad.numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, avg_pool_grad(g.astype(np.float64), shape, k, stride),
                               rtol=1e-5, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 11), st.integers(1, 5), st.integers(0, 6), st.integers(0, 6),
       st.sampled_from(["div", "recip", "log", "exp"]), st.sampled_from([np.float32, np.float64]))
def test_padded_values_that_do_not_keep_zero_match_numpy(w, rows, left, right, op, dtype):
    """pad(f(x)) for an f with f(0) != 0 or undefined at 0: gated to 0 in the padding."""
    a = np.abs(np.random.default_rng(w * rows).standard_normal((rows, w))).astype(dtype) + 0.5
    fs = {"div": (lambda t: t / 3.0, lambda v: v / 3.0),
          "recip": (lambda t: t.reciprocal(), lambda v: 1 / v),
          "log": (lambda t: t.log(), np.log), "exp": (lambda t: t.exp(), np.exp)}
    f, fn = fs[op]
    got = f(Tensor(a)).pad(((0, 0), (left, right))).numpy()
    want = np.pad(fn(a.astype(np.float64)), ((0, 0), (left, right)))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
