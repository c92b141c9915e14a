"""The polynomial of float32 tanh near 0 (lazyten/autograd/tanh.py, D131).

    python tools/fit_tanh.py [--below 0.625] [--degree 4]

tanh(a) = a + a^3 P(a^2) on [0, below]: P is fitted by weighted least squares to
(tanh(a) - a) / a^3, its error weighted by a^3 / tanh(a) (so the fit's error is the
result's relative error), and re-weighted by Lawson's iteration (each point's weight
times its error) towards the minimax fit. Prints the coefficients rounded to float32,
the fit's worst relative error in float32 ulps, and the worst error of the whole float32
evaluation (Horner's rule in float32 on a dense grid, against float64 tanh).
"""
from __future__ import annotations
import argparse

import numpy as np


def fit(below: float, degree: int, points: int = 20001,
        rounds: int = 50) -> tuple[np.ndarray, float]:
    """(P's coefficients, lowest power first; the fit's worst relative error)."""
    a = np.linspace(below / points, below, points)
    s = a * a
    target = (np.tanh(a) - a) / a ** 3
    scale = a ** 3 / np.tanh(a)
    powers = np.vander(s, degree + 1, increasing=True)
    weights = np.ones_like(a)
    for _ in range(rounds):
        w = scale * np.sqrt(weights)
        coefficients = np.linalg.lstsq(powers * w[:, None], target * w, rcond=None)[0]
        error = np.abs(a + a ** 3 * (powers @ coefficients) - np.tanh(a)) / np.tanh(a)
        weights = weights * error / (weights * error).sum()
    return coefficients, float(error.max())


def float32_error(coefficients: np.ndarray, below: float) -> float:
    """Worst error in ulps of x + x^3 P(x^2) evaluated in float32 on (0, below)."""
    f = np.float32
    x = np.linspace(1e-6, below, 1_000_001).astype(f)
    square = x * x
    poly = f(coefficients[-1])
    for c in coefficients[-2::-1]:
        poly = poly * square + f(c)
    got = x + (x * square) * poly
    want = np.tanh(x.astype(np.float64))
    return float(np.max(np.abs(got - want) / np.spacing(np.abs(want).astype(f))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--below", type=float, default=0.625)
    parser.add_argument("--degree", type=int, default=4)
    args = parser.parse_args()
    c, worst = fit(args.below, args.degree)
    print("POLY =", tuple(float(v) for v in c.astype(np.float32)))
    print(f"fit: {worst / 2 ** -24:.3f} float32 ulps; in float32: "
          f"{float32_error(c.astype(np.float32), args.below):.3f} ulps")


if __name__ == "__main__":
    main()
