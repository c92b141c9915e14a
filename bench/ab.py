"""A switch's effect on one workload, measured in one process: `python -m bench.ab SWITCH
WORKLOAD [--steps N]` (e.g. `python -m bench.ab GRAPH_TRACE mlp_b64`).

On a busy machine two runs of `python -m bench` can differ by more than a change's
effect. Here both settings of the switch (0 and 1, a `Context` setting read on every
call, such as GRAPH_TRACE or POINTWISE_TRACE) get their own case, built and warmed up
under that setting, and are timed in alternating blocks of calls; each side's best and
median call are printed with the ratio. Workloads: the layer-class ones (bench/layers.py:
mlp_b64, attn_fwd_..., softmax_...) and LeNet's steps (train_b64, train_b256_jit, ...).
"""
from __future__ import annotations
import argparse
import time
from typing import Any, Callable

from codegen.helpers import Context


def _run_of(name: str) -> Callable[[], Any]:
    """A call of the workload: returns what to read back (`.numpy()`) to finish it."""
    if name.startswith("train_b"):
        from bench.lazy_side import make_train_step
        batch, jit = name[len("train_b"):].split("_")[0], name.endswith("_jit")
        return make_train_step(int(batch), jit)[0]
    from bench import lazy_layers
    return lazy_layers.case(name).run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("switch")
    parser.add_argument("workload")
    parser.add_argument("--steps", type=int, default=200, help="timed calls per side (default 200)")
    args = parser.parse_args(argv)
    runs = {}
    for value in (0, 1):
        with Context(**{args.switch: value}):
            runs[value] = _run_of(args.workload)
            for _ in range(5):  # compile, the schedule cache, the plan
                _finish(runs[value]())
    times: dict[int, list[float]] = {0: [], 1: []}
    block = 10
    for _ in range(max(1, args.steps // block)):
        for value in (0, 1):
            with Context(**{args.switch: value}):
                for _ in range(block):
                    start = time.perf_counter()
                    _finish(runs[value]())
                    times[value].append(time.perf_counter() - start)
    best = {}
    for value in (0, 1):
        ts = sorted(times[value])
        best[value] = ts[0]
        print(f"{args.workload} {args.switch}={value}: best {ts[0] * 1e6:.0f} us, "
              f"median {ts[len(ts) // 2] * 1e6:.0f} us ({len(ts)} calls)")
    print(f"{args.switch}=1 / {args.switch}=0, best calls: {best[1] / best[0]:.3f}")


def _finish(out: Any) -> None:
    if hasattr(out, "numpy"):
        out.numpy()


if __name__ == "__main__":
    main()
