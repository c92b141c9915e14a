"""The workload registry: what each benchmark computes, how much work it is, its targets.

Imports numpy only. The implementations live in lazy_side.py (lazyten) and baselines.py
(numpy, torch); both build their inputs with `inputs()` here, so every implementation
sees the same shapes and the same seeded random data.
"""
from __future__ import annotations
from dataclasses import dataclass, field

import numpy as np

CHAIN_N = 1 << 24          # fused elementwise chain: 16M float32 elements
REDUCE_SHAPE = (4096, 4096)  # sum and softmax over the last axis
CONV_BATCH = 64            # LeNet conv layers forward


@dataclass(frozen=True)
class Target:
    """One goal. kind "speed": speed ratio against `against` (its time / lazyten's time)
    must be >= threshold. kind "seconds": lazyten's time must be < threshold."""
    text: str
    kind: str
    threshold: float
    against: str | None = None

    def evaluate(self, lazy_s: float | None, base_s: float | None,
                 lower_bound: bool = False) -> tuple[float | None, bool | None]:
        """(the value compared, passed?), or (None, None) when a figure is missing.
        lower_bound: lazy_s is only a lower bound (lazyten hit its time limit), which
        still decides a miss when even the bound misses."""
        if lazy_s is None or lazy_s <= 0:
            return None, None
        if self.kind == "seconds":
            value = lazy_s
            ok = value < self.threshold
        else:
            if base_s is None:
                return None, None
            value = base_s / lazy_s
            ok = value >= self.threshold
        if lower_bound and ok:
            return None, None
        return value, ok


@dataclass(frozen=True)
class Workload:
    name: str
    group: str
    desc: str
    flops: float = 0.0        # floating-point operations per call (GFLOP/s column)
    nbytes: float = 0.0       # minimum bytes moved per call (GB/s column, when no flops)
    items: int = 0            # images per call (img/s column, training)
    baselines: tuple[str, ...] = ()   # of "numpy", "torch", "torch_compile"
    baseline_key: str = ""    # workloads sharing one baseline measurement
    targets: tuple[Target, ...] = ()
    deadline: tuple[float, float] = (60.0, 30.0)  # lazyten child's time limit: full, quick
    quick: bool = True        # part of --quick (else only when named in --only)
    params: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.baseline_key or self.name

    def rate(self, seconds: float | None) -> tuple[float | None, str]:
        """Throughput for a time, and its unit."""
        if self.flops:
            return (self.flops / seconds / 1e9 if seconds else None), "GFLOP/s"
        if self.nbytes:
            return (self.nbytes / seconds / 1e9 if seconds else None), "GB/s"
        if self.items:
            return (self.items / seconds if seconds else None), "img/s"
        return None, ""


def _conv_flops(batch: int) -> float:
    conv1 = batch * 6 * 24 * 24 * (1 * 5 * 5) * 2
    conv2 = batch * 16 * 8 * 8 * (6 * 5 * 5) * 2
    return float(conv1 + conv2)


def _matmul(n: int, deadline: tuple[float, float], target: bool, quick: bool = True) -> Workload:
    targets = (Target(f"matmul {n} >= 0.6x numpy GFLOP/s", "speed", 0.6, "numpy"),) if target else ()
    return Workload(f"matmul_{n}", "matmul", f"fp32 ({n}x{n}) @ ({n}x{n})", flops=2.0 * n ** 3,
                    baselines=("numpy", "torch"), targets=targets, deadline=deadline,
                    quick=quick, params={"n": n})


def _train(batch: int, jit: bool) -> Workload:
    targets = ()
    if jit and batch == 256:
        targets = (Target("LeNet train step b256, jitted, <= 1.5x torch eager time", "speed",
                          1 / 1.5, "torch"),)
    return Workload(f"train_b{batch}" + ("_jit" if jit else ""), "train",
                    f"LeNet train step (fwd+bwd+Adam), batch {batch}" + (", lazyten.jit" if jit else ""),
                    items=batch, baselines=("torch",), baseline_key=f"train_b{batch}",
                    targets=targets, deadline=(60.0, 40.0), params={"batch": batch, "jit": jit})


