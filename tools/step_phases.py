"""Where an eager training step's time goes, phase by phase (no torch needed).

    python tools/step_phases.py MODEL BATCH [--steps 50] [--gc-threshold N]

MODEL is one of tools/model_zoo.py's models. Each step is zero_grad, the forward (graph
building), the cross entropy, backward (graph building), the optimiser's step (which
realizes the loss and every gradient and runs the update; with the clipping and AdamW
of the models that use them, tools/model_zoo.py) and `loss.item()`; after ten
warm-up steps the mean of each phase over `--steps` steps is printed in ms, the kernels
launched a step, and the first step's time in s (compiles included: `CACHEDIR=$(mktemp
-d)` times it with an empty cache).
`--gc-threshold N` sets CPython's first garbage-collector threshold to N first (the
default is 700: a step that builds tens of thousands of graph objects pays for
collections in whichever phase triggers them; docs/benchmarks.md, session 7).
"""
from __future__ import annotations
import argparse
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_zoo  # noqa: E402  (a sibling tool: the models and their batches)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(model_zoo.SIZES))
    parser.add_argument("batch", type=int)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--gc-threshold", type=int, default=None)
    args = parser.parse_args(argv)
    if args.gc_threshold is not None:
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    import lazyten
    kind, F = args.model, lazyten.nn.functional
    model = model_zoo.build(lazyten.nn, F, kind)
    rng = np.random.default_rng(0)
    tokens = kind == "transformer" or kind in model_zoo._TOKENS
    data = [(lazyten.Tensor(x.astype(np.int64) if tokens else x), lazyten.Tensor(y.astype(np.int64)))
            for x, y in (model_zoo.batch(kind, args.batch, rng) for _ in range(4))]
    params = list(model.parameters())
    opt = lazyten.optim.AdamW(params, lr=1e-3, weight_decay=0.01) if kind in model_zoo.ADAMW \
        else lazyten.optim.Adam(params, lr=1e-3)
    pos = lazyten.Tensor(np.arange(64))
    names = ("zero_grad", "forward", "loss", "backward", "opt.step", "item")
    total = np.zeros(len(names))
    from lazyten.realize import Stats
    for step in range(10 + args.steps):
        if step == 10:
            kernels = Stats.kernels
        x, y = data[step % len(data)]
        marks = [time.perf_counter()]
        opt.zero_grad()
        marks.append(time.perf_counter())
        out = model(x, pos) if kind == "transformer" else model(x)
        marks.append(time.perf_counter())
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        if kind in model_zoo.CLIPPED:
            lazyten.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        marks.append(time.perf_counter())
        loss.item()
        marks.append(time.perf_counter())
        if step == 0:
            first = marks[-1] - marks[0]
        if step >= 10:
            total += np.diff(marks)
    mean = total / args.steps * 1e3
    per_step = (Stats.kernels - kernels) / args.steps
    print(f"{kind} b{args.batch}: " + "  ".join(f"{n} {t:.2f}" for n, t in zip(names, mean)) +
          f"  total {mean.sum():.2f} ms; {per_step:.0f} kernels a step; the first step "
          f"{first:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
