"""Layer normalisation as one Function (autograd/norm.py): its forward builds the Tensor
chain's graph node for node, its closed-form backward matches float64 finite differences
and the chain's gradients, over drawn shapes, axes, layouts (contiguous, permuted,
broadcast) and parameters (weight, bias, either, none); inputs it does not take (float16,
integers, empty) keep the chain. Its backward is fewer kernels than the chain's: without
weight one row kernel (schedule rule 5 takes the part of a row group no other kernel
reads)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from lazyten import Tensor, dtypes
import lazyten.nn.functional as F
from lazyten.schedule import create_schedule
from tests.gradcheck import check_grad
from tests.unit.test_graph_build import graph_key

EPS = 1e-5


def chain(x: Tensor, axes, weight, bias, eps: float = EPS) -> Tensor:
    """layernorm in Tensor ops, then weight and bias: what every caller built before."""
    y = x - x.mean(axes, keepdim=True)
    out = y * (y.square().mean(axes, keepdim=True) + eps).rsqrt()
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


def reference(x: np.ndarray, axes, weight, bias) -> np.ndarray:
    x = x.astype(np.float64)
    centred = x - x.mean(axes, keepdims=True)
    out = centred / np.sqrt((centred * centred).mean(axes, keepdims=True) + EPS)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


@st.composite
def cases(draw):
    """(x values, layout, axes, parameter shape or None, which parameters): 1-3 dims of
    odd sizes, the trailing axes, or (for Tensor.layernorm) any axes."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 7, 17, 33])) for _ in range(ndim))
    trailing = draw(st.integers(1, ndim))
    axes = tuple(range(ndim - trailing, ndim))
    if draw(st.booleans()):  # any axes, no parameters
        axes = tuple(sorted(draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                          unique=True))))
        return shape, axes, (False, False)
    return shape, axes, (draw(st.booleans()), draw(st.booleans()))


def make(values: np.ndarray, layout: str, dtype, requires_grad: bool) -> tuple[Tensor, Tensor]:
    """(leaf, tensor of values' shape): the leaf, its transposed view, or a broadcast row."""
    if layout == "permuted":
        leaf = Tensor(np.ascontiguousarray(values.T), dtype=dtype, requires_grad=requires_grad)
        return leaf, leaf.permute(tuple(reversed(range(values.ndim))))
    if layout == "broadcast":
        leaf = Tensor(values[:1], dtype=dtype, requires_grad=requires_grad)
        return leaf, leaf.expand(values.shape)
    leaf = Tensor(values, dtype=dtype, requires_grad=requires_grad)
    return leaf, leaf


def _params(shape, axes, affine, rng, dtype, requires_grad=True):
    pshape = shape[axes[0]:]
    made = [Tensor(rng.standard_normal(pshape), dtype=dtype, requires_grad=requires_grad)
            if on else None for on in affine]
    return made[0], made[1]


@settings(max_examples=60, deadline=None)
@given(case=cases(), layout=st.sampled_from(["contiguous", "permuted", "broadcast"]),
       dtype=st.sampled_from([dtypes.float32, dtypes.float64]), seed=st.integers(0, 99))
def test_layer_norm_builds_the_chains_graph_and_its_gradients(case, layout, dtype, seed):
    """The forward graph is the chain's, text for text; the gradients of x, weight and
    bias agree with the chain's derivative (closed form against the chain's: rounding)."""
    shape, axes, affine = case
    rng = np.random.default_rng(seed)
    values, g = rng.standard_normal(shape) * 3, rng.standard_normal(shape)
    grads, keys = [], []
    for build in ("function", "chain"):
        leaf, x = make(values, layout, dtype, requires_grad=True)
        weight, bias = _params(shape, axes, affine, np.random.default_rng(seed), dtype)
        out = x._layer_norm(axes, EPS, weight, bias) if build == "function" else \
            chain(x, axes, weight, bias)
        keys.append(graph_key(out.lazydata))
        out.backward(Tensor(g, dtype=dtype))
        grads.append([t.grad.numpy() for t in (leaf, weight, bias) if t is not None])
    assert keys[0] == keys[1], "the Function's forward graph differs from the chain's"
    tol = 2e-4 if dtype == dtypes.float32 else 1e-9
    # a row that is constant (a broadcast along the normalised axes) has 1/sqrt(var + eps)
    # = 316 where the others have ~1/3: both gradients are rounding noise amplified as much
    seen = np.broadcast_to(values[:1], shape) if layout == "broadcast" else values
    rstd = 1 / np.sqrt(seen.var(axis=axes).min() + EPS)
    tol *= max(1.0, 3 * rstd)
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,axes", [((4, 7), (1,)), ((3, 1), (1,)), ((2, 5, 33), (2,)),
                                        ((2, 5, 3), (1, 2)), ((5, 3), (0,)), ((2, 3, 4), (0, 2))])
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)])
def test_layer_norm_gradients_match_finite_differences(shape, axes, affine):
    """float64, every input that has a gradient (parameters only over trailing axes)."""
    if axes != tuple(range(len(shape) - len(axes), len(shape))):
        affine = (False, False)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(shape) * 2]
    arrays += [rng.standard_normal(shape[axes[0]:]) for on in affine if on]

    def fn(x, *params):
        it = iter(params)
        weight = next(it) if affine[0] else None
        bias = next(it) if affine[1] else None
        return x._layer_norm(axes, EPS, weight, bias)
    check_grad(fn, *arrays, directions=3)


