"""Build the small MNIST sample shipped in ``examples/data/mnist_sample``.

Contract: reads the four real MNIST IDX files from SOURCE_DIR (gz or raw), keeps the first
``--train`` training and first ``--test`` test images/labels, and writes them as gzip-9 IDX
files (byte-reproducible: gzip mtime is zeroed). Fails if the four outputs together exceed
``--max-bytes`` so the repository never silently grows past its data budget.

Usage: python tools/make_mnist_sample.py /work/shared/datasets/mnist [--train N] [--test M]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

# Run as a plain script from anywhere: the MNIST helpers live beside the example.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from mnist import MNIST_FILES, SAMPLE_DIR, _load_dir, write_idx  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, write the sample, print its size; return an exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("source_dir", type=Path, help="directory holding the full MNIST IDX files")
    ap.add_argument("--train", type=int, default=8000, help="training images to keep")
    ap.add_argument("--test", type=int, default=2000, help="test images to keep")
    ap.add_argument("--out", type=Path, default=SAMPLE_DIR, help="output directory")
    ap.add_argument("--max-bytes", type=int, default=1_800_000, help="size budget, all 4 files")
    args = ap.parse_args(argv)

    x_tr, y_tr, x_te, y_te = _load_dir(args.source_dir)
    parts = (x_tr[: args.train], y_tr[: args.train], x_te[: args.test], y_te[: args.test])
    for name, y in (("train", parts[1]), ("test", parts[3])):
        missing = sorted(set(range(10)) - set(np.unique(y).tolist()))
        if missing:
            print(f"error: {name} sample lacks classes {missing}", file=sys.stderr)
            return 1

    args.out.mkdir(parents=True, exist_ok=True)
    total = 0
    for name, arr in zip(MNIST_FILES, parts):
        path = args.out / name
        write_idx(path, arr, compresslevel=9)
        size = path.stat().st_size
        total += size
        print(f"{path}: shape {arr.shape}, {size} bytes")
    print(f"total {total} bytes ({total / 1e6:.2f} MB) for {args.train} train / {args.test} test")
    if total > args.max_bytes:
        print(f"error: over the {args.max_bytes}-byte budget; use fewer images", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
