"""`python -m bench --device CUDA`: lazyten on a GPU against PyTorch on the same card, in
one process (issue 16's targets).

Each workload is checked once against torch's result (float64 on the host for the
matmul), then timed: lazyten and torch alternate in rounds; a round makes `calls` calls
and waits for its device once, and a call's time is the round's over `calls`; the table
gives each side's median round. Bandwidth is counted as the fewest bytes the op must move
(each input read once, each output written once) and compared with a device-to-device
copy through torch measured in the same run. The matmul is float32 with TF32 off on both
sides. The LeNet step is one Adam step of bench/lenet.py's network (forward, backward,
update) on a batch already on the device.

`--target field=value,...` replaces fields of the device's optimiser Target for this run
(`item_tile=16,elementwise_items=0`): the way to try a setting before changing its default.
"""
from __future__ import annotations
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


N = 1 << 26                      # elements of the bandwidth workloads (256 MiB of float32)
ROWS = 4096                      # their 2-D form: ROWS x N // ROWS
MATMUL = 4096


@dataclass
class GpuWorkload:
    name: str
    what: str
    make: Callable[[str], tuple[Callable[[], Any], Callable[[], Any], Callable[[Any, Any], float]]]
    nbytes: int = 0              # fewest bytes moved per call (bandwidth workloads)
    flops: int = 0
    goal: str = ""               # "bandwidth" (>= 0.8 copy), "torch:<ratio>"
    calls: int = 10              # calls per timed round


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def _pair(device: str, arrays: dict[str, np.ndarray]):
    import torch
    from lazyten import Tensor
    lazy = {k: Tensor(v, device=device).realize() for k, v in arrays.items()}
    tor = {k: torch.from_numpy(v).cuda() for k, v in arrays.items()}
    return lazy, tor


def _torch_layer_norm(x, width: int):
    import torch
    return torch.nn.functional.layer_norm(x, (width,))


def _torch_gelu(x):
    import torch
    return torch.nn.functional.gelu(x)


def _unary(lazy_fn, torch_fn, shape):
    def make(device):
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        lz, tr = _pair(device, {"x": x})
        return (lambda: lazy_fn(lz["x"]).realize(), lambda: torch_fn(tr["x"]),
                lambda a, b: _rel(a.numpy(), b.cpu().numpy()))
    return make


def _add(device):
    rng = np.random.default_rng(0)
    lz, tr = _pair(device, {k: rng.standard_normal(N, dtype=np.float32) for k in "ab"})
    return (lambda: (lz["a"] + lz["b"]).realize(), lambda: tr["a"] + tr["b"],
            lambda a, b: _rel(a.numpy(), b.cpu().numpy()))


def _matmul(device):
    import torch
    rng = np.random.default_rng(0)
    lz, tr = _pair(device, {k: rng.standard_normal((MATMUL, MATMUL), dtype=np.float32)
                            for k in "ab"})
    sub = slice(0, 256)  # checked on a block against float64 on the host
    ref = (tr["a"][sub].double() @ tr["b"].double()).cpu().numpy()
    torch.backends.cuda.matmul.allow_tf32 = False
    return (lambda: (lz["a"] @ lz["b"]).realize(), lambda: tr["a"] @ tr["b"],
            lambda a, b: max(_rel(a.numpy()[sub], ref), _rel(b[sub].cpu().numpy(), ref)))


def _lenet_step(jit: bool, graph: bool = True):
    def make(device):
        from bench.baselines import torch_lenet_step
        from bench.lazy_side import make_train_step
        from lazyten import Context
        step_fn, _, _ = make_train_step(256, jit)

        def run():
            with Context(JIT_GRAPH=int(graph)):
                return step_fn()
        step = torch_lenet_step(256, device="cuda")
        # the first step of each (same parameters, same batch): the losses agree
        return run, step, lambda a, b: abs(float(a.numpy()) - float(b.item()))
    return make


