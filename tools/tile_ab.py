"""Time one matmul kernel under the optimiser's decisions and under other ones, on one thread.

    PYTHONPATH=. python tools/tile_ab.py nn 256x300x100 \
        "PAD_OUT:1:16,UPCAST:1:16,LANES:3:16,UPCAST:1:7,UPCAST:0:2"

KIND is nn (a @ b), tn (a.T @ b, a weight gradient) or nt (a @ b.T, Linear's forward);
MxKxN the product's sizes. Each further argument is an opt list, OP:AXIS:AMOUNT joined by
commas, applied to the matmul's last kernel (after any packing kernel) in place of what
codegen/opt chose. Every variant is compiled, checked against numpy, and called on the
same buffers through its program's `here` (one thread, no hand-off): after 3 warm-up
calls, ROUNDS (default 100) rounds of one call of each variant in turn; printed: the best
and median call, and the median over rounds of chosen's time / the variant's (above 1:
the variant is faster). Calls taken in turn make the ratio hold on a machine whose speed
drifts by tens of percent within seconds (session 28's VM), where best-of-rounds did not.
TORCH=1 (in an environment with torch) adds PyTorch's product of the same operands on one
thread to the rounds.
Used for D140's figures.
"""
from __future__ import annotations
import sys
import os
import time

import numpy as np

from codegen.kernel import Kernel, Opt, OptOps
from codegen.linearizer import Linearizer
from codegen.opt import optimize
from lazyten import Tensor
from lazyten.realize import run_schedule
from lazyten.schedule import create_schedule
from runtimes import get_runtime


def arrays(kind: str, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The operands as stored (a transposed for tn, b for nt), float32, seed 0."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if kind == "tn" else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if kind == "nt" else (k, n), dtype=np.float32)
    return a, b


def product(kind: str, a, b):
    """The `kind` product of stored operands (numpy, lazyten or torch)."""
    return a.T @ b if kind == "tn" else a @ b.T if kind == "nt" else a @ b


def operands(kind: str, m: int, k: int, n: int) -> tuple[Tensor, np.ndarray]:
    """The lazy product and its float32 value from numpy."""
    a, b = arrays(kind, m, k, n)
    return product(kind, Tensor(a).realize(), Tensor(b).realize()), product(kind, a, b)


ROUNDS = int(os.environ.get("ROUNDS", 100))  # calls of each variant, in turn


def torch_call(kind: str, m: int, k: int, n: int):
    """PyTorch's product of the same operands on one thread (TORCH=1), as a call that
    takes the variants' arguments, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    a, b = (torch.from_numpy(x) for x in arrays(kind, m, k, n))
    return lambda *_: product(kind, a, b)


def parse(text: str) -> list[Opt]:
    return [Opt(OptOps[op], int(axis), int(amount))
            for op, axis, amount in (part.split(":") for part in text.split(","))]


def main() -> None:
    kind, sizes, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
    m, k, n = (int(v) for v in sizes.split("x"))
    out, want = operands(kind, m, k, n)
    schedule = create_schedule([out.lazydata])
    item, sources = schedule[-1], list(schedule[-1].inputs)  # (running drops them)
    run_schedule(schedule)  # the earlier kernels' outputs (a packed operand) are its inputs
    runtime = get_runtime("CPU")
    target = runtime.renderer.target
    chosen = optimize(Kernel(item.ast), target).applied
    print("chosen:", ",".join(f"{o.op.name}:{o.axis}:{o.amount}" for o in chosen))
    inputs = [buf.realized._buf for buf in sources]
    result = np.zeros(want.size, np.float32)
    bufs = ((result, result.ctypes.data), *inputs)
    programs = []
    for name, opts in [("chosen", list(chosen))] + [(v, parse(v)) for v in variants]:
        kernel = Kernel(item.ast)
        for opt in opts:
            kernel.apply(opt)
        spec = runtime.renderer.program(Linearizer(kernel, target).linearize())
        program = runtime.program(spec, runtime.compiler.compile(spec.src))
        result[:] = 0
        program.here(bufs, spec.global_size[0])
        np.testing.assert_allclose(result.reshape(want.shape), want, rtol=1e-3, atol=1e-2)
        programs.append((name, program.here, spec.global_size[0]))
    if os.environ.get("TORCH"):
        call = torch_call(kind, m, k, n)
        if call is None:
            print("TORCH=1: no torch to import")
        else:
            programs.append(("torch (one thread)", call, 0))
    calls: dict[str, list[float]] = {name: [] for name, _, _ in programs}
    for _, run, size in programs:  # warm-up
        for _ in range(3):
            run(bufs, size)
    for _ in range(ROUNDS):  # one call of each in turn: a machine whose speed drifts by
        for name, run, size in programs:  # tens of percent within a second (a VM)
            start = time.perf_counter()  # slows the calls of one round alike
            run(bufs, size)
            calls[name].append((time.perf_counter() - start) * 1e6)
    base = calls["chosen"]
    for name, times in calls.items():
        best, median = min(times), float(np.median(times))
        ratio = float(np.median([c / t for c, t in zip(base, times)]))
        print(f"{name:60s} {best:8.1f} us best {median:8.1f} median "
              f"{2 * m * n * k / median / 1e3:6.0f} GFLOP/s  {ratio:5.2f}x chosen (median of pairs)")

if __name__ == "__main__":
    main()
