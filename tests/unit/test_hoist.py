"""A reduce that every one of its inputs broadcasts along an output axis is computed once
per distinct value, then copied along that axis (lazyten/hoist.py, D136): the schedule
has the small reduce, and every value stays what numpy computes (masked, indirect and
in-place kernels keep their form)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from codegen.helpers import prod
from codegen.ops import ReduceOps
from lazyten import Tensor
from lazyten.hoist import _MIN_SAVED
from lazyten.schedule import create_schedule


def _reduce_outputs(t: Tensor) -> list[int]:
    """The element counts of the outputs of the reduce kernels that realize `t`."""
    items = create_schedule([t.lazydata])
    return [prod(i.out.shape) for i in items
            if i.ast is not None and any(isinstance(n.op, ReduceOps) for n in i.ast.walk())]


def test_a_matmul_with_a_broadcast_operand_reduces_once_per_column():
    """ones(m, k) @ v: each of the m rows is the same column sums of v. The reduce kernel
    writes n values, not m * n, and the result is numpy's."""
    rng = np.random.default_rng(0)
    m, k, n = 300, 96, 130
    v = rng.standard_normal((k, n)).astype(np.float32)
    out = Tensor.ones(m, k) @ Tensor(v)
    assert _reduce_outputs(out) == [n]
    np.testing.assert_allclose(out.numpy(), np.ones((m, k)) @ v.astype(np.float64),
                               rtol=1e-5, atol=1e-4)


def test_a_reduce_repeated_below_the_bound_is_left_alone():
    """A small repeated reduce (under _MIN_SAVED steps saved) stays one kernel."""
    v = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = Tensor.ones(5, 3) @ Tensor(v)
    assert 5 * 3 * 4 < _MIN_SAVED
    assert _reduce_outputs(out) == [20]
    np.testing.assert_allclose(out.numpy(), np.ones((5, 3)) @ v)


def test_a_masked_leaf_along_the_axis_keeps_the_kernel_whole():
    """A row broadcast down 200 rows, then padded by 5 rows above and below: the padded
    rows read zeros, so the value depends on the row (the leaf's mask runs along it). The
    kernel is not split along that axis, and the padded rows' sums are 0."""
    rng = np.random.default_rng(1)
    row = rng.standard_normal((1, 50, 40)).astype(np.float32)
    x = Tensor(row).expand(200, 50, 40).pad(((5, 5), (0, 0), (0, 0)))
    out = (x * 2).sum(-1)
    assert _reduce_outputs(out) == [210 * 50]
    expected = np.pad(np.broadcast_to(row, (200, 50, 40)), ((5, 5), (0, 0), (0, 0))).sum(-1) * 2
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_an_in_place_update_from_a_broadcast_reduce():
    """t.assign(ones @ v): the reduce is split and the assign's own kernel writes t, which
    holds numpy's value; a view of t's old value taken before keeps it."""
    rng = np.random.default_rng(2)
    v = rng.standard_normal((64, 70)).astype(np.float32)
    t = Tensor(np.zeros((600, 70), np.float32))
    old = t[:2]
    t.assign(Tensor.ones(600, 64) @ Tensor(v))
    np.testing.assert_allclose(t.numpy(), np.broadcast_to(v.sum(0), (600, 70)), rtol=1e-5,
                               atol=1e-4)
    np.testing.assert_array_equal(old.numpy(), np.zeros((2, 70), np.float32))


def test_attention_sum_backward_is_numpy_s():
    """`.sum().backward()` through softmax(q k^T / sqrt(d)) v: its dP (ones @ v^T) and dV
    (P^T @ ones) are broadcast reduces, split; the gradients are the closed form's."""
    rng = np.random.default_rng(3)
    shape = (2, 3, 70, 16)
    q, k, v = (rng.standard_normal(shape) for _ in range(3))
    leaves = [Tensor(a.astype(np.float32), requires_grad=True) for a in (q, k, v)]
    lq, lk, lv = leaves
    out = (lq @ lk.transpose(-2, -1) * (1 / math.sqrt(16))).softmax(-1) @ lv
    out.sum().backward()
    s = q @ k.transpose(0, 1, 3, 2) / 4
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = np.ones(shape) @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / 4
    for got, want in zip([t.grad for t in leaves], [ds @ k, ds.transpose(0, 1, 3, 2) @ q,
                                                    p.transpose(0, 1, 3, 2) @ np.ones(shape)]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70), st.integers(1, 40), st.integers(1, 90),
       st.sampled_from(["sum", "max", "matmul", "softmax", "mean_sq"]),
       st.booleans(), st.integers(0, 2**16))
