"""lazyten's side of the layer-class workloads (bench/layers.py). `case(name)` -> a Case.

As in lazy_side.py: inputs are realized once; each timed call builds the graph and
realizes it. Forward + backward calls differentiate `(out * grad).sum()` with fixed
random `grad`, clear the leaves' gradients first, and realize all gradients together.
"""
from __future__ import annotations
import math
from typing import Callable

import numpy as np

from bench import reference
from bench.layers import dispatch_scales, mlp_batch, mlp_params
from bench.lazy_side import Case, _t, train_step, train_check
from bench.measure import compare
from bench.workloads import BY_NAME, inputs
from lazyten import Tensor
from lazyten.nn import functional as F


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(q @ k^T * scale) @ v, written out as people write it."""
    return (q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v


def _fwd_bwd(fn: Callable[..., Tensor], leaves: list[Tensor], grad: Tensor | None) -> Callable:
    """A call: forward, then the gradients of `leaves` (of `(out * grad).sum()`, or of
    `out.sum()` where `grad` is None), realized together."""
    def run():
        for t in leaves:
            t.grad = None
        out = fn(*leaves)
        (out if grad is None else out * grad).sum().backward()
        grads = [t.grad for t in leaves]
        grads[0].realize(*grads[1:])
        return grads
    return run


def _check_all(expected: list[np.ndarray], rtol: float, atol_scale: float):
    def check(outs) -> dict:
        results = [compare(o.numpy(), e, rtol, atol_scale) for o, e in zip(outs, expected)]
        return {"ok": all(r["ok"] for r in results),
                "max_err_over_scale": max(r["max_err_over_scale"] for r in results)}
    return check


def _f64(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in d.items()}


def _norm(op: str, d: dict[str, np.ndarray]) -> Case:
    t = {k: _t(v) for k, v in d.items()}
    if op == "softmax":
        run = lambda: t["x"].softmax(-1).realize()  # noqa: E731
    elif op == "log_softmax":
        run = lambda: t["x"].log_softmax(-1).realize()  # noqa: E731
    else:
        shape = (d["x"].shape[-1],)
        run = lambda: F.layer_norm(t["x"], shape, t["weight"], t["bias"]).realize()  # noqa: E731
    return Case(run, lambda out: compare(out.numpy(), reference.norm(op, _f64(d)), 1e-4, 1e-5))


def _attention(d: dict[str, np.ndarray], backward: bool, summed: bool = False) -> Case:
    ref = _f64(d)
    if not backward:
        q, k, v = (_t(d[n]) for n in "qkv")
        expected = reference.attention(ref["q"], ref["k"], ref["v"])[0]
        return Case(lambda: attention(q, k, v).realize(),
                    lambda out: compare(out.numpy(), expected, 1e-4, 1e-5))
    leaves = [_t(d[n], requires_grad=True) for n in "qkv"]
    expected = reference.attention_grads(ref["q"], ref["k"], ref["v"], ref["grad"])
    seed = None if summed else _t(d["grad"])  # (summed: d["grad"] holds the ones it seeds)
    return Case(_fwd_bwd(attention, leaves, seed), _check_all(list(expected), 1e-3, 1e-4))


def _conv(d: dict[str, np.ndarray], backward: bool) -> Case:
    ref = _f64(d)

    def conv(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return x.conv2d(w, b, padding=1)
    if not backward:
        x, w, b = (_t(d[n]) for n in ("x", "weight", "bias"))
        expected = reference.conv3x3(ref["x"], ref["weight"], ref["bias"])
        return Case(lambda: conv(x, w, b).realize(),
                    lambda out: compare(out.numpy(), expected, 1e-4, 1e-5))
    leaves = [_t(d[n], requires_grad=True) for n in ("x", "weight", "bias")]
    expected = reference.conv3x3_grads(ref["x"], ref["weight"], ref["bias"], ref["grad"])
    return Case(_fwd_bwd(conv, leaves, _t(d["grad"])), _check_all(list(expected), 1e-3, 1e-4))


def _gelu(d: dict[str, np.ndarray], backward: bool) -> Case:
    ref = _f64(d)
    if not backward:
        x = _t(d["x"])
        expected = reference.gelu(ref["x"])
        return Case(lambda: x.gelu().realize(), lambda out: compare(out.numpy(), expected, 1e-5, 1e-6))
    leaves = [_t(d["x"], requires_grad=True)]
    grads = [reference.gelu_grad(ref["x"], ref["grad"])]
    return Case(_fwd_bwd(Tensor.gelu, leaves, _t(d["grad"])), _check_all(grads, 1e-5, 1e-6))


def _embedding(d: dict[str, np.ndarray]) -> Case:
    idx = _t(d["idx"])
    leaves = [_t(d["weight"], requires_grad=True)]
    expected = [reference.embedding_grad(d["weight"].shape, d["idx"], _f64(d)["grad"])]
    return Case(_fwd_bwd(lambda w: F.embedding(idx, w), leaves, _t(d["grad"])),
                _check_all(expected, 1e-5, 1e-6))


def _mlp(batch: int, use_jit: bool) -> Case:
    layers = [(_t(w, requires_grad=True), _t(b, requires_grad=True)) for w, b in mlp_params()]

    def forward(x: Tensor) -> Tensor:
        for i, (w, b) in enumerate(layers):
            x = x.linear(w, b)
            x = x.relu() if i < len(layers) - 1 else x
        return x
    data = [mlp_batch(batch, seed=1 + i) for i in range(4)]
    run, info = train_step([t for pair in layers for t in pair], forward, data, use_jit)
    return Case(run, train_check(lambda: reference.mlp_loss(batch)),
                warmup=3 if use_jit else 2, info=info)


def _dispatch(kind: str, d: dict[str, np.ndarray], calls: int) -> Case:
    a, b = _t(d["a"]), _t(d["b"])
    if kind == "scalar":  # a new number each call: a kernel input from the second (D104)
        scales = dispatch_scales(calls)

        def over_scales():
            for s in scales:
                out = (a * s).realize()
            return out
        return Case(over_scales, lambda out: compare(out.numpy(), d["a"] * np.float32(scales[-1]),
                                                     1e-6, 0.0))
    if kind == "numpy":
        def one():
            return (a + b).numpy()
    else:
        def one():
            return (a + b).realize()

    def run():
        for _ in range(calls):
            out = one()
        return out
    expected = d["a"] + d["b"]
    return Case(run, lambda out: compare(np.asarray(out.numpy() if kind == "realize" else out),
                                         expected, 1e-6, 0.0))


def case(name: str) -> Case:
    """The lazyten case of one layer-class workload."""
    w = BY_NAME[name]
    Tensor.manual_seed(0)
    if w.group == "mlp_train":
        return _mlp(w.params["batch"], w.params["jit"])
    d = inputs(name)
    if w.group == "softmax_widths":
        return _norm(w.params["op"], d)
    if w.group == "attention":
        return _attention(d, w.params["backward"], w.params.get("seed") == "sum")
    if w.group == "conv3x3":
        return _conv(d, w.params["backward"])
    if w.group == "activations":
        if w.params.get("fn") == "sin":
            expected = np.sin(_f64(d)["x"])
            x = _t(d["x"])
            return Case(lambda: x.sin().realize(), lambda out: compare(out.numpy(), expected, 1e-6, 1e-6))
        return _gelu(d, w.params["backward"])
    if w.group == "embedding":
        return _embedding(d)
    if w.group == "dispatch":
        return _dispatch(w.params["kind"], d, w.calls)
    raise KeyError(f"lazyten has no layer case for {name}")