WORKLOADS: list[Workload] = [
    _matmul(512, (30.0, 20.0), False),
    _matmul(1024, (40.0, 25.0), True),
    # one lazyten call took about a minute when written: full runs only, unless named
    _matmul(2048, (80.0, 80.0), True, quick=False),
    Workload("fused_chain", "elementwise", "exp(relu(a*b+c)*0.5), 16M fp32",
             nbytes=4.0 * 4 * CHAIN_N, baselines=("numpy", "torch", "torch_compile"),
             targets=(Target("fused chain >= 1.5x numpy in-place", "speed", 1.5, "numpy"),
                      Target("fused chain >= 0.9x torch.compile", "speed", 0.9, "torch_compile")),
             deadline=(40.0, 25.0)),
    Workload("sum_4096", "reduce", "sum over last axis of 4096x4096 fp32",
             nbytes=4.0 * REDUCE_SHAPE[0] * (REDUCE_SHAPE[1] + 1), baselines=("numpy", "torch"),
             targets=(Target("sum >= 1.0x torch eager", "speed", 1.0, "torch"),),
             deadline=(30.0, 20.0)),
    Workload("softmax_4096", "reduce", "softmax over last axis of 4096x4096 fp32",
             nbytes=4.0 * 2 * REDUCE_SHAPE[0] * REDUCE_SHAPE[1], baselines=("numpy", "torch"),
             targets=(Target("softmax >= 1.0x torch eager", "speed", 1.0, "torch"),),
             deadline=(40.0, 25.0)),
    Workload("lenet_convs", "conv", "LeNet conv1+relu+pool, conv2+relu+pool fwd, batch 64",
             flops=_conv_flops(CONV_BATCH), baselines=("numpy", "torch"),
             targets=(Target("LeNet convs >= 0.5x torch eager", "speed", 0.5, "torch"),),
             deadline=(40.0, 25.0), params={"batch": CONV_BATCH}),
    _train(64, False),
    _train(256, False),
    _train(64, True),
    _train(256, True),
    Workload("startup_cold", "startup", "first train step b64, empty kernel cache (new process)",
             targets=(Target("first step, empty cache < 2 s", "seconds", 2.0),),
             deadline=(120.0, 90.0), params={"batch": 64}),
    Workload("startup_warm", "startup", "first train step b64, warm kernel cache (new process)",
             targets=(Target("first step, warm cache, new process < 0.3 s", "seconds", 0.3),),
             deadline=(120.0, 90.0), params={"batch": 64}),
]
BY_NAME = {w.name: w for w in WORKLOADS}


def select(only: str | None) -> list[Workload]:
    """Workloads named by --only: comma-separated names or group names ("matmul")."""
    if not only:
        return list(WORKLOADS)
    wanted = [s.strip() for s in only.split(",") if s.strip()]
    groups = {w.group for w in WORKLOADS}
    unknown = [s for s in wanted if s not in BY_NAME and s not in groups]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; choose from: "
                         f"{', '.join(BY_NAME)} (or a group: {', '.join(sorted(groups))})")
    return [w for w in WORKLOADS if w.name in wanted or w.group in wanted]


def inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """The seeded float32 inputs of a workload (training data lives in lenet.py)."""
    rng = np.random.default_rng(seed)
    w = BY_NAME[name]
    if w.group == "matmul":
        n = w.params["n"]
        return {"a": rng.standard_normal((n, n), dtype=np.float32),
                "b": rng.standard_normal((n, n), dtype=np.float32)}
    if name == "fused_chain":
        return {k: rng.standard_normal(CHAIN_N, dtype=np.float32) for k in "abc"}
    if w.group == "reduce":
        return {"x": rng.standard_normal(REDUCE_SHAPE, dtype=np.float32)}
    raise KeyError(f"no generic inputs for {name}")
