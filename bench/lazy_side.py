"""lazyten's side of every workload. `case(name)` returns what `measure` needs.

Inputs are realized once, up front; each timed call builds a fresh graph and realizes it,
so the figure covers graph building, scheduling, the (in-memory) kernel cache lookup and
the kernels themselves. Optional pieces of lazyten (lazyten.optim.Adam, lazyten.nn,
lazyten.jit) are used when importable; a workload that needs a missing piece raises
`Unavailable`, which the table shows as "n/a".
"""
from __future__ import annotations
import importlib
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from bench import lenet
from bench.measure import Unavailable, compare
from bench.workloads import BY_NAME, inputs
from lazyten import Tensor


@dataclass
class Case:
    run: Callable[[], Any]
    check: Callable[[Any], dict] | None = None
    warmup: int = 1
    info: dict = field(default_factory=dict)


def _t(arr: np.ndarray, **kw) -> Tensor:
    return Tensor(arr, **kw).realize()


def sync() -> None:
    """Wait for the default device (a no-op on the synchronous CPU runtime)."""
    try:
        from runtimes import get_runtime
        from lazyten.tensor import default_device
        get_runtime(default_device()).synchronize()
    except Exception:
        pass


def kernel_counter() -> Callable[[], int] | None:
    """Kernels launched so far, when lazyten exposes the counter."""
    try:
        from lazyten.realize import Stats
        return lambda: Stats.kernels
    except (ImportError, AttributeError):
        return None


def compiled_counter() -> Callable[[], int] | None:
    """Real kernel compilations (disk-cache misses) so far, when exposed."""
    try:
        from runtimes import get_runtime
        from lazyten.tensor import default_device
        compiler = get_runtime(default_device()).compiler
        compiler.compiled  # noqa: B018 - probe the attribute
        return lambda: compiler.compiled
    except Exception:
        return None


# ---- optional lazyten pieces ----
def find_adam():
    try:
        from lazyten.optim import Adam
        return Adam
    except ImportError as e:
        raise Unavailable(f"lazyten.optim.Adam not importable ({e})") from None


def find_jit() -> Callable:
    """lazyten.jit as a decorator, whether lazyten exports a function or a module."""
    try:
        import lazyten
        obj = getattr(lazyten, "jit", None)
        if obj is None:
            obj = importlib.import_module("lazyten.jit")
    except ImportError as e:
        raise Unavailable(f"lazyten.jit not importable ({e})") from None
    if isinstance(obj, types.ModuleType):
        for name in ("jit", "TinyJit", "JIT", "Jit"):
            if callable(getattr(obj, name, None)):
                return getattr(obj, name)
        raise Unavailable("lazyten.jit has no jit decorator")
    if not callable(obj):
        raise Unavailable("lazyten.jit is not callable")
    return obj


# ---- LeNet ----
class _RawConv:
    def __init__(self, weight: Tensor, bias: Tensor):
        self.weight, self.bias = weight, bias

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias)


class _RawLinear(_RawConv):
    def __call__(self, x: Tensor) -> Tensor:
        return x.linear(self.weight, self.bias)


class LeNet:
    """LeNet on lazyten.nn layers when they exist (else raw Tensor ops), loaded with the
    seeded parameters of bench/lenet.py so results can be checked against numpy."""

    def __init__(self, params: dict[str, np.ndarray]):
        tensors = {k: _t(v, requires_grad=True) for k, v in params.items()}
        pairs = [(tensors[f"{n}.weight"], tensors[f"{n}.bias"]) for n in lenet.LAYERS]
        try:
            from lazyten import nn
            layers = [nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5), nn.Linear(256, 120),
                      nn.Linear(120, 84), nn.Linear(84, 10)]
            for layer, (w, b) in zip(layers, pairs):
                if not (hasattr(layer, "weight") and hasattr(layer, "bias")):
                    raise AttributeError("layer without weight/bias")
                layer.weight, layer.bias = w, b
            self.kind = "lazyten.nn"
        except (ImportError, AttributeError, TypeError):
            layers = [_RawConv(*pairs[0]), _RawConv(*pairs[1]), _RawLinear(*pairs[2]),
                      _RawLinear(*pairs[3]), _RawLinear(*pairs[4])]
            self.kind = "raw Tensor ops"
        self.layers = layers
        self.params = [t for pair in pairs for t in pair]

    def __call__(self, x: Tensor) -> Tensor:
        c1, c2, f1, f2, f3 = self.layers
        x = c1(x).relu().max_pool2d()
        x = c2(x).relu().max_pool2d()
        x = x.reshape(x.shape[0], -1)
        return f3(f2(f1(x).relu()).relu())


