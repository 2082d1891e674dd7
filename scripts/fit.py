#!/usr/bin/env python3
"""Polynomial fits for the WGSL math library (shaders/math/*.wgsl).

Each fit is a near-minimax polynomial (Chebyshev interpolation at high precision, mpmath),
with coefficients rounded to the target precision, then checked on a dense grid. Usage:

    python3 scripts/fit.py NAME [f32|f64]

prints the coefficients (lowest degree first) and the max relative error of the rounded
polynomial against the target function. The functions and intervals are the ones the WGSL
code uses; see FITS below.
"""
import struct
import sys

import mpmath as mp

mp.mp.dps = 60


def f32(v):
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def asin_series(z):
    # (asin(sqrt z) - sqrt z) / (z sqrt z)
    if z == 0:
        return mp.mpf(1) / 6
    s = mp.sqrt(z)
    return (mp.asin(s) - s) / (z * s)


def atan_series(z):
    # (atan(sqrt z) - sqrt z) / (z sqrt z)
    if z == 0:
        return mp.mpf(-1) / 3
    s = mp.sqrt(z)
    return (mp.atan(s) - s) / (z * s)


def sin_series(z):
    # (sin(sqrt z) - sqrt z) / (z sqrt z)
    if z == 0:
        return mp.mpf(-1) / 6
    s = mp.sqrt(z)
    return (mp.sin(s) - s) / (z * s)


def cos_series(z):
    # (cos(sqrt z) - 1 + z/2) / z^2
    if z == 0:
        return mp.mpf(1) / 24
    return (mp.cos(mp.sqrt(z)) - 1 + z / 2) / (z * z)


def exp_series(r):
    # (e^r - 1 - r) / r^2
    if r == 0:
        return mp.mpf(1) / 2
    return (mp.exp(r) - 1 - r) / (r * r)


def log_series(z):
    # R(z)/z with R(z) = 2 atanh(s)/s - 2, z = s^2
    if z == 0:
        return mp.mpf(2) / 3
    s = mp.sqrt(z)
    return (2 * mp.atanh(s) / s - 2) / z


def log_tail(z):
    # (R(z)/z - 2/3) / z: the part of log_series beyond its constant, for double-double logs
    if z == 0:
        return mp.mpf(2) / 5
    return (log_series(z) - mp.mpf(2) / 3) / z


def erf_series(z):
    # erf(x)/x as function of z = x^2
    if z == 0:
        return 2 / mp.sqrt(mp.pi)
    x = mp.sqrt(z)
    return mp.erf(x) / x


def erf_q(z):
    # (erf(x)/x - 2/sqrt(pi)) / z, z = x^2
    if z == 0:
        return -2 / (3 * mp.sqrt(mp.pi))
    x = mp.sqrt(z)
    return (mp.erf(x) / x - 2 / mp.sqrt(mp.pi)) / z


def sinh_series(z):
    if z == 0:
        return mp.mpf(1) / 6
    x = mp.sqrt(z)
    return (mp.sinh(x) - x) / (z * x)


def tanh_series(z):
    if z == 0:
        return mp.mpf(-1) / 3
    x = mp.sqrt(z)
    return (mp.tanh(x) - x) / (z * x)


def erfcx(x):
    return mp.erfc(x) * mp.exp(x * x)


def lgamma2(t):
    # lgamma(2 + t) / t on [0, 1]
    if t == 0:
        return 1 - mp.euler
    return mp.loggamma(2 + t) / t


DIGAMMA_ROOT = mp.findroot(mp.digamma, mp.mpf("1.4616"))


def digamma_root(t):
    # digamma(x0 + t) / t around the positive root x0
    if t == 0:
        return mp.polygamma(1, DIGAMMA_ROOT)
    return mp.digamma(DIGAMMA_ROOT + t) / t


def i1_over_x(z):
    # I1(x) / x as a function of z = x^2
    if z == 0:
        return mp.mpf(1) / 2
    x = mp.sqrt(z)
    return mp.besseli(1, x) / x


def i1e_h(t):
    # I1(x) exp(-x) sqrt(x) as a function of t = 1/x
    if t == 0:
        return 1 / mp.sqrt(2 * mp.pi)
    x = 1 / t
    return mp.besseli(1, x) * mp.exp(-x) * mp.sqrt(x)


