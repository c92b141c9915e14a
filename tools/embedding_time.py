"""Time an Embedding's forward and weight gradient, lazyten or PyTorch eager (D69).

    python tools/embedding_time.py V D N [--torch]

A (V, D) table, N random int64 token ids, a random upstream gradient G: the forward is
`emb(idx)` realized, the backward `(out * G).sum().backward()` with the weight's
gradient realized. Prints the best of 3 calls after a warm-up call (torch: 2 threads).
"""
from __future__ import annotations
import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", type=int, nargs=3, metavar=("V", "D", "N"))
    parser.add_argument("--torch", action="store_true", help="time torch.nn.Embedding")
    args = parser.parse_args()
    vocab, width, tokens = args.sizes
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, tokens)
    grad = rng.standard_normal((tokens, width)).astype(np.float32)
    if args.torch:
        import torch
        torch.set_num_threads(2)
        emb, idx, g = torch.nn.Embedding(vocab, width), torch.tensor(ids), torch.tensor(grad)
        forward, weight = (lambda: emb(idx)), emb.weight
    else:
        import lazyten
        emb = lazyten.nn.Embedding(vocab, width)
        emb.weight.realize()
        idx, g = lazyten.Tensor(ids), lazyten.Tensor(grad).realize()
        forward, weight = (lambda: emb(idx).realize()), emb.weight
    best_f = best_b = float("inf")
    for call in range(4):
        start = time.perf_counter()
        out = forward()
        mid = time.perf_counter()
        (out * g).sum().backward()
        if not args.torch:
            weight.grad.realize()
        end = time.perf_counter()
        weight.grad = None
        if call:
            best_f, best_b = min(best_f, mid - start), min(best_b, end - mid)
    side = "torch" if args.torch else "lazyten"
    print(f"{side} Embedding({vocab}, {width}), {tokens} tokens: forward {best_f * 1e3:.2f} ms, "
          f"backward {best_b * 1e3:.1f} ms (best of 3)")


if __name__ == "__main__":
    main()
