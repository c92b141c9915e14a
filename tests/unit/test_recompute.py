"""Rule 4 of the scheduler (lazyten/schedule.py, D20): elementwise work is inlined where it
is read, except where an expand would repeat much of it; then it is materialised once."""
import math

import numpy as np
import pytest

from codegen.ops import BinaryOps, ReduceOps, UnaryOps
from lazyten import Tensor
from lazyten.schedule import create_schedule


def _kernels(t: Tensor) -> list:
    return [i for i in create_schedule([t.lazydata]) if i.ast is not None]


@pytest.mark.parametrize("n,materialised", [(256, True), (4, False)])
def test_an_elementwise_input_of_a_matmul_is_computed_once_when_reused_widely(n, materialised):
    """relu(a) @ b reads each element of relu(a) n times: with n = 256 (and 64K repeated
    ops) relu runs once in its own kernel, with n = 4 it stays inside the matmul."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300, n)).astype(np.float32)
    out = Tensor(a).relu() @ Tensor(b)
    kernels = _kernels(out)
    ops = [{n_.op for n_ in k.ast.walk()} for k in kernels]
    relu_alone = [o for o in ops if BinaryOps.MAX in o and not any(isinstance(x, ReduceOps) for x in o)]
    assert len(relu_alone) == (1 if materialised else 0), [str(k.ast)[:80] for k in kernels]
    np.testing.assert_allclose(out.numpy(), np.maximum(a, 0) @ b, rtol=1e-4, atol=1e-4)


def test_mlp_weight_gradient_reads_a_materialised_upstream_gradient():
    """The weight gradient of relu(x @ w) re-reads the relu mask times the upstream gradient
    for every input feature (the case that made the rule): the gradient stays right."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 784)).astype(np.float32)
    w = rng.standard_normal((784, 256)).astype(np.float32) * 0.05
    g = rng.standard_normal((64, 256)).astype(np.float32)
    wt = Tensor(w, requires_grad=True)
    (((Tensor(x) @ wt).relu()) * Tensor(g)).sum().backward()
    h = x @ w
    np.testing.assert_allclose(wt.grad.numpy(), x.T @ (g * (h > 0)), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n,materialised", [(7, True), (3, True), (7, False)])
def test_a_costly_input_of_a_narrow_matmul_is_computed_once(n, materialised):
    """gelu(a) @ b with b 300 x 7 (a 7-class head) read each gelu value 7 times inside the
    matmul, about 60 ops each time: 146 MFLOP for a 2 MFLOP product at batch 512. Costly
    ops (>= _REPEAT_OPS repeated per element) are computed once from 2 reads on; cheap ones
    (a relu read 7 times: the last case) stay inlined below _EXPAND_MIN reads."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((512, 300)).astype(np.float32)
    b = rng.standard_normal((300, n)).astype(np.float32)
    x = Tensor(a).gelu() if materialised else Tensor(a).relu()
    out = x @ Tensor(b)
    kernels = _kernels(out)
    reduce_ops = [{o.op for o in k.ast.walk()} for k in kernels
                  if any(isinstance(o.op, ReduceOps) for o in k.ast.walk())]
    assert len(reduce_ops) == 1
    inlined = BinaryOps.MAX in reduce_ops[0] if not materialised else \
        len(reduce_ops[0] & {UnaryOps.EXP2, UnaryOps.EXP, UnaryOps.RECIP}) > 0
    assert len(kernels) == (2 if materialised else 1) and not (materialised and inlined)
    ref = np.maximum(a, 0) if not materialised else \
        0.5 * a * (1 + np.vectorize(math.erf)(a / np.sqrt(2)))
    np.testing.assert_allclose(out.numpy(), ref @ b, rtol=1e-4, atol=1e-4)


def _exps(kernels: list) -> int:
    return sum(1 for k in kernels for n in k.ast.walk() if n.op is UnaryOps.EXP)


@pytest.mark.parametrize("steps", [4, 12])
def test_a_recurrent_state_read_by_two_kernels_is_computed_once(steps):
    """Rule 7 (D111): an LSTM's cell state c_t = sigmoid(f) * c_t-1 + sigmoid(i) * tanh(g)
    is read by h_t = sigmoid(o) * tanh(c_t) (stored: every step's output) and by c_t+1.
    Inlined, step t's kernel computed every cell state before it: exps grew with the
    square of the steps. Stored once each, every step computes its own."""
    rng = np.random.default_rng(0)
    gates = [[Tensor(rng.standard_normal((8, 16)).astype(np.float32)) for _ in range(4)]
             for _ in range(steps)]
    c, hs = Tensor(np.zeros((8, 16), np.float32)), []
    ref_c, ref_hs = np.zeros((8, 16)), []

    def sig(v):
        return 1 / (1 + np.exp(-v))
    for i, f, g, o in gates:
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        hs.append(o.sigmoid() * c.tanh())
        ni, nf, ng, no = (x.numpy().astype(np.float64) for x in (i, f, g, o))
        ref_c = sig(nf) * ref_c + sig(ni) * np.tanh(ng)
        ref_hs.append(sig(no) * np.tanh(ref_c))
    out = hs[0].stack(*hs[1:]) if steps > 1 else hs[0]
    kernels = _kernels(out)
    # per step: four sigmoids (an exp each) and two tanh (one each), some computed twice
    assert _exps(kernels) <= 12 * steps, (_exps(kernels), len(kernels))
    np.testing.assert_allclose(out.numpy(), np.stack(ref_hs), rtol=1e-5, atol=1e-6)
