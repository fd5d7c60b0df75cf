#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Fits the two polynomials of ops/detail/gelu_float.hpp, minimising the relative error:
#   G(a) = Φ(-a) e^{a²/2} (= erfcx(a/√2) / 2) as a polynomial in t = (a - K) / (a + K) on
#        a in [0, AMAX];
#   e^r on |r| <= ln2 / 2 (the reduced argument of e^{-a²/2}).
#
# Reference: mpmath (50 significant digits), G(a) = erfc(a/√2) e^{a²/2} / 2 and exp.
# Method: relative least squares on 2000 Chebyshev nodes in t, then Lawson's iteratively
# reweighted least squares towards the minimax fit; the coefficients are rounded to double and
# the printed error is that of the rounded coefficients evaluated by Horner's rule in double,
# measured on 20001 points against the reference.
# Usage: /usr/bin/python3 tools/fit_gelu_float.py   (mpmath, numpy)
import mpmath as mp
import numpy as np

mp.mp.dps = 50
AMAX = 15.5      # float GELU(x) rounds to 0 below x = -14.1, GELU'(x) below -15.2
K = 3.0          # t = (a - 3) / (a + 3): t in [-1, 0.6757]
DEGREE = 9
EXP_DEGREE = 6


def g_ref(a):
    a = mp.mpf(a)
    return mp.erfc(a / mp.sqrt(2)) * mp.exp(a * a / 2) / 2


def t_of(a):
    return (a - K) / (a + K)


def fit(f, lo, hi, degree):
    """Relative minimax-like fit of f (in the fitted variable) on [lo, hi]."""
    n = 2000
    ts = np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2
    gs = np.array([float(f(t)) for t in ts])
    V = np.vander(ts, degree + 1, increasing=True) / gs[:, None]
    w = np.ones(n) / n
    for _ in range(60):  # Lawson: weights grow where the error is largest
        sw = np.sqrt(w)
        c = np.linalg.lstsq(V * sw[:, None], sw, rcond=None)[0]
        e = np.abs(V @ c - 1)
        w = w * e
        w = w / w.sum()
    return c


def horner(c, t):
    r = 0.0
    for ci in reversed(c):
        r = ci + t * r
    return r


def show(name, c, worst, what):
    print(f"// {what}: max relative error {worst:.2e}")
    print(f"inline constexpr double {name}[] = {{")
    print(",\n".join(f"    {x!r}" for x in c) + "};")


def main():
    g = lambda t: g_ref(K * (1 + t) / (1 - t))
    c = [float(x) for x in fit(g, t_of(0.0), t_of(AMAX), DEGREE)]
    worst = 0.0
    for a in np.linspace(0.0, AMAX, 20001):
        ref = g_ref(a)
        got = horner(c, t_of(float(a)))
        worst = max(worst, float(abs((mp.mpf(got) - ref) / ref)))
    show("kTail", c, worst, f"G(a) in t = (a - {K}) / (a + {K}), a in [0, {AMAX}], degree {DEGREE}")
    half = float(mp.log(2) / 2)
    e = [float(x) for x in fit(mp.exp, -half, half, EXP_DEGREE)]
    worst = 0.0
    for r in np.linspace(-half, half, 20001):
        ref = mp.exp(r)
        worst = max(worst, float(abs((mp.mpf(horner(e, float(r))) - ref) / ref)))
    show("kExp", e, worst, f"e^r, |r| <= ln2 / 2, degree {EXP_DEGREE}")


if __name__ == "__main__":
    main()
