"""Two thread pools on two cores: lazyten's kernels timed in blocks and interleaved with
PyTorch's, call by call, in one process.

    PYTHONPATH=. /tmp/tvenv/bin/python tools/interleave.py [--calls 300] [--rounds 3]

A harness that compares the two libraries call by call in one process (lazyten, torch,
lazyten, ...) times each lazyten kernel while torch's OpenMP worker still spins after
torch's last op (GNU OpenMP spins a while before it sleeps), so lazyten's own worker
finds its core taken and the calling thread runs every piece of the kernel itself
(runtimes/cpu_crew.py: pieces go to whichever thread is free, D102): the kernel runs at
its serial speed. Timed in blocks (many calls of one side, then of the other, as
bench/ and tools/model_steps.py do) each side has both cores. For each case this prints
the best mean of `--rounds` blocks of `--calls` calls per side, then the medians of
`--calls` interleaved pairs, and lazyten's serial time (its kernels on the calling
thread alone, as a sequence that runs serial makes them: `SEQUENCE.serial`, D134).
"""
from __future__ import annotations
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_overhead import per_call  # noqa: E402  (a sibling tool: best mean per call, us)


def _interleaved(lazy, torch_fn, calls: int) -> tuple[float, float]:
    ours, theirs = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        lazy()
        t1 = time.perf_counter()
        torch_fn()
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        theirs.append(t2 - t1)
    return float(np.median(ours)) * 1e6, float(np.median(theirs)) * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(2)
    from lazyten import Tensor
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 64), np.float32), rng.standard_normal((64, 256), np.float32)
    x = rng.standard_normal((256, 1000), np.float32)
    la, lb, lx = (Tensor(v).realize() for v in (a, b, x))
    ta, tb, tx = (torch.from_numpy(v) for v in (a, b, x))
    cases = {"matmul 512 x 64 x 256": (lambda: (la @ lb).realize(), lambda: ta @ tb),
             "softmax 256 x 1000": (lambda: lx.softmax(-1).realize(), lambda: tx.softmax(-1))}
    for name, (lazy, torch_fn) in cases.items():
        for _ in range(20):
            lazy(), torch_fn()
        np.testing.assert_allclose(lazy().numpy(), torch_fn().numpy(), rtol=1e-4, atol=1e-4)
        block = (per_call(lazy, args.calls, args.rounds), per_call(torch_fn, args.calls, args.rounds))
        mixed = _interleaved(lazy, torch_fn, args.calls)
        print(f"{name:24s} blocks: lazyten {block[0]:7.1f} us  torch {block[1]:7.1f} us  "
              f"interleaved: lazyten {mixed[0]:7.1f} us  torch {mixed[1]:7.1f} us  "
              f"lazyten serial {_serial(lazy, args.calls, args.rounds):7.1f} us")
    return 0


def _serial(lazy, calls: int, rounds: int) -> float:
    """The case's time with its kernels run on this thread alone (SEQUENCE.serial: what a
    sequence that runs serial sets, D134)."""
    from runtimes.cpu_choice import SEQUENCE
    was = SEQUENCE.serial
    SEQUENCE.serial = True
    try:
        return per_call(lazy, calls, rounds)
    finally:
        SEQUENCE.serial = was


if __name__ == "__main__":
    raise SystemExit(main())