@pytest.mark.parametrize("width", [1, 7, 33, 100, 127, 1000, 1023, 4097])
def test_layer_norm_matches_numpy_at_odd_widths(width):
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((5, width)) * 3 + 1).astype(np.float32)
    w, b = rng.standard_normal((2, width)).astype(np.float32)
    out = F.layer_norm(Tensor(x), (width,), Tensor(w), Tensor(b))
    np.testing.assert_allclose(out.numpy(), reference(x, -1, w, b), rtol=1e-4, atol=1e-5)


def test_parameters_as_views_and_broadcasts():
    """A transposed weight and a bias broadcast from one value: read through their views,
    and their gradients summed back to their own shapes."""
    rng = np.random.default_rng(0)
    x_np, w_np, g = rng.standard_normal((4, 3, 5)), rng.standard_normal((5, 3)), \
        rng.standard_normal((4, 3, 5))
    x, w_leaf = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
    b_leaf = Tensor(np.array([0.5]), requires_grad=True)
    out = x._layer_norm((1, 2), EPS, w_leaf.T, b_leaf.expand(3, 5))
    out.backward(Tensor(g))
    norm = reference(x_np, (1, 2), None, None)
    np.testing.assert_allclose(out.numpy(), norm * w_np.T + 0.5, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w_leaf.grad.numpy(), (g * norm).sum(0).T, rtol=1e-10)
    np.testing.assert_allclose(b_leaf.grad.numpy(), [g.sum()], rtol=1e-10)


def test_int_keeps_the_chain_and_16bit_floats_round_once():
    """An integer input takes the chain; float16 computes in float32 (the Function) and
    rounds once, as PyTorch (the chain rounded x - mean to float16)."""
    x = Tensor(np.arange(12).reshape(3, 4) % 5, dtype=dtypes.int32)
    assert graph_key(x.layernorm().lazydata) == graph_key(chain(x, -1, None, None).lazydata)
    want = reference(np.arange(12).reshape(3, 4) % 5, -1, None, None)
    np.testing.assert_allclose(x.layernorm().numpy().astype(np.float64), want, rtol=1e-5, atol=1e-5)
    h = Tensor(np.arange(12).reshape(3, 4) % 5, dtype=dtypes.float16)
    out = h.layernorm()
    assert out.dtype == dtypes.float16
    assert graph_key(out.lazydata) == graph_key(h.float().layernorm().cast(dtypes.float16).lazydata)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float16))


def test_mixed_parameter_dtype_and_empty_input_keep_the_chain():
    x = Tensor(np.ones((2, 3), np.float32))
    w = Tensor(np.ones(3, np.float64))
    assert F.layer_norm(x, 3, w).dtype == dtypes.float64  # promoted, as `*` promotes
    assert F.layer_norm(Tensor(np.ones((0, 3), np.float32)), 3).shape == (0, 3)


def test_backward_kernel_counts():
    """Without weight and bias the gradient is one row kernel (the chain's took 6: the
    mean and variance again, their sums, the output); with them, x's mean and rstd are
    read by the weight's gradient too, so they are kernels of their own, and x's gradient
    is still one row kernel: 5 kernels, not the chain's 8."""
    rng = np.random.default_rng(0)
    for affine, most in (((False, False), 1), ((True, True), 5)):
        x = Tensor(rng.standard_normal((16, 100)).astype(np.float32), requires_grad=True)
        weight, bias = _params((16, 100), (1,), affine, rng, dtypes.float32)
        out = x._layer_norm((1,), EPS, weight, bias)
        out.realize()
        out.backward(Tensor(rng.standard_normal((16, 100)).astype(np.float32)))
        grads = [t.grad for t in (x, weight, bias) if t is not None]
        items = [i for i in create_schedule([g.lazydata for g in grads]) if i.ast is not None]
        assert len(items) <= most, \
            f"layernorm backward {affine}: expected <= {most} kernels, got {len(items)}"


def test_only_a_parameter_needs_a_gradient():
    """x without a gradient: the backward skips x's row kernel and gives the weight's."""
    rng = np.random.default_rng(4)
    xn, wn, bn, g = (rng.standard_normal(s) for s in ((4, 6), 6, 6, (4, 6)))
    x, w, b = Tensor(xn), Tensor(wn, requires_grad=True), Tensor(bn)
    x._layer_norm(-1, EPS, w, b).backward(Tensor(g))
    assert x.grad is None and b.grad is None
    np.testing.assert_allclose(w.grad.numpy(), (g * reference(xn, -1, None, None)).sum(0),
                               rtol=1e-10, atol=1e-12)
