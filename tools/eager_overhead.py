"""The fixed cost of small eager ops: what a call costs where the kernel is tiny.

    python tools/eager_overhead.py

Each line is the best of 9 rounds of 5000 calls, in microseconds per call: a realized op
on 16 floats (`(a + b).realize()`: the dispatch the bench's `dispatch` group measures),
a scalar operand, row ops at small shapes, a transposed copy, and three graphs built but
not realized (the Python that builds them), then ops on tensors that require gradients
(what a training step's forward builds: each records a Function). The kernels of the realized lines take
0.1-2.7 us of these (docs/benchmarks.md, session 6); the rest is Python.
"""
from __future__ import annotations
import time

import numpy as np


def per_call(fn, calls: int = 5000, rounds: int = 9) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main() -> None:
    from lazyten import Tensor
    import lazyten.nn.functional as F
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.random(16, dtype=np.float32)) for _ in range(2))
    x = Tensor(rng.random((8, 1000), dtype=np.float32))
    w, bias = Tensor(np.ones(1000, np.float32)), Tensor(np.zeros(1000, np.float32))
    y = Tensor(rng.random((64, 10), dtype=np.float32))
    g, h = (Tensor(rng.random((8, 256), dtype=np.float32), requires_grad=True) for _ in range(2))
    wg = Tensor(rng.random((256, 256), dtype=np.float32), requires_grad=True)
    cases = {
        "(a + b).realize(), 16 floats": lambda: (a + b).realize(),
        "(a * 0.5).realize()": lambda: (a * 0.5).realize(),
        "softmax 8x1000": lambda: x.softmax(-1).realize(),
        "log_softmax 64x10": lambda: y.log_softmax(-1).realize(),
        "layer_norm 8x1000": lambda: F.layer_norm(x, (1000,), w, bias).realize(),
        "transpose(0, 1).contiguous()": lambda: x.transpose(0, 1).contiguous().realize(),
        "build a + b": lambda: a + b,
        "build softmax": lambda: x.softmax(-1),
        "build layer_norm": lambda: F.layer_norm(x, (1000,), w, bias),
        "grad: g + h": lambda: g + h,
        "grad: g.sigmoid()": lambda: g.sigmoid(),
        "grad: g.chunk(4, -1)": lambda: g.chunk(4, -1),
        "grad: g[:, 3]": lambda: g[:, 3],
        "grad: F.linear(g, wg)": lambda: F.linear(g, wg),
    }
    for fn in cases.values():  # compile and fill the caches first
        for _ in range(100):
            fn()
    for name, fn in cases.items():
        print(f"{name:30s} {per_call(fn):6.2f} us")


if __name__ == "__main__":
    main()
