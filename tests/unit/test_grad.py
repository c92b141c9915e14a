"""Gradients of every differentiable op against central finite differences, in float64,
over hypothesis-drawn shapes; and the autograd mechanics (accumulation, detach, no_grad,
explicit gradients).

The oracle (tests/gradcheck.py) reduces the op's output with a random weight and compares
directional derivatives with central differences. Inputs are spaced apart (no ties for
max, no values near the kinks of relu/abs/clip) so the function is smooth around x.
Shapes stay small: each new shape compiles new kernels. Edge cases (max over recomputed
values, pow at 0 and negative bases, std at zero variance, negative conv padding, what
carries no gradient) are in test_grad_semantics.py.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten
from lazyten import Tensor
from gradcheck import check_grad, spaced

SEEDS = st.integers(0, 2 ** 16)


@st.composite
def shapes(draw, min_dims=1, max_dims=3, max_size=4):
    ndim = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.integers(1, max_size)) for _ in range(ndim))


@st.composite
def broadcast_shapes(draw):
    """Two shapes that broadcast: some dims of each set to 1, leading dims dropped."""
    out = draw(shapes(1, 3, 3))

    def operand():
        s = tuple(1 if draw(st.booleans()) else d for d in out)
        return s[draw(st.integers(0, len(s) - 1)):]
    return operand(), operand()


@st.composite
def axes_of(draw, shape):
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    return tuple(sorted(axes)) if len(axes) > 1 else axes[0]


# ---- elementwise ----
BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "pow": lambda x, y: (x.abs() + 0.5) ** y,
    "maximum": lambda x, y: x.maximum(y),
    "minimum": lambda x, y: x.minimum(y),
    "where": lambda x, y: (x > y).where(x * 2, y),
    "lerp": lambda x, y: x.lerp(y, 0.3),
}


@pytest.mark.parametrize("name", BINARY)
@settings(max_examples=6)
@given(pair=broadcast_shapes(), seed=SEEDS)
def test_binary_with_broadcasting(name, pair, seed):
    x, y = spaced(np.random.default_rng(seed), *pair)
    check_grad(BINARY[name], x, y, seed=seed)


UNARY = {
    "neg": lambda x: -x, "exp": lambda x: x.exp(), "log": lambda x: (x.abs() + 0.1).log(),
    "log2": lambda x: (x.abs() + 0.1).log2(), "exp2": lambda x: x.exp2(),
    "sqrt": lambda x: (x.abs() + 0.1).sqrt(), "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(),
    "reciprocal": lambda x: x.reciprocal(), "sin": lambda x: x.sin(), "cos": lambda x: x.cos(),
    "tan": lambda x: (x * 0.5).tan(), "square": lambda x: x.square(), "abs": lambda x: x.abs(),
    "pow3": lambda x: x ** 3, "pow_half": lambda x: (x.abs() + 0.1) ** 0.5,
    "pow_float": lambda x: (x.abs() + 0.1) ** 1.7, "rpow": lambda x: 2 ** x,
    "rsub": lambda x: 1 - x, "rdiv": lambda x: 2 / x, "relu": lambda x: x.relu(),
    "sigmoid": lambda x: x.sigmoid(), "tanh": lambda x: x.tanh(), "gelu": lambda x: x.gelu(),
    "quick_gelu": lambda x: x.quick_gelu(), "elu": lambda x: x.elu(),
    "celu": lambda x: x.celu(0.5), "leakyrelu": lambda x: x.leakyrelu(0.1),
    "softplus": lambda x: x.softplus(2.0), "softsign": lambda x: x.softsign(),
    "mish": lambda x: x.mish(), "swish": lambda x: x.swish(), "relu6": lambda x: (x * 4).relu6(),
    "hardsigmoid": lambda x: (x * 4).hardsigmoid(), "hardswish": lambda x: (x * 4).hardswish(),
    "hardtanh": lambda x: x.hardtanh(-0.5, 1), "clip": lambda x: x.clip(-1, 0.5),
    "sign_times": lambda x: x.sign() * x, "cast_roundtrip": lambda x: x.float().double() * 1,
    "contiguous": lambda x: x.T.contiguous() if x.ndim == 2 else x.contiguous(),
}


@pytest.mark.parametrize("name", UNARY)
@settings(max_examples=3)
@given(shape=st.sampled_from([(5,), (2, 3)]), seed=SEEDS)
def test_unary(name, shape, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    if name == "cast_roundtrip":  # float32 in the middle: only check the gradient flows
        t = Tensor(x, requires_grad=True)
        UNARY[name](t).sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), np.ones(shape))
        return
    check_grad(UNARY[name], x, seed=seed)


def test_ties_and_kinks_follow_pytorch():
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]]), requires_grad=True)
    x.max(axis=1).sum().backward()  # amax: ties share the gradient
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])
    a, b = (Tensor(np.array(v), requires_grad=True) for v in ([1.0, 2.0, 0.0], [1.0, 1.0, 3.0]))
    a.maximum(b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1, 0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 0, 1])
    z = Tensor(np.array([0.0, -1.0, 2.0]), requires_grad=True)
    (z.relu() + z.abs()).sum().backward()  # both 0 at 0, as PyTorch
    np.testing.assert_array_equal(z.grad.numpy(), [0, -1, 2])


@pytest.mark.parametrize("name,fn,expected", [
    ("softplus", lambda x: x.softplus(), 0.5),
    ("elu", lambda x: x.elu(), 1.0),
    ("bce_logits", lambda x: x.binary_crossentropy_logits(Tensor(np.zeros(1))), 0.5),
])
def test_smooth_functions_at_zero(name, fn, expected):
    x = Tensor(np.zeros(1), requires_grad=True)
    fn(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [expected])


def test_rounding_has_no_gradient():
    x = Tensor(np.array([0.4, 1.6, -2.5]), requires_grad=True)
    for f in (Tensor.floor, Tensor.ceil, Tensor.round, Tensor.trunc):
        assert not f(x).requires_grad
    (x.floor() * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, -3.0])


# ---- reductions ----
REDUCE = {
    "sum": lambda x, a, k: x.sum(a, keepdim=k),
    "mean": lambda x, a, k: x.mean(a, keepdim=k),
    "max": lambda x, a, k: x.max(axis=a, keepdim=k),
    "min": lambda x, a, k: x.min(axis=a, keepdim=k),
    "var": lambda x, a, k: x.var(a, keepdim=k),
    "var_biased": lambda x, a, k: x.var(a, keepdim=k, correction=0),
    "std": lambda x, a, k: x.std(a, keepdim=k),
    "logsumexp": lambda x, a, k: x.logsumexp(a, keepdim=k),
}


@pytest.mark.parametrize("name", REDUCE)
@settings(max_examples=6)
@given(data=st.data(), seed=SEEDS)
def test_reduce_over_axes(name, data, seed):
    shape = data.draw(shapes(1, 3, 4))
    axis = data.draw(st.one_of(st.none(), axes_of(shape)))
    keepdim = data.draw(st.booleans())
    if name in ("var", "std"):  # with one element reduced the (unbiased) variance is nan
        shape = tuple(max(2, s) for s in shape)
    (x,) = spaced(np.random.default_rng(seed), shape)
    check_grad(lambda t: REDUCE[name](t, axis, keepdim), x, seed=seed)


@settings(max_examples=6)
@given(data=st.data(), keepdim=st.booleans(), seed=SEEDS)
def test_prod(data, keepdim, seed):
    # few elements: prod's backward builds deep views that take seconds to schedule
    shape = data.draw(shapes(1, 2, 3))
    axis = data.draw(st.one_of(st.none(), axes_of(shape)))
    (x,) = spaced(np.random.default_rng(seed), shape, amp=4)
    check_grad(lambda t: t.prod(axis, keepdim=keepdim), x, seed=seed)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cumsum"])
@settings(max_examples=6)
@given(data=st.data(), seed=SEEDS)
def test_softmax_family(name, data, seed):
    shape = data.draw(shapes(1, 3, 4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (x,) = spaced(np.random.default_rng(seed), shape, amp=2)
    check_grad(lambda t: getattr(t, name)(axis), x, seed=seed)


# ---- movement ----
@settings(max_examples=8)
@given(shape=shapes(1, 4, 3), data=st.data(), seed=SEEDS)
def test_reshape_permute_expand(shape, data, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    order = data.draw(st.permutations(range(len(shape))))
    big = tuple(data.draw(st.integers(2, 3)) if s == 1 else s for s in shape)
    lead = data.draw(st.integers(1, 2))
    check_grad(lambda t: t.reshape(-1).reshape(shape[::-1]), x, seed=seed)
    check_grad(lambda t: t.permute(order) * 1.5, x, seed=seed)
    check_grad(lambda t: t.expand((lead,) + big), x, seed=seed)


@settings(max_examples=8)
@given(shape=shapes(1, 3, 4), data=st.data(), seed=SEEDS)
def test_pad_shrink_flip(shape, data, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    pads = [(data.draw(st.integers(-(s - 1) // 2 if s > 1 else 0, 2)),
             data.draw(st.integers(-(s // 2) if s > 1 else 0, 2))) for s in shape]
    value = data.draw(st.sampled_from([0.0, -1.5]))
    check_grad(lambda t: t.pad(pads, value=value), x, seed=seed)
    bounds = [tuple(sorted(data.draw(st.lists(st.integers(0, s), min_size=2, max_size=2))))
              for s in shape]
    bounds = [(b, e) if b < e else (0, s) for (b, e), s in zip(bounds, shape)]
    check_grad(lambda t: t.shrink(bounds).exp(), x, seed=seed)
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    check_grad(lambda t: t.flip(axes) * t, x, seed=seed)


@settings(max_examples=10)
@given(shape=shapes(1, 3, 6), data=st.data(), seed=SEEDS)
def test_slicing_with_steps(shape, data, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    index = []
    for s in shape:
        step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
        start = data.draw(st.one_of(st.none(), st.integers(-s, s - 1)))
        index.append(slice(start, None, step))
    index = tuple(index)
    if x[index].size == 0:
        index = tuple(slice(None, None, sl.step) for sl in index)
    check_grad(lambda t: t[index], x, seed=seed)
    check_grad(lambda t: t[0] if t.ndim > 1 else t[-1], x, seed=seed)
    check_grad(lambda t: t[None, ..., None], x, seed=seed)
    check_grad(lambda t: t[..., -1] * t[..., :1].sum(), x, seed=seed)


@settings(max_examples=8)
@given(shape=shapes(2, 3, 4), data=st.data(), seed=SEEDS)
def test_tensor_indexing_and_gather(shape, data, seed):
    rng = np.random.default_rng(seed)
    (x,) = spaced(rng, shape)
    rows = rng.integers(-shape[0], shape[0], size=data.draw(st.sampled_from([(3,), (2, 2)])))
    check_grad(lambda t: t[Tensor(rows)], x, seed=seed)  # repeats accumulate
    cols = rng.integers(0, shape[1], size=rows.shape)
    check_grad(lambda t: t[Tensor(rows), Tensor(cols)], x, seed=seed)
    check_grad(lambda t: t[:, Tensor(cols.reshape(-1))], x, seed=seed)
    dim = data.draw(st.integers(0, len(shape) - 1))
    idx_shape = tuple(data.draw(st.integers(1, s + (2 if d == dim else 0)))
                      for d, s in enumerate(shape))
    index = rng.integers(0, shape[dim], size=idx_shape)
    check_grad(lambda t: t.gather(dim, Tensor(index)), x, seed=seed)


@settings(max_examples=8)
@given(rows=st.integers(1, 3), width=st.integers(2, 6), data=st.data(), seed=SEEDS)
def test_gathered_values_read_nonlinearly(rows, width, data, seed):
    """A gathered value whose gradient reads it again (1 / x): the backward kernel sums
    the one-hot pick and reads it at every position of the gathered row (a row kernel);
    the pick made an indirect load there had the reduced shape inside the row's (a
    crash in the optimiser, found by the gradient fuzzer, seed 5149)."""
    rng = np.random.default_rng(seed)
    x = 1 + rng.random((rows, width))
    index = rng.integers(0, width, size=(data.draw(st.integers(1, rows)), 1)).astype(np.uint8)
    check_grad(lambda t: 1 / t.gather(1, Tensor(index)), x, seed=seed)
    check_grad(lambda t: t[:1] / t.gather(1, Tensor(index[:1])), x, seed=seed)


@settings(max_examples=8)
@given(shape=shapes(1, 3, 3), data=st.data(), seed=SEEDS)
def test_cat_stack_split_repeat(shape, data, seed):
    dim = data.draw(st.integers(0, len(shape) - 1))
    other = shape[:dim] + (data.draw(st.integers(1, 3)),) + shape[dim + 1:]
    x, y, z = spaced(np.random.default_rng(seed), shape, other, shape)
    check_grad(lambda a, b, c: a.cat(b, c, dim=dim), x, y, z, seed=seed)
    stack_dim = data.draw(st.integers(0, len(shape)))
    check_grad(lambda a, c: a.stack(c, a, dim=stack_dim), x, z, seed=seed)
    check_grad(lambda b: b.split(1, dim)[-1] * b.chunk(2, dim)[0].sum(), y, seed=seed)
    reps = tuple(data.draw(st.integers(1, 2)) for _ in range(len(shape) + 1))
    check_grad(lambda a: a.repeat(reps), x, seed=seed)


@settings(max_examples=6)
@given(shape=shapes(2, 3, 4), diagonal=st.integers(-2, 2), seed=SEEDS)
def test_triangles_squeeze_transpose(shape, diagonal, seed):
    (x,) = spaced(np.random.default_rng(seed), shape)
    check_grad(lambda t: t.tril(diagonal) + t.triu(diagonal + 1) * 2, x, seed=seed)
    check_grad(lambda t: t.transpose(0, -1).unsqueeze(1).squeeze(1).flatten(), x, seed=seed)


# ---- matmul, convolution, pooling ----
@settings(max_examples=10)
@given(data=st.data(), seed=SEEDS)
def test_matmul(data, seed):
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(st.sampled_from([(), (2,), (2, 1), (1, 3)]))
    batch_w = data.draw(st.sampled_from([(), batch[-1:], batch]))
    kind = data.draw(st.sampled_from(["mm", "vec@mat", "mat@vec", "dot"]))
    xs = {"mm": batch + (n, k), "vec@mat": (k,), "mat@vec": batch + (n, k), "dot": (k,)}[kind]
    ws = {"mm": batch_w + (k, m), "vec@mat": batch_w + (k, m), "mat@vec": (k,), "dot": (k,)}[kind]
    x, w = spaced(np.random.default_rng(seed), xs, ws)
    check_grad(lambda a, b: a @ b, x, w, seed=seed)


@settings(max_examples=10)
@given(data=st.data(), seed=SEEDS)
def test_conv2d(data, seed):
    draw = data.draw
    groups, cin_g, cout_g = (draw(st.integers(1, 2)) for _ in range(3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, dilation = draw(st.sampled_from([1, 2, (1, 2)])), draw(st.sampled_from([1, 2, (2, 1)]))
    padding = draw(st.sampled_from([0, 1, (1, 0)]))
    d = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    h = draw(st.integers(d[0] * (kh - 1) + 1, d[0] * (kh - 1) + 4))
    w = draw(st.integers(d[1] * (kw - 1) + 1, d[1] * (kw - 1) + 4))
    bs = draw(st.integers(1, 2))
    x, weight, bias = spaced(np.random.default_rng(seed), (bs, groups * cin_g, h, w),
                             (groups * cout_g, cin_g, kh, kw), (groups * cout_g,))
    check_grad(lambda a, b, c: a.conv2d(b, c, groups=groups, stride=stride, dilation=dilation,
                                        padding=padding), x, weight, bias, seed=seed)


@settings(max_examples=5)
@given(data=st.data(), seed=SEEDS)
def test_conv1d(data, seed):
    k, stride = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    padding = data.draw(st.integers(0, 1))
    length = data.draw(st.integers(k, k + 4))
    x, w = spaced(np.random.default_rng(seed), (2, 2, length), (3, 2, k))
    check_grad(lambda a, b: a.conv1d(b, stride=stride, padding=padding), x, w, seed=seed)


@settings(max_examples=10)
@given(data=st.data(), seed=SEEDS)
def test_conv_transpose2d(data, seed):
    draw = data.draw
    groups, cin_g, cout_g = (draw(st.integers(1, 2)) for _ in range(3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, dilation = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    padding = draw(st.integers(0, min(kh, kw) - 1))
    output_padding = draw(st.integers(0, max(stride, dilation) - 1))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    if (min(h, w) - 1) * stride - 2 * padding + dilation * (min(kh, kw) - 1) + 1 <= 0:
        padding = 0
    x, weight, bias = spaced(np.random.default_rng(seed), (1, groups * cin_g, h, w),
                             (groups * cin_g, cout_g, kh, kw), (groups * cout_g,))
    check_grad(lambda a, b, c: a.conv_transpose2d(b, c, groups=groups, stride=stride,
                                                  dilation=dilation, padding=padding,
                                                  output_padding=output_padding),
               x, weight, bias, seed=seed)


@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
@settings(max_examples=6)
@given(data=st.data(), seed=SEEDS)
def test_pooling(pool, data, seed):
    draw = data.draw
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.one_of(st.none(), st.integers(1, 3)))
    dilation = draw(st.integers(1, 2))
    padding = draw(st.integers(0, min(k) // 2))
    h = draw(st.integers(dilation * (k[0] - 1) + 1, dilation * (k[0] - 1) + 4))
    w = draw(st.integers(dilation * (k[1] - 1) + 1, dilation * (k[1] - 1) + 4))
    (x,) = spaced(np.random.default_rng(seed), (2, 2, h, w))
    check_grad(lambda t: getattr(t, pool)(k, stride=stride, dilation=dilation, padding=padding),
               x, seed=seed)


# ---- losses and normalisation ----
@settings(max_examples=6)
@given(n=st.integers(1, 4), classes=st.integers(2, 5), smoothing=st.sampled_from([0.0, 0.2]),
       reduction=st.sampled_from(["mean", "sum", "none"]), seed=SEEDS)
def test_classification_losses(n, classes, smoothing, reduction, seed):
    rng = np.random.default_rng(seed)
    (logits,) = spaced(rng, (n, classes), amp=3)
    labels = rng.integers(0, classes, n)
    probs = rng.dirichlet(np.ones(classes), n)
    check_grad(lambda x, y: x.cross_entropy(y, label_smoothing=smoothing, reduction=reduction),
               logits, labels, seed=seed)
    check_grad(lambda x, y: x.sparse_categorical_crossentropy(y, smoothing, reduction),
               logits, labels, seed=seed)
    check_grad(lambda x, p: x.cross_entropy(p, label_smoothing=smoothing, reduction=reduction),
               logits, probs, seed=seed, wrt=[0, 1])


@settings(max_examples=6)
@given(shape=shapes(1, 2, 4), reduction=st.sampled_from(["mean", "sum", "none"]), seed=SEEDS)
def test_regression_and_binary_losses(shape, reduction, seed):
    rng = np.random.default_rng(seed)
    x, target = spaced(rng, shape, shape, amp=3)
    probs = 1 / (1 + np.exp(-x))
    labels = rng.random(shape)
    check_grad(lambda a, b: a.mse(b, reduction=reduction), x, target, seed=seed)
    check_grad(lambda a, b: a.binary_crossentropy(b, reduction=reduction), probs, labels,
               seed=seed)
    check_grad(lambda a, b: a.binary_crossentropy_logits(b, reduction=reduction), x, labels,
               seed=seed)


@settings(max_examples=6)
@given(shape=shapes(2, 4, 3), seed=SEEDS)
def test_normalisation(shape, seed):
    rng = np.random.default_rng(seed)
    x, weight, bias, mean = spaced(rng, shape, shape[1:2], shape[1:2], shape[1:2], amp=2)
    invstd = rng.uniform(0.5, 2.0, shape[1:2])
    check_grad(lambda t: t.layernorm(axis=-1) if shape[-1] > 1 else t.layernorm(axis=0), x,
               seed=seed)
    check_grad(lambda t, w, b, m, s: t.batchnorm(w, b, m, s), x, weight, bias, mean, invstd,
               seed=seed)


def test_dropout_gradient_is_the_mask(monkeypatch):
    monkeypatch.setattr(Tensor, "training", True)
    x = Tensor(np.ones((8, 8)), requires_grad=True)
    out = x.dropout(0.5)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), out.numpy())


def test_embedding_gradient():
    from lazyten import nn
    emb = nn.Embedding(4, 3)
    emb.weight.replace(Tensor(np.random.default_rng(0).standard_normal((4, 3)),
                              requires_grad=True))
    emb.weight.requires_grad = True
    idx = np.array([[3, 0, 3], [1, 1, 2]])
    check_grad(lambda w, i: i.one_hot(4).cast(w.dtype) @ w, emb.weight.numpy(), idx)


# ---- autograd mechanics ----
def test_gradients_accumulate_over_backward_calls():
    x = Tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3)
    x.grad = None
    (x.exp()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.numpy()))


def test_shared_subexpression_gets_both_paths():
    x = Tensor(np.array([0.5, 2.0]), requires_grad=True)
    y = x * x
    (y * y + y).sum().backward()  # d/dx (x^4 + x^2)
    np.testing.assert_allclose(x.grad.numpy(), 4 * x.numpy() ** 3 + 2 * x.numpy())


def test_second_backward_through_a_freed_graph_is_not_silent():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 2
    y.sum().backward()
    try:
        (y * 3).sum().backward()
    except RuntimeError:
        return  # PyTorch's answer: the graph was freed
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 8.0])  # or keep the graph and be right


def test_detach_stops_gradient():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d._ctx is None
    (x * d).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])


def test_no_grad_records_nothing():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with lazyten.no_grad():
        y = x * 2 + 1
        assert y._ctx is None and not y.requires_grad
        with pytest.raises(RuntimeError, match="does not require grad"):
            y.sum().backward()
    assert not Tensor.no_grad
    z = x * 2
    assert z.requires_grad and z._ctx is not None


def test_inputs_without_requires_grad_get_no_grad():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    c = Tensor(np.array([1.0, 4.0]))
    (x * c + (c > 2).where(x, 0)).sum().backward()
    assert c.grad is None
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 5.0])


def test_backward_with_explicit_gradient():
    x = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    y = x * x
    seed = np.array([[1.0, 0.5], [-1.0, 2.0]])
    y.backward(Tensor(seed))
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() * seed)


def test_explicit_gradient_of_another_dtype():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    try:
        (x * x).backward(Tensor(np.array([1.0, 3.0], np.float32)))
    except (TypeError, ValueError):
        return  # a clear error is fine
    assert x.grad.dtype == x.dtype
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 12.0])


def test_backward_on_non_scalar_needs_a_gradient():
    x = Tensor(np.ones((2, 2)), requires_grad=True)
    with pytest.raises(ValueError, match="explicit gradient"):
        (x * 2).backward()
    with pytest.raises(ValueError, match="gradient shape"):
        (x * 2).backward(Tensor(np.ones(3)))
    (x * 2).sum().backward()  # a scalar, or a one-element tensor, implies 1
    (x[0, :1] * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[5.0, 2.0], [2.0, 2.0]])


def test_gradient_through_device_copy_and_dtype():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x.to(x.device).float() * Tensor(np.array([2.0, 3.0], np.float32))
    y.sum().backward()
    assert x.grad.dtype == x.dtype
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 3.0])
