#!/usr/bin/python3
"""Fits Q, the polynomial of GELU's normal CDF (vnormal_cdf in
core/numeric/src/simd/row_elementwise_impl.hpp): erfc(z) = t e^(-z^2) Q(t), t = 1 / (1 + z / 2),
for z in [0, 14.5 / sqrt 2] (the kernel clamps |x| to 14.5). Least squares in the Chebyshev
basis on 400,001 points of t, then rounded to float; prints the coefficients from the highest
power down (the kernel's Horner order) and the relative error of the fit in double and of its
float Horner evaluation.

    tools/normal_cdf_fit.py [DEGREE]      (default 8; needs numpy and scipy)
"""
import sys

import numpy as np
from scipy.special import erfcx


def main():
    deg = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    a, b = 1 / (1 + 14.5 / (2 * np.sqrt(2))), 1.0
    t = np.linspace(a, b, 400001)
    z = 2 * (1 / t - 1)
    f = erfcx(z) / t  # erfc(z) e^(z^2) / t
    ch = np.polynomial.chebyshev.Chebyshev.fit(t, f, deg, domain=[a, b])
    coef = ch.convert(kind=np.polynomial.Polynomial).coef.astype(np.float32)
    tf, r = t.astype(np.float32), np.zeros(len(t), np.float32)
    for k in reversed(coef):
        r = (r * tf + k).astype(np.float32)
    print(f"degree {deg}, t in [{a:.4f}, 1]: relative error {np.max(np.abs(ch(t) / f - 1)):.2e} "
          f"in double, {np.max(np.abs(r / f - 1)):.2e} evaluated in float")
    print(", ".join(f"{v:.9e}f" for v in reversed(coef)))


if __name__ == "__main__":
    main()
