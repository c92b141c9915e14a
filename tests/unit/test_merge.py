"""Equal bases read as one (lazyten/merge.py): a value the graph holds twice, built from the
same sources the same way, is computed once; the values stay what numpy computes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from codegen.ops import UnaryOps
from lazyten import Tensor
from lazyten.autograd.composite import Composite
from lazyten.schedule import create_schedule


def _kernels(*tensors: Tensor) -> list[tuple]:
    """Each kernel of the schedule that realizes `tensors`: its AST and the bases it reads."""
    items = create_schedule([t.lazydata for t in tensors])
    return [(item.ast.key(), tuple(id(b.base) for b in item.inputs))
            for item in items if item.ast is not None]


def _body(x: Tensor, w: Tensor) -> Tensor:
    return (x + w).exp()


def _exps(ast, seen: set) -> int:
    if id(ast) in seen:
        return 0
    seen.add(id(ast))
    return (ast.op in (UnaryOps.EXP, UnaryOps.EXP2)) + sum(_exps(s, seen) for s in ast.src)


def test_a_traced_gradient_that_another_reads_is_computed_once():
    """A traced call's gradient of x, g * exp(x + w), is what its gradient of w sums: the
    two gradients are rebuilt from one trace, and the first was rebuilt twice (as x's
    node and inside w's graph), so w's kernel computed the exps again. Now it reads them
    (an LSTM step's gradient of its gate inputs: three times a step before)."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.random((4, 8), dtype=np.float32), requires_grad=True)
    w = Tensor(rng.random((1, 8), dtype=np.float32), requires_grad=True)
    x.apply(Composite, w, body=_body).sum().backward()
    items = create_schedule([x.grad.lazydata, w.grad.lazydata])
    assert sum(_exps(item.ast, set()) for item in items) == 1
    want = np.exp(x.numpy() + w.numpy())
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), want.sum(0, keepdims=True), rtol=1e-5)


_OPS = ["add", "mul", "exp2", "neg", "max", "where", "permute", "pad", "shrink", "expand"]


def _build(t: Tensor, other: Tensor, steps: list[str]) -> Tensor:
    """The same chain of ops, each time a new graph: (4, 4) in, (4, 4) out."""
    for op in steps:
        if op == "add":
            t = t + other
        elif op == "mul":
            t = t * other * 0.5
        elif op == "exp2":
            t = (t * 0.25).exp2()
        elif op == "neg":
            t = -t
        elif op == "max":
            t = t.maximum(other)
        elif op == "where":
            t = (t < other).where(t, other * 2.0)
        elif op == "permute":
            t = t.permute(1, 0)
        elif op == "pad":
            t = t.pad(((1, 0), (0, 1)))[1:, :4]
        elif op == "shrink":
            t = t[:2].cat(t[2:], dim=0)
        elif op == "expand":
            t = t[:, :1].expand(4, 4) + t
    return t


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_OPS), min_size=1, max_size=6),
       st.lists(st.sampled_from(_OPS), min_size=0, max_size=3), st.booleans())
def test_a_value_built_twice_is_computed_once(steps, more, both_out):
    """The same chain built twice over the same inputs (and a second chain after each),
    realized together (both, the second plus one; or one sum of them): every kernel
    differs from every other, and the values are the ones each copy gives alone."""
    rng = np.random.default_rng(len(steps) * 7 + len(more))
    a = Tensor(rng.standard_normal((4, 4)).astype(np.float32)).realize()
    b = Tensor(rng.standard_normal((4, 4)).astype(np.float32)).realize()
    once = _build(a, b, steps)
    first, second = _build(once, b, more), _build(_build(a, b, steps), b, more)
    outs = (first, second + 1.0) if both_out else (first + second * 2.0,)
    alone = _build(_build(a, b, steps), b, more).numpy()  # its own realize: nothing to merge
    assert len(set(_kernels(*outs))) == len(_kernels(*outs))
    Tensor.realize(*outs)
    if both_out:  # (an exp's vector and scalar code may round one ulp apart)
        np.testing.assert_allclose(outs[0].numpy(), alone, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(outs[1].numpy(), alone + np.float32(1.0), rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(outs[0].numpy(), alone + alone * 2.0, rtol=1e-6, atol=1e-6)


def test_signed_zero_constants_stay_apart():
    """x * 0.0 and x * -0.0 differ (1 / them: inf and -inf): their bases are not merged."""
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32)).realize()
    out = (x * 0.0).reciprocal() - (x * -0.0).reciprocal()
    np.testing.assert_array_equal(out.numpy(), np.full(3, np.inf, np.float32))


def test_equal_outputs_are_both_realized():
    """Two outputs that compute the same thing: each is realized, with the same values;
    a third value reads one of them instead of computing it again."""
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
    y1, y2 = (x * 3.0).exp2(), (x * 3.0).exp2()
    z = (x * 3.0).exp2() + 1.0
    Tensor.realize(y1, y2, z)
    want = np.exp2(np.arange(6, dtype=np.float32).reshape(2, 3) * 3.0)
    for t in (y1, y2):
        assert t.lazydata.base.realized is not None
        np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(z.numpy(), want + 1.0)
