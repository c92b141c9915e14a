"""One op, lazyten against PyTorch eager, in blocks taken in turn in one process.

    PYTHONPATH=. /tmp/tvenv/bin/python tools/op_pair.py gelu 64x3072 [calls] [rounds]

Each round times `calls` (default 20) realized calls of lazyten's op, then as many of
torch's on the same values (float32 N(0, 3^2)); it prints the medians of each side's
per-call time and of the per-round ratio torch / lazyten (above 1: lazyten faster) with
its quartiles. On a machine whose speed drifts (docs/benchmarks.md, session 28) only the
ratios of neighbouring blocks mean anything. Ops: gelu, sin, exp, tanh, sigmoid,
softmax, log_softmax, layernorm (over the last axis).
"""
from __future__ import annotations
import sys
import time

import numpy as np
import torch

import lazyten as lt
import lazyten.nn.functional as F

OPS = {  # name -> (lazyten's op, torch's op), each of one tensor
    "gelu": (lambda x: x.gelu(), torch.nn.functional.gelu),
    "sin": (lambda x: x.sin(), torch.sin),
    "exp": (lambda x: x.exp(), torch.exp),
    "tanh": (lambda x: x.tanh(), torch.tanh),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
    "softmax": (lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
    "log_softmax": (lambda x: x.log_softmax(-1), lambda x: x.log_softmax(-1)),
    "layernorm": (lambda x: F.layer_norm(x, x.shape[-1:]),
                  lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:])),
}


def main(argv: list[str]) -> None:
    op, shape = argv[0], tuple(int(s) for s in argv[1].split("x"))
    calls = int(argv[2]) if len(argv) > 2 else 20
    rounds = int(argv[3]) if len(argv) > 3 else 30
    a = np.random.default_rng(0).normal(0, 3, shape).astype(np.float32)
    x, tx = lt.Tensor(a).realize(), torch.tensor(a)
    ours_op, theirs_op = OPS[op]

    def block(fn) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls

    ours, theirs = (lambda: ours_op(x).realize()), (lambda: theirs_op(tx))
    for fn in (ours, theirs, ours, theirs):  # compile, warm the caches and allocators
        block(fn)
    mine, torch_s, ratio = [], [], []
    for _ in range(rounds):
        mine.append(block(ours))
        torch_s.append(block(theirs))
        ratio.append(torch_s[-1] / mine[-1])
    print(f"{op} {argv[1]}: lazyten {np.median(mine) * 1e6:.1f} us, torch "
          f"{np.median(torch_s) * 1e6:.1f} us, torch / lazyten {np.median(ratio):.2f} "
          f"(quartiles {np.quantile(ratio, 0.25):.2f}-{np.quantile(ratio, 0.75):.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
