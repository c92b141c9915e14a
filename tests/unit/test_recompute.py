"""Rule 4 of the scheduler (lazyten/schedule.py, D20): elementwise work is inlined where it
is read, except where an expand would repeat much of it; then it is materialised once."""
import numpy as np
import pytest

from codegen.ops import BinaryOps, ReduceOps
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
