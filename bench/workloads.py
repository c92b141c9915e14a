"""The workload registry: what each benchmark computes, how much work it is, its targets.

Imports numpy only. The implementations live in lazy_side.py (lazyten) and baselines.py
(numpy, torch); both build their inputs with `inputs()` here, so every implementation
sees the same shapes and the same seeded random data.
"""
from __future__ import annotations
import numpy as np

from bench import layers
from bench.spec import Target, Workload

CHAIN_N = 1 << 24          # fused elementwise chain: 16M float32 elements
REDUCE_SHAPE = (4096, 4096)  # sum and softmax over the last axis
CONV_BATCH = 64            # LeNet conv layers forward


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
    ratio = 1.5 if jit else 1.0
    targets = (Target(f"LeNet train step b{batch}{', jit' if jit else ''} >= {ratio:g}x torch "
                      "eager", "speed", ratio, "torch"),)
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
             targets=(Target("first step, empty cache < 1 s", "seconds", 1.0),),
             deadline=(120.0, 90.0), params={"batch": 64}),
    Workload("startup_warm", "startup", "first train step b64, warm kernel cache (new process)",
             targets=(Target("first step, warm cache, new process < 0.3 s", "seconds", 0.3),),
             deadline=(120.0, 90.0), params={"batch": 64}),
] + layers.WORKLOADS
BY_NAME = {w.name: w for w in WORKLOADS}


def select(only: str | None, everything: bool = False) -> list[Workload]:
    """Workloads named by --only: comma-separated names or group names ("matmul"); without
    --only the default ones (`Workload.default`), or all of them with `everything`."""
    if not only:
        return [w for w in WORKLOADS if w.default or everything]
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
    if w in layers.WORKLOADS:
        return layers.inputs(w, rng)
    raise KeyError(f"no generic inputs for {name}")
