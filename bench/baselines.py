"""The numpy and PyTorch baselines. torch is optional: without it every torch case raises
`Unavailable` and the table prints "n/a".

numpy forms are the fastest plain ones: BLAS matmul, the in-place elementwise chain into
a preallocated buffer, in-place softmax, im2col + BLAS for the LeNet convs. torch runs
eager (under no_grad for forward-only workloads) and, for the fused chain, torch.compile.
"""
from __future__ import annotations
from typing import Any, Callable

import numpy as np

from bench import lenet
from bench.measure import Unavailable
from bench.workloads import BY_NAME, inputs

try:
    import torch
    import torch.nn.functional as F
    TORCH_ERROR = ""
except Exception as e:  # ImportError, or a broken install
    torch, F = None, None
    TORCH_ERROR = f"torch not importable ({type(e).__name__}: {e})"


def torch_info() -> dict:
    if torch is None:
        return {"available": False, "error": TORCH_ERROR}
    return {"available": True, "version": torch.__version__, "threads": torch.get_num_threads()}


# ---- numpy ----
def numpy_case(name: str) -> Callable[[], Any]:
    w = BY_NAME[name]
    if w.group == "matmul":
        d = inputs(name)
        a, b = d["a"], d["b"]
        return lambda: a @ b
    if name == "fused_chain":
        d = inputs(name)
        a, b, c = d["a"], d["b"], d["c"]
        t = np.empty_like(a)

        def chain():
            np.multiply(a, b, out=t)       # t = a*b
            np.add(t, c, out=t)            # t += c
            np.maximum(t, 0, out=t)
            np.multiply(t, 0.5, out=t)     # t *= 0.5
            np.exp(t, out=t)
            return t
        return chain
    if name == "sum_4096":
        x = inputs(name)["x"]
        return lambda: x.sum(axis=-1)
    if name == "softmax_4096":
        x = inputs(name)["x"]
        t = np.empty_like(x)

        def softmax():
            np.subtract(x, x.max(axis=-1, keepdims=True), out=t)
            np.exp(t, out=t)
            np.divide(t, t.sum(axis=-1, keepdims=True), out=t)
            return t
        return softmax
    if name == "lenet_convs":
        p = lenet.init_params()
        x, _ = lenet.batch(w.params["batch"])
        return lambda: lenet.np_convs(x, p)
    raise Unavailable(f"no numpy form of {name}")


# ---- torch ----
def _need_torch() -> None:
    if torch is None:
        raise Unavailable(TORCH_ERROR)


def _chain(a, b, c):
    return torch.exp(torch.relu(a * b + c) * 0.5)


def torch_case(name: str) -> Callable[[], Any]:
    _need_torch()
    w = BY_NAME[name]
    if w.group == "train":
        return torch_lenet_step(w.params["batch"])
    if w.group == "matmul":
        d = {k: torch.from_numpy(v) for k, v in inputs(name).items()}
        a, b = d["a"], d["b"]
        return _no_grad(lambda: a @ b)
    if name == "fused_chain":
        a, b, c = (torch.from_numpy(v) for v in inputs(name).values())
        return _no_grad(lambda: _chain(a, b, c))
    if name == "sum_4096":
        x = torch.from_numpy(inputs(name)["x"])
        return _no_grad(lambda: x.sum(dim=-1))
    if name == "softmax_4096":
        x = torch.from_numpy(inputs(name)["x"])
        return _no_grad(lambda: torch.softmax(x, dim=-1))
    if name == "lenet_convs":
        p = {k: torch.from_numpy(v) for k, v in lenet.init_params().items()}
        x = torch.from_numpy(lenet.batch(w.params["batch"])[0])

        def convs():
            h = F.max_pool2d(F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"])), 2)
            return F.max_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"])), 2)
        return _no_grad(convs)
    raise Unavailable(f"no torch form of {name}")


def torch_compile_case(name: str) -> Callable[[], Any]:
    """torch.compile of the fused chain (the first call compiles: it is the warm-up)."""
    _need_torch()
    if name != "fused_chain":
        raise Unavailable(f"no torch.compile form of {name}")
    a, b, c = (torch.from_numpy(v) for v in inputs(name).values())
    compiled = torch.compile(_chain)
    return _no_grad(lambda: compiled(a, b, c))


def _no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run():
        with torch.no_grad():
            return fn()
    return run


def torch_lenet_step(batch_size: int, n_batches: int = 4,
                     device: str = "cpu") -> Callable[[], Any]:
    """One Adam step per call of bench/lenet.py's network in torch, on `device`."""
    params = lenet.init_params()
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(256, 120), torch.nn.ReLU(),
        torch.nn.Linear(120, 84), torch.nn.ReLU(), torch.nn.Linear(84, 10))
    layers = [m for m in model if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        for name, layer in zip(lenet.LAYERS, layers):
            layer.weight.copy_(torch.from_numpy(params[f"{name}.weight"]))
            layer.bias.copy_(torch.from_numpy(params[f"{name}.bias"]))
    return torch_train_step(model.to(device),
                            [lenet.batch(batch_size, seed=1 + i) for i in range(n_batches)], device)


def torch_train_step(model: Any, batches: list[tuple[np.ndarray, np.ndarray]],
                     device: str = "cpu") -> Callable[[], Any]:
    """One Adam step of `model` (cross entropy) per call, cycling through `batches` (put on
    `device` once, up front)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tensors = [(torch.from_numpy(x).to(device), torch.from_numpy(y.astype(np.int64)).to(device))
               for x, y in batches]
    counter = [0]

    def step():
        x, y = tensors[counter[0] % len(tensors)]
        counter[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


CASES = {"numpy": numpy_case, "torch": torch_case, "torch_compile": torch_compile_case}
