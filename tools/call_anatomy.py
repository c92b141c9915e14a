"""Where one eager call's time goes: its kernels alone, the same kernels inside the calls,
and the Python around them.

    python tools/call_anatomy.py 'x = rand(256, 256); y = rand(256, 256)' 'x @ y.T'
    THREADS=1 python tools/call_anatomy.py 'x = rand(64, 1000)' 'x.softmax(-1)'

The first argument sets up realized inputs (`rand(*shape)`: float32 N(0, 1); `lt`, `F`
and `np` are lazyten, lazyten.nn.functional and numpy); the second is the expression
whose `.realize()` is the call. After warm-up (the call's schedule is then a cached plan,
D78) it prints, in microseconds:

- each kernel of the plan called alone, again and again on the same memory (best of 7
  rounds of 50): the kernel as a microbenchmark sees it;
- the same launches timed inside whole calls (median and mean of 300 calls);
- the whole call with every launch a no-op (best of 7 rounds of 200): the Python alone,
  in a hot loop; and building the graph alone, in a hot loop;
- 300 calls split into building the graph, realizing it (of which the plan's run and, of
  that, the launches) and dropping the result (means).

The gaps between these lines are what a kernel benchmark misses: a kernel inside a call
runs after the Python and the kernels before it have moved its data out of the caches or
to the other core, and the Python runs after the kernels have evicted its own state, at
about twice its hot-loop cost (docs/benchmarks.md, session 26).
"""
from __future__ import annotations
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_overhead import per_call  # noqa: E402  (a sibling tool: best of rounds, per call)


def best_per_call(fn: Callable[[], Any], calls: int) -> float:
    """Microseconds a call, the best of 7 rounds of `calls`."""
    return per_call(fn, calls, rounds=7)


def with_steps(plan: Any, wrap: Callable[[int, Callable[..., Any]], Callable[..., Any]],
               run: Callable[[], Any]) -> None:
    """Run `run` with each of the plan's launchers replaced by wrap(position, launcher)."""
    steps = plan.steps
    plan.steps = [(wrap(i, step[0]),) + tuple(step[1:]) for i, step in enumerate(steps)]
    try:
        run()
    finally:
        plan.steps = steps


def timed(record: Callable[[int, float], None]) -> Callable[..., Callable[..., Any]]:
    """A `with_steps` wrapper that times each launch and gives record(position, seconds)."""
    def wrap(i: int, launch: Callable[..., Any]) -> Callable[..., Any]:
        def run(*memory: Any) -> None:
            start = time.perf_counter()
            launch(*memory)
            record(i, time.perf_counter() - start)
        return run
    return wrap


def calls(call: Callable[[], Any], n: int) -> None:
    """`n` calls, each result dropped before the next (as an eager loop drops them: kept,
    each call's output would take fresh memory from the system)."""
    for _ in range(n):
        call()


def kernels_alone(plan: Any, nodes: list) -> list[tuple[str, float]]:
    """Each launcher of the plan on the memory it would get: inputs realized in the graph,
    outputs and panels of the plan's own made once here."""
    made: dict[int, Any] = {}  # a step's output position -> its memory
    times = []
    for launch, out, inputs, _runtime, _size, _dtype, alloc, nbytes, *_ in plan.steps:
        memory = alloc(nbytes)
        args = [memory] + [made[i] if i in made else nodes[i].realized._buf for i in inputs]
        program = getattr(getattr(launch, "func", None), "__self__", None)
        name = getattr(program, "name", "") or getattr(getattr(program, "spec", None), "name", "?")
        for _ in range(20):
            launch(*args)
        times.append((name, best_per_call(lambda: launch(*args), 50)))
        made[out] = memory
    return times


def main() -> None:
    import lazyten as lt
    import lazyten.nn.functional as F
    from lazyten import realize as engine
    from lazyten.schedule_cache import lookup

    setup, expression = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    scope: dict[str, Any] = {"lt": lt, "F": F, "np": np, "rand": lambda *shape: lt.Tensor(
        rng.standard_normal(shape, dtype=np.float32)).realize()}
    exec(setup, scope)
    call = eval(f"lambda: ({expression}).realize()", scope)
    build = eval(f"lambda: ({expression})", scope)
    for _ in range(30):
        call()
    _, nodes, template = lookup([build().lazydata])
    plan = template.plan if template is not None else None
    if not plan:
        sys.exit("no plan: the call does not run from a cached plan (a copy, an assign?)")

    alone = kernels_alone(plan, nodes)
    for i, (name, us) in enumerate(alone):
        print(f"kernel {i} alone        {us:9.1f}  {name}")
    print(f"kernels alone          {sum(us for _, us in alone):9.1f}")

    inside: dict[int, list[float]] = {i: [] for i in range(len(plan.steps))}
    for _ in range(50):  # (after the kernels alone: the calls settle again first)
        call()
    with_steps(plan, timed(lambda i, dt: inside[i].append(dt)), lambda: calls(call, 300))
    for i, ts in inside.items():
        print(f"kernel {i} inside calls {statistics.median(ts) * 1e6:9.1f} median, "
              f"{statistics.fmean(ts) * 1e6:.1f} mean")
    print(f"whole call             {best_per_call(call, 200):9.1f}")
    python: list[float] = []
    with_steps(plan, lambda i, launch: lambda *memory: None,
               lambda: python.append(best_per_call(call, 200)))
    print(f"no-op launches         {python[0]:9.1f}  (the Python, in a hot loop)")
    print(f"building alone         {best_per_call(build, 200):9.1f}  (in a hot loop)")

    phases = dict.fromkeys(("build", "realize", "run", "launches", "drop"), 0.0)
    launches: list[float] = []
    run_plan = engine.Plan.run

    def run_timed(self: Any, graph: list) -> None:
        start = time.perf_counter()
        try:
            run_plan(self, graph)
        finally:
            phases["run"] += time.perf_counter() - start

    def phased() -> None:
        for _ in range(300):
            t0 = time.perf_counter()
            out = build()
            t1 = time.perf_counter()
            out.realize()
            t2 = time.perf_counter()
            del out
            t3 = time.perf_counter()
            phases["build"] += t1 - t0
            phases["realize"] += t2 - t1
            phases["drop"] += t3 - t2
    engine.Plan.run = run_timed  # type: ignore[method-assign,assignment]
    try:
        with_steps(plan, timed(lambda i, dt: launches.append(dt)), phased)
    finally:
        engine.Plan.run = run_plan  # type: ignore[method-assign]
    phases["launches"] = sum(launches)
    print("in calls (means):      " + ", ".join(f"{k} {v / 300 * 1e6:.1f}" for k, v in phases.items()))


if __name__ == "__main__":
    main()
