"""Child-process entry point: `python -m bench.worker SIDE NAMES --out FILE ...`.

SIDE "lazyten": measure one lazyten workload. SIDE "baseline": measure numpy and torch
eager for every named workload, then torch.compile where it applies (last, since its
compilation is the slow part). SIDE "paired": lazyten and torch eager for one workload,
in alternating rounds in this one process (`python -m bench --paired`). Each finished
measurement is appended to FILE as one JSON line at once, so a child stopped at its time
limit still leaves what it measured.

Line format: {"workload", "impl", "status": "ok" | "n/a" | "error", "result" | "reason"},
plus one {"meta": {...}} line describing the child's environment.
"""
from __future__ import annotations
import argparse
import json
import time
import traceback
from typing import Callable

from bench import layers
from bench.measure import Side, Unavailable, measure, measure_paired
from bench.workloads import BY_NAME

LAYER_NAMES = {w.name for w in layers.WORKLOADS}


class Sink:
    def __init__(self, path: str):
        self.path = path

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _error(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:])


def per_op(result: dict, calls: int) -> dict:
    """Times of a call that ran `calls` operations, made per operation."""
    if calls > 1:
        for key in ("median_s", "min_s", "max_s"):
            result[key] /= calls
        result["times_s"] = [t / calls for t in result["times_s"]]
        if "kernels_per_call" in result:
            result["kernels_per_call"] /= calls
        result["ops_per_call"] = calls
    return result


def _lazyten_side(name: str) -> tuple[Side, Callable[[dict], None]]:
    """The lazyten case of `name` as a Side, and what adds its kernel count to a result."""
    from bench import lazy_layers, lazy_side
    c = (lazy_layers if name in LAYER_NAMES else lazy_side).case(name)
    counter = lazy_side.kernel_counter()
    last_kernels: list = [None]

    def run():
        k0 = counter() if counter else 0
        out = c.run()
        if counter:
            last_kernels[0] = counter() - k0
        return out

    def finish(result: dict) -> None:
        result.update(c.info)
        if last_kernels[0] is not None:
            result["kernels_per_call"] = last_kernels[0]
        per_op(result, BY_NAME[name].calls)
    return Side(run, c.warmup, c.check, lazy_side.sync), finish


def run_lazyten(name: str, args, sink: Sink, end: float) -> None:
    try:
        side, finish = _lazyten_side(name)
        result = measure(side.fn, warmup=side.warmup, repeat=args.repeat, budget=args.budget,
                         deadline=end, check=side.check, after=side.after)
        finish(result)
        sink.write({"workload": name, "impl": "lazyten", "status": "ok", "result": result})
    except Unavailable as e:
        sink.write({"workload": name, "impl": "lazyten", "status": "n/a", "reason": str(e)})
    except Exception as e:
        sink.write({"workload": name, "impl": "lazyten", "status": "error", "reason": _error(e)})


def run_paired(name: str, args, sink: Sink, end: float) -> None:
    """lazyten and torch eager side by side; lazyten alone where torch cannot run."""
    from bench import base_layers, baselines
    sink.write({"meta": {"torch": baselines.torch_info()}})
    try:
        torch_fn = (base_layers if name in LAYER_NAMES else baselines).CASES["torch"](name)
    except Exception as e:
        missing = isinstance(e, Unavailable)
        sink.write({"workload": name, "impl": "torch", "status": "n/a" if missing else "error",
                    "reason": str(e) if missing else _error(e)})
        run_lazyten(name, args, sink, end)
        return
    try:
        side, finish = _lazyten_side(name)
        found = measure_paired({"lazyten": side, "torch": Side(torch_fn, warmup=2)},
                               repeat=args.repeat, budget=2 * args.budget, deadline=end)
        finish(found["lazyten"])
        per_op(found["torch"], BY_NAME[name].calls)
        for impl in ("lazyten", "torch"):
            sink.write({"workload": name, "impl": impl, "status": "ok", "result": found[impl]})
    except Unavailable as e:
        sink.write({"workload": name, "impl": "lazyten", "status": "n/a", "reason": str(e)})
    except Exception as e:
        for impl in ("lazyten", "torch"):
            sink.write({"workload": name, "impl": impl, "status": "error", "reason": _error(e)})


def run_baselines(names: list[str], args, sink: Sink, end: float) -> None:
    from bench import base_layers, baselines
    sink.write({"meta": {"torch": baselines.torch_info()}})
    cap = max(3 * args.budget, 10.0)
    plan = [(n, impl) for impl in ("numpy", "torch") for n in names
            if impl in BY_NAME[n].baselines and impl not in args.without]
    plan.sort(key=lambda item: names.index(item[0]))
    plan += [(n, "torch_compile") for n in names if "torch_compile" in BY_NAME[n].baselines
             and "torch_compile" not in args.without]
    for name, impl in plan:
        try:
            fn = (base_layers if name in LAYER_NAMES else baselines).CASES[impl](name)
            # the warm-up always runs (torch.compile compiles there); the limits only
            # stop further timed calls, and the parent's timeout bounds the whole child
            result = measure(fn, warmup=2 if impl == "torch" else 1, repeat=args.repeat,
                             budget=args.budget, deadline=end, timed_limit=cap)
            if impl == "torch_compile":
                result["compile_s"] = result["warmup_s"][0]
            per_op(result, BY_NAME[name].calls)
            sink.write({"workload": name, "impl": impl, "status": "ok", "result": result})
        except Unavailable as e:
            sink.write({"workload": name, "impl": impl, "status": "n/a", "reason": str(e)})
        except Exception as e:
            sink.write({"workload": name, "impl": impl, "status": "error", "reason": _error(e)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.worker")
    p.add_argument("side", choices=["lazyten", "baseline", "paired"])
    p.add_argument("names", help="comma-separated workload names")
    p.add_argument("--out", required=True)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--budget", type=float, default=5.0)
    p.add_argument("--deadline", type=float, default=60.0, help="seconds from start")
    p.add_argument("--without", default="", help="baselines not to measure (comma-separated)")
    args = p.parse_args(argv)
    args.without = set(args.without.split(",")) - {""}
    end = time.monotonic() + args.deadline
    sink = Sink(args.out)
    names = [n for n in args.names.split(",") if n]
    if args.side in ("lazyten", "paired"):
        for name in names:
            (run_lazyten if args.side == "lazyten" else run_paired)(name, args, sink, end)
    else:
        run_baselines(names, args, sink, end)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
