"""3x3 convolutions (padding 1) at many shapes, lazyten against PyTorch eager.

    PYTHONPATH=. /tmp/tvenv/bin/python tools/conv_sweep.py [--grid small|wide] [--rounds 5]
        [--mode fwd,fwdbwd] [--shapes 8x256x8,4x64-128x28s2 ...] [--worst 10] [--base TREE]
        [--threads 2]

A shape is N x C x H (C in = out, H = W), or N x Cin-Cout x H, with `s2` for stride 2.
Each side runs in its own child process (as bench/ does: in one process, torch's OpenMP
threads spin after each op and slow lazyten's threads down, and the other way round),
both on `--threads` threads (THREADS for lazyten; the lazyten child's own torch, which
checks the results, on one). For each shape and mode both run `--rounds` rounds in turn (lazyten,
then torch, each a few calls), after an untimed warm-up call (compiling): the best call
of each side is kept, so that both see the same load on a shared machine. Forward calls realize
conv2d(x, w, b); forward + backward calls differentiate (out * grad).sum() and realize the
gradients of x, w and b together, as bench/lazy_layers.py does. Each shape's results are
checked against torch once. --base times another source tree's lazyten too, in its own
child, in the same rounds (A/B on a shared machine). Prints one line per shape and mode (ms, ratio = torch /
lazyten: above 1 is faster than torch), then the worst ratios.
"""
from __future__ import annotations
import argparse
import itertools
import os
import subprocess
import sys
import time

import numpy as np
import torch

from lazyten import Tensor

_SMALL = ["8x16x56", "16x64x28", "16x128x14", "8x256x8", "1x3-32x32", "32x16x32",
          "4x32x56", "8x48x28", "1x64x56", "4x96x14", "8x128x7", "1x128x28", "4x192x14",
          "32x192x7", "1x256x14", "4x256x7", "8x256x13", "4x64-128x28s2", "8x128-256x14s2",
          "4x256x16", "32x64x8", "1x32x13"]


def _wide() -> list[str]:
    out = []
    for n, c, hw in itertools.product((1, 4, 8, 32), (16, 32, 48, 64, 96, 128, 192, 256),
                                      (7, 8, 13, 14, 16, 28, 32, 56)):
        if n * c * c * hw * hw * 9 <= 4e9 // 2 and n * c * hw * hw >= 4096:  # skip tiny/huge
            out.append(f"{n}x{c}x{hw}")
    return out


def parse(shape: str) -> tuple[int, int, int, int, int]:
    """'4x64-128x28s2' -> (N, Cin, Cout, H, stride)."""
    stride = 1
    if "s" in shape:
        shape, s = shape.split("s")
        stride = int(s)
    n, c, hw = shape.split("x")
    cin, cout = (int(v) for v in c.split("-")) if "-" in c else (int(c), int(c))
    return int(n), cin, cout, int(hw), stride


def _lazy_call(x, w, b, g, stride: int, backward: bool):
    if not backward:
        return lambda: x.conv2d(w, b, padding=1, stride=stride).realize()

    def run():
        for t in (x, w, b):
            t.grad = None
        (x.conv2d(w, b, padding=1, stride=stride) * g).sum().backward()
        x.grad.realize(w.grad, b.grad)
        return x.grad, w.grad, b.grad
    return run


def _torch_call(x, w, b, g, stride: int, backward: bool):
    conv = torch.nn.functional.conv2d
    if not backward:
        return lambda: conv(x, w, b, padding=1, stride=stride)

    def run():
        for t in (x, w, b):
            t.grad = None
        (conv(x, w, b, padding=1, stride=stride) * g).sum().backward()
        return x.grad, w.grad, b.grad
    return run


