"""A convolution's bias inside its Function (lazyten/autograd/conv.py `_biased`, D152).

The bias's gradient is the output gradient summed over the batch and positions. Added
outside the Function, that sum read the output gradient as the graph built it and
recomputed its chain inside the reduce (a gated conv: the sigmoid's and tanh's
derivatives at every position), where the Function's own gradients read it materialised.
Checked against finite differences (conv and transposed conv, strides, groups, 1 and 2
spatial axes), for the kernels (no reduce recomputes the chain: fails before), and that a
bias of another dtype still adds as before.
"""
import numpy as np
import pytest

from codegen.ops import ReduceOps, UnaryOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.gradcheck import check_grad, spaced


@pytest.mark.parametrize("transposed,stride,groups,nd", [
    (False, 1, 1, 2), (False, 2, 2, 2), (False, 1, 1, 1), (True, 2, 1, 2), (True, 2, 2, 1)])
def test_conv_bias_gradients_match_finite_differences(transposed, stride, groups, nd):
    rng = np.random.default_rng(nd * 10 + stride)
    sp = (5, 4)[:nd]
    if transposed:
        x, w, b = spaced(rng, (2, 4) + sp, (4, 6 // groups) + (2,) * nd, (6,))
        conv = lambda a, c, d: a.conv_transpose2d(c, d, stride=stride, groups=groups)  # noqa: E731
    else:
        x, w, b = spaced(rng, (2, 4) + sp, (6, 4 // groups) + (3,) * nd, (6,))
        conv = lambda a, c, d: a.conv2d(c, d, stride=stride, padding=1, groups=groups)  # noqa: E731
    check_grad(lambda a, c, d: conv(a, c, d).tanh() * conv(a, c, d).sigmoid(), x, w, b)


@pytest.mark.parametrize("transposed", [False, True])
def test_the_bias_gradient_reads_the_materialised_output_gradient(transposed):
    """A gated layer, tanh(conv(x)) * sigmoid(conv(x)): no reduce among the gradients'
    kernels recomputes the chain's exps (the bias's sum did, one exp per position)."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 8, 16)).astype(np.float32), requires_grad=True)
    shape = (8, 8, 2) if transposed else (8, 8, 3)
    w = Tensor(rng.standard_normal(shape).astype(np.float32) * 0.3, requires_grad=True)
    b = Tensor(rng.standard_normal(8).astype(np.float32), requires_grad=True)
    out = x.conv_transpose2d(w, b, stride=2) if transposed else x.conv2d(w, b, padding=1)
    (out.tanh() * out.sigmoid()).sum().backward()
    assert x.grad is not None and w.grad is not None and b.grad is not None
    items = [i for i in create_schedule([x.grad.lazydata, w.grad.lazydata, b.grad.lazydata])
             if i.ast is not None]
    ops = [{n.op for n in i.ast.walk()} for i in items]
    assert not [o for o in ops if ReduceOps.SUM in o and UnaryOps.EXP in o]
    g = out.numpy()
    s = 1 / (1 + np.exp(-g.astype(np.float64)))
    t = np.tanh(g.astype(np.float64))
    want = ((1 - t * t) * s + t * s * (1 - s)).sum((0, 2))
    np.testing.assert_allclose(b.grad.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_bias_of_another_dtype_adds_after_the_conv():
    """A float64 bias on a float32 conv: added outside the Function, promoted as `+` does."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b))
    plain = Tensor(x).conv2d(Tensor(w)).numpy().astype(np.float64)
    assert out.dtype == Tensor(b).dtype
    # (the conv with the add and the conv alone are two kernels, which may sum the 27
    # products of a position in different orders: a float32 rounding or two apart)
    np.testing.assert_allclose(out.numpy(), plain + b.reshape(1, 4, 1, 1), rtol=1e-5, atol=1e-6)
