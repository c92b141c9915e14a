"""Training BatchNorm as one autograd Function (lazyten/autograd/norm.py, BatchNorm): its
statistics are computed once and shared with the running-statistics update, and its
backward is the closed form. Compared with numpy forward and float64 finite differences
backward, at odd sizes, on inputs out of memory order and broadcast, with and without
the affine parameters; and the size of the gradients' graph."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyten import Tensor, nn
from lazyten.nn import functional as F
from tests.gradcheck import check_grad, spaced


def np_batchnorm(x, w, b, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    out = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    out = out * w.reshape(shape) if w is not None else out
    return out + b.reshape(shape) if b is not None else out


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 5), c=st.integers(1, 4), spatial=st.lists(st.integers(1, 5), max_size=2),
       affine=st.sampled_from(["both", "weight", "bias", "none"]),
       layout=st.sampled_from(["contiguous", "transposed", "broadcast"]), seed=st.integers(0, 99))
def test_batch_norm_train_matches_numpy_and_finite_differences(n, c, spatial, affine, layout, seed):
    """F.batch_norm(training=True) on an input in memory order, one whose first and last
    axes are swapped in memory, and one broadcast along the batch (expand: every sample
    the same, so only the positions vary)."""
    if layout == "broadcast" and max(spatial, default=1) < 2:
        spatial = [*spatial, 3]  # a batch of equal samples needs positions that differ
    rng = np.random.default_rng(seed)
    shape = (n, c, *spatial)
    x, w, b = spaced(rng, (1,) + shape[1:] if layout == "broadcast" else shape, (c,), (c,))
    w = w + 1.5
    weight = w if affine in ("both", "weight") else None
    bias = b if affine in ("both", "bias") else None

    def view(t: Tensor) -> Tensor:
        if layout == "transposed":
            return t.transpose(0, -1).contiguous().transpose(0, -1)
        return t.expand(*shape) if layout == "broadcast" else t

    def fn(t, *params):
        p = list(params)
        return F.batch_norm(view(t), None, None, p.pop(0) if weight is not None else None,
                            p.pop(0) if bias is not None else None, training=True)
    args = [x] + [a for a in (weight, bias) if a is not None]
    out = fn(*[Tensor(a) for a in args])
    np.testing.assert_allclose(out.numpy(), np_batchnorm(np.broadcast_to(x, shape), weight, bias),
                               rtol=1e-9, atol=1e-9)
    check_grad(fn, *args, seed=seed)


def test_batch_norm_module_gradients_match_finite_differences():
    """nn.BatchNorm2d in training mode: its weight and bias set from float64 arrays."""
    rng = np.random.default_rng(3)
    x, w, b = spaced(rng, (3, 4, 5, 3), (4,), (4,))

    def fn(t, weight, bias):
        bn = nn.BatchNorm2d(4)
        bn.weight, bn.bias = weight, bias
        bn.running_mean, bn.running_var = Tensor(np.zeros(4)), Tensor(np.ones(4))
        return bn(t)
    check_grad(fn, x, w + 1.0, b)


def test_batch_norm_gradients_are_the_closed_form():
    """The gradients' graph is the closed form's (sum(g) and sum(g * xhat) per channel,
    then one expression for the input's): 38 bases here, where the Tensor chain's
    derivative (through the mean and the variance) built 47, and a training step of one
    layer ran 3.6M instructions of Python against 2.2M (callgrind)."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 16, 6, 6)).astype(np.float32), requires_grad=True)
    bn = nn.BatchNorm2d(16)
    bn.train()
    g = Tensor(rng.standard_normal((8, 16, 6, 6)).astype(np.float32))
    (bn(x) * g).sum().backward()
    seen, stack = set(), [x.grad.lazydata, bn.weight.grad.lazydata, bn.bias.grad.lazydata]
    while stack:
        base = stack.pop().base
        if id(base) not in seen:
            seen.add(id(base))
            stack.extend(base.src)
    assert len(seen) <= 40, f"{len(seen)} bases"
    xn, gn = x.numpy().astype(np.float64), g.numpy().astype(np.float64)
    xhat = (xn - xn.mean((0, 2, 3), keepdims=True)) / np.sqrt(xn.var((0, 2, 3), keepdims=True) + 1e-5)
    ref = (gn - gn.mean((0, 2, 3), keepdims=True) -
           xhat * (gn * xhat).mean((0, 2, 3), keepdims=True)) / np.sqrt(
        xn.var((0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(bn.weight.grad.numpy(), (gn * xhat).sum((0, 2, 3)), rtol=1e-3, atol=1e-3)


def test_the_input_gradient_shares_the_parameters_sums():
    """A channel's weight is one number along the batch and positions, so the input
    gradient's sums are the parameters' gradients times it (sum(g w) = w sum(g)): the
    three gradients reduce g twice, not four times, and each reduce recomputes g's chain
    (here an elu's derivative) once (D151). Values against numpy."""
    from codegen.ops import ReduceOps
    from lazyten.schedule import create_schedule
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((32, 24)).astype(np.float32)
    gn = rng.standard_normal((32, 24)).astype(np.float32)
    wn = rng.uniform(0.5, 1.5, 24).astype(np.float32)

    def gradients():
        x = Tensor(xn, requires_grad=True)
        bn = nn.BatchNorm1d(24).train()  # (alone, a layer follows Tensor.training)
        bn.weight = Tensor(wn, requires_grad=True)
        (bn(x).elu() * Tensor(gn)).sum().backward()
        return [x.grad, bn.weight.grad, bn.bias.grad]
    items = create_schedule([t.lazydata for t in gradients()])
    reduces = [i for i in items if i.ast is not None and any(
        n.op is ReduceOps.SUM for n in i.ast.walk()) and i.out.shape in ((1, 24), (24,))]
    # (x's statistics: its mean and variance, two; the gradients': sum(g), sum(g xhat))
    assert len(reduces) <= 4, [i.out.shape for i in reduces]
    gx, gw, gb = (t.numpy().astype(np.float64) for t in gradients())
    x = xn.astype(np.float64)
    xhat = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    y = xhat * wn + 0
    g = gn * np.where(y > 0, 1.0, np.exp(np.minimum(y, 0)))  # through the elu
    np.testing.assert_allclose(gb, g.sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, (g * xhat).sum(0), rtol=1e-4, atol=1e-4)
    gxhat = g * wn
    want = (gxhat - gxhat.mean(0) - xhat * (gxhat * xhat).mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(gx, want, rtol=1e-3, atol=1e-4)
