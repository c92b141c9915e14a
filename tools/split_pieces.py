"""What a split CPU kernel costs at each count of pieces a thread, against serial (D135).

    python tools/split_pieces.py

For a few kernels just over and well over the thread bound, the last kernel of a realized
op is called through its plan's launcher (no Python of the engine), split on THREADS
threads with 1, 2, 4, 8 and 16 pieces a thread (runtimes/cpu_choice.py's `pieces`
replaced for the trial, its ThreadChoice set aside), then on the calling thread alone;
each figure is the best of 3 rounds of 500 calls, in microseconds a call, the counts in
turn within each round. The rule's own count is printed beside them.
"""
from __future__ import annotations
import time

import numpy as np

CASES = [("t[0] * 0.9 + t[1] * 0.1", [(65536,), (65536,)]),
         ("t[0] * 0.9 + t[1] * 0.1", [(262144,), (262144,)]),
         ("t[0] * 0.9 + t[1] * 0.1", [(1048576,), (1048576,)]),
         ("t[0].sum(0)", [(512, 512)]),
         ("t[0].softmax(-1)", [(64, 1000)]),
         ("t[0] @ t[1]", [(256, 256), (256, 256)])]
COUNTS = (1, 2, 4, 8, 16)


def per_call(fn, calls: int = 500) -> float:
    for _ in range(50):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    from lazyten import Tensor
    from lazyten.schedule_cache import _SCHEDULES
    import runtimes.cpu_llvm as cpu_llvm
    from runtimes.cpu_choice import pieces
    from runtimes.cpu_llvm import _threading
    rng = np.random.default_rng(0)
    for expr, shapes in CASES:
        t = [Tensor(rng.standard_normal(s, dtype=np.float32)).realize() for s in shapes]
        for _ in range(20):
            eval(expr).realize()
        plan = [c.plan for c in _SCHEDULES.values() if c.plan][-1]
        step = plan.steps[-1]
        launch, out = step[0], eval(expr).realize()
        if not hasattr(getattr(launch, "func", None), "__self__"):
            print(f"{expr:26s} {shapes}: runs serial (too little work to split)")
            continue
        program, n = launch.func.__self__, launch.args[0]
        program.choice = None  # split every call
        memory = [out.lazydata.base.realized._buf] + [x.lazydata.base.realized._buf for x in t]
        memory = memory[:1 + len(step[2])]
        threads = min(_threading()[0], n)
        best: dict[str, float] = {}
        try:
            for _ in range(3):
                for count in COUNTS:
                    cpu_llvm.pieces = lambda work, n, threads, c=count: min(n, c * threads)
                    best[str(count)] = min(best.get(str(count), 1e9), per_call(lambda: launch(*memory)))
                best["serial"] = min(best.get("serial", 1e9),
                                     per_call(lambda: program.here(tuple(memory), n)))
        finally:
            cpu_llvm.pieces = pieces
        figures = "  ".join(f"{k}: {v:.1f}" for k, v in best.items())
        print(f"{expr:26s} {shapes}: work {program.work}, rule {pieces(program.work, n, threads) // threads}"
              f" a thread; {figures}")


if __name__ == "__main__":
    main()
