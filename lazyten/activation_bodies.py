"""The activations made of several ops, each a module-level function of one float Tensor
that `Tensor` runs as one traced call (a Composite: one graph node forward, one per
gradient backward, its backward autograd over the same ops; autograd/composite.py).

Written as a chain of Tensor ops, an elu was about six graph nodes and a mish about ten,
each a Function, a Tensor and a LazyBuffer or more made in Python on every call; as a
traced call it costs one (the kernels are the same: the trace's ops are expanded when
scheduled). Each body takes float32 or float64 (halves are computed in float32 around
it, `_opmath`), and what it computes is fixed by the input's shape, dtype and the
keyword arguments, as a Composite's body must be.
"""
from __future__ import annotations
from typing import Any


def nonpositive(x: Any) -> Any:
    """x where x <= 0, else 0 (the gradient is x's there, whole, at 0 too)."""
    return (x > 0).where(0.0, x)


def leakyrelu(x: Any, neg_slope: float) -> Any:
    return x.relu() - (-neg_slope * x).relu()


def elu(x: Any, alpha: float) -> Any:
    """x above 0, alpha * (e^x - 1) below: expm1 keeps tiny |x| relatively exact (e^x - 1
    was 0 for x = -3e-9), and e^x of x clamped to <= 0 never overflows (its gradient,
    0 * inf where x > 88, was NaN); a where clamps, so d/dx at 0 is alpha, not split."""
    return (x > 0).where(x, alpha * nonpositive(x).expm1())


def celu(x: Any, alpha: float) -> Any:
    return (x > 0).where(x, alpha * (nonpositive(x) / alpha).expm1())


def softplus(x: Any, beta: float) -> Any:
    """log(1 + e^(bx)) / b as max(bx, 0) + log1p(e^-|bx|): no overflow, and log1p keeps
    the tiny values of bx << 0 (log(1 + e^-20) was 0). maximum (not relu) splits the
    gradient at the kink, so d/dx at 0 is 0.5 as it should be."""
    bx = x * beta
    return (bx.maximum(0) + (-bx.abs()).exp().log1p()) / beta


def softsign(x: Any) -> Any:
    return x / (1 + x.abs())


def quick_gelu(x: Any) -> Any:
    return x * (x * 1.702).sigmoid()


def mish(x: Any) -> Any:
    return x * softplus(x, 1.0).tanh()


def swish(x: Any) -> Any:
    return x * x.sigmoid()


def hardsigmoid(x: Any, alpha: float, beta: float) -> Any:
    """clip(alpha x + beta, 0, 1), computed as (x + beta / alpha) / (1 / alpha): PyTorch's
    relu6(x + 3) / 6 for the defaults; alpha x + beta cancels near x = -3 (8192 ulps)."""
    if not alpha:
        return (x * 0 + beta).relu().minimum(1)
    return ((x + beta / alpha) / (1 / alpha)).relu().minimum(1)


def hardswish(x: Any) -> Any:
    """x * (relu6(x + 3) / 6): x * 6 would overflow for x near the max."""
    return x * ((x + 3).relu6() / 6)