WORKLOADS = [
    GpuWorkload("add", f"a + b, {N >> 20}M float32", _add, nbytes=12 * N, goal="bandwidth"),
    GpuWorkload("relu_chain", "exp(relu(x) * 0.5), one kernel",
                _unary(lambda x: (x.relu() * 0.5).exp(),
                       lambda x: (x.relu() * 0.5).exp(), (N,)),
                nbytes=8 * N, goal="bandwidth"),
    GpuWorkload("gelu", f"exact gelu, {N >> 20}M float32 (erf's one fit, D137)",
                _unary(lambda x: x.gelu(), _torch_gelu, (N,)), nbytes=8 * N, goal="bandwidth"),
    GpuWorkload("sum_all", f"x.sum(), {N >> 20}M float32",
                _unary(lambda x: x.sum(), lambda x: x.sum(), (N,)), nbytes=4 * N,
                goal="bandwidth"),
    GpuWorkload("sum_rows", f"x.sum(1), {ROWS} x {N // ROWS}",
                _unary(lambda x: x.sum(axis=1), lambda x: x.sum(1), (ROWS, N // ROWS)),
                nbytes=4 * N, goal="bandwidth"),
    GpuWorkload("sum_cols", f"x.sum(0), {ROWS} x {N // ROWS}",
                _unary(lambda x: x.sum(axis=0), lambda x: x.sum(0), (ROWS, N // ROWS)),
                nbytes=4 * N, goal="bandwidth"),
    GpuWorkload("softmax_rows", f"x.softmax(-1), {ROWS} x {N // ROWS}",
                _unary(lambda x: x.softmax(-1), lambda x: x.softmax(-1), (ROWS, N // ROWS)),
                nbytes=8 * N, goal="bandwidth"),
    GpuWorkload("softmax_w1000", "x.softmax(-1), 65536 x 1000 (an odd width)",
                _unary(lambda x: x.softmax(-1), lambda x: x.softmax(-1), (65536, 1000)),
                nbytes=8 * 65536 * 1000, goal="bandwidth"),
    GpuWorkload("log_softmax_w50257", "x.log_softmax(-1), 1024 x 50257 (a vocabulary)",
                _unary(lambda x: x.log_softmax(-1), lambda x: x.log_softmax(-1),
                       (1024, 50257)), nbytes=8 * 1024 * 50257, goal="bandwidth"),
    GpuWorkload("layernorm_rows", f"x.layernorm(-1), {N // 4096} x 4096 (no affine)",
                _unary(lambda x: x.layernorm(-1),
                       lambda x: _torch_layer_norm(x, 4096),
                       (N // 4096, 4096)), nbytes=8 * N, goal="bandwidth"),
    GpuWorkload("matmul_4096", "float32 4096 x 4096 @ 4096 x 4096 (TF32 off)", _matmul,
                flops=2 * MATMUL ** 3, goal="torch:0.5", calls=3),
    GpuWorkload("lenet_step_b256", "LeNet train step (fwd+bwd+Adam), batch 256",
                _lenet_step(False), goal="torch:1.0", calls=5),
    GpuWorkload("lenet_step_b256_jit", "the same step, lazyten.jit (a CUDA graph)",
                _lenet_step(True), goal="torch:1.0", calls=5),
    GpuWorkload("lenet_step_b256_jit_nograph", "the same, kernels launched one by one "
                "(JIT_GRAPH=0)", _lenet_step(True, graph=False), goal="torch:1.0", calls=5),
]
TOLERANCE = {"matmul_4096": 1e-5, "lenet_step_b256": 1e-4, "lenet_step_b256_jit": 1e-4,
             "lenet_step_b256_jit_nograph": 1e-4}


def copy_bandwidth() -> float:
    """Bytes read plus written per second by a 1 GiB device-to-device copy (torch)."""
    import torch
    x = torch.empty(1 << 28, device="cuda")
    y = torch.empty_like(x)
    times = []
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            y.copy_(x)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / 5)
    return 2 * x.numel() * 4 / statistics.median(times)


def launch_cost(device: str) -> dict[str, float]:
    """Microseconds per call: a realized x + 1 on 16 floats (eager: graph, schedule,
    launch), torch's x + 1 on the same card, and per kernel of a jitted chain of 20
    kernels (replay: no Python of the function runs)."""
    import torch
    from lazyten import Context, Tensor
    from lazyten.jit import jit
    x = Tensor(np.ones(16, np.float32), device=device).realize()
    tx = torch.ones(16, device="cuda")

    def chain(t):
        for _ in range(20):
            t = (t + 1).realize()
        return t
    graphed, plain = jit(chain), jit(chain)

    def one_by_one():
        with Context(JIT_GRAPH=0):
            return plain(x)
    out = {}
    for name, fn, sync in (("lazyten x + 1", lambda: (x + 1).realize(), _syncer(device)),
                           ("torch x + 1", lambda: tx + 1, torch.cuda.synchronize),
                           ("lazyten jit, per kernel", one_by_one, _syncer(device)),
                           ("lazyten jit as a CUDA graph, per kernel", lambda: graphed(x),
                            _syncer(device))):
        fn()
        sync()
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            sync()
            rounds.append((time.perf_counter() - t0) / 200)
        out[name] = statistics.median(rounds) * 1e6 / (20 if "jit" in name else 1)
    return out


def _syncer(device: str) -> Callable[[], None]:
    from runtimes import get_runtime
    return get_runtime(device).synchronize


def measure(w: GpuWorkload, device: str, rounds: int) -> dict:
    import torch
    lazy_fn, torch_fn, diff = w.make(device)
    error = diff(lazy_fn(), torch_fn())
    sync = _syncer(device)
    for fn in (lazy_fn, torch_fn):  # warm: compile, capture (jit), allocate
        for _ in range(3):
            fn()
    sync()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {"lazyten": [], "torch": []}
    for _ in range(rounds):
        for side, fn, wait in (("lazyten", lazy_fn, sync), ("torch", torch_fn,
                                                           torch.cuda.synchronize)):
            wait()
            t0 = time.perf_counter()
            for _ in range(w.calls):
                fn()
            wait()
            times[side].append((time.perf_counter() - t0) / w.calls)
    lz, tr = statistics.median(times["lazyten"]), statistics.median(times["torch"])
    return {"lazyten_s": lz, "torch_s": tr, "error": error,
            "ok": bool(np.isfinite(error) and error <= TOLERANCE.get(w.name, 1e-4))}


def _apply_target(device: str, fields: str) -> dict:
    """Replace fields of the device's Target (for trying settings)."""
    from codegen.target import with_fields
    from runtimes import get_runtime
    renderer = get_runtime(device).renderer
    before = renderer.target
    renderer.target = with_fields(before, fields)
    return {k: getattr(renderer.target, k) for k in before.__dataclass_fields__
            if getattr(renderer.target, k) != getattr(before, k)}


def chosen_workloads(only_arg: str | None) -> tuple[list[GpuWorkload], set[str]]:
    """The GPU workloads `--only` names (all if none) and the names given; a name that is
    neither a GPU workload nor `launch` raises ValueError (the CPU suite's groups, such as
    `activations`, are not GPU workloads: an empty table would hide the mistake)."""
    only = set((only_arg or "").replace(" ", "").split(",")) - {""}
    names = [w.name for w in WORKLOADS]
    unknown = sorted(only - set(names) - {"launch"})
    if unknown:
        raise ValueError(f"unknown GPU workload(s) {', '.join(unknown)}; choose from: "
                         f"{', '.join(names)}, launch")
    return [w for w in WORKLOADS if not only or w.name in only], only


def main(args) -> int:
    device = args.device.upper()
    try:
        chosen, only = chosen_workloads(args.only)
    except ValueError as e:
        print(f"python -m bench --device {device}: {e}", file=sys.stderr)
        return 2
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
    except Exception as e:
        print(f"python -m bench --device {device}: needs PyTorch with CUDA on the same card "
              f"({e})", file=sys.stderr)
        return 2
    os.environ["DEVICE"] = device  # lazyten's default device for this run (a bench process)
    changes = _apply_target(device, args.target or "")
    rounds = 5 if args.quick else 15
    copy = copy_bandwidth()
    print(f"device {device} ({torch.cuda.get_device_name()}), torch {torch.__version__}; "
          f"target changes {changes or 'none'}; copy bandwidth {copy / 1e9:.0f} GB/s "
          f"(read + write)")
    print(f"{'workload':22s} {'lazyten':>10s} {'torch':>10s} {'ratio':>6s} {'GB/s':>6s} "
          f"{'TFLOP/s':>7s}  goal")
    results = {"device": device, "copy_bytes_per_s": copy, "target": changes, "workloads": {}}
    failed = 0
    for w in chosen:
        r = measure(w, device, rounds)
        r["ratio"] = r["torch_s"] / r["lazyten_s"]
        if w.goal == "bandwidth":
            r["fraction_of_copy"] = w.nbytes / r["lazyten_s"] / copy
            met = r["fraction_of_copy"] >= 0.8
            goal = f">= 0.80 copy: {r['fraction_of_copy']:.2f} {'met' if met else 'MISSED'}"
        else:
            want = float(w.goal.split(":")[1])
            met = r["ratio"] >= want
            goal = f">= {want:g}x torch: {'met' if met else 'MISSED'}"
        r["met"] = met
        check = "" if r["ok"] else f"  WRONG (error {r['error']:.2e})"
        failed += not r["ok"]
        gbs = f"{w.nbytes / r['lazyten_s'] / 1e9:6.0f}" if w.nbytes else f"{'':6s}"
        tfl = f"{w.flops / r['lazyten_s'] / 1e12:7.2f}" if w.flops else f"{'':7s}"
        print(f"{w.name:22s} {r['lazyten_s'] * 1e3:8.3f}ms {r['torch_s'] * 1e3:8.3f}ms "
              f"{r['ratio']:6.2f} {gbs} {tfl}  {goal}{check}", flush=True)
        results["workloads"][w.name] = r
    if not only or "launch" in only:
        costs = launch_cost(device)
        results["launch_us"] = costs
        print("launch, us per call: " + ", ".join(f"{k} {v:.1f}" for k, v in costs.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0
