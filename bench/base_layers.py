"""numpy and PyTorch baselines of the layer-class workloads (bench/layers.py).

numpy runs the forms in bench/reference.py (including hand-written gradients). torch
runs eager, under no_grad for forward-only workloads, the same formulas as lazyten
(attention is written out, not F.scaled_dot_product_attention); torch.compile compiles
the forward function (its first call, the compilation, is the warm-up). Forward + backward
calls differentiate `(out * grad).sum()` and clear the leaves' gradients first.
"""
from __future__ import annotations
import math
from typing import Any, Callable

import numpy as np

from bench import reference
from bench.baselines import F, _need_torch, _no_grad, torch, torch_train_step
from bench.layers import MLP_SIZES, dispatch_scales, mlp_batch, mlp_params
from bench.measure import Unavailable
from bench.workloads import BY_NAME, inputs


# ---- numpy ----
def numpy_case(name: str) -> Callable[[], Any]:
    w = BY_NAME[name]
    if w.group == "mlp_train":
        raise Unavailable(f"no numpy form of {name}")
    d = inputs(name)
    if w.group == "softmax_widths":
        return lambda: reference.norm(w.params["op"], d)
    if w.group == "attention":
        if w.params["backward"]:
            return lambda: (reference.attention(d["q"], d["k"], d["v"]),
                            reference.attention_grads(d["q"], d["k"], d["v"], d["grad"]))
        return lambda: reference.attention(d["q"], d["k"], d["v"])
    if w.group == "conv3x3":
        args = (d["x"], d["weight"], d["bias"])
        if w.params["backward"]:
            return lambda: (reference.conv3x3(*args), reference.conv3x3_grads(*args, d["grad"]))
        return lambda: reference.conv3x3(*args)
    if w.group == "embedding":
        return lambda: (d["weight"][d["idx"]],
                        reference.embedding_grad(d["weight"].shape, d["idx"], d["grad"]))
    if w.group == "dispatch":
        a, b = d["a"], d["b"]
        if w.params["kind"] == "scalar":
            return _over_scales(lambda s: a * np.float32(s), w.calls)
        return _loop(lambda: a + b, w.calls)
    raise Unavailable(f"no numpy form of {name}")


def _over_scales(one: Callable[[float], Any], calls: int) -> Callable[[], Any]:
    """`one(s)` for each of the dispatch group's changing numbers."""
    scales = dispatch_scales(calls)

    def run():
        for s in scales:
            out = one(s)
        return out
    return run


def _loop(one: Callable[[], Any], calls: int) -> Callable[[], Any]:
    def run():
        for _ in range(calls):
            out = one()
        return out
    return run


# ---- torch ----
def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1])), dim=-1) @ v


def _conv(x, weight, bias):
    return F.conv2d(x, weight, bias, padding=1)


def _forward(w) -> tuple[Callable, list[str]]:
    """The workload's forward function and the names of its inputs, in order."""
    if w.group == "softmax_widths":
        op = w.params["op"]
        if op == "layernorm":
            return (lambda x, weight, bias: F.layer_norm(x, (x.shape[-1],), weight, bias),
                    ["x", "weight", "bias"])
        if op == "softmax":
            return (lambda x: torch.softmax(x, -1)), ["x"]
        return (lambda x: torch.log_softmax(x, -1)), ["x"]
    if w.group == "attention":
        return _attention, ["q", "k", "v"]
    if w.group == "conv3x3":
        return _conv, ["x", "weight", "bias"]
    if w.group == "activations":
        return (torch.sin if w.params.get("fn") == "sin" else F.gelu), ["x"]
    raise Unavailable(f"no torch form of {w.name}")


def _fwd_bwd(fn: Callable, leaves: list, grad) -> Callable[[], Any]:
    """Gradients of `(out * grad).sum()`, or of `out.sum()` where `grad` is None."""
    def run():
        for t in leaves:
            t.grad = None
        out = fn(*leaves)
        (out if grad is None else out * grad).sum().backward()
        return [t.grad for t in leaves]
    return run


def torch_case(name: str) -> Callable[[], Any]:
    _need_torch()
    w = BY_NAME[name]
    if w.group == "mlp_train":
        return _mlp_step(w.params["batch"])
    d = {k: torch.from_numpy(v) for k, v in inputs(name).items()}
    if w.group == "dispatch":
        a, b = d["a"], d["b"]
        if w.params["kind"] == "scalar":
            return _no_grad(_over_scales(lambda s: a * s, w.calls))
        one = (lambda: (a + b).numpy()) if w.params["kind"] == "numpy" else (lambda: a + b)
        return _no_grad(_loop(one, w.calls))
    if w.group == "embedding":
        idx, weight = d["idx"], d["weight"].clone().requires_grad_(True)
        return _fwd_bwd(lambda wt: F.embedding(idx, wt), [weight], d["grad"])
    fn, names = _forward(w)
    if w.params.get("backward"):
        leaves = [d[n].clone().requires_grad_(True) for n in names]
        return _fwd_bwd(fn, leaves, None if w.params.get("seed") == "sum" else d["grad"])
    args = [d[n] for n in names]
    return _no_grad(lambda: fn(*args))


def torch_compile_case(name: str) -> Callable[[], Any]:
    _need_torch()
    w = BY_NAME[name]
    if "torch_compile" not in w.baselines:
        raise Unavailable(f"no torch.compile form of {name}")
    d = {k: torch.from_numpy(v) for k, v in inputs(name).items()}
    fn, names = _forward(w)
    compiled = torch.compile(fn)
    args = [d[n] for n in names]
    return _no_grad(lambda: compiled(*args))


def _mlp_step(batch: int, n_batches: int = 4) -> Callable[[], Any]:
    layers = [torch.nn.Linear(i, o) for i, o in zip(MLP_SIZES, MLP_SIZES[1:])]
    with torch.no_grad():
        for layer, (weight, bias) in zip(layers, mlp_params()):
            layer.weight.copy_(torch.from_numpy(weight))
            layer.bias.copy_(torch.from_numpy(bias))
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    return torch_train_step(model, [mlp_batch(batch, seed=1 + i) for i in range(n_batches)])


CASES = {"numpy": numpy_case, "torch": torch_case, "torch_compile": torch_compile_case}