def train_step(params: list[Tensor], forward: Callable[[Tensor], Tensor],
               data: list[tuple[np.ndarray, np.ndarray]], use_jit: bool):
    """(run() -> loss Tensor, info): one Adam (lr 1e-3) step of `forward` per call, on the
    batches of `data` in turn."""
    Adam = find_adam()
    jit = find_jit() if use_jit else None
    opt = Adam(params, lr=1e-3)
    batches = [(_t(x), _t(y)) for x, y in data]

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = forward(x).sparse_categorical_crossentropy(y)
        loss.backward()
        # forward, backward and the gradients in one realize, then the in-place update
        loss.realize(*[p.grad for p in params if p.grad is not None])
        opt.step()
        return loss

    fn = jit(step) if jit is not None else step
    counter = [0]

    def run():
        x, y = batches[counter[0] % len(batches)]
        counter[0] += 1
        return fn(x, y)

    info = {"optimizer": f"{Adam.__module__}.{Adam.__name__}",
            "jit": (f"{getattr(jit, '__module__', '?')}.{getattr(jit, '__name__', '?')}"
                    if jit is not None else None)}
    return run, info


def make_train_step(batch_size: int, use_jit: bool, n_batches: int = 4):
    """(step() -> loss Tensor, info, reference() -> numpy loss of the first step)."""
    params = lenet.init_params()
    model = LeNet(params)
    data = [lenet.batch(batch_size, seed=1 + i) for i in range(n_batches)]
    run, info = train_step(model.params, model, data, use_jit)
    info = {"model": model.kind, **info}

    def reference() -> float:
        return lenet.np_loss(data[0][0], data[0][1].astype(np.int64), params)
    return run, info, reference


def train_check(reference: Callable[[], float]) -> Callable[[Tensor], dict]:
    """Check of a training step's first loss against the float64 numpy loss."""
    def check(loss):
        value, ref = float(loss.numpy()), reference()
        ok = bool(np.isfinite(value) and abs(value - ref) <= 1e-4 * max(1.0, abs(ref)))
        return {"ok": ok, "loss": value, "reference_loss": ref}
    return check


# ---- the cases ----
def case(name: str) -> Case:
    w = BY_NAME[name]
    Tensor.manual_seed(0)
    if w.group == "matmul":
        d = inputs(name)
        a, b = _t(d["a"]), _t(d["b"])
        return Case(lambda: (a @ b).realize(),
                    lambda out: compare(out.numpy(), d["a"] @ d["b"], 1e-3, 1e-4))
    if name == "fused_chain":
        d = inputs(name)
        a, b, c = (_t(d[k]) for k in "abc")

        def ref():
            t = d["a"] * d["b"] + d["c"]
            return np.exp(np.maximum(t, 0) * 0.5)
        return Case(lambda: ((a * b + c).relu() * 0.5).exp().realize(),
                    lambda out: compare(out.numpy(), ref(), 1e-5, 1e-6))
    if name == "sum_4096":
        d = inputs(name)
        x = _t(d["x"])
        return Case(lambda: x.sum(axis=-1).realize(),
                    lambda out: compare(out.numpy(), d["x"].sum(axis=-1, dtype=np.float64), 1e-4, 1e-4))
    if name == "softmax_4096":
        d = inputs(name)
        x = _t(d["x"])

        def ref():
            e = np.exp(d["x"].astype(np.float64) - d["x"].max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)
        return Case(lambda: x.softmax(-1).realize(),
                    lambda out: compare(out.numpy(), ref(), 1e-4, 1e-6))
    if name == "lenet_convs":
        p = lenet.init_params()
        xs, _ = lenet.batch(w.params["batch"])
        x = _t(xs)
        w1, b1, w2, b2 = (_t(p[k]) for k in ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"))

        def run():
            h = x.conv2d(w1, b1).relu().max_pool2d()
            return h.conv2d(w2, b2).relu().max_pool2d().realize()
        return Case(run, lambda out: compare(out.numpy(), lenet.np_convs(xs, p), 1e-4, 1e-5))
    if w.group == "train":
        use_jit = w.params["jit"]
        run, info, reference = make_train_step(w.params["batch"], use_jit)
        # jit: call 1 runs normally, call 2 captures, call 3 is the first replay
        return Case(run, train_check(reference), warmup=3 if use_jit else 2, info=info)
    raise KeyError(f"lazyten has no case for {name}")
