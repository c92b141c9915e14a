"""Rebuild ERFCX_CHEB in lazyten/mathfn.py: the Chebyshev interpolant of
P(t) = exp(x^2) erfc(x) / t, t = 1 / (1 + x), for x >= 0.5, in u = 2t / (2/3) - 1.

Interpolates at the DEGREE + 1 Chebyshev nodes of the first kind with 40-digit mpmath (not a
dependency of lazyten: `pip install mpmath` to run this) and prints the coefficients and
the interpolant's relative error on 801 points, and that of its first 14 terms (float32).
K = 1 in t = K / (K + x) keeps the error that rounding t passes on to P small (K = 3 needs
fewer terms but made float32 erfc 6 ulps off, K = 1: 3.5).
"""
import mpmath as mp

mp.mp.dps = 40
K, X_MIN, DEGREE = 1, 0.5, 30
T_MAX = mp.mpf(K) / (K + X_MIN)


def target(u):
    t = (mp.mpf(u) + 1) / 2 * T_MAX
    if t == 0:  # the limit x -> inf: erfc(x) ~ exp(-x^2) / (x sqrt(pi))
        return 1 / (K * mp.sqrt(mp.pi))
    x = K / t - K
    return mp.exp(x * x) * mp.erfc(x) / t


def main() -> None:
    n = DEGREE + 1
    angles = [mp.pi * (j + mp.mpf(1) / 2) / n for j in range(n)]
    values = [target(mp.cos(a)) for a in angles]
    coeffs = [(2 if k else 1) * mp.fsum(v * mp.cos(k * a) for v, a in zip(values, angles)) / n
              for k in range(n)]
    print([float(c) for c in coeffs])
    for terms in (n, 14):
        err = max(abs(mp.fsum(coeffs[k] * mp.chebyt(k, u) for k in range(terms)) / target(u) - 1)
                  for u in mp.linspace(-1, 1, 801))
        print(f"{terms} terms: max relative error {float(err):.2e}")


if __name__ == "__main__":
    main()
