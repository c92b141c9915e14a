"""Rebuild ERFCX_CHEB (and, with --wide, ERFCX_WIDE_CHEB) in lazyten/mathfn.py: Chebyshev
interpolants of P(t) = exp(x^2) erfc(x) / t, t = K / (K + x).

Default: erfc's tail, x >= 0.5, K = 1, t in (0, 2/3], in u = 2t / (2/3) - 1, degree 30.
--wide: float32 gelu's one fit over 0 <= x <= 14.5 / sqrt 2 (past it gelu is below the
smallest subnormal), K = 2, t in [t_min, 1], in u = (t - t_min) 2 / (1 - t_min) - 1, its
first 10 terms.

Interpolates at the DEGREE + 1 Chebyshev nodes of the first kind with 40-digit mpmath (not a
dependency of lazyten: `pip install mpmath` to run this) and prints the coefficients and
the interpolant's relative error on 801 points, and that of the terms float32 uses.
K = 1 in t = K / (K + x) keeps the error that rounding t passes on to P small (K = 3 needs
fewer terms but made float32 erfc 6 ulps off, K = 1: 3.5); gelu's fit, over a bounded
range, takes K = 2 (10 terms for 4e-8; K = 1 needed 13 for 1e-8, K = 3 put gelu 7 ulps off
near 0 against 5).
"""
import sys

import mpmath as mp

mp.mp.dps = 40


def fit(k: int, x_min, x_max, degree: int, float32_terms: int) -> tuple[list, object]:
    """(Chebyshev coefficients, t_min) of P over x_min <= x <= x_max (inf: t_min 0)."""
    t_max = mp.mpf(k) / (k + x_min)
    t_min = mp.mpf(0) if x_max == mp.inf else mp.mpf(k) / (k + x_max)

    def target(u):
        t = t_min + (mp.mpf(u) + 1) / 2 * (t_max - t_min)
        if t == 0:  # the limit x -> inf: erfc(x) ~ exp(-x^2) / (x sqrt(pi))
            return 1 / (k * mp.sqrt(mp.pi))
        x = k / t - k
        return mp.exp(x * x) * mp.erfc(x) / t

    n = degree + 1
    angles = [mp.pi * (j + mp.mpf(1) / 2) / n for j in range(n)]
    values = [target(mp.cos(a)) for a in angles]
    coeffs = [(2 if i else 1) * mp.fsum(v * mp.cos(i * a) for v, a in zip(values, angles)) / n
              for i in range(n)]
    for terms in (n, float32_terms):
        err = max(abs(mp.fsum(coeffs[i] * mp.chebyt(i, u) for i in range(terms)) / target(u) - 1)
                  for u in mp.linspace(-1, 1, 801))
        print(f"{terms} terms: max relative error {float(err):.2e}")
    return coeffs, t_min


if __name__ == "__main__":
    if "--wide" in sys.argv[1:]:
        coeffs, t_min = fit(2, mp.mpf(0), mp.mpf(14.5) / mp.sqrt(2), 24, 10)
        print("t_min", float(t_min))
        print([float(c) for c in coeffs[:10]])
    else:
        coeffs, _ = fit(1, mp.mpf(0.5), mp.inf, 30, 14)
        print([float(c) for c in coeffs])