I1E_A = mp.mpf(5) / 64
PI4 = mp.pi / 4
FITS = {
    # name: (function, interval, degree by precision)
    "exp": (exp_series, (-mp.log(2) / 2, mp.log(2) / 2), {"f32": 5, "f64": 10}),
    "log": (log_series, (0, (3 - 2 * mp.sqrt(2)) ** 2), {"f32": 3, "f64": 7}),
    "logtail": (log_tail, (0, (3 - 2 * mp.sqrt(2)) ** 2), {"f64": 7}),
    "sin": (sin_series, (0, PI4 * PI4), {"f32": 3, "f64": 6}),
    "cos": (cos_series, (0, PI4 * PI4), {"f32": 3, "f64": 6}),
    "atan": (atan_series, (0, mp.mpf(7 * 7) / 256), {"f32": 6, "f64": 11}),
    "asin": (asin_series, (0, mp.mpf(1) / 4), {"f32": 5, "f64": 11}),
    "erf": (erf_series, (0, mp.mpf(1)), {"f32": 6, "f64": 11}),
    "erfq": (erf_q, (0, mp.mpf(1)), {"f32": 6, "f64": 15}),
    "lgamma2": (lambda u: lgamma2(u + mp.mpf("0.25")), (mp.mpf("-0.75"), mp.mpf("0.75")), {"f32": 11, "f64": 22}),
    "digamma0": (
        lambda u: digamma_root(u + mp.mpf("0.04")),
        (1 - DIGAMMA_ROOT - mp.mpf("0.04"), 2 - DIGAMMA_ROOT - mp.mpf("0.04")),
        {"f32": 9, "f64": 22},
    ),
    "i1x": (i1_over_x, (0, mp.mpf(64)), {"f32": 10, "f64": 20}),
    "i1e_h": (i1e_h, (0, mp.mpf(1) / 8), {"f32": 7}),
    "i1e_a": (lambda u: i1e_h(u + I1E_A), (mp.mpf(1) / 32 - I1E_A, mp.mpf(1) / 8 - I1E_A), {"f64": 18}),
    "i1e_b": (i1e_h, (0, mp.mpf(1) / 32), {"f64": 10}),
    "sinh": (sinh_series, (0, mp.mpf(1)), {"f32": 4, "f64": 8}),
    "tanh": (tanh_series, (0, mp.mpf("0.3025")), {"f32": 6, "f64": 12}),
    "tanh1": (tanh_series, (0, mp.mpf(1)), {"f32": 8}),
}


def fit(name, prec, degree=None, interval=None):
    fn, (a, b), degs = FITS[name]
    if interval is not None:
        a, b = interval
    n = degree if degree is not None else degs[prec]
    poly, _ = mp.chebyfit(fn, [a, b], n + 1, error=True)
    coeffs = list(reversed(poly))
    if prec == "f32":
        coeffs = [mp.mpf(f32(c)) for c in coeffs]
    else:
        coeffs = [mp.mpf(float(c)) for c in coeffs]
    worst = mp.mpf(0)
    for k in range(2001):
        t = a + (b - a) * k / 2000
        want = fn(t)
        got = mp.polyval(list(reversed(coeffs)), t)
        err = abs(got - want) / max(abs(want), mp.mpf(10) ** -30)
        worst = max(worst, err)
    return coeffs, worst


def show(name, prec, degree=None):
    coeffs, worst = fit(name, prec, degree)
    print(f"{name} {prec} degree {len(coeffs) - 1}: max rel err {mp.nstr(worst, 3)}")
    for c in coeffs:
        print("  " + (repr(f32(c)) if prec == "f32" else repr(float(c))))


def erfc_h(t):
    # erfc(1/t) exp(1/t^2) / t: smooth on (0, 2], tends to 1/sqrt(pi) at 0
    x = 1 / t
    return mp.erfc(x) * mp.exp(x * x) * x


ERFC_A = mp.mpf("1.25")
ERFC_B = mp.mpf("0.4375")
FITS["erfc_a"] = (lambda u: erfc_h(u + ERFC_A), (mp.mpf("0.625") - ERFC_A, 2 - ERFC_A), {"f32": 9, "f64": 20})
FITS["erfc_b"] = (lambda u: erfc_h(u + ERFC_B), (mp.mpf("0.25") - ERFC_B, mp.mpf("0.625") - ERFC_B), {"f32": 8, "f64": 18})
ERFC_A1 = mp.mpf("1.5")
ERFC_A2 = mp.mpf("0.868")
FITS["erfc_a1"] = (lambda u: erfc_h(u + ERFC_A1), (mp.mpf(10) / 9 - ERFC_A1, 2 - ERFC_A1), {"f64": 18})
FITS["erfc_a2"] = (lambda u: erfc_h(u + ERFC_A2), (mp.mpf("0.625") - ERFC_A2, mp.mpf(10) / 9 - ERFC_A2), {"f64": 18})
FITS["erfc_c"] = (erfc_h, (mp.mpf("0.0375"), mp.mpf("0.25")), {"f32": 6, "f64": 16})


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    prec = sys.argv[2] if len(sys.argv) > 2 else "f32"
    deg = int(sys.argv[3]) if len(sys.argv) > 3 else None
    show(sys.argv[1], prec, deg)