def test_reduces_of_broadcast_inputs_are_numpy_s(batch, rows, k, n, kind, transpose, seed):
    """Reduces whose inputs are broadcast along some output axes (rows, and the batch for
    a shared operand), at odd sizes, with a transposed (non-contiguous) operand: numpy's
    values, split or not."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((1, 1, k, n)).astype(np.float32)
    data = np.ascontiguousarray(base.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2) \
        if transpose else base
    other = rng.standard_normal((batch, 1, 1, n)).astype(np.float32)
    x = Tensor(data).expand(batch, rows, k, n) * Tensor(other)
    want = np.broadcast_to(data, (batch, rows, k, n)).astype(np.float64) * other
    if kind == "sum":
        got, expected = x.sum(2), want.sum(2)
    elif kind == "max":
        got, expected = x.amax(-1), want.max(-1)
    elif kind == "matmul":
        w = rng.standard_normal((n, 5)).astype(np.float32)
        got, expected = x @ Tensor(w), want @ w
    elif kind == "softmax":
        got = x.softmax(-1)
        e = np.exp(want - want.max(-1, keepdims=True))
        expected = e / e.sum(-1, keepdims=True)
    else:
        got, expected = (x * x).mean((0, 2)), (want * want).mean((0, 2))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_linear_sum_backward_matches_the_closed_form():
    """y = x @ W^T + b, y.sum().backward(): dW = ones^T x (each row the column sums of x),
    dx = ones W (each row the column sums of W), both broadcast reduces; float64
    finite differences of the loss agree with the gradients."""
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((300, 120))
    ws = rng.standard_normal((90, 120))
    x, w = Tensor(xs, requires_grad=True), Tensor(ws, requires_grad=True)
    (x @ w.transpose(0, 1)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.broadcast_to(xs.sum(0), (90, 120)), rtol=1e-9)
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(ws.sum(0), (300, 120)), rtol=1e-9)
    eps, (i, j) = 1e-6, (7, 11)
    bumped = ws.copy()
    bumped[i, j] += eps
    fd = ((xs @ bumped.T).sum() - (xs @ ws.T).sum()) / eps
    assert abs(fd - w.grad.numpy()[i, j]) < 1e-4 * max(1.0, abs(fd))


def test_a_row_kernel_over_a_broadcast_row_keeps_its_reduce_axis():
    """softmax and layernorm over rows broadcast along their own width: the row kernel
    stores at the input's shape, so the width is an output axis of its STORE that every
    leaf broadcasts, but the reduces run over it: it is not split off (each row's sum is
    width times its value, not one value), and the results are numpy's."""
    rng = np.random.default_rng(5)
    col = rng.standard_normal((400, 1)).astype(np.float32)
    x = Tensor(col).expand(400, 1000)
    np.testing.assert_allclose(x.softmax(-1).numpy(), np.full((400, 1000), 1e-3), rtol=1e-5)
    np.testing.assert_allclose((x * 3).log_softmax(-1).numpy(), np.full((400, 1000), np.log(1e-3)),
                               rtol=1e-5)
    centred = x - x.mean(-1, keepdim=True)
    # a float32 mean of 1000 equal values rounds by up to 1000 ulps of them (pocl's sum
    # order: 2.9e-5 at |x| 2.8); a reduce over one position would leave about |x| itself
    bound = 1000 * 2.0 ** -24 * float(np.abs(col).max())
    np.testing.assert_allclose(centred.numpy(), np.zeros((400, 1000)), atol=bound)
