"""Sweep softmax, log_softmax and layernorm (weight, bias) over rows x widths, float32, last
axis: check lazyten against numpy (float64) and time it against PyTorch eager in one process.

    PYTHONPATH=. /tmp/tvenv/bin/python tools/norm_sweep.py [--ops softmax,layernorm]
        [--rows 1,8,64] [--widths 7,1000] [--max-elements N] [--rounds 5] [--json out.json]

Each case: one warm-up call of each (lazyten compiles there), then `--rounds` rounds that
run lazyten and torch in turn, each for about 20 ms of calls; a side's time is its best
call over all rounds (the machine is shared: the best call is the least disturbed one).
The ratio is torch / lazyten, so >= 1 means lazyten is at least as fast. Cases over
`--max-elements` are skipped (a 4096 x 50257 input is 800 MB). Correctness: the output
against numpy in float64, relative 1e-4 and absolute 1e-5, as bench/ checks it.
"""
from __future__ import annotations
import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as torch_f

from lazyten import Tensor
import lazyten.nn.functional as F

ROWS = (1, 8, 64, 512, 4096)
WIDTHS = (1, 7, 33, 100, 127, 768, 1000, 1023, 3000, 4097, 10000, 32000, 50257)
OPS = ("softmax", "log_softmax", "layernorm")
ROUND_SECONDS = 0.02  # calls per side per round: enough that a round is not one timer tick
EPS = 1e-5


def reference(op: str, x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The op in float64 numpy."""
    x = x.astype(np.float64)
    if op == "layernorm":
        centred = x - x.mean(-1, keepdims=True)
        norm = centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + EPS)
        return norm * weight.astype(np.float64) + bias.astype(np.float64)
    shifted = x - x.max(-1, keepdims=True)
    log_sum = np.log(np.exp(shifted).sum(-1, keepdims=True))
    return shifted - log_sum if op == "log_softmax" else np.exp(shifted - log_sum)


def calls(op: str, x: np.ndarray, weight: np.ndarray, bias: np.ndarray):
    """(lazyten call, torch call) for one case; each returns its realized output."""
    lx, lw, lb = Tensor(x), Tensor(weight), Tensor(bias)
    tx, tw, tb = torch.from_numpy(x), torch.from_numpy(weight), torch.from_numpy(bias)
    width = x.shape[-1]
    if op == "softmax":
        return lambda: lx.softmax(-1).realize(), lambda: torch.softmax(tx, -1)
    if op == "log_softmax":
        return lambda: lx.log_softmax(-1).realize(), lambda: torch.log_softmax(tx, -1)
    return (lambda: F.layer_norm(lx, (width,), lw, lb, EPS).realize(),
            lambda: torch_f.layer_norm(tx, (width,), tw, tb, EPS))


def best_call(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def run_case(op: str, rows: int, width: int, rounds: int) -> dict:
    rng = np.random.default_rng(rows * 100003 + width)
    x = (rng.standard_normal((rows, width)) * 3).astype(np.float32)
    weight, bias = rng.standard_normal((2, width)).astype(np.float32)
    ours, theirs = calls(op, x, weight, bias)
    out = ours().numpy()
    expected = reference(op, x, weight, bias)
    err = np.abs(out - expected) - 1e-4 * np.abs(expected)
    ok = bool(out.shape == expected.shape and np.all(err <= 1e-5))
    theirs()
    first = best_call(ours, 1)
    repeat = max(1, min(500, int(ROUND_SECONDS / max(first, 1e-6))))
    times = [float("inf"), float("inf")]
    for _ in range(rounds):
        times[0] = min(times[0], best_call(ours, repeat))
        times[1] = min(times[1], best_call(theirs, repeat))
    return {"op": op, "rows": rows, "width": width, "ok": ok,
            "max_err": float(np.max(np.abs(out - expected))),
            "lazyten_us": times[0] * 1e6, "torch_us": times[1] * 1e6,
            "ratio": times[1] / times[0]}


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--rows", type=_ints, default=ROWS)
    parser.add_argument("--widths", type=_ints, default=WIDTHS)
    parser.add_argument("--max-elements", type=int, default=1 << 25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.set_num_threads(2)
    results = []
    print(f"{'op':12s} {'rows':>5s} {'width':>6s} {'lazyten us':>11s} {'torch us':>10s} "
          f"{'ratio':>6s}  ok")
    for op in args.ops.split(","):
        for rows in args.rows:
            for width in args.widths:
                if rows * width > args.max_elements:
                    continue
                r = run_case(op, rows, width, args.rounds)
                results.append(r)
                print(f"{op:12s} {rows:5d} {width:6d} {r['lazyten_us']:11.1f} "
                      f"{r['torch_us']:10.1f} {r['ratio']:6.2f}  "
                      f"{'ok' if r['ok'] else 'WRONG %.2e' % r['max_err']}", flush=True)
    print("\nworst ratios:")
    for r in sorted(results, key=lambda r: r["ratio"])[:15]:
        print(f"  {r['op']:12s} {r['rows']:5d} x {r['width']:6d}  {r['ratio']:5.2f}x")
    wrong = [r for r in results if not r["ok"]]
    print(f"{len(results)} cases, {len(wrong)} wrong")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
