"""Training steps of models that are not in bench/, lazyten against PyTorch eager, one process.

    python tools/model_steps.py [mlp|transformer|cnn ...] [--steps 30] [--jit]

Each model is written once against an `nn`/`F` pair and built twice, as torch.nn and as
lazyten.nn, with the same weights (torch's initialisation, copied through the state dict).
A step is zero_grad, forward, cross entropy, backward, Adam (clipped and AdamW
where the model says so). The first six steps of both
run on the same batches and their losses are compared (a wrong gradient or optimiser
shows as a diverging loss); then each side's best mean step time over five rounds is
printed with the ratio torch / lazyten (> 1: lazyten faster); the two sides take turns
round by round. torch runs on 2 threads.

The models, their batches and sizes: tools/model_zoo.py.
"""
from __future__ import annotations
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_zoo import _TOKENS, ADAMW, CLIPPED, SIZES, batch, build  # noqa: E402,F401


def stepper(lib, model, kind: str, batches, use_jit: bool = False):
    """step(i): one training step on batches[i % len] with Adam (AdamW, and the gradients
    clipped, where the model says so); returns a realized loss."""
    params = list(model.parameters())
    optimizer = lib.optim.AdamW if kind in ADAMW else lib.optim.Adam
    opt = optimizer(params, lr=1e-3, **({"weight_decay": 0.01} if kind in ADAMW else {}))
    tensor = lib.from_numpy if lib.__name__ == "torch" else lib.Tensor
    F, pos = lib.nn.functional, np.arange(64)

    def step(x, y):
        opt.zero_grad()
        out = model(x, tensor(pos)) if kind == "transformer" else model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        if kind in CLIPPED:
            lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss
    if use_jit and lib.__name__ != "torch":
        step = lib.jit(step)
    data = [(tensor(x), tensor(y)) for x, y in batches]
    return lambda i: float(step(*data[i % len(data)]).item())


def best_seconds(steps_of: list, steps: int, rounds: int = 5) -> list[float]:
    """Each step function's best mean time over `rounds` rounds of steps // rounds steps;
    the functions take turns round by round, so a machine whose speed drifts (as shared
    ones do, by up to 2x within minutes) slows both sides alike."""
    best, per_round = [float("inf")] * len(steps_of), max(1, steps // rounds)
    for r in range(rounds):
        for k, step in enumerate(steps_of):
            start = time.perf_counter()
            for i in range(per_round):
                step(r * per_round + i)
            best[k] = min(best[k], (time.perf_counter() - start) / per_round)
    return best


def compare(kind: str, size: int, steps: int, use_jit: bool) -> str:
    import torch
    import lazyten
    torch.set_num_threads(2)
    torch.manual_seed(0)
    reference = build(torch.nn, torch.nn.functional, kind)
    model = build(lazyten.nn, lazyten.nn.functional, kind)
    model.load_state_dict({k: lazyten.Tensor(v.detach().numpy().copy())
                           for k, v in reference.state_dict().items()})
    rng = np.random.default_rng(0)
    batches = [batch(kind, size, rng) for _ in range(4)]
    ints = [(x.astype(np.int64) if kind in ("transformer", *_TOKENS) else x, y.astype(np.int64))
            for x, y in batches]
    torch_step = stepper(torch, reference, kind, ints)
    lazy_step = stepper(lazyten, model, kind, ints, use_jit)
    want, got = [torch_step(i) for i in range(6)], [lazy_step(i) for i in range(6)]
    error = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(want, got))
    t_torch, t_lazy = best_seconds([torch_step, lazy_step], steps)
    return (f"{kind:<12} b{size:<4} {'jit ' if use_jit else ''}loss rel. diff {error:.1e}  "
            f"torch {t_torch * 1e3:8.2f} ms  lazyten {t_lazy * 1e3:8.2f} ms  "
            f"ratio {t_torch / t_lazy:5.2f}x")



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"of {', '.join(SIZES)}; all if none")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--jit", action="store_true", help="lazyten's step under lazyten.jit")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in SIZES]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(SIZES)}")
    for kind in args.models or list(SIZES):
        for size in SIZES[kind]:
            print(compare(kind, size, args.steps, args.jit), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