def _best(fn, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _check(lazy_out, torch_out) -> float:
    """Largest error over the reference's scale, over all outputs."""
    pairs = zip(lazy_out, torch_out) if isinstance(lazy_out, tuple) else [(lazy_out, torch_out)]
    worst = 0.0
    for a, b in pairs:
        ref = b.detach().numpy()
        worst = max(worst, float(np.abs(a.numpy() - ref).max() / (np.abs(ref).max() + 1e-30)))
    return worst


def _inputs(shape: str, backward: bool) -> tuple[list[np.ndarray], int]:
    n, cin, cout, hw, stride = parse(shape)
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(cin * 9)
    out_hw = (hw - 1) // stride + 1
    return [rng.standard_normal((n, cin, hw, hw), dtype=np.float32),
            rng.uniform(-bound, bound, (cout, cin, 3, 3)).astype(np.float32),
            rng.uniform(-bound, bound, cout).astype(np.float32),
            rng.standard_normal((n, cout, out_hw, out_hw), dtype=np.float32)], stride


def worker(side: str) -> None:
    """A child: reads `setup SHAPE MODE` and `time CALLS` lines, answers one line each."""
    torch.set_num_threads(int(os.environ["THREADS"]) if side == "torch" else 1)
    fn = None
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "setup":
            backward = rest[1] == "fwdbwd"
            arrays, stride = _inputs(rest[0], backward)
            th = [torch.tensor(a, requires_grad=backward and i < 3) for i, a in enumerate(arrays)]
            torch_fn = _torch_call(*th, stride, backward)
            if side == "torch":
                fn = torch_fn
                fn()
                answer = _best(fn, 1)
            else:
                lz = [Tensor(a, requires_grad=backward and i < 3) for i, a in enumerate(arrays)]
                fn = _lazy_call(*lz, stride, backward)
                answer = _check(fn(), torch_fn())
        else:
            answer = _best(fn, int(rest[0]))
        print(answer, flush=True)


class _Child:
    def __init__(self, side: str, threads: int, tree: str | None = None):
        env = dict(os.environ, THREADS=str(threads), **({"PYTHONPATH": tree} if tree else {}))
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", side], env=env,
                                     cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def ask(self, line: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())


def measure(children: dict[str, _Child], shape: str, mode: str, rounds: int) -> dict[str, float]:
    """Best ms of each child for one shape and mode, and lazyten's error ("error")."""
    answers = {side: child.ask(f"setup {shape} {mode}") for side, child in children.items()}
    calls = max(2, min(20, int(0.02 / max(answers["torch"], 1e-5))))
    best = {side: float("inf") for side in children}
    for _ in range(rounds):
        for side, child in children.items():
            best[side] = min(best[side], child.ask(f"time {calls}"))
    out = {side: t * 1e3 for side, t in best.items()}
    out["error"] = max(v for side, v in answers.items() if side != "torch")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", choices=("small", "wide"), default="small")
    parser.add_argument("--shapes", help="comma-separated shapes (overrides --grid)")
    parser.add_argument("--mode", default="fwd,fwdbwd")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worst", type=int, default=10)
    parser.add_argument("--base", help="another lazyten tree to time too (A/B)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of each side (1: kernel quality, whatever the load)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    children = {"lazyten": _Child("lazyten", args.threads),
                "torch": _Child("torch", args.threads)}
    if args.base:
        children["base"] = _Child("lazyten", args.threads, os.path.abspath(args.base))
    shapes = args.shapes.split(",") if args.shapes else (_SMALL if args.grid == "small" else _wide())
    rows = []
    for shape, mode in itertools.product(shapes, args.mode.split(",")):
        ms = measure(children, shape, mode, args.rounds)
        lazy_ms, torch_ms = ms["lazyten"], ms["torch"]
        rows.append((torch_ms / lazy_ms, shape, mode, lazy_ms, torch_ms))
        base = f"  base {ms['base']:8.3f} ms ({torch_ms / ms['base']:5.2f})" if args.base else ""
        flag = "  ERROR" if ms["error"] > 1e-4 else ""
        print(f"{mode:7s} {shape:16s} lazyten {lazy_ms:8.3f} ms  torch {torch_ms:8.3f} ms  "
              f"ratio {torch_ms / lazy_ms:5.2f}{base}  err {ms['error']:.1e}{flag}", flush=True)
    print(f"\nworst {args.worst}:")
    for ratio, shape, mode, lazy_ms, torch_ms in sorted(rows)[:args.worst]:
        print(f"  {mode:7s} {shape:16s} {ratio:5.2f}  ({lazy_ms:.3f} / {torch_ms:.3f} ms)")


if __name__ == "__main__":
    main()
